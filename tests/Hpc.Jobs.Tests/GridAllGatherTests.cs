using Hpc.CommonData.Fanout;
using System.Collections.Concurrent;
using System.Net;
using Hpc.CommonData.Format;
using Hpc.Jobs.Fanout;
using static Hpc.Jobs.Tests.RingData;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The fan-out as a grid of rings: groups of consecutive ranks and columns across them. Every rank ends with every
/// segment once, the tier sends each once, a block crosses about G + N/G links, and a member that dies is routed
/// around in both of its rings.
/// </summary>
public sealed class GridAllGatherTests
{
    [Theory]
    [InlineData(10, 3, 3, 3)]    // groups of 4, 3, 3: the first has a member beyond the positions
    [InlineData(9, 3, 3, 3)]
    [InlineData(1000, 32, 31, 32)]
    [InlineData(10000, 100, 100, 100)]
    public void Consecutive_ranks_form_groups_and_each_position_a_column_with_one_member_per_group(int ranks, int groupSize, int groups, int positions)
    {
        var grid = RingGrid.Of(ranks, groupSize)!;
        Assert.Equal((groups, positions), (grid.Groups, grid.Positions));
        var members = Enumerable.Range(0, groups).SelectMany(grid.GroupMembers).ToList();
        Assert.Equal(Enumerable.Range(0, ranks), members);
        Assert.All(Enumerable.Range(0, groups), g => Assert.InRange(grid.GroupMembers(g).Count, positions, positions + 1));
        for (var p = 0; p < positions; p++)
        {
            var column = grid.ColumnMembers(p);
            Assert.Equal(Enumerable.Range(0, groups).Select(g => (g, p)), column.Select(grid.PlaceOf));
        }
        Assert.All(Enumerable.Range(0, ranks), r => Assert.Equal(grid.GroupMembers(grid.PlaceOf(r).Group)[grid.PlaceOf(r).Position], r));
        Assert.Equal(groups - 1 + positions, grid.Depth);
    }

    [Fact]
    public void Auto_keeps_one_ring_below_sixty_four_ranks_and_takes_groups_of_about_the_square_root_beyond()
    {
        Assert.Null(RingGrid.For(63, "auto"));
        Assert.Equal((8, 8), (RingGrid.For(64, "auto")!.Groups, RingGrid.For(64, "auto")!.Positions));
        Assert.Equal((31, 32), (RingGrid.For(1000, "auto")!.Groups, RingGrid.For(1000, "auto")!.Positions));
        Assert.Null(RingGrid.For(10000, "off"));
        Assert.Equal(6, RingGrid.For(12, "4")!.Depth);               // three groups of four: 2 + 4 hops, one ring 11
        Assert.Null(RingGrid.For(8, "4"));                           // two groups: a ring that lost one member would be one
        var error = Assert.Throws<FormatException>(() => RingGrid.ParseGroupSize("2"));
        Assert.Contains("auto, off or a group size of at least 3", error.Message);
        Assert.Throws<FormatException>(() => RingGrid.ParseGroupSize("many"));
    }

    [Theory]
    [InlineData(10, 3, 300)]
    [InlineData(16, 4, 40)]
    [InlineData(15, 5, 7)]       // fewer segments than some columns have members: empty shares
    public void Every_group_plan_carries_every_needed_segment_once_and_a_members_share_is_its_columns_part(int ranks, int groupSize, int segments)
    {
        var manifest = ManifestOf(segments);
        var needed = Enumerable.Range(0, segments).Select(i => i % 7 != 3).ToArray();
        var grid = RingGrid.Of(ranks, groupSize)!;
        for (var g = 0; g < grid.Groups; g++)
        {
            var (group, columns) = grid.Plans(manifest, g, needed);
            Assert.Equal(grid.GroupMembers(g).Count, group.Ranks);
            var carried = group.Shares.SelectMany(s => s).SelectMany(b => Enumerable.Range(b.First, b.Count)).Order();
            Assert.Equal(Enumerable.Range(0, segments).Where(i => needed[i]), carried);
            for (var p = 0; p < grid.Positions; p++)
                Assert.Equal(columns[p].Shares.SelectMany(s => s).Select(b => (b.First, b.Count)), group.Shares[p].Select(b => (b.First, b.Count)));
            Assert.All(group.Shares.Skip(grid.Positions), extra => Assert.Empty(extra));
        }
    }

