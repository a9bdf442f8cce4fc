using Hpc.CommonData.Fanout;
using Hpc.Bench.Simulation;

namespace Hpc.Bench.Tests;

/// <summary>bench simulate: the flow network's sharing, the protocols' behaviour, and a recorded lab cell reproduced.</summary>
public class SimulationTests
{
    private static readonly string Records = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "slurm-native.jsonl");
    private static readonly string SlowRecords = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "slow-node.jsonl");
    private static readonly string GridRecords = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "grid.jsonl");
    private static readonly string FastTierGridRecords = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "grid-fast-tier.jsonl");
    private static readonly string FastTierSlowGridRecords = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "slow-node-grid-fast-tier.jsonl");
    private static readonly string KillRecords = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "kill.jsonl");
    private static readonly string AgentsRecords = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "agents.jsonl");
    private static readonly string[] FastTierAgentsRecords =
        [Path.Combine(LabRecords.RepoRoot(), "docs", "results", "agents-fast-tier.jsonl"), Path.Combine(LabRecords.RepoRoot(), "docs", "results", "agents-fast-tier-100mbit.jsonl")];

    /// <summary>Costs beyond the wire set to nothing, so a test sees the links alone.</summary>
    private static readonly Calibration Wire = new();

    [Theory]
    [InlineData(25, 8, Delivery.Fanout)]
    [InlineData(100, 16, Delivery.Fanout)]
    [InlineData(25, 16, Delivery.Direct)]
    public void Reproduces_a_recorded_lab_cell_within_ten_percent(int rateMbit, int nodes, Delivery delivery)
    {
        var records = ResultReader.Read(Records).Records;
        // Calibrated from the whole file (start-up from its N = 4 runs), then replayed at an N it did not read the start-up from.
        var cal = Calibration.FromRecords(records, Records);
        var cell = Experiments.Cells(records).Single(c => c.RateMbit == rateMbit && c.Nodes == nodes && c.Delivery == delivery && c.SizeBytes < 100 << 20);
        var row = Experiments.Replay(cell, cal);
        Assert.True(Math.Abs(row.Error) <= 0.10, $"{cell.Describe()}: simulated {row.Simulated:0.00} s, measured median {cell.Median:0.00} s ({row.Error:P1})");
    }

    /// <summary>Every cell, replayed with the calibration, within ±10% of its measured median.</summary>
    private static void AssertReplayedWithinTenPercent(IEnumerable<LabCell> cells, Calibration cal) =>
        Assert.All(cells, cell =>
        {
            var row = Experiments.Replay(cell, cal);
            Assert.True(Math.Abs(row.Error) <= 0.10, $"{cell.Describe()}: simulated {row.Simulated:0.00} s, measured median {cell.Median:0.00} s ({row.Error:P1})");
        });

    /// <summary>
    /// The slow-node runs were recorded with the host queues the Slurm cells have (ACKs ahead of bulk data, as a NIC's
    /// fq_codel gives them): every cell of them — direct, the ring with and without the probe, healthy and slow
    /// nodes — is predicted from the same file's runs without a slow node.
    /// </summary>
    [Fact]
    public void Reproduces_every_cell_of_the_recorded_slow_node_runs_within_ten_percent()
    {
        var records = ResultReader.Read(SlowRecords).Records;
        Assert.All(records, r => Assert.Equal("ack-first", r.Config.HostQueue));
        var cal = Calibration.FromRecords(records, SlowRecords);
        var cells = Experiments.Cells(records);
        Assert.Equal(8, cells.Count);
        AssertReplayedWithinTenPercent(cells, cal);
    }

    /// <summary>
    /// The lab's runs of sixteen ranks in four groups of four (bench cluster --fanout mpi-grid4) beside one ring: the
    /// grid is replayed with node prep's own layout, calibrated from the same file's runs over one ring.
    /// </summary>
    [Fact]
    public void Reproduces_the_recorded_grid_of_rings_within_ten_percent()
    {
        var records = ResultReader.Read(GridRecords).Records;
        var cal = Calibration.FromRecords(records, GridRecords);
        var cells = Experiments.Cells(records);
        var grid = Assert.Single(cells, c => c.GridGroupSize == 4);
        Assert.Equal(16, grid.Nodes);
        Assert.Contains(records, r => r.Config.Fanout == "mpi-grid4" && r.Nodes.Count == 16);
        AssertReplayedWithinTenPercent(cells, cal);
    }

    /// <summary>
    /// Where the cache tier takes an eighth of the transfer, as it does at 1,000–10,000 nodes with 8 hosts (8 hosts for 16
    /// nodes here, the default build's native programs), the grid of 4 × 4 is no slower than one ring measured and the
    /// model replays both, and the same session's N = 4 runs it is calibrated from, within ±10%.
    /// </summary>
    [Fact]
    public void Reproduces_the_grid_of_rings_where_the_tier_is_not_the_limit_within_ten_percent()
    {
        var records = ResultReader.Read(FastTierGridRecords).Records;
        var cal = Calibration.FromRecords(records, FastTierGridRecords);
        var cells = Experiments.Cells(records);
        var grid = Assert.Single(cells, c => c.GridGroupSize == 4);
        var ring = Assert.Single(cells, c => c.GridGroupSize is null && c.Delivery == Delivery.Fanout && c.Nodes == 16);
        Assert.All(cells, c => Assert.Equal(8, c.Hosts));
        Assert.True(grid.Median <= ring.Median * 1.02, $"grid {grid.Median:0.00} s, one ring {ring.Median:0.00} s");
        AssertReplayedWithinTenPercent(cells, cal);
    }

    /// <summary>
    /// Node5 of 16 at a quarter of the rate, 8 cache hosts: the ranks made it a leaf and ran one ring of the other 15 or
    /// the grid of them (3 × 5) with the leaf served by one group. The healthy nodes took about as long either way, the
    /// leaf its own link's time; the model routes it as the ranks did and replays every cell, and the same session's
    /// N = 4 runs it is calibrated from, within ±10%.
    /// </summary>
    [Fact]
    public void Reproduces_a_slow_node_served_by_one_group_of_the_grid_within_ten_percent_and_routes_it_as_the_ranks_did()
    {
        var records = ResultReader.Read(FastTierSlowGridRecords).Records;
        var cal = Calibration.FromRecords(records, FastTierSlowGridRecords);
        var cells = Experiments.Cells(records).ToList();
        var grid = records.Where(r => r.Config.Fanout == "mpi-grid4").ToList();
        Assert.NotEmpty(grid);
        Assert.All(grid, run => Assert.All(run.Nodes, n => Assert.Equal("grid:3x5/leaves:4", n.Route)));
        var gridHealthy = Assert.Single(cells, c => c.GridGroupSize == 4 && c.Group == NodeGroup.Healthy);
        var ringHealthy = Assert.Single(cells, c => c.GridGroupSize is null && c.Nodes == 16 && c.Group == NodeGroup.Healthy);
        Assert.InRange(gridHealthy.Median, 0.9 * ringHealthy.Median, 1.1 * ringHealthy.Median);
        foreach (var cell in cells.Where(c => c.SlowNodes.Count > 0))
            Assert.Equal([4], Experiments.Replay(cell, cal).Leaves!);
        AssertReplayedWithinTenPercent(cells, cal);
    }

    /// <summary>
    /// The agents asked for the exchange at N = 16 with 8 cache hosts, at 25 and 100 Mbit/s: the model replays them, and
    /// each file's N = 4 runs it is calibrated from, within ±10%. Not the launched ranks' N = 16 cell at 100 Mbit/s, which
    /// the model puts 19% under the measured (mpiexec's start of 16 ranks on the lab's 2 cores; docs/benchmarks.md).
    /// </summary>
    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    public void Reproduces_the_agents_where_the_tier_is_not_the_limit_within_ten_percent(int file)
    {
        var path = FastTierAgentsRecords[file];
        var records = ResultReader.Read(path).Records;
        var cal = Calibration.FromRecords(records, path);
        var cells = Experiments.Cells(records).ToList();
        Assert.Single(cells, c => c.Agents && c.Nodes == 16);
        AssertReplayedWithinTenPercent(cells.Where(c => c.Agents || c.Nodes == 4), cal);
    }

    /// <summary>
    /// What each hop adds beyond a block's own transmission (the network's latency and a switch port's queue) is charged
    /// once per hop of a block's longest path: at 1,000 nodes a block crosses about 2·√N links of the grid, so a
    /// millisecond more per hop costs tens of milliseconds, not the thousand a ring of every node would.
    /// </summary>
    [Fact]
    public void Latency_per_hop_costs_the_grid_its_depth_in_hops()
    {
        var cal = Calibration.FromRecords(ResultReader.Read(AgentsRecords).Records, AgentsRecords);
        const long stored = 448L << 20;
        var low = new Experiments.Assumptions();
        var high = low with { HopLatency = low.HopLatency + 1e-3 };
        var fast = Simulator.Run(Experiments.Cluster(1_000, 8, 10, low), cal, Delivery.Fanout, stored, agents: true).Jobs[0].Seconds;
        var slow = Simulator.Run(Experiments.Cluster(1_000, 8, 10, high), cal, Delivery.Fanout, stored, agents: true).Jobs[0].Seconds;
        var depth = RingGrid.For(1_000, "auto")!.Depth;
        Assert.InRange(slow - fast, 0.5 * depth * 1e-3, 2.0 * depth * 1e-3 + 0.05);
        var oneRing = Simulator.Run(Experiments.Cluster(1_000, 8, 10, high), cal, Delivery.Fanout, stored, agents: true, ringGroups: "off").Jobs[0].Seconds;
        Assert.True(oneRing > slow + 0.5, $"one ring {oneRing:0.00} s, the grid {slow:0.00} s at 1 ms a hop");
    }

    /// <summary>
    /// The lab's fan-outs requested of the running agents (the default build's native programs; N = 4, 8, 16 at 25 and
    /// N = 16 at 100 Mbit/s, and N = 8 with an agent killed mid-exchange) are replayed within ±10%: the agents' CPU per
    /// byte and the start read from the same file (its N = 4 runs), the N = 8 and 16 cells and the kill predicted from them.
    /// </summary>
    [Fact]
    public void Reproduces_the_recorded_fanouts_requested_of_the_agents_within_ten_percent()
    {
        var records = ResultReader.Read(AgentsRecords).Records;
        var cal = Calibration.FromRecords(records, AgentsRecords);
        Assert.NotNull(cal.AgentsCpuPerByte);
        Assert.NotNull(cal.AgentsStartSeconds);
        var cells = Experiments.Cells(records).Where(c => c.Agents).ToList();
        Assert.Equal([4, 8, 8, 16, 16], cells.Select(c => c.Nodes).Order());
        Assert.Single(cells, c => c.KillRank is not null);
        Assert.Equal([25, 100], cells.Where(c => c.Nodes == 16).Select(c => c.RateMbit).Order());
        AssertReplayedWithinTenPercent(cells, cal);
    }

    /// <summary>
    /// Requested of the running agents, the start is the request's tree: it grows with the tree's height (log N), not
    /// with a launch, and at 10,000 nodes on 10 Gbit/s the whole fan-out is faster than the ranks' by more than the
    /// launch's assumed second; an agent that dies mid-exchange costs the others nothing and the tier little.
    /// </summary>
    [Fact]
    public void A_fanout_requested_of_the_agents_starts_in_the_trees_height_and_a_dead_agent_costs_the_others_nothing()
    {
        var model = new AgentTreeModel();
        Assert.Equal(0, AgentTreeModel.Height(1, 8));
        Assert.Equal(1, AgentTreeModel.Height(9, 8));
        Assert.Equal(2, AgentTreeModel.Height(10, 8));
        Assert.Equal(5, AgentTreeModel.Height(10_000, 8));
        // The tree itself takes round trips; each node's own work around its ring (measured) comes once on top.
        var tree = model with { NodeSeconds = 0 };
        Assert.True(tree.Seconds(10_000, 25e-6, 1.25e9) < 0.05, $"{tree.Seconds(10_000, 25e-6, 1.25e9)}");
        Assert.Equal(tree.Seconds(10_000, 25e-6, 1.25e9) + model.NodeSeconds, model.Seconds(10_000, 25e-6, 1.25e9), 9);
        // A member down when the request comes costs the others the reach timeout and one more level for its subtree.
        Assert.InRange(model.Seconds(10_000, 25e-6, 1.25e9, oneDown: true) - model.Seconds(10_000, 25e-6, 1.25e9), model.ReachSeconds, model.ReachSeconds + 0.01);

        var cal = Calibration.FromRecords(ResultReader.Read(AgentsRecords).Records, AgentsRecords);
        var a = new Experiments.Assumptions();
        const long stored = 448L << 20;
        var ranks = Simulator.Run(Experiments.Cluster(10_000, 8, 10, a), cal, Delivery.Fanout, stored).Jobs[0];
        var agents = Simulator.Run(Experiments.Cluster(10_000, 8, 10, a), cal, Delivery.Fanout, stored, agents: true).Jobs[0];
        Assert.True(agents.Seconds < ranks.Seconds - 1, $"agents {agents.Seconds:0.00} s, ranks {ranks.Seconds:0.00} s");
        var dying = Simulator.Run(Experiments.Cluster(10_000, 8, 10, a), cal, Delivery.Fanout, stored, failAfter: (agents.ExchangeSeconds ?? 0) / 2,
            peerTimeout: 0, agents: true).Jobs[0];
        Assert.InRange(dying.Seconds, agents.Seconds * 0.99, agents.Seconds * 1.2);
        Assert.InRange(dying.TierBytes, stored * 0.99, stored * 1.1);
    }

    /// <summary>
    /// The lab's runs with a rank killed mid-exchange are replayed with the death at the lab's moment (from the launch),
    /// the rank's neighbours told at once: the others take longer than without it, the dead node has no time, and the
    /// tier sends more than the data once; every cell of the file (the default build's native programs) within ±10%.
    /// </summary>
    [Fact]
    public void Replays_the_recorded_kill_at_the_labs_moment_within_ten_percent_and_the_others_finish_later_than_without_it()
    {
        var records = ResultReader.Read(KillRecords).Records;
        var cal = Calibration.FromRecords(records, KillRecords);
        var cells = Experiments.Cells(records);
        var killed = Assert.Single(cells, c => c.KillRank is not null);
        var healthy = Assert.Single(cells, c => c.KillRank is null && c.Delivery == Delivery.Fanout && c.Nodes == killed.Nodes);
        Assert.Equal(3, killed.KillRank);
        Assert.InRange(killed.KillSeconds, 1, healthy.Median);
        Assert.True(killed.Median > healthy.Median, "the lab's kill cost nothing");
        var withKill = Experiments.Replay(killed, cal);
        var without = Experiments.Replay(healthy, cal);
        Assert.True(withKill.Simulated > without.Simulated, $"simulated {withKill.Simulated:0.00} s with the kill, {without.Simulated:0.00} s without");
        AssertReplayedWithinTenPercent(cells, cal);
    }

    [Fact]
    public void Reproduces_the_slow_node_of_the_recorded_slow_node_run_within_ten_percent_and_routes_it_as_the_ranks_did()
    {
        var records = ResultReader.Read(SlowRecords).Records;
        // Calibrated from the same file's runs without a slow node; the slow-node run itself is predicted.
        var cal = Calibration.FromRecords(records, SlowRecords);
        var runs = records.Where(r => r.Config.Fanout == "mpi" && r.Config.SlowNodes is { Count: > 0 }).ToList();
        var cell = Experiments.Cells(records).Single(c => c.Probe && c.SlowNodes.Count > 0 && c.Group == NodeGroup.Slow);
        var row = Experiments.Replay(cell, cal);
        Assert.True(Math.Abs(row.Error) <= 0.10, $"{cell.Describe()}: simulated {row.Simulated:0.00} s, measured {cell.Median:0.00} s ({row.Error:P1})");
        // The ranks wrote down the route they agreed on ("leaves:2/ring:0,1,3"); the simulated probe must reach the same.
        Assert.NotEmpty(runs);
        foreach (var run in runs)
            Assert.Equal(run.Nodes[0].Route!.Split('/')[0]["leaves:".Length..].Split(',').Select(int.Parse), row.Leaves);
    }

    [Fact]
    public void With_no_slow_node_the_probe_keeps_the_ring_and_costs_only_its_own_time()
    {
        const long stored = 64L << 20;
        // 25 Mbit/s: a probe takes ~80 ms, long enough to judge, so only the rates decide.
        var spec = new ClusterSpec { Nodes = 12, CacheHosts = 2, LinkBitsPerSecond = 25e6, HopLatency = 25e-6 };
        var off = Simulator.Run(spec, Wire, Delivery.Fanout, stored).Jobs[0];
        var on = Simulator.Run(spec, Wire, Delivery.Fanout, stored, probe: true).Jobs[0];
        Assert.Empty(on.Leaves!);
        // One round of 64 KB at the link's rate (long enough to judge at 25 Mbit/s), then the rates' all-gather.
        var chunks = LeafRule.FirstRoundBytes / (25e6 / 8 * Wire.Efficiency);
        Assert.InRange(on.ProbeSeconds, chunks, chunks + 0.01);
        Assert.Equal(off.ExchangeSeconds!.Value, on.ExchangeSeconds!.Value, 9);
        Assert.Equal(off.TierBytes, on.TierBytes, 0);
        for (var i = 0; i < spec.Nodes; i++) Assert.Equal(off.NodeSeconds[i] + on.ProbeSeconds, on.NodeSeconds[i], 9);
    }

    [Fact]
    public void A_quarter_rate_node_becomes_a_leaf_and_the_others_keep_their_time()
    {
        const long stored = 64L << 20;
        ClusterSpec Spec(params int[] slow) => new() { Nodes = 12, CacheHosts = 2, LinkBitsPerSecond = 25e6, HopLatency = 25e-6, SlowNodes = slow.ToHashSet(), SlowFactor = 0.25 };
        var even = Simulator.Run(Spec(), Wire, Delivery.Fanout, stored, probe: true).Jobs[0];
        var ring = Simulator.Run(Spec(5), Wire, Delivery.Fanout, stored).Jobs[0];
        var routed = Simulator.Run(Spec(5), Wire, Delivery.Fanout, stored, probe: true).Jobs[0];
        // Its neighbours have one slow link each and their other one healthy: they stay in the ring.
        Assert.Equal([5], routed.Leaves!);
        var healthy = routed.NodeSeconds.Where((_, i) => i != 5).Max();
        Assert.InRange(healthy, even.Seconds, 1.1 * even.Seconds);
        Assert.True(healthy < ring.Seconds / 3, $"healthy nodes {healthy:0.00} s with the leaf, {ring.Seconds:0.00} s in the ring");
        // The leaf receives S over its own link, from every member at once: its link's time and little more.
        var leafLimit = stored / (0.25 * 25e6 / 8 * Wire.Efficiency);
        Assert.InRange(routed.NodeSeconds[5], leafLimit, 1.1 * leafLimit);
        Assert.Equal(stored, routed.TierBytes, 0);
    }

    /// <summary>What the probe's rounds up to and including <paramref name="rounds"/> take on a link of that rate.</summary>
    private static double RoundsSeconds(int rounds, double bytesPerSecond) => Enumerable.Range(0, rounds).Sum(k => LeafRule.RoundBytes(k) / bytesPerSecond);

    /// <summary>
    /// One node in a hundred at a tenth of the rate, 10,000 nodes on 10 Gbit/s: the probe makes the slow ones leaves and
    /// the others still run the grid, each leaf served by one group. The healthy nodes lose the probe's time to the slow
    /// nodes, not the grid: over one ring of the members they took about twice as long.
    /// </summary>
    [Fact]
    public void With_one_node_in_a_hundred_slow_the_members_keep_the_grid_and_the_healthy_lose_only_the_probe()
    {
        var cal = Calibration.FromRecords(ResultReader.Read(AgentsRecords).Records, AgentsRecords);
        const long stored = 448L << 20;
        const int nodes = 10_000;
        var a = new Experiments.Assumptions();
        var slow = Enumerable.Range(0, nodes).Where(i => i % 100 == 50).ToHashSet();
        var healthy = Simulator.Run(Experiments.Cluster(nodes, 8, 10, a), cal, Delivery.Fanout, stored).Jobs[0];
        var grid = Simulator.Run(Experiments.Cluster(nodes, 8, 10, a, slow: slow), cal, Delivery.Fanout, stored, probe: true).Jobs[0];
        var ring = Simulator.Run(Experiments.Cluster(nodes, 8, 10, a, slow: slow), cal, Delivery.Fanout, stored, probe: true, ringGroups: "off").Jobs[0];
        double Healthiest(JobResult job) => job.NodeSeconds.Where((_, i) => !slow.Contains(i)).Max();

        Assert.Equal(slow.Order(), grid.Leaves!);
        Assert.InRange(Healthiest(grid), healthy.Seconds, healthy.Seconds + grid.ProbeSeconds + 0.1);
        Assert.True(Healthiest(ring) > 1.5 * Healthiest(grid), $"one ring of the members {Healthiest(ring):0.00} s, the grid {Healthiest(grid):0.00} s");
        // Each leaf takes S once, from its group's members (who keep its S/G, 4.5 MB here, under the 64 MB they may keep
        // for leaves): the tier still sends S once.
        Assert.InRange(grid.TierBytes, stored * 0.999, stored * 1.01);
        // A slow node takes its own link's time for S beside the start-up and probe everyone has: it waits for no one.
        var own = stored / (10e9 * a.SlowFactor / 8 * cal.Efficiency);
        Assert.InRange(grid.NodeSeconds.Where((_, i) => slow.Contains(i)).Max(), own, own + healthy.Seconds + grid.ProbeSeconds);
    }

    /// <summary>
    /// A member of a leaf's group dies while the leaf, at a tenth of the rate, still takes its copy: the member's rings
    /// close around it, and that leaf alone loses its connection and fetches what it lacks from the tier. The other
    /// leaves and the healthy nodes are not held up.
    /// </summary>
    [Fact]
    public void A_member_that_dies_costs_only_the_leaves_of_its_group_a_fetch_of_what_they_lack()
    {
        var cal = Calibration.FromRecords(ResultReader.Read(AgentsRecords).Records, AgentsRecords);
        const long stored = 448L << 20;
        const int nodes = 1_000, victim = 5;    // a member of group 0, which serves the first leaf (rank 50)
        var a = new Experiments.Assumptions();
        var slow = Enumerable.Range(0, nodes).Where(i => i % 100 == 50).ToHashSet();
        var spec = Experiments.Cluster(nodes, 8, 10, a, slow: slow);
        var healthy = Simulator.Run(spec, cal, Delivery.Fanout, stored, probe: true).Jobs[0];
        // Mid-exchange: the members have long finished their grid, the leaves are a third of the way through.
        var at = healthy.ExchangeStart + 1.5;
        Assert.True(healthy.NodeSeconds[50] > at + 1, $"the leaf was done at {healthy.NodeSeconds[50]:0.00} s");
        var died = Simulator.Run(spec, cal, Delivery.Fanout, stored, failAfter: at, probe: true, peerTimeout: 2, failRank: victim).Jobs[0];

        Assert.Equal(1, died.FellBack);
        double Last(JobResult job, Func<int, bool> which) => job.NodeSeconds.Where((_, i) => i != victim && which(i)).Max();
        Assert.Equal(Last(healthy, i => !slow.Contains(i)), Last(died, i => !slow.Contains(i)), 2);
        Assert.Equal(Last(healthy, i => slow.Contains(i) && i != 50), Last(died, i => slow.Contains(i) && i != 50), 2);
        // The leaf is done no later than the detection and a whole copy at its own rate after the death.
        var own = stored / (10e9 * a.SlowFactor / 8 * cal.Efficiency);
        Assert.InRange(died.NodeSeconds[50], at + 2, at + 2 + own);
        Assert.InRange(died.TierBytes, stored, 2.0 * stored);
    }

    [Theory]
    [InlineData(10e9, 0.25)]
    [InlineData(10e9, 0.1)]
    [InlineData(100e9, 0.1)]
    public void On_fast_links_the_probe_grows_until_it_can_judge_then_confirms_the_slow_node_in_one_more_round_and_makes_it_a_leaf(double rate, double factor)
    {
        const long stored = 64L << 20;
        // 64 KB cross even the slow link in a few milliseconds: the first round alone could not make a leaf.
        var link = rate / 8 * Wire.Efficiency;
        Assert.True(LeafRule.FirstRoundBytes / (factor * link) < LeafRule.ShortestTelling.TotalSeconds);
        var spec = new ClusterSpec { Nodes = 12, CacheHosts = 2, LinkBitsPerSecond = rate, HopLatency = 25e-6, SlowNodes = new HashSet<int> { 5 }, SlowFactor = factor };
        var job = Simulator.Run(spec, Wire, Delivery.Fanout, stored, probe: true).Jobs[0];
        Assert.Equal([5], job.Leaves!);
        // The rounds run at the slow link's pace (lockstep) until the median link's took half the floor, or the largest.
        var most = Enumerable.Range(1, 16).First(k => LeafRule.RoundBytes(k - 1) >= LeafRule.LastRoundBytes);
        var rounds = Enumerable.Range(1, most).First(k => LeafRule.RoundBytes(k - 1) * (LeafRule.Chunks - 1.0) / LeafRule.Chunks / link >= LeafRule.ShortestTelling.TotalSeconds / 2 || k == most);
        // Then one more round at the slow link's pace, the smallest that still times it for half again the floor: the
        // node stays a leaf because it read slow twice.
        var confirming = Enumerable.Range(0, rounds).First(k => LeafRule.RoundBytes(k) >= 1.5 * factor * link * LeafRule.ShortestTelling.TotalSeconds * 8 / 7 || k == rounds - 1);
        var expected = RoundsSeconds(rounds, factor * link) + LeafRule.RoundBytes(confirming) / (factor * link);
        Assert.InRange(job.ProbeSeconds, expected, expected + 0.01);
        Assert.True(job.ProbeSeconds < LeafRule.Limit.TotalSeconds);
    }

    [Theory]
    [InlineData(1e9)]
    [InlineData(10e9)]
    [InlineData(100e9)]
    public void On_fast_links_with_no_slow_node_the_probe_makes_no_leaf_and_takes_tens_of_milliseconds_at_most(double rate)
    {
        const long stored = 64L << 20;
        var spec = new ClusterSpec { Nodes = 12, CacheHosts = 2, LinkBitsPerSecond = rate, HopLatency = 25e-6 };
        var job = Simulator.Run(spec, Wire, Delivery.Fanout, stored, probe: true).Jobs[0];
        Assert.Empty(job.Leaves!);
        Assert.InRange(job.ProbeSeconds, RoundsSeconds(2, rate / 8 * Wire.Efficiency), 0.05);
    }

    [Fact]
    public void A_node_slower_than_half_the_median_but_measured_under_twenty_milliseconds_is_no_leaf()
    {
        const long stored = 64L << 20;
        // At 100 Gbit/s the largest round (64 MB) crosses a half-rate link in about 11 ms: under the floor, so no leaf;
        // without the floor it would be one.
        var spec = new ClusterSpec { Nodes = 12, CacheHosts = 2, LinkBitsPerSecond = 100e9, HopLatency = 25e-6, SlowNodes = new HashSet<int> { 5 }, SlowFactor = 0.45 };
        Assert.True(LeafRule.LastRoundBytes / (0.45 * 100e9 / 8 * Wire.Efficiency) < LeafRule.ShortestTelling.TotalSeconds);
        Assert.Empty(Simulator.Run(spec, Wire, Delivery.Fanout, stored, probe: true).Jobs[0].Leaves!);
        Assert.Equal([5], Simulator.Run(spec, Wire, Delivery.Fanout, stored, probe: true, shortestTelling: 0).Jobs[0].Leaves!);
    }

    [Fact]
    public void The_leaf_rule_needs_both_links_below_half_the_median_and_leaves_at_least_two_members()
    {
        ProbeResult Link(double rate) => new(rate, 0.1);
        // Rank 2's links (1→2 and 2→3) are slow; rank 3's incoming is slow but its outgoing is not.
        Assert.Equal([2], LeafRule.Leaves([Link(100), Link(100), Link(20), Link(20), Link(100)]));
        // One slow link alone (3→4) makes nobody a leaf: each node on it has its other link healthy.
        Assert.Empty(LeafRule.Leaves([Link(100), Link(100), Link(100), Link(100), Link(20)]));
        Assert.Empty(LeafRule.Leaves([Link(100), Link(20)]));
        // Too short to judge: the faster of the node's two probes took under 20 ms.
        Assert.Empty(LeafRule.Leaves([new(100, 0.1), new(100, 0.1), new(20, 0.019), new(20, 0.019), new(100, 0.1)]));
    }

    [Fact]
    public void Calibration_reads_the_costs_from_the_records_not_from_the_cells_times()
    {
        var records = ResultReader.Read(Records).Records;
        var cal = Calibration.FromRecords(records, Records);
        // The ring's node spends rank and agent CPU on every stored byte; the agent alone less.
        Assert.InRange(cal.FanoutCpuPerByte * 1e9, 2, 30);
        Assert.InRange(cal.FanoutIngestCpuPerByte, 0, cal.FanoutCpuPerByte);
        Assert.InRange(cal.FanoutStartSeconds, 0, 2);
        Assert.Equal(2, cal.LabCores);
        Assert.Throws<InvalidOperationException>(() => Calibration.FromRecords([], "nothing"));
    }

    [Fact]
    public void Flows_sharing_a_link_get_equal_shares_and_a_narrower_path_gives_its_spare_to_the_other()
    {
        var net = new FlowNetwork();
        var shared = net.AddLink(100);
        var narrow = net.AddLink(20);
        var a = net.Start(1000, [shared], null, null);
        var b = net.Start(1000, [shared, narrow], null, null);
        net.Run(until: 1);
        Assert.Equal(20, b.Rate, 6);
        Assert.Equal(80, a.Rate, 6);
        net.Run();
        // a: 1000 at 80 until 12.5 s; b: 250 by then, the rest at 20 → 50 s.
        Assert.Equal(12.5, a.Finished, 6);
        Assert.Equal(50, b.Finished, 6);
    }

    [Fact]
    public void A_weighted_flow_uses_a_CPU_link_by_its_cost_per_byte()
    {
        var net = new FlowNetwork();
        var wire = net.AddLink(1000);
        var cpu = net.AddLink(1); // one core
        // 0.002 CPU-s per byte: one core ingests 500 bytes/s, half the wire.
        var f = net.Start(1000, [wire, cpu], [1, 0.002], null);
        net.Run();
        Assert.Equal(2, f.Finished, 6);
    }

    [Theory]
    [InlineData(Delivery.Direct)]
    [InlineData(Delivery.Fanout)]
    public void Doubling_the_link_rate_halves_a_link_bound_transfer(Delivery delivery)
    {
        const long stored = 512L << 20;
        ClusterSpec Spec(double bits) => new() { Nodes = 8, CacheHosts = 2, LinkBitsPerSecond = bits };
        var slow = Simulator.Run(Spec(1e9), Wire, delivery, stored).Seconds;
        var fast = Simulator.Run(Spec(2e9), Wire, delivery, stored).Seconds;
        Assert.Equal(0.5, fast / slow, 3);
        // Direct: the 2 host links carry 8 copies; every byte at 0.94 of the rate.
        if (delivery == Delivery.Direct) Assert.Equal(4 * stored / (1e9 / 8 * Wire.Efficiency), slow, 3);
    }

    [Fact]
    public void A_slow_node_in_the_ring_slows_every_node_to_its_link()
    {
        const long stored = 256L << 20;
        ClusterSpec Spec(params int[] slow) => new() { Nodes = 16, CacheHosts = 2, LinkBitsPerSecond = 1e9, SlowNodes = slow.ToHashSet(), SlowFactor = 0.25 };
        var even = Simulator.Run(Spec(), Wire, Delivery.Fanout, stored).Jobs[0];
        var one = Simulator.Run(Spec(5), Wire, Delivery.Fanout, stored).Jobs[0];
        var sb = stored / (1e9 / 8 * Wire.Efficiency);
        // Uniform: S/(ηB) plus the pipeline's fill and drain, well under 1.2 × S/(ηB).
        Assert.InRange(even.Seconds, sb, 1.2 * sb);
        // The slow node's links carry (N−1)/N·S and S at a quarter of the rate, and every block crosses them.
        Assert.InRange(one.Seconds, 3.6 * sb, 4.4 * sb);
        Assert.All(one.NodeSeconds, t => Assert.True(t > 3.5 * sb));
        // Direct fetch: only that node is late; the others keep their time.
        var direct = Simulator.Run(Spec(5), Wire, Delivery.Direct, stored).Jobs[0];
        var evenDirect = Simulator.Run(Spec(), Wire, Delivery.Direct, stored).Jobs[0];
        Assert.Equal(evenDirect.NodeSeconds[0], direct.NodeSeconds[0], 6);
    }

    [Fact]
    public void A_ring_starts_once_a_shares_first_block_is_in_at_the_tiers_rate_over_N_so_the_ramps_small_first_block_starts_it_sooner()
    {
        // The lab's N = 16: 27.5 MB stored, two cache hosts, 25 Mbit/s. Each node's part of the tier is 2 × 25 / 16
        // Mbit/s, its blocks 215 KB: a whole first block takes 0.55 s to come, an eighth of one 0.07 s.
        const long stored = 27_518_642;
        var spec = new ClusterSpec { Nodes = 16, CacheHosts = 2, LinkBitsPerSecond = 25e6 };
        double Seconds(int ramp) => Simulator.Run(spec, Wire, [new JobSpec(Delivery.Fanout, 0, 16, stored, RampBlocks: ramp)]).Seconds;
        var tierPerNode = 2 * 25e6 / 8 * Wire.Efficiency / 16;
        var block = BlockSizing.For(stored / 16.0);
        var expected = (block - block / 8.0) / tierPerNode;
        Assert.InRange(Seconds(0) - Seconds(BlockSizing.RampBlocks), 0.8 * expected, 1.2 * expected);
    }

    [Fact]
    public void Each_byte_leaves_the_tier_once_with_the_fan_out_and_once_per_node_with_direct_fetch()
    {
        const long stored = 64L << 20;
        var spec = new ClusterSpec { Nodes = 12, CacheHosts = 3, LinkBitsPerSecond = 1e9 };
        Assert.Equal(stored, Simulator.Run(spec, Wire, Delivery.Fanout, stored).Jobs[0].TierBytes, 0);
        Assert.Equal(12.0 * stored, Simulator.Run(spec, Wire, Delivery.Direct, stored).Jobs[0].TierBytes, 0);
    }

    [Fact]
    public void A_node_that_dies_mid_ring_costs_the_stall_timeout_and_a_direct_fetch_of_what_is_missing()
    {
        const long stored = 256L << 20;
        var spec = new ClusterSpec { Nodes = 8, CacheHosts = 2, LinkBitsPerSecond = 1e9 };
        var clean = Simulator.Run(spec, Wire, Delivery.Fanout, stored).Jobs[0];
        var failed = Simulator.Run(spec, Wire, Delivery.Fanout, stored, failAfter: clean.ExchangeSeconds!.Value / 2, stallTimeout: 30).Jobs[0];
        Assert.Equal(7, failed.FellBack);
        Assert.True(failed.Seconds > 30 + clean.Seconds / 2, $"{failed.Seconds:0.00} s");
        // About half of the data was in every survivor when the ring stopped: the tier sends the other half to each.
        Assert.InRange(failed.TierBytes / stored, 1 + 7 * 0.35, 1 + 7 * 0.65);
    }

    [Fact]
    public void A_node_that_dies_mid_ring_over_a_ring_that_closes_costs_the_peer_timeout_and_at_most_its_share_from_the_tier()
    {
        const long stored = 256L << 20;
        var spec = new ClusterSpec { Nodes = 8, CacheHosts = 2, LinkBitsPerSecond = 1e9 };
        var clean = Simulator.Run(spec, Wire, Delivery.Fanout, stored).Jobs[0];
        var closed = Simulator.Run(spec, Wire, Delivery.Fanout, stored, failAfter: clean.ExchangeSeconds!.Value / 2, stallTimeout: 30, peerTimeout: 2).Jobs[0];
        Assert.Equal(0, closed.FellBack);
        // The survivors pause for the peer timeout and then finish the ring without the dead node: no direct fetch.
        Assert.InRange(closed.Seconds, clean.Seconds + 2, clean.Seconds + 2 + clean.ExchangeSeconds!.Value / 4);
        Assert.True(double.IsNaN(closed.NodeSeconds[spec.Nodes / 2]));
        Assert.InRange(closed.TierBytes / stored, 1, 1 + 1.0 / 8);
    }

    [Fact]
    public void A_grid_of_rings_cuts_the_last_blocks_hops_from_N_minus_1_to_about_twice_the_square_root_and_the_tier_still_sends_once()
    {
        const long stored = 448L << 20;
        var spec = new ClusterSpec { Nodes = 4096, CacheHosts = 8, LinkBitsPerSecond = 10e9 };
        var ring = Simulator.Run(spec, Wire, Delivery.Fanout, stored, ringGroups: "off").Jobs[0];
        var grid = Simulator.Run(spec, Wire, Delivery.Fanout, stored).Jobs[0];
        // 128 KB blocks at 10 Gbit/s: one ring's 4,095 hops against the grid's 63 + 64. Each node sends and receives
        // what it would in one ring (its column's part, and the other parts over its group), so that is all it saves.
        var hop = (128 << 10) / (10e9 / 8 * Wire.Efficiency);
        var saved = (4095 - 127) * hop;
        Assert.InRange(ring.Seconds - grid.Seconds, 0.8 * saved, 1.2 * saved);
        Assert.Equal(stored, ring.TierBytes, 0);
        Assert.Equal(stored, grid.TierBytes, 0);
        // Below 64 nodes node prep keeps one ring, and so does the simulation.
        var small = spec with { Nodes = 32 };
        Assert.Equal(Simulator.Run(small, Wire, Delivery.Fanout, stored, ringGroups: "off").Seconds, Simulator.Run(small, Wire, Delivery.Fanout, stored).Seconds, 9);
    }

    [Fact]
    public void A_node_that_dies_in_a_grid_is_closed_out_of_its_group_and_its_column_and_the_tier_sends_at_most_its_parts_again()
    {
        const long stored = 256L << 20;
        var spec = new ClusterSpec { Nodes = 64, CacheHosts = 2, LinkBitsPerSecond = 1e9 };
        var clean = Simulator.Run(spec, Wire, Delivery.Fanout, stored).Jobs[0];
        var closed = Simulator.Run(spec, Wire, Delivery.Fanout, stored, failAfter: clean.ExchangeSeconds!.Value / 2, stallTimeout: 30, peerTimeout: 2).Jobs[0];
        Assert.Equal(0, closed.FellBack);
        Assert.InRange(closed.Seconds, clean.Seconds + 2, clean.Seconds + 2 + clean.ExchangeSeconds!.Value / 4);
        Assert.True(double.IsNaN(closed.NodeSeconds[spec.Nodes / 2]));
        // Its column's part in its group (S/8) and its share of that part in its column (S/64), at most.
        Assert.InRange(closed.TierBytes / stored, 1, 1 + 1.0 / 8 + 1.0 / 64);
        // Without a peer timeout the survivors wait out the stall and fetch what they lack directly, as with one ring.
        var stalled = Simulator.Run(spec, Wire, Delivery.Fanout, stored, failAfter: clean.ExchangeSeconds!.Value / 2, stallTimeout: 30).Jobs[0];
        Assert.Equal(63, stalled.FellBack);
        Assert.True(stalled.Seconds > 30 + clean.Seconds / 2, $"{stalled.Seconds:0.00} s");
    }

    [Fact]
    public void On_a_uniform_ring_the_last_block_arrives_N_minus_2_hops_after_the_edges_end()
    {
        var finish = Simulator.RingFinish(Enumerable.Repeat(10.0, 6).ToArray(), new double[6], 0.5);
        Assert.Equal(10 + 4 * 0.5, finish.Max(), 9);
        // Behind one edge that ended late, the ranks after it finish one hop apart.
        var ends = Enumerable.Repeat(10.0, 6).ToArray();
        ends[2] = 20;
        var late = Simulator.RingFinish(ends, new double[6], 0.5);
        Assert.Equal(20, late[3], 9);
        Assert.Equal(20.5, late[4], 9);
        Assert.Equal(20 + 4 * 0.5, late[1], 9);
    }

    [Fact]
    public void Ten_thousand_nodes_simulate_in_seconds()
    {
        var records = ResultReader.Read(Records).Records;
        var cal = Calibration.FromRecords(records, Records);
        var a = new Experiments.Assumptions();
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var fan = Simulator.Run(Experiments.Cluster(10_000, 8, 10, a), cal, Delivery.Fanout, 448L << 20);
        var direct = Simulator.Run(Experiments.Cluster(10_000, 8, 10, a), cal, Delivery.Direct, 448L << 20);
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(10), $"{clock.Elapsed.TotalSeconds:0.0} s");
        Assert.True(fan.Seconds < direct.Seconds / 10, $"fan-out {fan.Seconds:0.0} s, direct {direct.Seconds:0.0} s");
    }
}
