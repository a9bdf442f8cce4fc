using System.Globalization;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// The grid of rings (<see cref="RingGrid"/>) over the members of a route, with its leaves served beside it: leaf j
/// (in rank order) joins the ring of group j mod K as a leaf of that ring, where every member sends it its own share
/// there — its column's part, S/G — so the leaf receives the data once, spread over G uplinks, at its own link's pace.
/// The grid's positions are the members' places in the route (<see cref="RingRoute.PositionOf"/>); a group's ring
/// lists its members first and its leaves after them.
/// </summary>
/// <remarks>
/// Why not one ring of the members once the probe made leaves, as before: at 10,000 nodes one ring is 9,999 hops deep,
/// and a single slow node would have cost every healthy node the grid's whole advantage (simulated in
/// docs/benchmarks.md). Round robin rather than a leaf's own rack's group: a rack that is slow as a whole would
/// otherwise load one group's uplinks with all of its leaves.
/// </remarks>
public sealed class GridRoute : ExchangeRoute
{
    private readonly int[][] _leavesOf;

    public GridRoute(RingGrid layout, RingRoute route)
    {
        if (layout.Ranks != route.Members.Count) throw new ArgumentException($"a grid of {layout.Ranks} ranks for {route.Members.Count} members", nameof(layout));
        Layout = layout;
        Route = route;
        _leavesOf = Enumerable.Range(0, layout.Groups).Select(g => route.Leaves.Where((_, j) => j % layout.Groups == g).ToArray()).ToArray();
    }

    public RingGrid Layout { get; }
    public RingRoute Route { get; }

    /// <summary>The leaves group <paramref name="group"/>'s ring serves, in rank order.</summary>
    public IReadOnlyList<int> LeavesOf(int group) => _leavesOf[group];

    /// <summary>The group of <paramref name="rank"/> and its place in that group's ring (a leaf's comes after the members).</summary>
    public (int Group, int Position) PlaceOf(int rank)
    {
        if (!Route.IsLeaf(rank)) return Layout.PlaceOf(Route.PositionOf(rank));
        var j = Route.Leaves.ToList().IndexOf(rank);
        var group = j % Layout.Groups;
        return (group, Layout.GroupMembers(group).Count + j / Layout.Groups);
    }

    /// <summary>Ranks of a group's ring: its members in ring order, then its leaves.</summary>
    public IReadOnlyList<int> GroupRanks(int group) => [.. Layout.GroupMembers(group).Select(m => Route.Members[m]), .. _leavesOf[group]];

    /// <summary>Ranks of a column's ring (members only: a leaf is in no column).</summary>
    public IReadOnlyList<int> ColumnRanks(int position) => [.. Layout.ColumnMembers(position).Select(m => Route.Members[m])];

    /// <summary>Who sends and who receives in a group's ring; without leaves, the plain ring.</summary>
    public RingRoute GroupRoute(int group) => RingRoute.WithLeavesAfter(Layout.GroupMembers(group).Count, _leavesOf[group].Length);

    /// <summary>The grid's two rings for this rank: every rank listens for both (a rank beyond the grid's positions
    /// or a leaf for its group's only), the addresses travel in one all-gather, and each ring connects among its own
    /// ranks. A leaf only receives, over its group's ring.</summary>
    internal override async Task<RingResult> RunAsync(ExchangeContext c, CancellationToken ct)
    {
        var (group, tier, manifest, version, needed, limit, stallTimeout, peerSilence) = (c.Group, c.Tier, c.Manifest, c.Version, c.Needed, c.Limit, c.StallTimeout, c.PeerSilence);
        var layout = Layout;
        var (g, position) = PlaceOf(group.Rank);
        var (groupPlan, columnPlans) = layout.Plans(manifest, g, needed);
        var leaf = Route.IsLeaf(group.Rank);
        var inColumn = !leaf && position < layout.Positions;
        var groupRoute = GroupRoute(g);
        using var groupEnd = TcpRing.Listen(c.GridListen);
        using var columnEnd = inColumn ? TcpRing.Listen(c.GridListen) : null;
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
            var connectGroup = groupEnd.ConnectAsync(position, GroupRanks(g).Select(r => all[r][..TcpRing.EntryBytes]).ToArray(), connectLimit, ct, groupRoute);
            Task<TcpRing>? connectColumn = null;
            if (columnEnd is not null)
                connectColumn = columnEnd.ConnectAsync(g, ColumnRanks(position).Select(r => all[r][TcpRing.EntryBytes..]).ToArray(), connectLimit, ct);
            try { groupRing = await connectGroup; }
            finally { if (connectColumn is not null) columnRing = await connectColumn; }
            var fetchers = columnPlans.Append(groupPlan).ToDictionary(p => p, p => new BlockFetcher(tier, p, version));
            var groupRanks = GroupRanks(g).ToArray();
            var columnRanks = inColumn ? ColumnRanks(position).ToArray() : [];
            ValueTask Deliver(ReadOnlyMemory<byte> message, FanoutPlan plan, CancellationToken token) =>
                c.Deliver(message, plan, plan == groupPlan ? groupRanks : columnRanks, token);
            if (leaf)
                return await RingAllGather.RunAsync(groupPlan, groupRing, fetchers[groupPlan].FetchAsync, (message, token) => Deliver(message, groupPlan, token),
                    ct, stallTimeout, groupRoute, peerSilence: peerSilence);
            var result = await GridAllGather.RunAsync(layout, Route.PositionOf(group.Rank), groupPlan, columnPlans, groupRing, columnRing,
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

    /// <summary>For the summary line: the grid, and its leaves where it has any ("grid:31x32/leaves:7,19").</summary>
    public override string ToString() => Route.HasLeaves
        ? string.Create(CultureInfo.InvariantCulture, $"{Layout}/leaves:{string.Join(",", Route.Leaves)}")
        : Layout.ToString();
}
