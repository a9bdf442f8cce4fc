using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fanout;

/// <summary>What one rank's exchange works with once the ranks agreed on the manifest, the segments that travel and the route.</summary>
internal sealed record ExchangeContext(IRankGroup Group, IRingLink Link, CacheTierClient Tier, INodeIngest Node, SegmentOrigins Origins,
    Manifest Manifest, string Version, bool[] Needed, bool Wanted, TimeSpan Limit, TimeSpan? StallTimeout, TimeSpan? PeerSilence)
{
    /// <summary>Hands a block message to this node's agent, noting which rank put each segment into the exchange.</summary>
    public ValueTask Deliver(ReadOnlyMemory<byte> message, FanoutPlan plan, IReadOnlyList<int> rankOfShare, CancellationToken ct)
    {
        if (!Wanted) return ValueTask.CompletedTask;
        Origins.Note(message.Span, plan, rankOfShare);
        return Node.WriteAsync(message, plan, ct);
    }
}

/// <summary>
/// How the blocks travel between the ranks once the route is known: one ring of the route's members with its leaves
/// beside it (<see cref="RingPath"/>), or, where one ring would be deep, the grid's rings over the members with the
/// leaves in their groups' rings (<see cref="GridPath"/>). The route says who is a member and who a leaf; the path
/// says over which rings they take part.
/// </summary>
internal abstract class ExchangePath
{
    /// <summary>For the node line (its fields have no spaces): "ring", "leaves:…/ring:…", "grid:KxG", "grid:KxG/leaves:…".</summary>
    public abstract string Name { get; }

    public abstract Task<RingResult> RunAsync(ExchangeContext c, CancellationToken ct);

    /// <summary>
    /// The probed links this rank's part needs beside the ring's own, connected before the exchange: to and from the
    /// leaves of one ring. None where the path makes its rings itself (the grid) or has no leaves.
    /// </summary>
    public virtual (IReadOnlyList<int> SendsTo, IReadOnlyList<int> ReceivesFrom) PeerLinks(int rank) => ([], []);

    /// <summary>The grid over the route's members, where the setting and their number make one; else the one ring.</summary>
    public static ExchangePath For(GridRings? grid, FanoutRoute route) =>
        grid is not null && RingGrid.For(route.Members.Count, grid.Setting) is { } layout ? new GridPath(new GridRoute(layout, route), grid) : new RingPath(route);
}

/// <summary>One ring of the route's members over the rank group's link (or the ring given), each member also sending the leaves its share.</summary>
internal sealed class RingPath(FanoutRoute route) : ExchangePath
{
    public override string Name => route.ToString();

    public override (IReadOnlyList<int> SendsTo, IReadOnlyList<int> ReceivesFrom) PeerLinks(int rank) =>
        route.HasLeaves ? (route.SendsTo(rank), route.ReceivesFrom(rank)) : ([], []);

    public override Task<RingResult> RunAsync(ExchangeContext c, CancellationToken ct)
    {
        var plan = new FanoutPlan(c.Manifest, route.Members.Count, needed: c.Needed);
        var fetcher = new BlockFetcher(c.Tier, plan, c.Version);
        // A node that already holds the version still fetches its share and forwards: the ring needs every link.
        return RingAllGather.RunAsync(plan, c.Link, fetcher.FetchAsync, (message, token) => c.Deliver(message, plan, route.Members, token),
            ct, c.StallTimeout, route, awaitLeaves: false, peerSilence: c.PeerSilence);
    }
}

/// <summary>The grid's rings (<see cref="GridRoute"/>): this rank's group's ring, with the leaves it serves, and its column's ring.</summary>
internal sealed class GridPath(GridRoute route, GridRings grid) : ExchangePath
{
    public override string Name => route.ToString();

