using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The command line and settings of one cache host (<c>Hpc.CacheHost</c>), bound from the "CacheHost" configuration
/// section. Launchers build the host's arguments from it with <see cref="ProgramContract{T}.ToArguments"/> and pass
/// the password with <see cref="ProgramContract{T}.SecretEnvironment"/>, so no switch is spelled twice.
/// </summary>
public sealed class CacheHostOptions : IProgramOptions
{
    public static string SectionName => "CacheHost";
    public static string ProgramName => "hpcdata cache-host";
    public static string Assembly => "Hpc.CacheHost";
    public static string Summary => "in-memory segment store of the cache tier, speaking a RESP2 subset (redis-cli and redis-benchmark work against it)";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata cache-host --port 6380 --max-memory 64GB --users-file /etc/hpcdata/secrets/users",
         "a cache host with accounts, as its service runs it"),
    ];

    /// <summary>IP address (or host name) to listen on; 0.0.0.0 or :: for all interfaces.</summary>
    [Switch("--address", "address to listen on; 0.0.0.0 or :: for all interfaces", Meta = "ADDR")]
    public string Address { get; set; } = "127.0.0.1";

    /// <summary>TCP port; 0 picks a free one, announced on the READY line.</summary>
    [Switch("--port", "TCP port; 0 picks a free one, announced as READY host:port on stdout", Meta = "PORT")]
    public int Port { get; set; } = 6380;

    /// <summary>Budget for stored keys, values and per-entry overhead; writes beyond it are refused, never paged.</summary>
    [Switch("--max-memory", "budget for keys, values and per-entry overhead; writes beyond it are refused with OOM")]
    public ByteSize MaxMemoryBytes { get; set; } = new(1L << 30);

    /// <summary>Largest request frame accepted; it also bounds a single bulk string, an inline line and the argument count.</summary>
    [Switch("--max-frame", "largest request accepted (bounds one value, an inline line and the argument count)")]
    public ByteSize MaxFrameBytes { get; set; } = new(64L << 20);

    /// <summary>
    /// What keys outside the system's <c>hcd:</c> namespace may hold on the host before writers are refused more (all
    /// writers together; administrators are not limited): a writer account can otherwise fill the memory datasets need.
    /// </summary>
    [Switch("--foreign-key-quota", "bytes that keys outside hcd: may hold before writers are refused more (all writers together; administrators are not limited)")]
    public ByteSize ForeignKeyQuota { get; set; } = new(16L << 20);

    [Switch("--max-clients", "connections served at once; more are turned away")]
    public int MaxClients { get; set; } = 10_000;

    /// <summary>
    /// Connections served at once from one client address, so that one address cannot take every connection the host
    /// has; a whole node (every job's workers and its agent) may be one address, hence the margin.
    /// </summary>
    [Switch("--max-clients-per-address", "connections served at once from one client address (a whole node may be one); more are turned away")]
    public int MaxClientsPerAddress { get; set; } = 256;

    /// <summary>
    /// With a users file, the logged-in connections one reader or writer account may hold at once; 0 means half of
    /// <see cref="MaxClients"/>. Without it one account's clients (a writer's leaked password, a runaway job) could take
    /// every place and keep the nodes out. Administrators are not held to it (with <c>--password</c> alone every client
    /// is the administrator <c>default</c>); writers together also leave the last fifth of <see cref="MaxClients"/> to
    /// readers and administrators. The node account that every node logs in as needs nodes × connections per host.
    /// </summary>
    [Switch("--max-clients-per-account", "logged-in connections one reader or writer account may hold at once (0: half of --max-clients); administrators are not held to it, and writers together leave the last fifth of --max-clients to readers and administrators")]
    public int MaxClientsPerAccount { get; set; }

    /// <summary>The share <see cref="MaxClientsPerAccount"/> gives each account, its default resolved.</summary>
    public int AccountShare => MaxClientsPerAccount > 0 ? MaxClientsPerAccount : Math.Max(1, MaxClients / 2);

    /// <summary>
    /// On a host that requires authentication, how long a logged-in connection may send nothing before it is closed,
    /// freeing its place and its account's share: connections a client forgot would otherwise hold them for good. Our
    /// clients open a pooled connection again when they find it closed. Zero never closes one.
    /// </summary>
    [Switch("--idle-timeout", "with --password or --users-file, how long a logged-in connection may send nothing before it is closed (0: never; at most 7d)")]
    public TimeSpan IdleTimeout { get; set; } = TimeSpan.FromMinutes(5);

    /// <summary>
    /// On a host that requires authentication, connections from one client address that have not logged in yet: our
    /// clients log in at once, so only a flood of connections that never do reaches it.
    /// </summary>
    [Switch("--max-unauthenticated-per-address", "with --password or --users-file, connections from one client address not yet logged in; more are turned away (the last tenth of --max-clients is also kept for addresses that have logged in before)")]
    public int MaxUnauthenticatedPerAddress { get; set; } = 32;

    /// <summary>
    /// On a host that requires authentication, how long a connection may stay without logging in before it is closed,
    /// so idle unauthenticated connections cannot keep the accounts' own clients out. Our clients log in at once.
    /// </summary>
    [Switch("--auth-timeout", "with --password or --users-file, how long a connection may stay without logging in before it is closed (at most 1h)")]
    public TimeSpan AuthTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>When set, every connection must AUTH before any data command. Launchers pass it in the environment.</summary>
    [Switch("--password", "clients must AUTH with it; on the command line it is visible to every user in ps, so prefer --password-file or the environment",
        Environment = CacheTierOptions.PasswordVariable, Secret = true)]
    public string? Password { get; set; }

    /// <summary>A file whose first line is the password, so the secret never appears in the process list.</summary>
    [Switch("--password-file", "read the password from the first line of this file", Meta = "PATH")]
    public string? PasswordFile { get; set; }

    /// <summary>Named accounts with roles, one per line: NAME ROLE SECRET (reader, writer or admin; the password or sha256:HEX).</summary>
    [Switch("--users-file", "accounts with roles, one per line: NAME reader|writer|admin PASSWORD-or-sha256:HEX; clients AUTH as NAME", Meta = "PATH")]
    public string? UsersFile { get; set; }

    /// <summary>PEM certificate (chain) the host presents; with <see cref="TlsKeyFile"/> the port speaks TLS only.</summary>
    [Switch("--tls-cert", "PEM certificate (chain) to serve TLS with; with --tls-key, the port accepts TLS connections only", Meta = "PATH")]
    public string? TlsCertificateFile { get; set; }

    [Switch("--tls-key", "PEM private key of --tls-cert (keep it readable by the host's user only)", Meta = "PATH")]
    public string? TlsKeyFile { get; set; }

    /// <summary>Where the meter is exported (--prometheus, --otlp); off by default.</summary>
    public MetricsOptions Metrics { get; set; } = new();

    public IEnumerable<string> Validate()
    {
        foreach (var problem in Metrics.Validate()) yield return problem;
        if (Port is < 0 or > 65535)
            yield return $"--port must be 0..65535, not {Port}.";
        if (MaxMemoryBytes.Bytes <= 0)
            yield return "--max-memory must be positive.";
        if (MaxFrameBytes.Bytes is < 1024 or > int.MaxValue)
            yield return $"--max-frame must be between 1KB and 2GB, not {MaxFrameBytes.ToExactString()}.";
        if (MaxClients <= 0)
            yield return $"--max-clients must be positive, not {MaxClients}.";
        if (ForeignKeyQuota.Bytes < 0)
            yield return $"--foreign-key-quota must not be negative, not {ForeignKeyQuota.ToExactString()}.";
        if (MaxUnauthenticatedPerAddress <= 0)
            yield return $"--max-unauthenticated-per-address must be positive, not {MaxUnauthenticatedPerAddress}.";
        if (MaxClientsPerAddress <= 0)
            yield return $"--max-clients-per-address must be positive, not {MaxClientsPerAddress}.";
        if (MaxClientsPerAccount < 0 || (MaxClients > 0 && MaxClientsPerAccount > MaxClients))
            yield return $"--max-clients-per-account must be 0 (half of --max-clients) or 1 to --max-clients ({MaxClients}), not {MaxClientsPerAccount}.";
        if (IdleTimeout < TimeSpan.Zero || IdleTimeout > TimeSpan.FromDays(7))
            yield return $"--idle-timeout must be 0 (never) or at most 7d, not {SettingValues.FormatDuration(IdleTimeout)}.";
        if (AuthTimeout <= TimeSpan.Zero || AuthTimeout > TimeSpan.FromHours(1))
            yield return $"--auth-timeout must be more than 0 and at most 1h, not {SettingValues.FormatDuration(AuthTimeout)}.";
        if (string.IsNullOrWhiteSpace(Address))
            yield return "--address must not be empty.";
        if (!string.IsNullOrEmpty(Password) && !string.IsNullOrEmpty(PasswordFile))
            yield return "--password (or HPCDATA_CACHE_PASSWORD) and --password-file are both given; use one.";
        if (string.IsNullOrEmpty(TlsCertificateFile) != string.IsNullOrEmpty(TlsKeyFile))
            yield return "--tls-cert and --tls-key go together.";
        foreach (var (name, path) in new[] { ("--tls-cert", TlsCertificateFile), ("--tls-key", TlsKeyFile) })
            if (!string.IsNullOrEmpty(path) && !File.Exists(path))
                yield return $"{name} '{path}' does not exist.";
        if (!string.IsNullOrEmpty(UsersFile) && !File.Exists(UsersFile))
            yield return $"--users-file '{UsersFile}' does not exist.";
        if (!string.IsNullOrEmpty(PasswordFile) && !File.Exists(PasswordFile))
            yield return $"--password-file '{PasswordFile}' does not exist.";
    }

    /// <summary>
    /// Reads <see cref="PasswordFile"/>, when given, into <see cref="Password"/> (its first line, without the line end).
    /// Returns why that failed, or null.
    /// </summary>
    public string? LoadPasswordFile()
    {
        if (string.IsNullOrEmpty(PasswordFile))
            return null;
        try
        {
            using var reader = new StreamReader(PasswordFile);
            var line = reader.ReadLine();
            if (string.IsNullOrEmpty(line))
                return $"--password-file '{PasswordFile}' is empty.";
            Password = line;
            return null;
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
        {
            return $"--password-file '{PasswordFile}' cannot be read: {ex.Message}";
        }
    }
}
