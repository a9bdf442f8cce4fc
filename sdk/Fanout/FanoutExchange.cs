using System.Diagnostics;
using System.Text;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fanout;

/// <summary>The ranks of a fan-out, one per node: who we are, a way to agree on the manifest, and the ring.</summary>
public interface IRankGroup
{
    int Rank { get; }
    int Size { get; }
    /// <summary>Rank 0's bytes, on every rank (rank 0 passes them, the others null).</summary>
    Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct);
    /// <summary>Every rank's <paramref name="mine"/> (all the same length), in rank order, on every rank.</summary>
    Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct);
    /// <summary>Every rank's <paramref name="mine"/> (all the same length) OR-ed together, on every rank. A group whose
    /// all-gather moves N times the bytes over some link (a tree's root) reduces on the way instead.</summary>
    async Task<byte[]> AllOrAsync(byte[] mine, CancellationToken ct)
    {
        var union = new byte[mine.Length];
        foreach (var other in await AllGatherAsync(mine, ct)) Bits.Or(union, other);
        return union;
    }
    IRingLink Ring { get; }
}

internal static class Bits
{
    /// <summary><paramref name="into"/> |= <paramref name="other"/>, which must be as long.</summary>
    public static void Or(Span<byte> into, ReadOnlySpan<byte> other)
    {
        if (other.Length != into.Length) throw new InvalidDataException($"a bit set of {other.Length} bytes where {into.Length} were expected");
        for (var i = 0; i < into.Length; i++) into[i] |= other[i];
    }
}

/// <summary>This node's side of an exchange: hands stored segments to the node's agent, which verifies and keeps them.</summary>
public interface INodeIngest : IAsyncDisposable
{
    /// <summary>Starts taking segments of a version; false when the node already holds it complete (nothing will be written).</summary>
    Task<bool> BeginAsync(string name, string version, ReadOnlyMemory<byte> manifest, CancellationToken ct);
    /// <summary>After <see cref="BeginAsync"/>: whether the node lacks segment <paramref name="index"/>.</summary>
    bool Lacks(int index);
    /// <summary>One block's records: segment index and stored bytes.</summary>
    ValueTask WriteAsync(ReadOnlyMemory<byte> blockMessage, FanoutPlan plan, CancellationToken ct);
    /// <summary>Ends the exchange: segments accepted, already held, and rejected (with which, <see cref="IngestReport.RejectedBitmap"/>).</summary>
    Task<IngestReport> EndAsync(CancellationToken ct);
}

/// <summary>How a fan-out may run as a grid of rings (<see cref="RingGrid"/>): <c>--ring-groups</c>'s value, and the
/// address this rank's ring links listen on.</summary>
public sealed record GridRings(string Setting, System.Net.IPAddress Local);

/// <summary>What one rank's exchange did, for the node-prep line and the report.</summary>
/// <param name="Ring">Its <see cref="RingResult.LeavesServed"/> completes once this member has sent the leaves its
/// share: the rank's process must not leave before, though its node is ready.</param>
/// <param name="Route">Who formed the ring or grid and who was a leaf (<see cref="RingRoute.ToString"/>,
/// <see cref="GridRoute.ToString"/>).</param>
/// <param name="HadLeaves">Whether the probe made leaves: they finish at their own links' pace, long after the members.</param>
/// <param name="ProbeSeconds">What the link probe took on this rank, up to the agreed route; 0 without one.</param>
/// <param name="ManifestSeconds">From the exchange's start until this rank held the checked manifest (rank 0's look-up
/// and its broadcast).</param>
/// <param name="AgreeSeconds">Then until the ranks agreed what travels (the node's ingest begun, the all-gather of what
/// each lacks).</param>
/// <param name="BeginSeconds">Of that, the node's ingest's begin: its writer turn, its files, and the segments copied
/// from the node's other versions.</param>
/// <param name="EndSeconds">From the ring's end until the exchange's (the probe's drain, the ingest's end).</param>
/// <param name="RejectedFrom">Whose blocks the segments this node rejected came in: the member that put each into the
/// ring it arrived on, most first. Empty when none was rejected.</param>
public sealed record FanoutSummary(int Ranks, string Version, RingResult Ring, int Accepted, int AlreadyHeld, int Rejected, double Seconds, bool NodeHadIt,
    int SegmentsCarried = 0, string Route = "ring", double ProbeSeconds = 0, double ManifestSeconds = 0, double AgreeSeconds = 0, double EndSeconds = 0,
    bool HadLeaves = false, IReadOnlyList<MemberRejections>? RejectedFrom = null, double BeginSeconds = 0);

/// <summary><paramref name="Segments"/> segments that came in blocks <paramref name="Rank"/> put into the ring failed
/// verification on this node.</summary>
public readonly record struct MemberRejections(int Rank, int Segments);

