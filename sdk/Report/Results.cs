using System.Text.Json;
using System.Text.Json.Serialization;

namespace Hpc.CommonData.Report;

/// <summary>
/// One line of results.jsonl (format "hpcdata-bench", schema 1; documented in docs/benchmarks.md). Readers must ignore
/// fields they do not know, so later schemas only add.
/// </summary>
public sealed class BenchRecord
{
    public string Kind { get; set; } = "cluster";          // cluster | calibration | skipped
    public int Schema { get; set; } = 1;
    public string Run { get; set; } = "";
    public DateTimeOffset Time { get; set; } = DateTimeOffset.UtcNow;
    public string? Pattern { get; set; }                   // calibration: pull | neighbour
    public string? Note { get; set; }
    public RunConfig Config { get; set; } = new();
    public DatasetInfo? Dataset { get; set; }
    /// <summary>Seconds the configuration needs at the link rate with nothing lost (see <see cref="Limits"/>).</summary>
    public double LimitSeconds { get; set; }
    /// <summary>From the common start until the last node had a complete, verified copy.</summary>
    public double MeasuredSeconds { get; set; }
    public double Efficiency { get; set; }
    public List<NodeTime> Nodes { get; set; } = [];
    public List<HostBytes>? CacheHosts { get; set; }
    public List<ProcessSample>? Processes { get; set; }
    public List<WorkerTime>? Workers { get; set; }
    public MachineInfo? Machine { get; set; }
    /// <summary>Share of all cores busy (user, system, interrupts) over the timed part: near 1, the emulator itself limited the run.</summary>
    public double? MachineBusy { get; set; }
    /// <summary>How the node agent the run started was compiled: native, ReadyToRun or JIT (a Debug build's is JIT and
    /// unoptimised, several times the CPU per byte); absent in records from before it was recorded.</summary>
    public string? Programs { get; set; }
    /// <summary>Fan-out: how many small first blocks each share began with (BlockSizing.RampBlocks in the build that
    /// ran); absent in records from before the ramp, whose shares began with a whole block.</summary>
    public int? BlockRamp { get; set; }
    /// <summary>Runs with --agent-max-rate or --stager-max-rate: what the token buckets held.</summary>
    public RateLimitResult? RateLimit { get; set; }
    /// <summary>Bytes the cache tier sent to the nodes in this run, where the nodes reported it (Slurm steps).</summary>
    public long? CacheTierBytes { get; set; }
    /// <summary>Fault runs of the burst-buffer mode: what the cache tier sent after the struck nodes came back (a stopped
    /// node continued, a link up again), the node completing its own copy; not part of the job's staging, which
    /// <see cref="CacheTierBytes"/> counts up to then.</summary>
    public long? RecoveryTierBytes { get; set; }
    /// <summary>Runs with slow nodes (<see cref="RunConfig.SlowNodes"/>): S over the slow link's rate, the least a slow node can take.</summary>
    public double? SlowNodeLimitSeconds { get; set; }
    /// <summary>Scheduler runs: what became of the job (ran; requeued or held, with Slurm's reason), where a fault made it matter.</summary>
    public string? JobFate { get; set; }
}

/// <summary>
/// Configured against achieved rates, in bytes per second of cache-tier payload (what the bucket charges; link counters
/// also carry TCP/IP headers). A node's rate is the stored bytes it fetched over its fetch time; the stager's the bytes
/// it sent over its staging time. The steady rates are slopes between 10% and 90% of the transfer, sampled every 100 ms
/// (<see cref="TrafficSampler"/>): for the agents each agent's own progress (its status, raw bytes scaled to stored;
/// the median node), for the stager the cache hosts' input counters. NodeLinkPeak: node 1's busiest 100 ms on its link
/// (frames, headers included), how evenly the limited fetch used the link.
/// </summary>
public sealed record RateLimitResult(long? AgentMaxRateBytes, double? AgentMedianBytesPerSecond, double? AgentMinBytesPerSecond,
    double? AgentMaxBytesPerSecond, long? StagerMaxRateBytes, double? StagerBytesPerSecond)
{
    public double? AgentSteadyBytesPerSecond { get; init; }
    public double? StagerSteadyBytesPerSecond { get; init; }
    public double? NodeLinkPeakBytesPerSecond { get; init; }
}

