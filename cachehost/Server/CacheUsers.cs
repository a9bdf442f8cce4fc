using System.Security.Cryptography;
using System.Text;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Server;

/// <summary>
/// One account: a name, what it may do, the SHA-256 of its password (never the password itself) and, for a writer, the
/// dataset names it may stage (<see cref="Owns"/>).
/// </summary>
internal sealed record CacheUser(string Name, CacheRole Role, byte[] PasswordHash)
{
    public byte[] NameBytes { get; } = Encoding.UTF8.GetBytes(Name);

    /// <summary>The <c>names</c> patterns of the users file: <c>owner/name</c>, <c>owner/*</c>, <c>owner/prefix*</c> or <c>*</c>.</summary>
    public List<string> NamePatterns { get; } = [];

    /// <summary>
    /// Whether this account may publish, move or remove versions of dataset <paramref name="name"/>. Read from the users
    /// file alone, so every host with the same file gives the same answer, before and after any restart: a writer owns
    /// the names its <c>names</c> lines match, and the owner prefix spelled as its account name (<c>alice/*</c> for
    /// alice). Administrators own every name.
    /// </summary>
    public bool Owns(string name)
    {
        if (Role == CacheRole.Admin) return true;
        if (Role != CacheRole.Writer) return false;
        int slash = name.IndexOf('/');
        if (slash == Name.Length && name.StartsWith(Name, StringComparison.Ordinal)) return true;
        foreach (var pattern in NamePatterns)
            if (pattern.EndsWith('*') ? name.StartsWith(pattern.AsSpan(0, pattern.Length - 1), StringComparison.Ordinal) : name == pattern)
                return true;
        return false;
    }