/// <summary>
/// Which member put each segment into the ring it reached this node on (a block's share names it), so the segments
/// the node rejects name whose blocks they were. Blocks reach the node one at a time, in either of a grid's rings.
/// </summary>
internal sealed class SegmentOrigins
{
    private readonly int[] _rank;

    public SegmentOrigins(int segments) => Array.Fill(_rank = new int[segments], -1);

    public void Note(ReadOnlySpan<byte> message, FanoutPlan plan, IReadOnlyList<int> rankOfShare)
    {
        var (share, first, count, _) = BlockMessage.ReadHeader(message, plan);
        _rank.AsSpan(first, count).Fill(rankOfShare[share]);
    }

    public IReadOnlyList<MemberRejections> Of(IEnumerable<int> rejected) =>
        [.. rejected.Where(i => (uint)i < (uint)_rank.Length && _rank[i] >= 0).GroupBy(i => _rank[i])
            .Select(g => new MemberRejections(g.Key, g.Count())).OrderByDescending(m => m.Segments).ThenBy(m => m.Rank)];
}

/// <summary>
/// One rank's whole fan-out: rank 0 resolves the version and hands its manifest to all (each checks it hashes to the
/// version), every rank fetches its share and the ring brings it the rest, and every block goes to this node's agent.
/// It never publishes: the node's ordinary prefetch that follows verifies the whole copy and publishes it, and fetches
/// from the cache tier whatever the exchange did not deliver — so a failed exchange costs time, never data.
/// The blocks travel on <c>ring</c> when one is given (e.g. <see cref="TcpRing"/>), else on the group's own link.
/// </summary>
public static class FanoutExchange
{
    /// <summary>The probe sends at most 1/ProbeShare of the stored bytes the exchange moves.</summary>
    internal const int ProbeShare = 16;