public sealed class RunConfig
{
    public int Nodes { get; set; }
    public int Hosts { get; set; }
    public long SizeBytes { get; set; }
    public int RateMbit { get; set; }
    public double DelayMs { get; set; }
    public bool Compress { get; set; } = true;
    /// <summary>The stager's codec when it was not LZ4 (zstd, zstd:LEVEL); null for LZ4 or none (see <see cref="Compress"/>).</summary>
    public string? Codec { get; set; }
    public int Workers { get; set; }
    public string Data { get; set; } = "csv";
    public bool WarmAgents { get; set; }
    /// <summary>How workers attach when <see cref="Workers"/> &gt; 0: map (shared mapping) or stream (private copy over the pipe).</summary>
    public string? WorkerMode { get; set; }
    /// <summary>Members' egress queue when not the plain FIFO (see <see cref="Topology.HostQueue"/>); absent means fifo.</summary>
    public string? HostQueue { get; set; }
    /// <summary>How the data reached the nodes when not every agent fetching directly: "mpi" (hpcdata nodeprep --fanout
    /// mpi, one Open MPI rank per node namespace, sharing the fetching and passing the data on); absent means direct.</summary>
    public string? Fanout { get; set; }
    /// <summary>True when the cache tier served TLS (hosts with a certificate; the stager and agents verifying it).</summary>
    public bool? Tls { get; set; }
    /// <summary>Nodes whose link (both ends) was shaped to <see cref="SlowRateMbit"/> instead of the rate; absent when none was.</summary>
    public List<string>? SlowNodes { get; set; }
    public double? SlowRateMbit { get; set; }
    /// <summary>Fan-out runs: the rank whose process was killed once the exchange moved (its node has no line), and when,
    /// from the launch; absent when none was.</summary>
    public int? KillRank { get; set; }
    public double? KillSeconds { get; set; }
    /// <summary>A node fault injected by the bench: kill (every process of the node's namespaces SIGKILLed), down (its
    /// link set down) or stop (its processes SIGSTOPped); the nodes (node1…) and when, in seconds from the job's
    /// allocation. Absent when none was.</summary>
    public string? Fault { get; set; }
    public List<string>? FaultNodes { get; set; }
    public double? FaultSeconds { get; set; }
    /// <summary>The peer timeout the exchange ran with where the bench set one (the burst buffer site's
    /// <c>--peer-timeout</c>); absent for the product's default.</summary>
    public double? PeerTimeoutSeconds { get; set; }
}

public sealed record DatasetInfo(string Version, long RawBytes, long StoredBytes, int Segments, double StageSeconds);
/// <summary>LinkRxBytes/LinkTxBytes: the node namespace's eth0 counters over the timed part (its shaped veth end).
/// LaunchSeconds/ExchangeSeconds (fan-out runs): from the common start until the rank's process started its clock, and
/// the rank's own exchange time as it reported it. RankCpuSeconds/AgentCpuSeconds: node prep's CPU and its agent's over
/// the fetch (all of it for an agent node prep started). Route/ProbeSeconds (fan-out runs): "ring", or the leaves and
/// the ring's members the ranks agreed on after probing their links, and what the probe took on this rank.
/// JoinSeconds (fan-out runs): from the rank's clock starting until MPI was up on it (the agent is reached meanwhile).
/// ShareSeconds (fan-out runs): from the exchange's start until the rank held its own share from the cache tier.
/// ManifestSeconds/AgreeSeconds/EndSeconds (fan-out runs): the exchange's steps before and after its ring (the
/// manifest's look-up and broadcast; agreeing what travels; the probe's drain and the ingest's end). BeginSeconds: of
/// the agreement, the node's ingest's begin.</summary>
public sealed record NodeTime(string Node, double WallSeconds, double FetchSeconds, long Bytes, string? Source = null,
    long? LinkRxBytes = null, long? LinkTxBytes = null, double? LaunchSeconds = null, double? ExchangeSeconds = null,
    double? RingSeconds = null, double? PublishSeconds = null, double? RankCpuSeconds = null, double? AgentCpuSeconds = null,
    string? Route = null, double? ProbeSeconds = null, double? JoinSeconds = null, double? ShareSeconds = null,
    double? ManifestSeconds = null, double? AgreeSeconds = null, double? EndSeconds = null,
    long? FetchedBytes = null, long? RepairBytes = null, long? RepairResentBytes = null, int? Bypassed = null, double? BeginSeconds = null);