    /// <summary>Everything <see cref="Owns"/> accepts, as the users file spells it (ACL GETUSER).</summary>
    public IEnumerable<string> Datasets => Role switch
    {
        CacheRole.Admin => ["*"],
        CacheRole.Writer => NamePatterns.Prepend(Name + "/*").Distinct(StringComparer.Ordinal),
        _ => [],
    };
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
    /// where ROLE is reader, writer or admin and SECRET the password or <c>sha256:HEX</c> of it, and
    /// <c>names ACCOUNT PATTERN...</c>, the dataset names a writer may stage; <c>#</c> starts a comment. Throws
    /// <see cref="FormatException"/> naming the line for anything else.
    /// </summary>
    public static CacheUsers Create(string? defaultPassword, IEnumerable<string>? usersFileLines, string? source = null)
    {
        var users = new Dictionary<string, CacheUser>(StringComparer.Ordinal);
        if (!string.IsNullOrEmpty(defaultPassword))
            users[DefaultUser] = new(DefaultUser, CacheRole.Admin, SHA256.HashData(Encoding.UTF8.GetBytes(defaultPassword)));
        int number = 0;
        var names = new List<(string Account, string[] Patterns, string Where)>();
        foreach (var raw in usersFileLines ?? [])
        {
            number++;
            var line = raw.Trim();
            if (line.Length == 0 || line[0] == '#')
                continue;
            var where = $"{source ?? "users file"} line {number}";
            if (line.StartsWith(NamesDirective + " ", StringComparison.Ordinal) || line.StartsWith(NamesDirective + "\t", StringComparison.Ordinal))
            {
                var parts = line.Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries);
                if (parts.Length < 3)
                    throw new FormatException($"{where}: expected names ACCOUNT PATTERN..., e.g. names stager risk/* market/ticks");
                foreach (var pattern in parts.Skip(2))
                    if (PatternProblem(pattern) is { } problem)
                        throw new FormatException($"{where}: {problem}");
                names.Add((parts[1], parts[2..], where));
                continue;
            }
            var fields = line.Split((char[]?)null, 3, StringSplitOptions.RemoveEmptyEntries);
            if (fields.Length != 3)
                throw new FormatException($"{where}: expected NAME ROLE SECRET, got {fields.Length} field(s)");
            var (name, roleText, secret) = (fields[0], fields[1], fields[2]);
            if (!name.All(c => char.IsAsciiLetterOrDigit(c) || c is '-' or '_' or '.' or '@') || name.Length > 64)
                throw new FormatException($"{where}: user name '{name}' may hold only letters, digits and - _ . @ (at most 64)");
            if (!char.IsAsciiLetter(roleText[0]) || !Enum.TryParse<CacheRole>(roleText, ignoreCase: true, out var role) || !Enum.IsDefined(role))
                throw new FormatException($"{where}: role '{roleText}' is not one of reader, writer, admin");
            if (name == NamesDirective)
                throw new FormatException($"{where}: '{NamesDirective}' starts a line of dataset names (names ACCOUNT PATTERN...), it cannot name an account");
            if (users.ContainsKey(name))
                throw new FormatException($"{where}: user '{name}' is defined twice");
            users[name] = new(name, role, ParseSecret(secret, where));
        }
        foreach (var (account, patterns, where) in names)
        {
            if (!users.TryGetValue(account, out var user))
                throw new FormatException($"{where}: names for account '{account}', which no line of this file defines");
            if (user.Role != CacheRole.Writer)
                throw new FormatException($"{where}: names for account '{account}', a {user.Role.ToString().ToLowerInvariant()}: only writers are given dataset names (administrators own every name)");
            user.NamePatterns.AddRange(patterns);
        }
        return new CacheUsers(users);
    }

    /// <summary>
    /// The accounts <paramref name="options"/> name: the default user's password (<c>--password</c> or the first line of
    /// <c>--password-file</c>, read again each time) and the users file. Throws <see cref="FormatException"/> whose message
    /// names the switch and the line at fault.
    /// </summary>
    public static CacheUsers Load(Hpc.CommonData.Hosting.CacheHostOptions options)
    {
        if (options.LoadPasswordFile() is { } unreadable)
            throw new FormatException(unreadable);
        try
        {
            return Create(options.Password, options.UsersFile is { Length: > 0 } file ? File.ReadAllLines(file) : null, options.UsersFile);
        }
        catch (Exception e) when (e is FormatException or IOException or UnauthorizedAccessException)
        {
            throw new FormatException($"--users-file: {e.Message}", e);
        }
    }

    /// <summary>
    /// Which of the files holding passwords (<c>--users-file</c>, <c>--password-file</c>) other users of the machine can
    /// read, as one line for the log, or null: ssh refuses keys others can read; a host warns, at start and each reload,
    /// and goes on (refusing would take a running tier down over a mode).
    /// </summary>
    public static string? Exposure(Hpc.CommonData.Hosting.CacheHostOptions options) =>
        Hpc.CommonData.Security.SecretFiles.Exposure((options.UsersFile, "--users-file"), (options.PasswordFile, "--password-file"));

    /// <summary>What a new load changes against this one: accounts added, removed, and changed (role, secret or names).</summary>
    public (int Added, int Removed, int Changed) Compare(CacheUsers next)
    {
        int added = next._byName.Keys.Count(n => !_byName.ContainsKey(n));
        int removed = _byName.Keys.Count(n => !next._byName.ContainsKey(n));
        int changed = next._byName.Values.Count(u => _byName.TryGetValue(u.Name, out var was) && (was.Role != u.Role
            || !was.PasswordHash.AsSpan().SequenceEqual(u.PasswordHash) || !was.NamePatterns.SequenceEqual(u.NamePatterns)));
        return (added, removed, changed);
    }

    /// <summary>The directive that gives a writer dataset names.</summary>
    public const string NamesDirective = "names";

    // Patterns are names, owner prefixes or name prefixes, so every host decides a name alike and no pattern can reach
    // outside the dataset namespace.
    private static string? PatternProblem(string pattern)
    {
        if (pattern == "*") return null;
        var body = pattern.EndsWith('*') ? pattern[..^1] : pattern;
        if (body.Contains('*')) return $"pattern '{pattern}' may hold '*' only at its end";
        var slash = body.IndexOf('/');
        var probe = slash < 0 ? body + "/x" : slash == body.Length - 1 ? body + "x" : body;
        if (slash < 0 && !pattern.EndsWith('*')) return $"pattern '{pattern}' is neither a dataset name owner/name nor a prefix ending in '*' (owner/*)";
        return DatasetName.TryValidate(probe, out var error) ? null : $"pattern '{pattern}': {error}";
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