    /// <param name="peerSilence">How long a ring neighbour may take nothing before the ring closes around it
    /// (<see cref="RingAllGather.PeerSilence"/> by default); over links that can (<see cref="IRingRepair"/>).</param>
    /// <param name="probeLinks">Measure the ring's links first and leave ranks with a slow link out of the ring
    /// (<see cref="RingRoute"/>); only over links that reach every rank (<see cref="IPeerLinks"/>).</param>
    /// <param name="grid">Where one ring would be deep, the rings of a <see cref="RingGrid"/> instead: <c>--ring-groups</c>'s
    /// value and how this rank listens for a ring's links (<see cref="TcpRing.Listen"/>); the grid is used only where the
    /// route has no leaves.</param>
    public static async Task<FanoutSummary> RunAsync(IRankGroup group, CacheTierClient tier, INodeIngest node, string name, string? version, CancellationToken ct,
        TimeSpan? stallTimeout = null, IRingLink? ring = null, bool probeLinks = true, TimeSpan? peerSilence = null, GridRings? grid = null)
    {
        var clock = Stopwatch.StartNew();
        // Before the ring runs, the ranks wait for each other in collectives; one that died would keep them waiting.
        var limit = stallTimeout ?? Timeout.InfiniteTimeSpan;
        byte[]? announcement = null;
        if (group.Rank == 0)
        {
            try
            {
                var (v, _, bytes) = await tier.Catalog.ResolveWithBytesAsync(name, version, ct);
                announcement = Announce(v, bytes);
            }
            catch (CommonDataException e)
            {
                // Every rank must learn why, or the others would wait for a manifest that never comes.
                announcement = Announce(null, Encoding.UTF8.GetBytes($"{e.Code}:{e.Message}"));
                await Within(group.BroadcastAsync(announcement, ct), limit, "the manifest's broadcast");
                throw;
            }
        }
        var (resolved, manifestBytes) = Read(await Within(group.BroadcastAsync(announcement, ct), limit, "the manifest's broadcast"));
        if (resolved is null)
        {
            var text = Encoding.UTF8.GetString(manifestBytes.Span);
            var colon = text.IndexOf(':');
            throw new CommonDataException(Enum.TryParse<ErrorCode>(text[..Math.Max(colon, 0)], out var code) ? code : ErrorCode.Internal, text[(colon + 1)..]);
        }
        if (Manifest.VersionOf(manifestBytes.Span) != resolved)
            throw new CommonDataException(ErrorCode.Integrity, $"the manifest rank 0 sent does not hash to version {resolved}");
        var manifest = Manifest.Parse(manifestBytes.Span);
        var manifestSeconds = clock.Elapsed.TotalSeconds;
        if (manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version {resolved} belongs to '{manifest.Name}', not '{name}'");

        var wanted = await node.BeginAsync(name, resolved, manifestBytes, ct);
        var beginSeconds = clock.Elapsed.TotalSeconds - manifestSeconds;
        // The ranks agree on the union of what their nodes lack (a node holding yesterday's version has its unchanged
        // segments already, copied from that version when the ingest began): only those travel.
        var lacking = new byte[(manifest.Segments.Count + 7) / 8];
        if (wanted)
            for (var i = 0; i < manifest.Segments.Count; i++)
                if (node.Lacks(i)) lacking[i >> 3] |= (byte)(1 << (i & 7));
        var union = await Within(group.AllOrAsync(lacking, ct), limit, "agreeing on the missing segments");
        if (union.Length != lacking.Length) throw new InvalidDataException($"a union of {union.Length} bytes, expected {lacking.Length}");
        var needed = Enumerable.Range(0, manifest.Segments.Count).Select(i => (union[i >> 3] & (1 << (i & 7))) != 0).ToArray();
        var agreeSeconds = clock.Elapsed.TotalSeconds - manifestSeconds;
        var link = ring ?? group.Ring;
        var route = RingRoute.Ring(group.Size);
        var probeClock = Stopwatch.StartNew();
        Task probeDone = Task.CompletedTask;
        if (probeLinks && link is IPeerLinks peers && group.Size >= LeafRule.SmallestWithLeaves)
        {
            // The probe all-gathers after each of its rounds: a rank that died or stalled shows here.
            // At most a sixteenth of what the exchange moves, so the probe costs the links a few percent at most.
            var moving = Enumerable.Range(0, needed.Length).Where(i => needed[i]).Sum(i => (long)manifest.Segments[i].StoredLength);
            var probe = await Within(LinkProbe.RunAsync(link, group, ct, maxBytes: Math.Max(LeafRule.FirstRoundBytes, moving / ProbeShare)), limit, "agreeing on the links' rates");
            var (drained, sent) = (probe.Drained, probe.Sent);
            route = RingRoute.FromProbes(probe.Links);
            // The rest of the probe from the left neighbour comes before its blocks on that link; from a neighbour
            // that is now a leaf nothing else comes, and the probe drains beside the exchange.
            var oldLeft = (group.Rank - 1 + group.Size) % group.Size;
            if (route.ReceivesFrom(group.Rank).Contains(oldLeft)) await drained;
            probeDone = Task.WhenAll(drained, sent);
            // The links the route needs beside the ring's own (none over the grid, which makes its own rings).
            var (sendsTo, receivesFrom) = ExchangeRoute.For(grid, route).PeerLinks(group.Rank);
            await peers.ConnectPeersAsync(sendsTo, receivesFrom,
                sendsTo.Count + receivesFrom.Count == 0 ? TimeSpan.Zero : limit == Timeout.InfiniteTimeSpan ? TimeSpan.FromMinutes(2) : limit, ct);
        }
        var probeSeconds = probeLinks && route.NodeRates is not null ? probeClock.Elapsed.TotalSeconds : 0;
        var origins = new SegmentOrigins(manifest.Segments.Count);
        var exchangeRoute = ExchangeRoute.For(grid, route);
        var exchanged = await exchangeRoute.RunAsync(new ExchangeContext(group, link, tier, node, origins, manifest, resolved, needed, wanted, limit, stallTimeout, peerSilence,
            grid?.Local ?? System.Net.IPAddress.Loopback), ct);
        var ringEnd = clock.Elapsed.TotalSeconds;
        await Within(probeDone.ContinueWith(t => t.IsCompletedSuccessfully ? 0 : throw t.Exception!.InnerException!, TaskScheduler.Default), limit, "the link probe's end");
        var ended = wanted ? await node.EndAsync(ct) : new IngestReport { Complete = true, AlreadyHad = manifest.Segments.Count };
        var seconds = clock.Elapsed.TotalSeconds;
        return new FanoutSummary(group.Size, resolved, exchanged, ended.Accepted, ended.AlreadyHad, ended.Rejected, seconds, !wanted, needed.Count(n => n),
            exchangeRoute.ToString(), probeSeconds, manifestSeconds, agreeSeconds, seconds - ringEnd, route.HasLeaves, origins.Of(ended.RejectedSegments()), beginSeconds);
    }

    internal static async Task<T> Within<T>(Task<T> step, TimeSpan limit, string what)
    {
        try { return await step.WaitAsync(limit); }
        catch (TimeoutException) { throw new TimeoutException($"the other ranks did not answer within {limit.TotalSeconds:0.#} s ({what}): a rank died or stalled"); }
    }

    /// <summary>Version (or none, then the bytes are "Code:message") and manifest bytes, length-prefixed.</summary>
    private static byte[] Announce(string? version, byte[] bytes)
    {
        var v = Encoding.ASCII.GetBytes(version ?? "");
        var message = new byte[1 + v.Length + bytes.Length];
        message[0] = (byte)v.Length;
        v.CopyTo(message, 1);
        bytes.CopyTo(message, 1 + v.Length);
        return message;
    }

    private static (string? Version, ReadOnlyMemory<byte> Bytes) Read(byte[] message)
    {
        if (message.Length < 1 || message.Length < 1 + message[0]) throw new InvalidDataException("malformed manifest announcement");
        var version = Encoding.ASCII.GetString(message, 1, message[0]);
        return (version.Length == 0 ? null : version, message.AsMemory(1 + message[0]));
    }
}
