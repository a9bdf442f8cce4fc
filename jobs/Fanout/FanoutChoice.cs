using System.Diagnostics;
using System.Globalization;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Jobs.Fanout;

/// <summary>
/// <c>--fanout auto</c>: direct fetch or the MPI fan-out, whichever the cost model (docs/benchmarks.md, "Cost model")
/// says is faster for this job, with the reason in one line.
/// </summary>
/// <remarks>
/// Direct fetch moves S stored bytes over every node's link and N·S/H over each cache host's, so it takes
/// S/B·max(1, N/H). The fan-out's cache tier sends each byte once and the ring passes it on: a fixed start-up T0 (ranks
/// launched, MPI_Init, manifest broadcast, ingest set-up), then S/(η·B) for the ring at efficiency η, or S over the
/// agent's ingest rate where that is lower, plus the last block crossing N−1 links. T0 and η are this project's measured figures; a site whose launcher is faster can say so.
/// </remarks>
public sealed record FanoutChoice(bool Mpi, double DirectSeconds, double FanoutSeconds, string Reason)
{
    /// <summary>
    /// Start-up of a fan-out whose ranks are native hpcdata (the build users get), fitted on the Slurm scale model at
    /// N = 4 over 25 and 100 Mbit/s: launch, MPI_Init beside the agent's start, manifest broadcast, ingest set-up, and
    /// publication. On the scale model it grows by ~0.06 s per rank beyond that, 16 ranks and agents starting on 2 shared
    /// cores; a cluster starts each on its own node.
    /// </summary>
    public static readonly TimeSpan StartUp = TimeSpan.FromSeconds(0.4);

    /// <summary>
    /// The ring's share of the link rate, fitted with <see cref="StartUp"/>: 0.94, what TCP's payload is of the frames
    /// on an Ethernet link (1448 of 1538 bytes).
    /// </summary>
    public const double RingEfficiency = 0.94;

    /// <summary>
    /// Stored bytes per second one node's agent ingests from the ring (verify, decode, write: one ingest session, one
    /// thread): 4.65 CPU-s per GB stored in the lab's records (docs/results/slurm-native.jsonl, native agents). Above about
    /// 2 Gbit/s the ring outruns it, and the fan-out takes S over this rate however fast the links are
    /// (docs/benchmarks.md, "Simulation").
    /// </summary>
    public const double IngestBytesPerSecond = 215e6;

    /// <summary>Below this many nodes there is no ring worth its start-up: two nodes fetch half each from the tier anyway.</summary>
    public const int MinimumNodes = 3;

    /// <param name="mpiUnavailable">Why no MPI launch is possible for this job, or null when one is.</param>
    public static FanoutChoice Decide(int nodes, int cacheHosts, long storedBytes, double linkBytesPerSecond, string linkSource, string? mpiUnavailable,
        TimeSpan? startUp = null)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(nodes, 1);
        ArgumentOutOfRangeException.ThrowIfLessThan(cacheHosts, 1);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(linkBytesPerSecond);
        var s = (double)storedBytes;
        var direct = s / linkBytesPerSecond * Math.Max(1.0, (double)nodes / cacheHosts);
        var block = Math.Clamp(storedBytes / nodes / FanoutPlan.BlocksPerShare, FanoutPlan.SmallestBlockBytes, FanoutPlan.LargestBlockBytes);
        var fanout = (startUp ?? StartUp).TotalSeconds + s / Math.Min(RingEfficiency * linkBytesPerSecond, IngestBytesPerSecond) + (nodes - 1) * (double)block / linkBytesPerSecond;
        var facts = string.Create(CultureInfo.InvariantCulture,
            $"{nodes} node(s), {cacheHosts} cache host(s), {ByteSize.Format(storedBytes)} stored, links {new ByteRate((long)linkBytesPerSecond)} ({linkSource}): " +
            $"direct ≈ {direct:0.0} s, fan-out ≈ {fanout:0.0} s");
        if (nodes < MinimumNodes) return new(false, direct, fanout, $"none: {facts}; fewer than {MinimumNodes} nodes");
        if (mpiUnavailable is not null) return new(false, direct, fanout, $"none: {facts}; {mpiUnavailable}");
        return fanout < direct
            ? new(true, direct, fanout, $"mpi: {facts}")
            : new(false, direct, fanout, $"none: {facts}");
    }

    /// <summary>
    /// The link rate from this machine to the cache tier, measured by fetching up to <paramref name="sampleBytes"/> of the
    /// version's stored segments from every host at once (bounded by <paramref name="limit"/>): what a node's fetch would
    /// see, as far as the submitting machine can tell. Timed from the first segment's arrival to the last's, so neither
    /// the requests' first round trip nor this process's first use of the fetch path counts as the link's time: on a
    /// small sample they would make any link look slow.
    /// </summary>
    public static async Task<double> MeasureLinkAsync(CacheTierClient tier, Manifest manifest, long sampleBytes, TimeSpan limit, CancellationToken ct)
    {
        var wanted = new List<int>();
        long bytes = 0;
        for (var i = 0; i < manifest.Segments.Count && bytes < sampleBytes; i++)
        {
            wanted.Add(i);
            bytes += manifest.Segments[i].StoredLength;
        }
        if (bytes == 0) throw new InvalidOperationException($"dataset '{manifest.Name}' has no stored bytes to measure the link with");
        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(ct);
        bounded.CancelAfter(limit);
        var gate = new object();
        long received = 0, firstBytes = 0, firstAt = 0, lastAt = 0;
        var start = Stopwatch.GetTimestamp();
        try
        {
            await tier.FetchSegmentsAsync(manifest.SegmentIds, wanted, (_, stored) =>
            {
                var now = Stopwatch.GetTimestamp();
                lock (gate)
                {
                    if (received == 0) (firstAt, firstBytes) = (now, stored.Length);
                    received += stored.Length;
                    lastAt = now;
                }
                return null;
            }, $"link measurement of '{manifest.Name}'", bounded.Token);
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested && Volatile.Read(ref received) > 0)
        {
            // A slow link: what arrived within the limit is the measurement.
        }
        lock (gate)
        {
            // One segment alone has no interval of its own: then the whole fetch is the measurement.
            return lastAt > firstAt
                ? (received - firstBytes) / Stopwatch.GetElapsedTime(firstAt, lastAt).TotalSeconds
                : received / Math.Max(1e-6, Stopwatch.GetElapsedTime(start).TotalSeconds);
        }
    }
}