    [Theory]
    [InlineData(10, 3, 400)]
    [InlineData(16, 4, 200)]
    [InlineData(9, 3, 30)]
    public async Task Every_rank_gets_every_segment_once_and_the_tier_sends_each_once(int ranks, int groupSize, int segments)
    {
        var manifest = ManifestOf(segments);
        var grid = RingGrid.Of(ranks, groupSize)!;
        var groupLinks = Enumerable.Range(0, grid.Groups).Select(g => InProcessRing.Create(grid.GroupMembers(g).Count)).ToArray();
        var columnLinks = Enumerable.Range(0, grid.Positions).Select(_ => InProcessRing.Create(grid.Groups)).ToArray();
        var fetched = new ConcurrentBag<int>();
        var delivered = Enumerable.Range(0, ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(60));

        var results = await Task.WhenAll(Enumerable.Range(0, ranks).Select(rank => Task.Run(() =>
        {
            var (g, p) = grid.PlaceOf(rank);
            var (groupPlan, columnPlans) = grid.Plans(manifest, g);
            return GridAllGather.RunAsync(grid, rank, groupPlan, columnPlans, groupLinks[g][p], p < grid.Positions ? columnLinks[p][g] : null,
                (plan, block, message, _) => FetchAsync(plan, block, message, fetched),
                (message, plan, _) => Deliver(message, plan, delivered[rank], rank), timeout.Token, stallTimeout: TimeSpan.FromSeconds(30));
        })));

        Assert.Equal(Enumerable.Range(0, segments), fetched.Order());
        foreach (var got in delivered)
        {
            Assert.Equal(Enumerable.Range(0, segments), got.Keys.Order());
            Assert.All(got, kv => Assert.Equal(StoredBytes(manifest, kv.Key), kv.Value));
        }
        // What a rank counts as fetched is what came from the tier: its blocks of its column's part, not the blocks its
        // group ring took from the column.
        var columnBlocks = grid.Plans(manifest, 0).Columns.Sum(c => c.Shares.Sum(s => s.Count));
        Assert.Equal(columnBlocks, results.Sum(r => r.BlocksFetched));
    }

