using System.Globalization;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// The grid of rings (<see cref="RingGrid"/>) over the members of a route, with its leaves served beside it: leaf j
/// (in rank order) joins the ring of group j mod K as a leaf of that ring, where every member sends it its own share
/// there — its column's part, S/G — so the leaf receives the data once, spread over G uplinks, at its own link's pace.
/// The grid's positions are the members' places in the route (<see cref="FanoutRoute.PositionOf"/>); a group's ring
/// lists its members first and its leaves after them.
/// </summary>
/// <remarks>
/// Why not one ring of the members once the probe made leaves, as before: at 10,000 nodes one ring is 9,999 hops deep,
/// and a single slow node would have cost every healthy node the grid's whole advantage (simulated in
/// docs/benchmarks.md). Round robin rather than a leaf's own rack's group: a rack that is slow as a whole would
/// otherwise load one group's uplinks with all of its leaves.
/// </remarks>
public sealed class GridRoute
{
    private readonly int[][] _leavesOf;

    public GridRoute(RingGrid layout, FanoutRoute route)
    {
        if (layout.Ranks != route.Members.Count) throw new ArgumentException($"a grid of {layout.Ranks} ranks for {route.Members.Count} members", nameof(layout));
        Layout = layout;
        Route = route;
        _leavesOf = Enumerable.Range(0, layout.Groups).Select(g => route.Leaves.Where((_, j) => j % layout.Groups == g).ToArray()).ToArray();
    }

    public RingGrid Layout { get; }
    public FanoutRoute Route { get; }

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
    public FanoutRoute GroupRoute(int group) => FanoutRoute.WithLeavesAfter(Layout.GroupMembers(group).Count, _leavesOf[group].Length);

    /// <summary>For the summary line: the grid, and its leaves where it has any ("grid:31x32/leaves:7,19").</summary>
    public override string ToString() => Route.HasLeaves
        ? string.Create(CultureInfo.InvariantCulture, $"{Layout}/leaves:{string.Join(",", Route.Leaves)}")
        : Layout.ToString();
}
