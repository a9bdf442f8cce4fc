using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The collectives of an exchange among running agents (<see cref="TreeRankGroup"/>), over real authenticated
/// connections on loopback: a broadcast goes down in pieces that each node forwards as they come, and the union of what
/// the nodes lack is reduced on the way up.
/// </summary>
public sealed class TreeCollectivesTests
{
    private static readonly PeerKey Key = PeerKey.FromSecret("tree-collectives-test-key");

    /// <summary>Both ends of one connection: the connecting side's and the accepting side's.</summary>
    private static async Task<(PeerLink Up, PeerLink Down)> PairAsync(CancellationToken ct)
    {
        using var listener = new Socket(SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen(1);
        var port = ((IPEndPoint)listener.LocalEndPoint!).Port;
        var connecting = PeerLink.ConnectAsync("127.0.0.1", port, Key, TimeSpan.FromSeconds(10), ct);
        var accepted = await PeerLink.AcceptAsync(await listener.AcceptAsync(ct), Key, TimeSpan.FromSeconds(10), ct);
        return (await connecting, accepted);
    }

    /// <summary>Ranks 0…n−1 in a tree of the given degree (rank r's parent is (r − 1) / degree), every edge a connection.</summary>
    private static async Task<(TreeRankGroup[] Groups, List<PeerLink> Links)> TreeAsync(int n, int degree, CancellationToken ct)
    {
        var parents = new PeerLink?[n];
        var children = Enumerable.Range(0, n).Select(_ => new List<PeerLink>()).ToArray();
        var links = new List<PeerLink>();
        for (var r = 1; r < n; r++)
        {
            var (up, down) = await PairAsync(ct);
            parents[r] = up;
            children[(r - 1) / degree].Add(down);
            links.Add(up);
            links.Add(down);
        }
        var positions = Enumerable.Range(0, n).ToArray();
        return (Enumerable.Range(0, n).Select(r => new TreeRankGroup(r, positions, parents[r], children[r])).ToArray(), links);
    }

    private static async Task DisposeAll(IEnumerable<PeerLink> links)
    {
        foreach (var link in links) await link.DisposeAsync();
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(TreeRankGroup.BroadcastPiece - 4)]
    [InlineData(TreeRankGroup.BroadcastPiece)]
    [InlineData(5 * TreeRankGroup.BroadcastPiece + 123)]
    public async Task Rank_zeros_bytes_reach_every_rank_of_a_three_level_tree_whole(int length)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var (groups, links) = await TreeAsync(11, degree: 2, timeout.Token);
        try
        {
            var sent = new byte[length];
            new Random(length).NextBytes(sent);
            var got = await Task.WhenAll(groups.Select(g => Task.Run(() => g.BroadcastAsync(g.Rank == 0 ? sent : null, timeout.Token))));
            Assert.All(got, bytes => Assert.Equal(sent, bytes));
        }
        finally { await DisposeAll(links); }
    }

    [Fact]
    public async Task A_node_hands_its_children_the_first_piece_before_the_rest_has_come()
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var (fromParent, parentEnd) = await PairAsync(timeout.Token);
        var (childEnd, toChild) = await PairAsync(timeout.Token);
        try
        {
            var node = new TreeRankGroup(1, [0, 1, 2], fromParent, [toChild]);
            var receiving = node.BroadcastAsync(null, timeout.Token);
            var whole = new byte[3 * TreeRankGroup.BroadcastPiece];
            new Random(7).NextBytes(whole);
            var first = new byte[4 + TreeRankGroup.BroadcastPiece];
            BitConverter.TryWriteBytes(first, whole.Length);
            whole.AsSpan(0, TreeRankGroup.BroadcastPiece).CopyTo(first.AsSpan(4));
            await parentEnd.WriteAsync(PeerFrame.Collective, first, timeout.Token);

            // The rest is held back: the child still gets the first piece.
            Assert.Equal(first, await childEnd.ReadAsync(PeerFrame.Collective, timeout.Token));
            Assert.False(receiving.IsCompleted);

            await parentEnd.WriteAsync(PeerFrame.Collective, whole.AsMemory(TreeRankGroup.BroadcastPiece, 2 * TreeRankGroup.BroadcastPiece), timeout.Token);
            Assert.Equal(whole, await receiving);
            Assert.Equal(whole.AsSpan(TreeRankGroup.BroadcastPiece).ToArray(), await childEnd.ReadAsync(PeerFrame.Collective, timeout.Token));
        }
        finally { await DisposeAll([fromParent, parentEnd, childEnd, toChild]); }
    }

    [Theory]
    [InlineData(new[] { 10, 20 }, "a broadcast piece of 20 bytes")]
    [InlineData(new[] { 10, 0 }, "a broadcast piece of 0 bytes")]
    [InlineData(new[] { -1 }, "a malformed broadcast")]
    public async Task A_broadcast_whose_pieces_do_not_add_up_is_refused_as_malformed(int[] frames, string error)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var (fromParent, parentEnd) = await PairAsync(timeout.Token);
        try
        {
            var node = new TreeRankGroup(1, [0, 1], fromParent, []);
            var receiving = node.BroadcastAsync(null, timeout.Token);
            // The first frame says the length and carries nothing; the others are pieces of the given sizes.
            await parentEnd.WriteAsync(PeerFrame.Collective, BitConverter.GetBytes(frames[0]), timeout.Token);
            foreach (var size in frames.Skip(1)) await parentEnd.WriteAsync(PeerFrame.Collective, new byte[size], timeout.Token);
            var e = await Assert.ThrowsAsync<InvalidDataException>(() => receiving);
            Assert.Contains(error, e.Message);
        }
        finally { await DisposeAll([fromParent, parentEnd]); }
    }

    [Theory]
    [InlineData(1, 8)]
    [InlineData(2, 8)]
    [InlineData(13, 3)]
    public async Task Every_rank_learns_the_union_of_the_bits_every_rank_set(int n, int degree)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var (groups, links) = await TreeAsync(n, degree, timeout.Token);
        try
        {
            const int bits = 200;
            // Rank r lacks segments r, r + n, r + 2n, … below 150: the union is segments 0…149, and no more.
            byte[] Mine(int r)
            {
                var set = new byte[(bits + 7) / 8];
                for (var i = r; i < 150; i += n) set[i >> 3] |= (byte)(1 << (i & 7));
                return set;
            }
            var got = await Task.WhenAll(groups.Select(g => Task.Run(() => ((IRankGroup)g).AllOrAsync(Mine(g.Rank), timeout.Token))));
            foreach (var union in got)
                Assert.Equal(Enumerable.Range(0, bits).Select(i => i < 150), Enumerable.Range(0, bits).Select(i => (union[i >> 3] & (1 << (i & 7))) != 0));
        }
        finally { await DisposeAll(links); }
    }

    [Fact]
    public async Task A_group_that_only_all_gathers_forms_the_same_union_from_every_ranks_bits()
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var groups = InProcessRanks.Create(3);
        byte[][] mine = [[0b0000_0001, 0], [0b1000_0000, 0], [0, 0b0001_0000]];
        var got = await Task.WhenAll(groups.Select(g => Task.Run(() => g.AllOrAsync(mine[g.Rank], timeout.Token))));
        Assert.All(got, union => Assert.Equal(new byte[] { 0b1000_0001, 0b0001_0000 }, union));
    }
}
