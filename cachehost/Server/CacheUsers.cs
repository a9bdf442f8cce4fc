using System.Security.Cryptography;
using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Server;

/// <summary>One account: a name, what it may do, and the SHA-256 of its password (never the password itself).</summary>
internal sealed record CacheUser(string Name, CacheRole Role, byte[] PasswordHash)
{
    public byte[] NameBytes { get; } = Encoding.UTF8.GetBytes(Name);
}

/// <summary>
/// The accounts a host accepts. With neither a password nor a users file the host is open and every connection acts
/// as admin (a laptop or a test); <c>--password</c> alone is the <c>default</c> user with the admin role, as in Redis;
/// a users file adds named accounts with roles.
/// </summary>
internal sealed class CacheUsers
{
    public const string DefaultUser = "default";

    private readonly Dictionary<string, CacheUser> _byName;

    private CacheUsers(Dictionary<string, CacheUser> byName) => _byName = byName;

    /// <summary>True when a connection must authenticate before it may do anything.</summary>
    public bool Required => _byName.Count > 0;

    public int Count => _byName.Count;

    /// <summary>The account of that name (ACL DRYRUN and GETUSER), or null.</summary>
    public CacheUser? Find(string name) => _byName.GetValueOrDefault(name);

    public CacheUser? Authenticate(ReadOnlySpan<byte> user, ReadOnlySpan<byte> password)
    {
        Span<byte> hash = stackalloc byte[SHA256.HashSizeInBytes];
        SHA256.HashData(password, hash);
        // Hash first, look up second, compare in fixed time: a wrong name costs what a wrong password does.
        if (user.Length > 256 || !_byName.TryGetValue(Encoding.UTF8.GetString(user), out var account))
            return null;
        return CryptographicOperations.FixedTimeEquals(hash, account.PasswordHash) ? account : null;
    }

    /// <summary>
    /// Builds the accounts from the default user's password and the lines of a users file: <c>NAME ROLE SECRET</c>,
    /// where ROLE is reader, writer or admin and SECRET the password or <c>sha256:HEX</c> of it; <c>#</c> starts a
    /// comment. Throws <see cref="FormatException"/> naming the line for anything else.
    /// </summary>
    public static CacheUsers Create(string? defaultPassword, IEnumerable<string>? usersFileLines, string? source = null)
    {
        var users = new Dictionary<string, CacheUser>(StringComparer.Ordinal);
        if (!string.IsNullOrEmpty(defaultPassword))
            users[DefaultUser] = new(DefaultUser, CacheRole.Admin, SHA256.HashData(Encoding.UTF8.GetBytes(defaultPassword)));
        int number = 0;
        foreach (var raw in usersFileLines ?? [])
        {
            number++;
            var line = raw.Trim();
            if (line.Length == 0 || line[0] == '#')
                continue;
            var where = $"{source ?? "users file"} line {number}";
            var fields = line.Split((char[]?)null, 3, StringSplitOptions.RemoveEmptyEntries);
            if (fields.Length != 3)
                throw new FormatException($"{where}: expected NAME ROLE SECRET, got {fields.Length} field(s)");
            var (name, roleText, secret) = (fields[0], fields[1], fields[2]);
            if (!name.All(c => char.IsAsciiLetterOrDigit(c) || c is '-' or '_' or '.' or '@') || name.Length > 64)
                throw new FormatException($"{where}: user name '{name}' may hold only letters, digits and - _ . @ (at most 64)");
            if (!char.IsAsciiLetter(roleText[0]) || !Enum.TryParse<CacheRole>(roleText, ignoreCase: true, out var role) || !Enum.IsDefined(role))
                throw new FormatException($"{where}: role '{roleText}' is not one of reader, writer, admin");
            if (users.ContainsKey(name))
                throw new FormatException($"{where}: user '{name}' is defined twice");
            users[name] = new(name, role, ParseSecret(secret, where));
        }
        return new CacheUsers(users);
    }

    private static byte[] ParseSecret(string secret, string where)
    {
        const string Hashed = "sha256:";
        if (!secret.StartsWith(Hashed, StringComparison.OrdinalIgnoreCase))
            return SHA256.HashData(Encoding.UTF8.GetBytes(secret));
        try
        {
            var hash = Convert.FromHexString(secret.AsSpan(Hashed.Length));
            if (hash.Length == SHA256.HashSizeInBytes)
                return hash;
        }
        catch (FormatException)
        {
        }
        throw new FormatException($"{where}: a hashed secret is sha256: and 64 hex digits");
    }
}
