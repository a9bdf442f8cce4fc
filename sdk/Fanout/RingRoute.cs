using System.Globalization;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// Which ranks form the ring and which are leaves, computed alike by every rank from the same gathered link rates.
/// Ring members are taken in rank order; the plan's share k belongs to the k-th member. A leaf forwards nothing: every
/// member also sends it its own share, so the leaf receives the data once, spread over all members' uplinks, at the
/// pace of its own link — and the ring runs at the pace of the healthy links.
/// </summary>
/// <remarks>
/// Why leaves rather than a ring through every node: in a ring every byte crosses every link, so a node whose link is
/// four times slower makes every node four times slower. A leaf's slowness is its own: the members send it about
/// S/M each, which at its pace is a small share of their uplink, and no member waits for it.
/// </remarks>
public sealed class RingRoute : ExchangeRoute
{
    private readonly int[] _position;

    private RingRoute(int size, int[] members, int[] leaves, double[]? nodeRates)
    {
        Size = size;
        Members = members;
        Leaves = leaves;
        NodeRates = nodeRates;
        _position = Enumerable.Repeat(-1, size).ToArray();
        for (var k = 0; k < members.Length; k++) _position[members[k]] = k;
    }

    /// <summary>Every rank in the ring, in rank order: today's plan.</summary>
    public static RingRoute Ring(int size) => new(size, Enumerable.Range(0, size).ToArray(), [], null);

    /// <summary>The ranks of a ring whose last <paramref name="leaves"/> are leaves: a group's ring of the grid with the
    /// leaves it serves after its members (<see cref="GridRoute"/>).</summary>
    public static RingRoute WithLeavesAfter(int members, int leaves) =>
        new(members + leaves, Enumerable.Range(0, members).ToArray(), Enumerable.Range(members, leaves).ToArray(), null);

    /// <summary>
    /// The route from every rank's probe of the link from its left neighbour (<paramref name="incoming"/>[r]: bytes per
    /// second from r−1 into r, with the bytes it measured over). Node r's rate is the faster of its two probed links
    /// (into r, out of r into r+1): a slow node slows both, a healthy neighbour of it only one.
    /// </summary>
    public static RingRoute FromProbes(IReadOnlyList<ProbeResult> incoming)
    {
        var size = incoming.Count;
        if (size < LeafRule.SmallestWithLeaves) return Ring(size);
        var leaves = LeafRule.Leaves(incoming);
        return new RingRoute(size, [.. Enumerable.Range(0, size).Except(leaves)], leaves, LeafRule.NodeRates(incoming));
    }

    public int Size { get; }
    /// <summary>Ranks in the ring, in rank order; member k fetches share k.</summary>
    public IReadOnlyList<int> Members { get; }
    /// <summary>Ranks outside the ring: they receive every member's own share and send nothing.</summary>
    public IReadOnlyList<int> Leaves { get; }
    /// <summary>Each node's rate as the probe saw it (bytes per second), or null when there was no probe.</summary>
    public IReadOnlyList<double>? NodeRates { get; }

    public bool HasLeaves => Leaves.Count > 0;
    public bool IsLeaf(int rank) => _position[rank] < 0;
    /// <summary>The rank's place in the ring (its share), or −1 for a leaf.</summary>
    public int PositionOf(int rank) => _position[rank];
    public int RightOf(int rank) => Members[(_position[rank] + 1) % Members.Count];
    public int LeftOf(int rank) => Members[(_position[rank] - 1 + Members.Count) % Members.Count];

    /// <summary>Ranks <paramref name="rank"/> sends to: its right neighbour and, as a member, every leaf.</summary>
    public IReadOnlyList<int> SendsTo(int rank) => IsLeaf(rank) ? [] : Members.Count < 2 ? [.. Leaves] : [RightOf(rank), .. Leaves];

    /// <summary>Ranks <paramref name="rank"/> receives from: its left neighbour, or as a leaf every member.</summary>
    public IReadOnlyList<int> ReceivesFrom(int rank) => IsLeaf(rank) ? Members : Members.Count < 2 ? [] : [LeftOf(rank)];

    public override (IReadOnlyList<int> SendsTo, IReadOnlyList<int> ReceivesFrom) PeerLinks(int rank) =>
        HasLeaves ? (SendsTo(rank), ReceivesFrom(rank)) : ([], []);

    /// <summary>One ring of the members over the rank group's link, each member also sending the leaves its share.</summary>
    internal override Task<RingResult> RunAsync(ExchangeContext c, CancellationToken ct)
    {
        var plan = new FanoutPlan(c.Manifest, Members.Count, needed: c.Needed);
        var fetcher = new BlockFetcher(c.Tier, plan, c.Version);
        // A node that already holds the version still fetches its share and forwards: the ring needs every link.
        return RingAllGather.RunAsync(plan, c.Link, fetcher.FetchAsync, (message, token) => c.Deliver(message, plan, Members, token),
            ct, c.StallTimeout, this, awaitLeaves: false, peerSilence: c.PeerSilence);
    }

    /// <summary>One word (the node-prep line's fields have no spaces): "ring", or the leaves and the members.</summary>
    public override string ToString() =>
        HasLeaves ? string.Create(CultureInfo.InvariantCulture, $"leaves:{string.Join(",", Leaves)}/ring:{string.Join(",", Members)}") : "ring";
}
