using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The node agent's settings and its command line: <c>Hpc.NodeAgent --pipe … --data-dir … --budget 8GB --cache-hosts …</c>.
/// Each setting also comes from appsettings.json beside the program (section "Agent", the cache tier nested as
/// "Agent:CacheTier") and, where named, from an environment variable. Launchers build the command line from an
/// instance with <see cref="ProgramContract{T}.ToArguments"/>.
/// </summary>
public sealed class NodeAgentOptions : IProgramOptions
{
    public static string SectionName => "Agent";
    public static string ProgramName => "hpcdata agent";
    /// <summary>Only the agent reads these (a systemd unit's <c>Environment=</c> lines, typically): a misspelt one warns.</summary>
    public static string? OwnVariables => "HPCDATA_AGENT_";
    public static string Assembly => "Hpc.NodeAgent";
    public static string Summary => "keeps verified local copies of datasets on this node and serves them to local workers over a pipe";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata agent --data-dir /var/lib/hpcdata --budget 200GB --cache-hosts cache1:6380",
         "this node's agent, as its service runs it"),
    ];

    /// <summary>Pipe name (or, on Linux, an absolute socket path). Keep it short: Unix socket paths are limited to ~100 bytes.</summary>
    [Switch("--pipe", "pipe name, or on Linux an absolute socket path", Environment = AgentClient.PipeVariable, Meta = "NAME")]
    public string Pipe { get; set; } = AgentClient.DefaultPipe;

    /// <summary>Where local copies live. tmpfs (/dev/shm) by default; a local disk directory for data larger than RAM.</summary>
    [Switch("--data-dir", "directory of the local copies (tmpfs, or a local disk for data larger than RAM)", Environment = "HPCDATA_AGENT_DATA_DIR", Meta = "DIR")]
    public string DataDirectory { get; set; } = Directory.Exists("/dev/shm") ? "/dev/shm/hpcdata" : Path.Combine(Path.GetTempPath(), "hpcdata");

    /// <summary>Bytes of local copies kept before unleased, unpinned ones are evicted, least recently used first.</summary>
    [Switch("--budget", "local copies kept before unleased ones are evicted, least recently used first", Environment = "HPCDATA_AGENT_BUDGET")]
    public ByteSize Budget { get; set; } = new(8L << 30);

    /// <summary>The node's name in status replies, logs and telemetry.</summary>
    [Switch("--node", "this node's name in status, logs and telemetry", Environment = "HPCDATA_AGENT_NODE", Meta = "NAME")]
    public string NodeName { get; set; } = Environment.MachineName;

    /// <summary>
    /// JSON-lines file that gets one <c>kind: "fetch"</c> line per completed fetch (the format <c>hpcdata report</c>
    /// reads; docs/benchmarks.md). Empty: <c>telemetry.jsonl</c> in the data directory; "none": off.
    /// </summary>
    [Switch("--telemetry", "JSON-lines file of completed fetches; empty: telemetry.jsonl in the data directory; none: off",
        Environment = "HPCDATA_AGENT_TELEMETRY", Meta = "PATH")]
    public string TelemetryFile { get; set; } = "";

    /// <summary>
    /// A group of the agent's administrators: its own files (telemetry, pins, manifests, journals) are created 0640 in
    /// that group rather than 0600, and its members see every copy in status and may release any pin. It reads no
    /// restricted dataset through it: copies keep their readers. None by default (the agent's user and root only).
    /// </summary>
    [Switch("--admin-group", "group (name or id) that may read the agent's own files, see every copy in status and release any pin",
        Environment = "HPCDATA_AGENT_ADMIN_GROUP", Meta = "GROUP")]
    public string? AdminGroup { get; set; }

    /// <summary>The id of <see cref="AdminGroup"/>, or null when none is set or the node does not know it (see <see cref="Validate"/>).</summary>
    public uint? AdminGroupId() =>
        string.IsNullOrEmpty(AdminGroup) ? null
        : uint.TryParse(AdminGroup, System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var gid) ? gid
        : OperatingSystem.IsLinux() ? Access.UnixAccounts.GroupId(AdminGroup) : null;

    /// <summary>
    /// Pipe connections served at once, every user together. A worker holds its connection while it uses a dataset, so
    /// this is about the node's ranks times the datasets each keeps open; beyond it a connection is answered with one
    /// error line and closed.
    /// </summary>
    [Switch("--max-connections", "pipe connections served at once, all users together")]
    public int MaxConnections { get; set; } = 4096;

    /// <summary>
    /// Pipe connections one user (by the uid the kernel records for the socket) may hold at once; root and the agent's
    /// user are not counted. Below <see cref="MaxConnections"/>, so no single user can take every connection; by default
    /// a quarter of it.
    /// </summary>
    [Switch("--max-connections-per-user", "pipe connections one user may hold at once (root and the agent's user: no limit); below --max-connections, default a quarter of it")]
    public int? MaxConnectionsPerUser { get; set; }

    /// <summary>The per-user connection limit in force: <see cref="MaxConnectionsPerUser"/>, or a quarter of <see cref="MaxConnections"/>.</summary>
    public int EffectiveMaxConnectionsPerUser => MaxConnectionsPerUser ?? Math.Max(1, MaxConnections / 4);

    /// <summary>Requests of one user the agent works on at once (opens waiting for a fetch, ingests); root and the agent's user are not counted.</summary>
    [Switch("--max-requests-per-user", "requests of one user worked on at once (root and the agent's user: no limit)")]
    public int MaxRequestsPerUser { get; set; } = 256;

    /// <summary>Ingests one user may run at once (a fan-out runs one per node).</summary>
    [Switch("--max-ingests-per-user", "ingests one user may run at once (root and the agent's user: no limit)")]
    public int MaxIngestsPerUser { get; set; } = 4;

    /// <summary>
    /// How long a new connection may take to send its first whole request. A connection that sends nothing is closed
    /// after this, so idle sockets cannot hold the places of the connections that are used.
    /// </summary>
    [Switch("--idle-timeout", "how long a new connection may take to send its first request before it is closed")]
    public TimeSpan IdleTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>
    /// How long an ingest may go without delivering a segment while a fetch of the same version waits for it: it is then
    /// abandoned, and the waiting readers' fetch takes over from what it had written.
    /// </summary>
    [Switch("--ingest-stall-timeout", "how long an ingest may go without delivering a segment while a reader waits for that version, before it is abandoned")]
    public TimeSpan IngestStallTimeout { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// The least an ingest must deliver, over each --ingest-stall-timeout, while a fetch of the same version waits for
    /// it: a segment now and then restarts no clock, so another user's trickle cannot hold a reader for minutes. A fan-out
    /// on a 10 Mbit/s link delivers five times this. An ingest under 16 times this rate is also compared, each window,
    /// with the waiting fetch's own rate measured then on a few missing segments, and abandoned when that fetch would
    /// finish at least twice as soon (<c>SegmentIngest.AbandonIfOutpacedAsync</c>); 0 turns off both.
    /// </summary>
    [Switch("--ingest-min-rate", "least bytes per second an ingest must deliver (over each --ingest-stall-timeout) while a reader waits for that version, before it is abandoned; 0: only an ingest that delivers nothing is", Meta = "RATE")]
    public ByteRate IngestMinRate { get; set; } = new(256 << 10);

    /// <summary>
    /// Threads that verify, decode and write an ingest's segments while its connection goes on receiving: a fan-out
    /// hands a node the whole dataset over one connection, and one thread took it at a fraction of the node's cores.
    /// 0: one per core.
    /// </summary>
    [Switch("--ingest-threads", "threads that verify, decode and write one ingest's segments; 0: one per core", Environment = "HPCDATA_AGENT_INGEST_THREADS")]
    public int IngestThreads { get; set; }

    /// <summary>The threads an ingest uses: <see cref="IngestThreads"/>, or one per core.</summary>
    public int IngestThreadCount => IngestThreads > 0 ? IngestThreads : Environment.ProcessorCount;

    /// <summary>
    /// Bytes of copies one user may hold pinned on the node (a copy counts whole for each user pinning it); root, the
    /// agent's user and the admin group are not limited. Default: a quarter of <see cref="Budget"/>.
    /// </summary>
    [Switch("--pin-quota", "bytes of copies one user may keep pinned (root, the agent's user and --admin-group: no limit); default a quarter of --budget",
        Environment = "HPCDATA_AGENT_PIN_QUOTA")]
    public ByteSize? PinQuota { get; set; }

    /// <summary>The pin quota in force: <see cref="PinQuota"/>, or a quarter of the budget.</summary>
    public ByteSize EffectivePinQuota => PinQuota ?? new ByteSize(Budget.Bytes / 4);

    /// <summary>
    /// Where the agent listens for node prep requested of the running agents (<c>hpcdata nodeprep --fanout agents</c>)
    /// and for the other agents forwarding it: host:port or :port; empty (the default): it takes no such requests.
    /// Requires <see cref="PeerKeyFile"/>: a request makes the agent fetch and pin data.
    /// </summary>
    [Switch("--peer-listen", "address (host:port or :port) where node prep requested of the running agents reaches this agent; empty: off. Needs --peer-key-file",
        Environment = "HPCDATA_AGENT_PEER_LISTEN", Meta = "HOST:PORT")]
    public string PeerListen { get; set; } = "";

    /// <summary>A file whose first line is the secret every agent of the cluster and node prep share (16 characters or more, e.g. from <c>openssl rand -hex 32</c>).</summary>
    [Switch("--peer-key-file", "file whose first line is the secret the cluster's agents and node prep share (16 characters or more)",
        Environment = PeerKeyFileVariable, Meta = "PATH")]
    public string? PeerKeyFile { get; set; }

    public const string PeerKeyFileVariable = "HPCDATA_PEER_KEY_FILE";

    /// <summary>The port agents listen on for requests when a member is given without one.</summary>
    public const int DefaultPeerPort = 6390;

    /// <summary>Where the meter is exported (--prometheus, --otlp); off by default.</summary>
    public MetricsOptions Metrics { get; set; } = new();

    /// <summary>How the agent reaches the cache tier (its switches: --cache-hosts, --replicas, --cache-password-file).</summary>
    public CacheTierOptions CacheTier { get; set; } = new();

    /// <summary>Where <see cref="PeerListen"/> listens (any address for ":port"), or null when it does not read.</summary>
    public System.Net.IPEndPoint? PeerEndpoint()
    {
        var colon = PeerListen.LastIndexOf(':');
        if (colon < 0 || !ushort.TryParse(PeerListen.AsSpan(colon + 1), out var port)) return null;
        var host = PeerListen[..colon].Trim('[', ']');
        if (host.Length == 0) return new System.Net.IPEndPoint(System.Net.IPAddress.IPv6Any, port);
        return System.Net.IPAddress.TryParse(host, out var address) ? new System.Net.IPEndPoint(address, port) : null;
    }

    /// <summary>Longest Unix socket path the kernel accepts (sun_path is 108 bytes including the terminator).</summary>
    private const int MaxSocketPath = 107;

    public IEnumerable<string> Validate()
    {
        foreach (var problem in Metrics.Validate()) yield return problem;
        if (PipeProblem(Pipe, OperatingSystem.IsWindows()) is { } pipeProblem) yield return pipeProblem;
        if (string.IsNullOrWhiteSpace(DataDirectory)) yield return "--data-dir must not be empty";
        if (Budget.Bytes <= 0) yield return $"--budget must be more than 0 (got {Budget.ToExactString()})";
        if (string.IsNullOrWhiteSpace(NodeName)) yield return "--node must not be empty";
        if (MaxConnections < 2) yield return $"--max-connections must be at least 2 (got {MaxConnections})";
        if (MaxConnectionsPerUser is { } perUser && (perUser < 1 || perUser >= MaxConnections))
            yield return $"--max-connections-per-user must be at least 1 and below --max-connections ({MaxConnections}), so one user cannot take every connection (got {perUser})";
        if (MaxRequestsPerUser < 1) yield return $"--max-requests-per-user must be at least 1 (got {MaxRequestsPerUser})";
        if (MaxIngestsPerUser < 1) yield return $"--max-ingests-per-user must be at least 1 (got {MaxIngestsPerUser})";
        if (IdleTimeout <= TimeSpan.Zero) yield return $"--idle-timeout must be more than 0 (got {SettingValues.FormatDuration(IdleTimeout)})";
        if (IngestStallTimeout <= TimeSpan.Zero) yield return $"--ingest-stall-timeout must be more than 0 (got {SettingValues.FormatDuration(IngestStallTimeout)})";
        if (IngestThreads is < 0 or > 1024) yield return $"--ingest-threads must be between 0 (one per core) and 1024 (got {IngestThreads})";
        if (PinQuota is { Bytes: <= 0 } quota) yield return $"--pin-quota must be more than 0 (got {quota.ToExactString()})";
        if (!string.IsNullOrEmpty(AdminGroup))
        {
            if (!OperatingSystem.IsLinux()) yield return "--admin-group is for Linux nodes (file groups and socket credentials)";
            else if (AdminGroupId() is null) yield return $"--admin-group: '{AdminGroup}' is not a group on this node";
        }
        if (!string.IsNullOrEmpty(PeerListen))
        {
            if (PeerEndpoint() is null) yield return $"--peer-listen: '{PeerListen}' is not host:port or :port";
            if (string.IsNullOrEmpty(PeerKeyFile)) yield return "--peer-listen needs --peer-key-file: a request makes the agent fetch and pin data";
            else if (!File.Exists(PeerKeyFile)) yield return $"--peer-key-file: '{PeerKeyFile}' does not exist";
        }
        if (CacheTier is null) { yield return "no cache-tier settings"; yield break; }
        foreach (var problem in CacheTier.Validate()) yield return problem;
    }

    /// <summary>Longest pipe name Windows accepts after <c>\\.\pipe\</c>.</summary>
    private const int MaxWindowsPipeName = 256;

    /// <summary>Set by a launcher: the file the agent appends its output to, where nobody reads its stdout and stderr.</summary>
    public const string LogVariable = "HPCDATA_AGENT_LOG";

    /// <summary>
    /// Set by a launcher that cannot wait for the agent (node prep starts it in a session of its own): the file the agent
    /// writes its exit code to, so a start-up that failed is reported by its class (denied, cannot create), not as unreachable.
    /// </summary>
    public const string ExitFileVariable = "HPCDATA_AGENT_EXIT_FILE";

    /// <summary>
    /// What is wrong with <paramref name="pipe"/> as the agent's pipe on Windows or on Unix, or null. On Unix a name
    /// becomes a socket file (the kernel's path limit applies) and an absolute path is taken as is; on Windows it is the
    /// part after <c>\\.\pipe\</c>: no backslash, at most 256 characters, and "anonymous" is reserved.
    /// </summary>
    public static string? PipeProblem(string? pipe, bool windows)
    {
        if (string.IsNullOrWhiteSpace(pipe)) return "--pipe must not be empty";
        if (windows)
        {
            if (pipe.Contains('\\') || Path.IsPathRooted(pipe) || pipe.Contains(':'))
                return $"--pipe: '{pipe}' is a path; on Windows the agent's pipe is a name (\\\\.\\pipe\\NAME), without backslashes";
            if (pipe.Length > MaxWindowsPipeName) return $"--pipe: '{pipe[..20]}…' is longer than {MaxWindowsPipeName} characters";
            if (pipe.Equals("anonymous", StringComparison.OrdinalIgnoreCase)) return "--pipe: 'anonymous' is reserved by Windows";
            return null;
        }
        if (System.Text.Encoding.UTF8.GetByteCount(SocketPath(pipe)) > MaxSocketPath)
            return $"--pipe: socket path '{SocketPath(pipe)}' is longer than {MaxSocketPath} bytes; use a shorter name";
        return null;
    }

    /// <summary>The file system path of the agent's socket on Unix (.NET puts a relative pipe name in the temp directory).</summary>
    public static string SocketPath(string pipe) => Agent.AgentClient.SocketPath(pipe);
}
