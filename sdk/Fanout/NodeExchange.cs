using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Fanout;

/// <summary>How one node's exchange runs: the settings node prep's switches (or a request to the agents) give.</summary>
/// <param name="TcpRing">The blocks travel on TCP connections of their own (else on the rank group's link, MPI's).</param>
/// <param name="RingSilence">How long a ring neighbour may be silent before the ring closes around it, where someone
/// else gives the verdict on it later (the agents' requester, <see cref="PrepRequest.SuspectAfter"/>); else
/// <paramref name="PeerTimeout"/>, which is then the verdict.</param>
public sealed record ExchangeSettings(TimeSpan StallTimeout, TimeSpan PeerTimeout, bool LinkProbe, string RingGroups, bool TcpRing = true, TimeSpan? RingSilence = null);

/// <summary>
/// One node's exchange as node prep runs it, whoever its ranks are (an MPI job's, or the running agents'): the ring's
/// TCP links from the address that reaches the cache tier, the exchange into the node's agent (<c>ingest</c>: over its
/// pipe from a job's rank, or straight into its store where the agent runs the exchange itself), and the links kept
/// open until the slow nodes that are leaves have this node's share.
/// </summary>
public static class NodeExchange
{
    /// <returns>The summary, and a task that ends once the leaves have this member's share and the ring's links are
    /// closed: they outlive the exchange while slow nodes are still being served.</returns>
    /// <param name="ingest">Where this node's blocks go; disposed here once the exchange ends.</param>
    public static async Task<(FanoutSummary Summary, Task Served)> RunAsync(IRankGroup ranks, CacheTierClient tier, IReadOnlyList<string> cacheHosts,
        INodeIngest ingest, string name, string? version, ExchangeSettings settings, CancellationToken ct)
    {
        TcpRing? ring = null;
        FanoutSummary summary;
        try
        {
            await using var _ = ingest;
            var first = CacheEndpoint.ParseList(string.Join(",", cacheHosts)).FirstOrDefault() ?? throw new ArgumentException("no cache hosts for the fan-out (--cache-hosts or HPCDATA_CACHE_HOSTS)");
            var local = TcpRing.LocalAddressToward(first.Host, first.Port);
            ring = settings.TcpRing ? await TcpRing.ConnectAsync(ranks, local, settings.StallTimeout, ct) : null;
            summary = await FanoutExchange.RunAsync(ranks, tier, ingest, name, version, ct, settings.StallTimeout, ring, probeLinks: settings.LinkProbe,
                peerSilence: settings.RingSilence ?? settings.PeerTimeout, grid: ring is null ? null : new GridRings(settings.RingGroups, local));
        }
        catch
        {
            if (ring is not null) await ring.DisposeAsync();
            throw;
        }
        return (summary, CloseAfter(summary.Ring.LeavesServed ?? Task.CompletedTask));

        async Task CloseAfter(Task leaves)
        {
            try { await leaves; }
            finally { if (ring is not null) await ring.DisposeAsync(); }
        }
    }

    /// <summary>The node prep line's fields for an exchange (after <c>fanout=… ranks=…</c>).</summary>
    public static string Fields(FanoutSummary summary) =>
        $"route={summary.Route} manifest-seconds={summary.ManifestSeconds:0.000} agree-seconds={summary.AgreeSeconds:0.000} begin-seconds={summary.BeginSeconds:0.000} probe-seconds={summary.ProbeSeconds:0.000} " +
        $"end-seconds={summary.EndSeconds:0.000} exchange-seconds={summary.Seconds:0.000} ring-seconds={summary.Ring.Seconds:0.000} " +
        $"share-seconds={summary.Ring.ShareSeconds:0.000} segments-carried={summary.SegmentsCarried} fetched-bytes={summary.Ring.BytesFetched} " +
        $"bypassed={summary.Ring.Bypassed} repair-bytes={summary.Ring.RepairBytesFetched} received-bytes={summary.Ring.BytesReceived} sent-bytes={summary.Ring.BytesSent}" +
        (summary.Ring.RoutedAround is { Count: > 0 } gone ? $" routed-around={string.Join(',', gone)}" : "") +
        (summary.Ring.MemberLost ? " member-lost=1" : "") +
        (summary.Ring.RepairBytesResent > 0 ? $" repair-resent-bytes={summary.Ring.RepairBytesResent}" : "") +
        (summary.Rejected > 0 ? $" rejected={summary.Rejected}" : "") +
        (summary.RejectedFrom is { Count: > 0 } from ? $" rejected-from={string.Join(',', from.Select(m => $"{m.Rank}:{m.Segments}"))}" : "");

    /// <summary>
    /// What an operator must hear of an exchange beyond its line, one sentence each: members whose blocks failed
    /// verification on this node (a member that sends damaged data, or a link that damages it, is named, not only counted),
    /// and members the ring went on without. <paramref name="describe"/> names a rank (its node and address where known).
    /// </summary>
    public static IEnumerable<string> Warnings(FanoutSummary summary, Func<int, string> describe)
    {
        foreach (var from in summary.RejectedFrom ?? [])
            yield return $"{from.Segments} segment(s) in blocks that {describe(from.Rank)} put into the ring failed verification on this node; " +
                         "they were not written, and the node fetched them from the cache tier";
        if (summary.Ring.RoutedAround is { Count: > 0 } gone)
            yield return $"the ring went on without {string.Join(", ", gone.Select(describe))}: " +
                         (summary.Ring.NeighbourDied ? "its link failed (the process or its node died)" : "it took nothing for the peer timeout (silent or hung)");
        else if (summary.Ring.MemberLost)
            yield return "the ring went on without a member (the member before it names it); this node has every block";
    }
}
