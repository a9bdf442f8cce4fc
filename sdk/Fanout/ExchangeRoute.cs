using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fanout;

/// <summary>What one rank's exchange works with once the ranks agreed on the manifest, the segments that travel and the route.</summary>
/// <param name="GridListen">Where a grid's rings listen (<see cref="GridRings.Local"/>); a single ring runs over <paramref name="Link"/>.</param>
internal sealed record ExchangeContext(IRankGroup Group, IRingLink Link, CacheTierClient Tier, INodeIngest Node, SegmentOrigins Origins,
    Manifest Manifest, string Version, bool[] Needed, bool Wanted, TimeSpan Limit, TimeSpan? StallTimeout, TimeSpan? PeerSilence,
    System.Net.IPAddress GridListen)
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
/// How the blocks travel between the ranks: who is a member and who a leaf, and over which rings they take part. One
/// ring of the members with its leaves beside it (<see cref="RingRoute"/>), or, where one ring would be deep, the grid's
/// rings over a ring route's members with the leaves in their groups' rings (<see cref="GridRoute"/>). A route is chosen
/// once (<see cref="For"/>) and runs itself: nothing outside the two types asks which one it is.
/// </summary>
public abstract class ExchangeRoute
{
    private protected ExchangeRoute() { }

    /// <summary>
    /// The probed links this rank's part needs beside the ring's own, connected before the exchange: to and from the
    /// leaves of one ring. None where the route makes its rings itself (the grid) or has no leaves.
    /// </summary>
    public virtual (IReadOnlyList<int> SendsTo, IReadOnlyList<int> ReceivesFrom) PeerLinks(int rank) => ([], []);

    internal abstract Task<RingResult> RunAsync(ExchangeContext c, CancellationToken ct);

    /// <summary>For the node line (its fields have no spaces): "ring", "leaves:…/ring:…", "grid:KxG", "grid:KxG/leaves:…".</summary>
    public abstract override string ToString();

    /// <summary>The grid over the route's members, where the setting and their number make one; else the one ring.</summary>
    public static ExchangeRoute For(GridRings? grid, RingRoute route) =>
        grid is not null && RingGrid.For(route.Members.Count, grid.Setting) is { } layout ? new GridRoute(layout, route) : route;
}