public sealed record HostBytes(string Host, long NetOutputBytes, long UsedMemoryBytes);
/// <summary>VerifyMs: the worker's own hash of a mapped copy (0 when the open hashed a private copy). WallMs: from the
/// common start until the worker had the whole dataset open and verified; absent where the run did not time it.</summary>
/// <param name="StartupMs">Fresh launches only: from the launch to the worker's own code running (runtime and command line up).</param>
/// <param name="TouchMs">Map mode: the first touch of every page of the mapping.</param>
public sealed record WorkerTime(string Node, string Mode, double AttachMs, double WarmAttachMs, bool Verified, double? VerifyMs = null, double? WallMs = null,
    double? StartupMs = null, double? TouchMs = null);
/// <param name="UserSeconds">CPU in the process's own code; <paramref name="SystemSeconds"/>: in the kernel on its behalf.</param>
public sealed record ProcessSample(string Name, int Pid, double CpuSeconds, long PeakRssBytes, double UserSeconds = double.NaN, double SystemSeconds = double.NaN);
public sealed record MachineInfo(string Host, int Cores, string Kernel, string Runtime);

/// <summary>The modes of a Slurm session, in the order the bench runs and the report lists them.</summary>
public static class SlurmModes
{
    /// <summary>The named modes. sbcast also takes its own knobs in the name: see <see cref="TryParseSbcast"/>.</summary>
    public static readonly IReadOnlyList<string> All = ["none", "mpi", "sbcast", "sbcast-tree2", "srun-bcast", BurstBuffer];

    /// <summary>A user's own job that names its dataset with <c>#BB_LUA hpcdata NAME</c>: the controller's burst buffer
    /// hooks have the nodes' running agents exchange it before the script starts (a job of its own per run).</summary>
    public const string BurstBuffer = "burst-buffer";

    /// <summary>What a list of modes may hold, for an error message.</summary>
    public const string Help = "none, mpi, sbcast[-f<F>][-tree<W>], srun-bcast, burst-buffer";

    /// <summary>sbcast's largest --fanout (Slurm caps it at 8, its default).</summary>
    public const int MaxSbcastFanout = 8;

    public static bool IsKnown(string mode) => All.Contains(mode) || IsSbcast(mode);

    public static bool IsSbcast(string mode) => TryParseSbcast(mode, out _, out _);

    /// <summary>
    /// sbcast's knobs from a mode's name: <c>sbcast</c> (Slurm's defaults), <c>sbcast-f&lt;F&gt;</c> (<c>sbcast
    /// --fanout=F</c>, 1–8: how many nodes the batch node sends each block to, each forwarding to its share of the
    /// rest), <c>sbcast-tree&lt;W&gt;</c> (<c>TreeWidth=W</c> in the configuration for that step: the width below the
    /// first level), or both, <c>sbcast-f&lt;F&gt;-tree&lt;W&gt;</c>. Null where the name leaves Slurm's value.
    /// </summary>
    public static bool TryParseSbcast(string mode, out int? fanout, out int? treeWidth)
    {
        (fanout, treeWidth) = (null, null);
        if (!mode.StartsWith("sbcast", StringComparison.Ordinal)) return false;
        var rest = mode["sbcast".Length..];
        if (rest.StartsWith("-f", StringComparison.Ordinal))
        {
            var end = rest.IndexOf('-', 2) is var d and > 0 ? d : rest.Length;
            if (!int.TryParse(rest[2..end], System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var f) || f is < 1 or > MaxSbcastFanout) return false;
            fanout = f;
            rest = rest[end..];
        }
        if (rest.StartsWith("-tree", StringComparison.Ordinal))
        {
            if (!int.TryParse(rest[5..], System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var w) || w is < 2 or > 65533) return false;
            treeWidth = w;
            rest = "";
        }
        return rest.Length == 0;
    }