    /// <summary>The grid's two rings for this rank: every rank listens for both (a rank beyond the grid's positions
    /// or a leaf for its group's only), the addresses travel in one all-gather, and each ring connects among its own
    /// ranks. A leaf only receives, over its group's ring.</summary>
    public override async Task<RingResult> RunAsync(ExchangeContext c, CancellationToken ct)
    {
        var (group, tier, manifest, version, needed, limit, stallTimeout, peerSilence) = (c.Group, c.Tier, c.Manifest, c.Version, c.Needed, c.Limit, c.StallTimeout, c.PeerSilence);
        var layout = route.Layout;
        var (g, position) = route.PlaceOf(group.Rank);
        var (groupPlan, columnPlans) = layout.Plans(manifest, g, needed);
        var leaf = route.Route.IsLeaf(group.Rank);
        var inColumn = !leaf && position < layout.Positions;
        var groupRoute = route.GroupRoute(g);
        using var groupEnd = TcpRing.Listen(grid.Local);
        using var columnEnd = inColumn ? TcpRing.Listen(grid.Local) : null;
        var mine = new byte[2 * TcpRing.EntryBytes];
        groupEnd.Entry.CopyTo(mine, 0);
        columnEnd?.Entry.CopyTo(mine, TcpRing.EntryBytes);
        var all = await FanoutExchange.Within(group.AllGatherAsync(mine, ct), limit, "the grid's addresses");
        var connectLimit = limit == Timeout.InfiniteTimeSpan ? TimeSpan.FromMinutes(2) : limit;
        TcpRing? groupRing = null, columnRing = null;
        var leavesKeepGroup = false;
        try
        {
            // Both rings at once: a rank waiting to be accepted into one ring must not hold up its neighbours' other ring.
            var connectGroup = groupEnd.ConnectAsync(position, route.GroupRanks(g).Select(r => all[r][..TcpRing.EntryBytes]).ToArray(), connectLimit, ct, groupRoute);
            Task<TcpRing>? connectColumn = null;
            if (columnEnd is not null)
                connectColumn = columnEnd.ConnectAsync(g, route.ColumnRanks(position).Select(r => all[r][TcpRing.EntryBytes..]).ToArray(), connectLimit, ct);
            try { groupRing = await connectGroup; }
            finally { if (connectColumn is not null) columnRing = await connectColumn; }
            var fetchers = columnPlans.Append(groupPlan).ToDictionary(p => p, p => new BlockFetcher(tier, p, version));
            var groupRanks = route.GroupRanks(g).ToArray();
            var columnRanks = inColumn ? route.ColumnRanks(position).ToArray() : [];
            ValueTask Deliver(ReadOnlyMemory<byte> message, FanoutPlan plan, CancellationToken token) =>
                c.Deliver(message, plan, plan == groupPlan ? groupRanks : columnRanks, token);
            if (leaf)
                return await RingAllGather.RunAsync(groupPlan, groupRing, fetchers[groupPlan].FetchAsync, (message, token) => Deliver(message, groupPlan, token),
                    ct, stallTimeout, groupRoute, peerSilence: peerSilence);
            var result = await GridAllGather.RunAsync(layout, route.Route.PositionOf(group.Rank), groupPlan, columnPlans, groupRing, columnRing,
                (plan, block, message, token) => fetchers[plan].FetchAsync(block, message, token), Deliver, ct, stallTimeout, peerSilence, groupRoute,
                groupRanks: groupRanks, columnRanks: columnRanks);
            if (result.LeavesServed is not { IsCompleted: false } serving) return result;
            // The leaves still take this member's share over the group's ring: it closes once they have it.
            leavesKeepGroup = true;
            var ring = groupRing;
            return result with { LeavesServed = CloseAfter(serving, ring) };
        }
        finally
        {
            if (groupRing is not null && !leavesKeepGroup) await groupRing.DisposeAsync();
            if (columnRing is not null) await columnRing.DisposeAsync();
        }

        static async Task CloseAfter(Task serving, TcpRing ring)
        {
            try { await serving; }
            finally { await ring.DisposeAsync(); }
        }
    }
}
