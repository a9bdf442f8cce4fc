using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cache;

/// <summary>
/// How to reach the cache tier. Bound from configuration (e.g. section "CacheTier", or nested in a program's options,
/// whose command line then has the switches below) or from HPCDATA_* variables.
/// </summary>
public sealed class CacheTierOptions
{
    /// <summary>Cache hosts, <c>host:port</c>. The order does not matter: placement is by rendezvous hashing.</summary>
    [Switch("--cache-hosts", "cache hosts, host:port,…", Environment = HostsVariable, Meta = "HOST:PORT,…")]
    public List<string> Hosts { get; set; } = [];
    /// <summary>
    /// The hosts are seed nodes of a Redis Cluster: keys go to the node serving their hash slot, learned from the
    /// cluster, and the cluster's own replicas serve reads while a master fails over. Off: independent hosts.
    /// </summary>
    [Switch("--cache-cluster", ClusterHelp, Environment = ClusterVariable)]
    public bool Cluster { get; set; }
    /// <summary>Copies of each segment (1 by default; 2 for high availability).</summary>
    [Switch("--replicas", "copies of each segment on the cache tier", Environment = ReplicasVariable)]
    public int Replicas { get; set; } = 1;
    /// <summary>Account on the cache hosts (their --users-file); none means the default user of --password.</summary>
    [Switch("--cache-user", UserHelp, Environment = UserVariable, Meta = "NAME")]
    public string? User { get; set; }
    /// <summary>AUTH password of the cache hosts. A secret: launchers pass it in the environment, never in argv.</summary>
    [Switch("--cache-password", "AUTH password of the cache hosts (visible in ps: prefer the variable or --cache-password-file)",
        Environment = PasswordVariable, Secret = true, Meta = "PASSWORD")]
    public string? Password { get; set; }
    /// <summary>A file whose first line is the AUTH password; read by <see cref="LoadPasswordFile"/> when no password is given.</summary>
    [Switch("--cache-password-file", PasswordFileHelp, Environment = PasswordFileVariable, Meta = "PATH")]
    public string? PasswordFile { get; set; }
    /// <summary>Speak TLS to the cache hosts (they run with --tls-cert and --tls-key).</summary>
    [Switch("--cache-tls", TlsHelp, Environment = TlsVariable)]
    public bool Tls { get; set; }
    /// <summary>PEM file of the certificate authorities that sign the hosts' certificates; implies TLS. Default: the system's trusted roots.</summary>
    [Switch("--cache-ca", TlsCaHelp, Environment = TlsCaVariable, Meta = "PATH")]
    public string? TlsCaFile { get; set; }
    public bool UsesTls => Tls || !string.IsNullOrEmpty(TlsCaFile);
    /// <summary>
    /// Most bytes per second this process moves to and from the cache tier, all its connections together (a stager's
    /// uploads, an agent's fetches), so staging or prefetching beside a running job leaves the job's traffic its share
    /// of the link. Unlimited by default.
    /// </summary>
    [Switch("--max-rate", "most bytes per second to and from the cache tier, all connections together (e.g. 100MB, 800mbit; 0: unlimited)",
        Environment = MaxRateVariable, Meta = "RATE")]
    public ByteRate MaxRate { get; set; }
    /// <summary>
    /// This machine's address that connections to the cache tier leave from: on a node with several interfaces, the one
    /// on the network the cache hosts are to be reached over. The hosts count connections per client address
    /// (<c>--max-clients-per-address</c>), so it is also whom they count them against. A setting of the machine it is
    /// given on, never handed to a job's other nodes. None: the system's routing picks it.
    /// </summary>
    [Switch("--cache-source-address", SourceAddressHelp, Environment = SourceAddressVariable, Meta = "ADDR", ThisMachine = true)]
    public string? SourceAddress { get; set; }
    /// <summary>Connections kept per host; each carries one pipelined batch at a time.</summary>
    public int ConnectionsPerHost { get; set; } = 4;
    /// <summary>Keys per MGET / pipelined SET batch (16 × 64 KB ≈ 1 MB in flight per connection).</summary>
    public int BatchSize { get; set; } = 16;
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(3);
    /// <summary>How long an exchange may go without receiving a byte before the host counts as unresponsive.</summary>
    public TimeSpan OperationTimeout { get; set; } = TimeSpan.FromSeconds(30);
    /// <summary>
    /// How long a small request (a "latest" pointer, a manifest, a flag) may wait for the first byte of its answer. An
    /// in-memory host answers those in microseconds; one that accepted the connection but says nothing (stopped, hung)
    /// must not hold a node's local copy back for the long <see cref="OperationTimeout"/> meant for data moving on a slow link.
    /// </summary>
    public TimeSpan ResponseTimeout { get; set; } = TimeSpan.FromSeconds(3);
    /// <summary>
    /// How long a batch of segments may go without a byte, before its answer or in the middle of it, while another
    /// replica holds the same segments: then the host counts as hung, the batch and the rest of that host's share go to
    /// the next replica, and the host is failed at once for a few seconds. A live host on any link sends something within
    /// it; without another replica, <see cref="OperationTimeout"/> applies. Under <see cref="MaxRate"/> it is lengthened
    /// to what the rate needs.
    /// </summary>
    public TimeSpan StallTimeout { get; set; } = TimeSpan.FromSeconds(2.5);
    public int MaxAttempts { get; set; } = 5;
    public TimeSpan RetryBaseDelay { get; set; } = TimeSpan.FromMilliseconds(50);
    public TimeSpan RetryMaxDelay { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>Below this a pipelined batch (about 1 MB per connection) takes longer than a sane exchange timeout.</summary>
    public const long MinimumRate = 256 << 10;

    // The help of the account and TLS switches, one text wherever a command line declares them (the programs' contracts,
    // and hpcdata's verbs that talk to the cache tier).
    public const string UserHelp = "account on the cache hosts (reader for nodes, writer for staging, admin for remove and gc)";
    public const string PasswordFileHelp = "file whose first line is the AUTH password of the cache hosts";
    public const string TlsHelp = "connect to the cache hosts over TLS, checking their certificates";
    public const string ClusterHelp = "the cache hosts are seed nodes of a Redis Cluster (keys go where their hash slot lives)";
    public const string SourceAddressHelp = "this machine's address to connect to the cache hosts from (a node with several interfaces: the one on the cache tier's network; default: the system's routing picks it); an IP address, never handed to a job's other nodes";
    public const string TlsCaHelp = "PEM file of the CA(s) that sign the cache hosts' certificates (implies --cache-tls; default: the system's roots)";

    public const string HostsVariable = "HPCDATA_CACHE_HOSTS";
    public const string PasswordVariable = "HPCDATA_CACHE_PASSWORD";
    public const string UserVariable = "HPCDATA_CACHE_USER";
    public const string PasswordFileVariable = "HPCDATA_CACHE_PASSWORD_FILE";
    public const string TlsVariable = "HPCDATA_CACHE_TLS";
    public const string TlsCaVariable = "HPCDATA_CACHE_CA";
    public const string MaxRateVariable = "HPCDATA_MAX_RATE";
    public const string ReplicasVariable = "HPCDATA_CACHE_REPLICAS";
    public const string ClusterVariable = "HPCDATA_CACHE_CLUSTER";
    public const string SourceAddressVariable = "HPCDATA_CACHE_SOURCE_ADDRESS";

    /// <summary>Problems with the settings, each a sentence naming the switch; empty when they are usable.</summary>
    public IEnumerable<string> Validate()
    {
        if (Hosts.Count == 0) yield return $"no cache hosts: give --cache-hosts HOST:PORT,… or set {HostsVariable}";
        foreach (var h in Hosts)
        {
            string? problem = null;
            try { CacheEndpoint.Parse(h); }
            catch (FormatException e) { problem = e.Message; }
            if (problem is not null) yield return $"--cache-hosts: {problem}";
        }
        if (!string.IsNullOrEmpty(User) && string.IsNullOrEmpty(Password) && string.IsNullOrEmpty(PasswordFile))
            yield return $"--cache-user '{User}' needs a password: give --cache-password-file or set {PasswordVariable}";
        if (MaxRate.BytesPerSecond < 0) yield return "--max-rate must not be negative";
        else if (MaxRate.BytesPerSecond is > 0 and < MinimumRate) yield return $"--max-rate {MaxRate.ToExactString()} is below {MinimumRate >> 10}KB/s: a batch would outwait the exchange timeout";
        if (!string.IsNullOrEmpty(SourceAddress) && CheckSourceAddress(SourceAddress) is { } source) yield return source;
        if (Replicas < 1) yield return $"--replicas must be at least 1 (got {Replicas})";
        else if (Cluster && Replicas > 1)
            yield return $"--replicas {Replicas} with --cache-cluster: a Redis Cluster keeps its own replicas of every key; leave --replicas at 1";
        // Placement puts each copy on a different host; more copies than hosts would silently be fewer copies.
        else if (Hosts.Count > 0 && Replicas > Hosts.Count)
            yield return $"--replicas {Replicas} cannot exceed the number of cache hosts ({Hosts.Count}): each copy of a segment is kept on a host of its own";
        if (!string.IsNullOrEmpty(TlsCaFile) && !File.Exists(TlsCaFile)) yield return $"--cache-ca: '{TlsCaFile}' does not exist";
        if (!string.IsNullOrEmpty(PasswordFile) && !File.Exists(PasswordFile)) yield return $"--cache-password-file: '{PasswordFile}' does not exist";
        if (ConnectionsPerHost < 1) yield return $"ConnectionsPerHost must be at least 1 (got {ConnectionsPerHost})";
        if (BatchSize < 1) yield return $"BatchSize must be at least 1 (got {BatchSize})";
        if (MaxAttempts < 1) yield return $"MaxAttempts must be at least 1 (got {MaxAttempts})";
        if (ResponseTimeout <= TimeSpan.Zero) yield return $"ResponseTimeout must be positive (got {ResponseTimeout})";
        if (StallTimeout <= TimeSpan.Zero) yield return $"StallTimeout must be positive (got {StallTimeout})";
    }

    /// <summary>
    /// Why <paramref name="text"/> cannot be an address to connect from, or null. A name is not taken: which address it
    /// resolves to would be the resolver's choice, and the point is the operator's.
    /// </summary>
    public static string? CheckSourceAddress(string text) =>
        !IPAddress.TryParse(text, out var address) ? $"--cache-source-address '{text}' is not an IP address (give the address of the interface to connect from, not a name)"
        : address.Equals(IPAddress.Any) || address.Equals(IPAddress.IPv6Any) || address.Equals(IPAddress.Broadcast) || address.IsIPv6Multicast
          || address.AddressFamily == AddressFamily.InterNetwork && address.GetAddressBytes()[0] is >= 224 and <= 239
            ? $"--cache-source-address {text} is not one address of this machine (leave it out to let the system's routing pick one)"
        : null;

    /// <summary>The address connections leave from (<see cref="SourceAddress"/>), or null for the system's choice.</summary>
    public IPAddress? SourceIPAddress => string.IsNullOrEmpty(SourceAddress) ? null
        : CheckSourceAddress(SourceAddress) is { } problem ? throw new ArgumentException(problem) : IPAddress.Parse(SourceAddress);

    /// <summary>A copy, with a hosts list of its own: what a command resolves (defaults, the password read) without
    /// changing the settings it was given.</summary>
    public CacheTierOptions Copy()
    {
        var copy = (CacheTierOptions)MemberwiseClone();
        copy.Hosts = [.. Hosts];
        return copy;
    }

    /// <summary>
    /// When <see cref="PasswordFile"/> is set and no <see cref="Password"/> is: reads the password from the file's first
    /// line (a trailing newline is not part of it).
    /// </summary>
    public void LoadPasswordFile()
    {
        if (string.IsNullOrEmpty(PasswordFile) || !string.IsNullOrEmpty(Password)) return;
        using var reader = new StreamReader(PasswordFile);
        Password = reader.ReadLine() ?? "";
    }

    /// <summary>
    /// Options from the client's settings files and the documented environment variables over them (hosts default to
    /// 127.0.0.1:6380): the layers every program resolves beneath its command line (<see cref="SettingLayers"/>), so a
    /// worker reads them as the verbs and the daemons do. A value that does not read is an <see cref="ArgumentException"/>
    /// naming the variable, or the file and line, not a setting silently left off.
    /// </summary>
    public static CacheTierOptions FromEnvironment()
    {
        ClientConfig files;
        try { files = ClientConfig.Load(); }
        catch (FormatException e) { throw new ArgumentException(e.Message, e); }
        return FromEnvironment(Environment.GetEnvironmentVariable, files);
    }

    /// <summary>The options <paramref name="environment"/>'s variables give over <paramref name="files"/> (none by default), read as <see cref="FromEnvironment()"/> reads the process's.</summary>
    public static CacheTierOptions FromEnvironment(Func<string, string?> environment, ClientConfig? files = null)
    {
        var o = new CacheTierOptions();
        var origins = new SettingOrigins();
        if (SettingLayers.ApplyBeneathCommandLine([.. SettingSlot.Of(o)], environment, files ?? ClientConfig.None, origins) is { } problem) throw new ArgumentException(problem);
        if (o.SourceAddress is { Length: > 0 } source && CheckSourceAddress(source) is { } bad) throw new ArgumentException($"{bad} (from {origins["--cache-source-address"]})");
        o.Hosts = o.Hosts.Count == 0 ? [$"127.0.0.1:{CacheEndpoint.DefaultPort}"] : CacheEndpoint.ParseList(string.Join(",", o.Hosts)).Select(e => e.ToString()).ToList();
        o.LoadPasswordFile();
        return o;
    }
}
