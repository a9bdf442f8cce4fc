using Hpc.CommonData.Fanout;
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
/// Direct fetch moves S stored bytes over every node's link and N·S/H over each cache host's, and each node's agent
/// verifies and decodes S on its cores, so it takes the longer of S/B·max(1, N/H) and S over the agent's direct rate.
/// The fan-out's cache tier sends each byte once and the ring passes it on: a start-up T0 (ranks launched, MPI_Init,
/// manifest broadcast, ingest set-up) that grows with the launch's tree, then S/(η·B) for the ring at efficiency η, or
/// S over the agent's ingest rate on its cores where that is lower, plus the last block crossing N−1 links. These are
/// the costs <c>bench simulate</c> replays (its calibration from the lab's records, its launch growth), so the choice
/// and the validated simulation agree on which mode is faster (Hpc.Bench.Tests, FanoutChoiceAgreementTests).
/// </remarks>
public sealed record FanoutChoice(bool Mpi, double DirectSeconds, double FanoutSeconds, string Reason)
{
    /// <summary>
    /// A node's start-up in a fan-out outside its CPU work (waits: launch within a node, MPI_Init's exchanges, the
    /// manifest's broadcast), and its CPU work (rank and agent starting, ingest set-up), read as <c>bench simulate</c>
    /// calibrates them from the lab's N = 4 runs of native programs (docs/results/slurm-native.jsonl): the step's time
    /// less the ring, less 4 nodes' start-up CPU on the lab's 2 cores. On a node of its own the CPU part runs on its
    /// cores; on the lab's shared cores the two made about 0.4 s.
    /// </summary>
    public const double StartSeconds = 0.06, StartCpuSeconds = 0.155;

    /// <summary>The same for a direct fetch (the agent's prefetch begun, its connections to the hosts made).</summary>
    public const double DirectStartSeconds = 0.07, DirectStartCpuSeconds = 0.014;

    /// <summary>
    /// What the launch adds per doubling of the ranks beyond 4: srun and mpiexec start ranks through a tree of daemons,
    /// one level per doubling (the simulation's assumption for clusters, docs/benchmarks.md, "Simulation").
    /// </summary>
    public const double LaunchPerDoubling = 0.1;

    /// <summary>
    /// The share of the link rate data gets, on the ring as in a direct fetch: 0.94, what TCP's payload is of the
    /// frames on an Ethernet link (1448 of 1538 bytes).
    /// </summary>
    public const double RingEfficiency = 0.94;

    /// <summary>
    /// Stored bytes per second one core of a node's agent ingests from the ring (verify, decode, write): 4.65 CPU-s per
    /// GB stored in the lab's records (docs/results/slurm-native.jsonl, native agents). The agent ingests on every core
    /// (--ingest-threads), so a node takes this times its cores; above that the ring outruns it.
    /// </summary>
    public const double IngestBytesPerSecond = 215e6;

    /// <summary>
    /// Stored bytes per second one core of a node's agent takes in a direct fetch (receive, verify, decode, write):
    /// 9.76 CPU-s per GiB stored in the same records (it also receives from H hosts at once).
    /// </summary>
    public const double DirectBytesPerSecond = 110e6;

    /// <summary>Below this many nodes there is no ring worth its start-up: two nodes fetch half each from the tier anyway.</summary>
    public const int MinimumNodes = 3;

    /// <param name="mpiUnavailable">Why no MPI launch is possible for this job, or null when one is.</param>
    /// <param name="nodeCores">Cores of each node's agent (its ingest and fetch use them all).</param>
    /// <param name="startUp">A node's fan-out start-up before the launch's growth, where a site measured its own.</param>
    public static FanoutChoice Decide(int nodes, int cacheHosts, long storedBytes, double linkBytesPerSecond, string linkSource, string? mpiUnavailable,
        int nodeCores, TimeSpan? startUp = null)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(nodes, 1);
        ArgumentOutOfRangeException.ThrowIfLessThan(cacheHosts, 1);
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(linkBytesPerSecond);
        ArgumentOutOfRangeException.ThrowIfLessThan(nodeCores, 1);
        var s = (double)storedBytes;
        var payload = RingEfficiency * linkBytesPerSecond;
        var direct = DirectStartSeconds + DirectStartCpuSeconds / nodeCores
                     + Math.Max(s / payload * Math.Max(1.0, (double)nodes / cacheHosts), s / (DirectBytesPerSecond * nodeCores));
        // The last block crosses N − 1 links of one ring, or a column's and a group's of the grid node prep makes by default.
        var grid = RingGrid.For(nodes, "auto");
        var block = BlockSizing.For((double)storedBytes / nodes);
        var hops = grid?.Depth ?? nodes - 1;
        var launch = LaunchPerDoubling * Math.Max(0, Math.Log2(nodes / 4.0));
        var start = startUp?.TotalSeconds ?? StartSeconds + StartCpuSeconds / nodeCores;
        var fanout = start + launch + s / Math.Min(payload, IngestBytesPerSecond * nodeCores) + hops * (double)block / linkBytesPerSecond;
        var facts = string.Create(CultureInfo.InvariantCulture,
            $"{nodes} node(s) of {nodeCores} core(s), {cacheHosts} cache host(s), {ByteSize.Format(storedBytes)} stored, links {new ByteRate((long)linkBytesPerSecond)} ({linkSource}): " +
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