    /// <summary>
    /// A column carries a G-th of what a group carries, so left alone it would finish early and a node would hold its
    /// column's whole part (S/G: 12.5 GB of a 100 GB dataset at 64 nodes) until its group took it. Over slow group links
    /// the column fetches its share from the tier only as the group takes the blocks: a member has its share in hand
    /// near the end of its exchange, not at the start.
    /// </summary>
    [Fact]
    public async Task The_columns_keep_pace_with_slow_groups_instead_of_holding_their_whole_part_in_memory()
    {
        const int ranks = 9;
        var manifest = ManifestOf(5000, seed: 3, minStored: 32000);
        var grid = RingGrid.Of(ranks, 3)!;
        var slow = Enumerable.Range(0, ranks).ToDictionary(r => r, _ => 100e6);
        var groupLinks = Enumerable.Range(0, grid.Groups).Select(g => InProcessRing.Create(grid.GroupMembers(g).Count, slow)).ToArray();
        var columnLinks = Enumerable.Range(0, grid.Positions).Select(_ => InProcessRing.Create(grid.Groups)).ToArray();
        var delivered = Enumerable.Range(0, ranks).Select(_ => new bool[manifest.Segments.Count]).ToArray();
        var fetched = new ConcurrentBag<int>();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));

        var results = await Task.WhenAll(Enumerable.Range(0, ranks).Select(rank => Task.Run(() =>
        {
            var (g, p) = grid.PlaceOf(rank);
            var (groupPlan, columnPlans) = grid.Plans(manifest, g);
            return GridAllGather.RunAsync(grid, rank, groupPlan, columnPlans, groupLinks[g][p], columnLinks[p][g],
                (plan, block, message, _) => FetchAsync(plan, block, message, fetched),
                (message, plan, _) =>
                {
                    foreach (var (index, _, _) in BlockMessage.Layout(message, plan))
                    {
                        Assert.False(delivered[rank][index], $"rank {rank} got segment {index} twice");
                        delivered[rank][index] = true;
                    }
                    return ValueTask.CompletedTask;
                }, timeout.Token, stallTimeout: TimeSpan.FromSeconds(60));
        })));

        Assert.All(delivered, got => Assert.All(got, Assert.True));
        Assert.Equal(manifest.Segments.Count, fetched.Count);
        // What a member keeps for its group: 8 MiB before it stops fetching, plus the blocks its column's members fetched
        // meanwhile (four ahead each, itself among them, and as many in the links) — whatever the size of the part. Each
        // member stops by what it holds itself, and its group ring may run behind another member's by scheduling alone, so
        // it can also hold up to that member's 8 MiB (a loaded CI machine measured 26–28 MiB against the bound without it).
        // Left to run ahead, the columns held 49-52 MiB of their 77 MiB parts here.
        var part = manifest.StoredLength / grid.Positions;
        var block = grid.Plans(manifest, 0).Columns.Max(c => c.MaxMessageBytes);
        var bound = 2 * (8L << 20) + (grid.Groups + 1) * 4L * block + 2L * block;
        Assert.True(part > 2 * bound, $"a part of {part >> 20} MiB does not tell");
        Assert.All(results, r => Assert.True(r.HeldBytesAtMost <= bound,
            $"held {r.HeldBytesAtMost >> 20} MiB of its column's {part >> 20} MiB part at once (bound {bound >> 20} MiB); share in hand at {r.ShareSeconds:0.00} s of {r.Seconds:0.00} s"));
    }

    [Fact]
    public async Task A_member_killed_mid_exchange_is_routed_around_in_its_group_and_its_column_and_the_others_get_everything()
    {
        const int ranks = 9, victim = 4;   // three groups of three; the victim is in the middle of both its rings
        var manifest = ManifestOf(1500, seed: 5, minStored: 16000);
        var grid = RingGrid.Of(ranks, 3)!;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));
        var (groupRings, columnRings) = await ConnectAsync(grid, timeout.Token);
        var delivered = Enumerable.Range(0, ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        var fetched = new ConcurrentBag<int>();
        var victimCancel = CancellationTokenSource.CreateLinkedTokenSource(timeout.Token);
        var struck = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var results = new RingResult?[ranks];
        try
        {
            var runs = Enumerable.Range(0, ranks).Select(rank => Task.Run(async () =>
            {
                var (g, p) = grid.PlaceOf(rank);
                var (groupPlan, columnPlans) = grid.Plans(manifest, g);
                try
                {
                    results[rank] = await GridAllGather.RunAsync(grid, rank, groupPlan, columnPlans, groupRings[rank], columnRings[rank],
                        async (plan, block, message, ct) =>
                        {
                            await Task.Delay(3, ct);
                            return await FetchAsync(plan, block, message, fetched);
                        },
                        async (message, plan, _) =>
                        {
                            await Deliver(message, plan, delivered[rank], rank);
                            // A process that dies: its work stops and the kernel closes its connections.
                            if (rank == victim && delivered[victim].Count >= 300 && struck.TrySetResult())
                            {
                                victimCancel.Cancel();
                                await groupRings[victim].DisposeAsync();
                                await columnRings[victim]!.DisposeAsync();
                            }
                        }, rank == victim ? victimCancel.Token : timeout.Token, stallTimeout: TimeSpan.FromSeconds(60), peerSilence: TimeSpan.FromSeconds(2),
                        groupRanks: [.. grid.GroupMembers(g)], columnRanks: p < grid.Positions ? [.. grid.ColumnMembers(p)] : null);
                }
                catch (Exception) when (rank == victim) { }
            })).ToArray();
            await Task.WhenAll(runs.Where((_, r) => r != victim)).WaitAsync(timeout.Token);
            await runs[victim];
        }
        finally
        {
            victimCancel.Cancel();
            foreach (var ring in groupRings.Concat(columnRings)) if (ring is not null) await ring.DisposeAsync();
            victimCancel.Dispose();
        }

        Assert.True(struck.Task.IsCompleted, "the victim was not struck: the exchange ended first");
        for (var r = 0; r < ranks; r++)
        {
            if (r == victim) continue;
            Assert.Equal(Enumerable.Range(0, manifest.Segments.Count), delivered[r].Keys.Order());
            Assert.All(delivered[r], kv => Assert.Equal(StoredBytes(manifest, kv.Key), kv.Value));
        }
        // The member before the victim in its group and in its column each closed their ring around it.
        Assert.Equal(1, results[3]!.Bypassed);   // group 1: ranks 3, 4, 5
        Assert.Equal(1, results[1]!.Bypassed);   // column 1: ranks 1, 4, 7
        // Each names the victim by its rank in the grid, not by its place in the ring it was passed in.
        Assert.Equal([victim], results[3]!.RoutedAround);
        Assert.Equal([victim], results[1]!.RoutedAround);
        // The tier sent the data once, plus at most what only the victim held: its column's part (a third) and what
        // its sockets' buffers swallowed (loopback's, 16 MiB, on each of its two rings).
        var stored = manifest.StoredLength;
        var sent = fetched.Sum(i => (long)manifest.Segments[i].StoredLength);
        Assert.InRange(sent, stored, stored + stored / grid.Positions + (32L << 20));
    }

    [Fact]
    public void The_leaves_are_dealt_round_the_groups_and_follow_the_members_in_their_groups_rings()
    {
        // Ranks 2, 5 and 11 are slow: the grid is over the other 12 (groups of 4: ranks 0 1 3 4 | 6 7 8 9 | 10 12 13 14).
        var probes = Enumerable.Range(0, 15).Select(r => new ProbeResult(r is 2 or 3 or 5 or 6 or 11 or 12 ? 0.5e6 : 3e6, 0.3)).ToArray();
        var route = RingRoute.FromProbes(probes);
        Assert.Equal([2, 5, 11], route.Leaves);
        var grid = new GridRoute(RingGrid.Of(12, 4)!, route);
        Assert.Equal([0, 1, 3, 4, 2], grid.GroupRanks(0));
        Assert.Equal([6, 7, 8, 9, 5], grid.GroupRanks(1));
        Assert.Equal([10, 12, 13, 14, 11], grid.GroupRanks(2));
        Assert.Equal([1, 7, 12], grid.ColumnRanks(1));
        Assert.Equal((1, 4), grid.PlaceOf(5));
        Assert.Equal((2, 1), grid.PlaceOf(12));
        var ring = grid.GroupRoute(0);
        Assert.Equal([4], ring.Leaves);
        Assert.Equal([1, 4], ring.SendsTo(0));
        Assert.Equal([0, 1, 2, 3], ring.ReceivesFrom(4));
        Assert.Equal("grid:3x4/leaves:2,5,11", grid.ToString());
        Assert.Equal("grid:3x4", new GridRoute(RingGrid.Of(12, 4)!, RingRoute.Ring(12)).ToString());
    }

    [Fact]
    public void The_route_is_chosen_once_a_ring_with_its_leaves_links_or_the_grid_that_makes_its_own_rings()
    {
        var probes = Enumerable.Range(0, 15).Select(r => new ProbeResult(r is 2 or 3 ? 0.5e6 : 3e6, 0.3)).ToArray();
        var members = RingRoute.FromProbes(probes);
        Assert.Equal([2], members.Leaves);

        // No grid asked for, or too few members for the one asked: the ring route itself runs, and a member connects
        // to the leaf beside its ring (rank 1 sends on to 3, past the leaf, and to the leaf) while the leaf hears from
        // every member.
        foreach (var grid in new GridRings?[] { null, new("off", IPAddress.Loopback), new("auto", IPAddress.Loopback) })
        {
            var chosen = ExchangeRoute.For(grid, members);
            Assert.Same(members, chosen);
            Assert.Equal([3, 2], chosen.PeerLinks(1).SendsTo);
            Assert.Equal([0], chosen.PeerLinks(1).ReceivesFrom);
            Assert.Equal(members.Members, chosen.PeerLinks(2).ReceivesFrom);
        }
        Assert.Empty(RingRoute.Ring(15).PeerLinks(1).SendsTo);
        Assert.Empty(RingRoute.Ring(15).PeerLinks(1).ReceivesFrom);

        // A group size that makes three groups of the members: the grid over them, with the leaf in a group's ring; its rings connect
        // themselves, so nothing is connected beside the ring's own.
        var grid4 = ExchangeRoute.For(new GridRings("4", IPAddress.Loopback), members);
        var asGrid = Assert.IsType<GridRoute>(grid4);
        Assert.Same(members, asGrid.Route);
        Assert.Empty(grid4.PeerLinks(1).SendsTo);
        Assert.Empty(grid4.PeerLinks(1).ReceivesFrom);
        Assert.Equal("grid:3x4+/leaves:2", grid4.ToString());   // 14 members: two groups of 5, one of 4
        Assert.Equal("leaves:2/ring:0,1,3,4,5,6,7,8,9,10,11,12,13,14", members.ToString());
    }

    /// <summary>
    /// A slow node the probe made a leaf no longer turns the grid into one ring: the other nodes form the grid, and the
    /// leaf takes each group member's column part over its group's ring. The leaf here takes its blocks slowly.
    /// </summary>
    [Theory]
    [InlineData(RingAllGather.LeafRetainBytes)]
    [InlineData(0L)]    // no bytes kept beyond the few blocks always kept: the members fetch the rest again, found by the block they arrived as
    public async Task A_leaf_served_by_its_group_gets_every_segment_once_while_the_members_run_the_grid(long leafRetainBytes)
    {
        const int ranks = 10, slow = 2, segments = 1200;
        var route = RingRoute.FromProbes(Enumerable.Range(0, ranks).Select(r => new ProbeResult(r is slow or slow + 1 ? 0.5e6 : 3e6, 0.3)).ToArray());
        Assert.Equal([slow], route.Leaves);
        var grid = new GridRoute(RingGrid.Of(9, 3)!, route);
        var manifest = ManifestOf(segments, seed: 7);
        var (plan0, _) = grid.Layout.Plans(manifest, 0);
        Assert.All(plan0.Shares, s => Assert.True(s.Count > 2 * RingAllGather.LeafRetainBlocks, $"{s.Count} blocks in a member's share"));
        var groupLinks = Enumerable.Range(0, grid.Layout.Groups).Select(g => InProcessRing.Create(grid.GroupRanks(g).Count)).ToArray();
        var columnLinks = Enumerable.Range(0, grid.Layout.Positions).Select(_ => InProcessRing.Create(grid.Layout.Groups)).ToArray();
        var delivered = Enumerable.Range(0, ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        var fetched = new ConcurrentBag<int>();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));

        var results = await Task.WhenAll(Enumerable.Range(0, ranks).Select(rank => Task.Run(async () =>
        {
            var (g, p) = grid.PlaceOf(rank);
            var (groupPlan, columnPlans) = grid.Layout.Plans(manifest, g);
            if (route.IsLeaf(rank))
                return await RingAllGather.RunAsync(groupPlan, new SlowReceivingLink((IPeerLinks)groupLinks[g][p], TimeSpan.FromMilliseconds(20), oneAtATime: true), (block, message, _) => FetchAsync(groupPlan, block, message, fetched),
                    (message, _) => Deliver(message, groupPlan, delivered[rank], rank), timeout.Token, TimeSpan.FromSeconds(60), grid.GroupRoute(g));
            var result = await GridAllGather.RunAsync(grid.Layout, route.PositionOf(rank), groupPlan, columnPlans, groupLinks[g][p], columnLinks[p][g],
                (plan, block, message, _) => FetchAsync(plan, block, message, fetched),
                (message, plan, _) => Deliver(message, plan, delivered[rank], rank), timeout.Token, TimeSpan.FromSeconds(60), groupRoute: grid.GroupRoute(g),
                leafRetainBytes: leafRetainBytes);
            await result.LeavesServed!.WaitAsync(timeout.Token);
            return result;
        })));

        for (var r = 0; r < ranks; r++)
        {
            Assert.Equal(Enumerable.Range(0, segments), delivered[r].Keys.Order());
            Assert.All(delivered[r], kv => Assert.Equal(StoredBytes(manifest, kv.Key), kv.Value));
        }
        // The leaf fetches and sends nothing and takes its group's plan once: each member's column part, from that
        // member. No member of another group sends it anything.
        Assert.Equal((0, 0), (results[slow].BlocksFetched, results[slow].BlocksSent));
        Assert.Equal(plan0.Shares.Sum(s => s.Count), results[slow].BlocksReceived);
        Assert.Equal(plan0.Shares.Sum(s => s.Sum(b => (long)b.StoredBytes + BlockMessage.HeaderLength + BlockMessage.RecordHeaderLength * b.Count)), results[slow].BytesReceived);
        Assert.All(Enumerable.Range(0, ranks).Where(r => grid.PlaceOf(r).Group != 0), r => Assert.Equal(0, results[r].LeafBytesSent));
        // The tier sends each segment once; with no room to keep blocks for the slow leaf, again what the members had
        // stopped keeping for it: at most the leaf's copy once more.
        Assert.Equal(Enumerable.Range(0, segments), fetched.Distinct().Order());
        if (leafRetainBytes > 0) Assert.Equal(segments, fetched.Count);
        // Whether the members had to fetch any again depends on how far the slow leaf fell behind the few blocks always
        // kept, which is the machine's speed (a native build on a quiet machine keeps up): only the bound is the promise.
        else Assert.InRange(fetched.Count, segments, 2 * segments);
    }

    private static async Task<(TcpRing[] Groups, TcpRing?[] Columns)> ConnectAsync(RingGrid grid, CancellationToken ct)
    {
        var groupEnds = Enumerable.Range(0, grid.Ranks).Select(_ => TcpRing.Listen(IPAddress.Loopback)).ToArray();
        var columnEnds = Enumerable.Range(0, grid.Ranks).Select(r => grid.PlaceOf(r).Position < grid.Positions ? TcpRing.Listen(IPAddress.Loopback) : null).ToArray();
        var groups = Task.WhenAll(Enumerable.Range(0, grid.Ranks).Select(r =>
        {
            var (g, p) = grid.PlaceOf(r);
            return groupEnds[r].ConnectAsync(p, grid.GroupMembers(g).Select(m => groupEnds[m].Entry).ToArray(), TimeSpan.FromSeconds(20), ct);
        }));
        var columns = Task.WhenAll(Enumerable.Range(0, grid.Ranks).Select(r =>
        {
            var (g, p) = grid.PlaceOf(r);
            return p < grid.Positions
                ? columnEnds[r]!.ConnectAsync(g, grid.ColumnMembers(p).Select(m => columnEnds[m]!.Entry).ToArray(), TimeSpan.FromSeconds(20), ct)!
                : Task.FromResult<TcpRing>(null!);
        }));
        return (await groups, await columns);
    }

    private static ValueTask Deliver(ReadOnlyMemory<byte> message, FanoutPlan plan, ConcurrentDictionary<int, byte[]> delivered, int rank)
    {
        foreach (var (index, stored) in BlockMessage.Records(message, plan))
            Assert.True(delivered.TryAdd(index, stored.ToArray()), $"rank {rank} got segment {index} twice");
        return ValueTask.CompletedTask;
    }
}
