using System.Diagnostics.Metrics;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The names of every meter and instrument the components publish, spelled once, so dashboards, <c>dotnet-counters</c>
/// (<c>dotnet-counters monitor -n Hpc.NodeAgent --counters Hpc.NodeAgent</c>) and the exporters see one vocabulary.
/// Each component has its own meter; instruments that mean the same thing have the same name in every meter.
/// </summary>
public static class HpcMetrics
{
    public const string CacheHostMeter = "Hpc.CacheHost";
    public const string NodeAgentMeter = "Hpc.NodeAgent";
    public const string StagerMeter = "Hpc.Stager";
    public static readonly IReadOnlyList<string> Meters = [CacheHostMeter, NodeAgentMeter, StagerMeter];

    /// <summary>Bytes received from the network (an agent's fetches; a cache host's requests).</summary>
    public const string BytesReceived = "hpcdata.bytes.received";
    /// <summary>Bytes sent over the network (a stager's uploads; a cache host's replies).</summary>
    public const string BytesSent = "hpcdata.bytes.sent";
    /// <summary>Stored segments moved: fetched and accepted by an agent, uploaded by a stager.</summary>
    public const string Segments = "hpcdata.segments";
    /// <summary>Seconds from a fetch's start to its copy being published on the node.</summary>
    public const string FetchDuration = "hpcdata.fetch.duration";
    /// <summary>Seconds of one staging, from the first byte read to the version being published.</summary>
    public const string StageDuration = "hpcdata.stage.duration";
    /// <summary>Segments or whole copies that failed their checksum, content id or dataset hash.</summary>
    public const string VerificationFailures = "hpcdata.verification.failures";
    /// <summary>Local copies removed from a node (budget, release with evict, damage); keys expired on a cache host.</summary>
    public const string Evictions = "hpcdata.evictions";
    /// <summary>Requests refused: a cache host's writes past its memory budget, an agent's no-space or access-denied answers, a stage the tier had no room for.</summary>
    public const string Refusals = "hpcdata.refusals";
    /// <summary>A cache host's stored bytes counted against its budget.</summary>
    public const string MemoryUsed = "hpcdata.memory.used";
    /// <summary>A cache host's budget.</summary>
    public const string MemoryLimit = "hpcdata.memory.limit";
    /// <summary>Keys a cache host holds.</summary>
    public const string Keys = "hpcdata.keys";
    /// <summary>A cache host's lookups, tagged result=hit or result=miss.</summary>
    public const string Lookups = "hpcdata.lookups";

    /// <summary>Tag of <see cref="Refusals"/>: why (an <see cref="ErrorCode"/> in its wire form).</summary>
    public const string ReasonTag = "reason";
}

/// <summary>
/// The push instruments a component records into, created once on its meter. Adding to a counter without tags
/// allocates nothing, so the per-segment counts sit on the fetch path as they are.
/// </summary>
public sealed class ComponentMetrics : IDisposable
{
    public ComponentMetrics(string meterName)
    {
        Meter = new Meter(meterName, typeof(ComponentMetrics).Assembly.GetName().Version?.ToString());
        BytesReceived = Meter.CreateCounter<long>(HpcMetrics.BytesReceived, "By", "bytes received from the network");
        BytesSent = Meter.CreateCounter<long>(HpcMetrics.BytesSent, "By", "bytes sent over the network");
        Segments = Meter.CreateCounter<long>(HpcMetrics.Segments, "{segment}", "stored segments fetched or uploaded");
        FetchDuration = Meter.CreateHistogram<double>(HpcMetrics.FetchDuration, "s", "seconds from a fetch's start to its copy being published");
        StageDuration = Meter.CreateHistogram<double>(HpcMetrics.StageDuration, "s", "seconds of one staging");
        VerificationFailures = Meter.CreateCounter<long>(HpcMetrics.VerificationFailures, "{failure}", "segments or copies that failed verification");
        Evictions = Meter.CreateCounter<long>(HpcMetrics.Evictions, "{copy}", "local copies removed from the node");
        Refusals = Meter.CreateCounter<long>(HpcMetrics.Refusals, "{request}", "requests refused, tagged with the reason");
    }

    public Meter Meter { get; }
    public Counter<long> BytesReceived { get; }
    public Counter<long> BytesSent { get; }
    public Counter<long> Segments { get; }
    public Histogram<double> FetchDuration { get; }
    public Histogram<double> StageDuration { get; }
    public Counter<long> VerificationFailures { get; }
    public Counter<long> Evictions { get; }
    public Counter<long> Refusals { get; }

    public void Refused(ErrorCode reason) => Refusals.Add(1, new KeyValuePair<string, object?>(HpcMetrics.ReasonTag, Reason(reason)));

    /// <summary>The code as the agent's wire spells it; constant strings, so a refusal allocates no tag value.</summary>
    private static string Reason(ErrorCode code) => code switch
    {
        ErrorCode.NoSpace => "no-space",
        ErrorCode.AccessDenied => "access-denied",
        ErrorCode.BadRequest => "bad-request",
        ErrorCode.NotFound => "not-found",
        ErrorCode.Integrity => "integrity",
        ErrorCode.Unavailable => "unavailable",
        ErrorCode.Timeout => "timeout",
        ErrorCode.Limit => "limit",
        _ => "other",
    };

    public void Dispose() => Meter.Dispose();
}