    /// <summary>Where a mode sorts in tables and charts: the named ones as listed, then other sbcast settings by fanout and width.</summary>
    public static int Order(string mode)
    {
        var named = All.ToList().IndexOf(mode);
        if (named >= 0) return named;
        TryParseSbcast(mode, out var f, out var w);
        return 1000 + 100_000 * (f ?? MaxSbcastFanout) + (w ?? 0);
    }

    /// <summary>What a chart's legend calls a mode.</summary>
    public static string Describe(string mode) => mode switch
    {
        "none" => "direct fetch",
        "mpi" => "MPI fan-out",
        "srun-bcast" => "srun --bcast",
        _ when TryParseSbcast(mode, out var f, out var w) && (f ?? w) is not null =>
            "sbcast" + (f is { } fan ? $" -F{fan}" : "") + (w is { } width ? $", TreeWidth={width}" : ""),
        _ => mode,
    };
}

public static class Limits
{
    /// <summary>
    /// Direct fetch: the H cache-host links must send N·S between them, and each node's own link must carry S, so the
    /// time is at least max(N/H, 1)·S/B. B is the shaped link rate in bytes per second.
    /// </summary>
    public static double DirectFetch(int nodes, int hosts, long bytes, int rateMbit) =>
        Math.Max((double)nodes / hosts, 1.0) * bytes / (rateMbit * 1e6 / 8);

    /// <summary>Fan-out between nodes: every node's own link must receive S (from the cache tier and the other nodes
    /// together), so S/B is the least any node can take, whatever N and H.</summary>
    public static double Fanout(long bytes, int rateMbit) => bytes / (rateMbit * 1e6 / 8);

    /// <summary>Every node sends S to its neighbour while receiving S from the other one: S/B on every link at once.</summary>
    public static double Neighbour(long bytes, int rateMbit) => bytes / (rateMbit * 1e6 / 8);
}

/// <summary>
/// The records' JSON, generated at compile time with <see cref="BenchJson.Options"/>' settings: the report reads them in
/// hpcdata compiled to native code too, where JSON by reflection is off.
/// </summary>
[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase, DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    NumberHandling = JsonNumberHandling.AllowNamedFloatingPointLiterals)]
[JsonSerializable(typeof(BenchRecord))]
[JsonSerializable(typeof(CodecRecord))]
[JsonSerializable(typeof(CacheRecord))]
[JsonSerializable(typeof(ResultReader.FetchTelemetry))]
[JsonSerializable(typeof(ReportMain.ReportDocument))]
internal sealed partial class ReportJson : JsonSerializerContext;

public static class BenchJson
{
    public static readonly JsonSerializerOptions Options = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.CamelCase,
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
        NumberHandling = JsonNumberHandling.AllowNamedFloatingPointLiterals,
    };

    /// <summary>Appends one line and flushes it to disk, so an interrupted matrix keeps every finished run.</summary>
    [System.Diagnostics.CodeAnalysis.RequiresUnreferencedCode("The lab writes its records by reflection; it runs JIT-compiled.")]
    [System.Diagnostics.CodeAnalysis.RequiresDynamicCode("The lab writes its records by reflection; it runs JIT-compiled.")]
    public static void Append<T>(string dir, T record)
    {
        Directory.CreateDirectory(dir);
        var line = JsonSerializer.Serialize(record, Options) + "\n";
        using var f = new FileStream(Path.Combine(dir, "results.jsonl"), FileMode.Append, FileAccess.Write, FileShare.Read);
        f.Write(System.Text.Encoding.UTF8.GetBytes(line));
        f.Flush(flushToDisk: true);
    }

    public static MachineInfo Machine() => new(Environment.MachineName, Environment.ProcessorCount,
        File.Exists("/proc/sys/kernel/osrelease") ? File.ReadAllText("/proc/sys/kernel/osrelease").Trim() : Environment.OSVersion.VersionString,
        System.Runtime.InteropServices.RuntimeInformation.FrameworkDescription);
}
