using System.Globalization;

namespace Hpc.Bench.Simulation;

/// <summary>Which of a run's nodes a cell times: all of them (the run's time), or in a run with slow nodes the healthy
/// ones or the slow ones (the last of each).</summary>
public enum NodeGroup { All, Healthy, Slow }

/// <summary>A configuration the lab measured, with its runs' times.</summary>
public sealed record LabCell(int Nodes, int Hosts, int RateMbit, long SizeBytes, long StoredBytes, Delivery Delivery, IReadOnlyList<double> Runs)
{
    /// <summary>Nodes (0-based) whose link was shaped to <see cref="SlowRateMbit"/>; empty when none was.</summary>
    public IReadOnlySet<int> SlowNodes { get; init; } = new HashSet<int>();
    public double SlowRateMbit { get; init; }
    /// <summary>Fan-out: the ranks probed their links and could route slow nodes out of the ring (the records carry a probe time).</summary>
    public bool Probe { get; init; }
    public NodeGroup Group { get; init; } = NodeGroup.All;
    /// <summary>Fan-out as a grid of rings in groups of this size (<c>mpi-grid&lt;G&gt;</c>: nodeprep --ring-groups G); null: node prep's default.</summary>
    public int? GridGroupSize { get; init; }
    /// <summary>Fan-out: the rank whose process was killed mid-exchange (bench cluster --kill-rank), and when (the runs'
    /// median, from the launch); the cell is timed by the other nodes.</summary>
    public int? KillRank { get; init; }
    public double KillSeconds { get; init; }
    /// <summary>Fan-out requested of the running agents (<c>bench cluster --fanout agents</c>) rather than launched as MPI ranks.</summary>
    public bool Agents { get; init; }
    /// <summary>Requested of the agents by Slurm's burst buffer pre-run hook (<c>bench cluster --scheduler slurm --fanout
    /// burst-buffer</c>), timed from the allocation to the job script's first line; <see cref="Agents"/> is set as well.</summary>
    public bool BurstBuffer { get; init; }
    /// <summary>The small first blocks of each share in the build that ran (<see cref="BenchRecord.BlockRamp"/>; 0 before the ramp).</summary>
    public int RampBlocks { get; init; }

    public double Median => Calibration.Median(Runs);
    public string Describe() => string.Create(CultureInfo.InvariantCulture,
        $"{RateMbit} Mbit/s, {SizeBytes / (1 << 20)} MB, N = {Nodes}, {Mode}{(SlowNodes.Count > 0 ? $", {SlowNodes.Count} node(s) at {SlowRateMbit:0.##} Mbit/s, {Group.ToString().ToLowerInvariant()} nodes" : "")}");

    public string Mode => Delivery == Delivery.Direct ? "direct"
        : KillRank is { } k ? string.Create(CultureInfo.InvariantCulture, $"fan-out, {(Agents ? "requested of the agents, agent" : "rank")} {k} killed at {KillSeconds:0.0} s")
        : BurstBuffer ? "fan-out, staged by Slurm's burst buffer"
        : Agents ? "fan-out, requested of the agents"
        : GridGroupSize is { } g ? string.Create(CultureInfo.InvariantCulture, $"fan-out, groups of {g}")
        : Probe ? "fan-out, probe" : SlowNodes.Count > 0 ? "fan-out, probe off" : "fan-out";
}

/// <summary>A lab cell beside what the simulation gives for it.</summary>
public sealed record ValidationRow(LabCell Cell, double Simulated)
{
    /// <summary>Fan-out with the probe: the ranks the simulated probe made leaves, and what the probe took.</summary>
    public IReadOnlyList<int> Leaves { get; init; } = [];
    public double ProbeSeconds { get; init; }
    public double Error => Simulated / Cell.Median - 1;
}

/// <summary>One predicted configuration.</summary>
public sealed record PredictionRow(string Scenario, int Nodes, int Hosts, double RateGbit, Delivery Delivery, long StoredBytes, double Seconds,
    double TierBytes, int? HostsNeeded, double? NetworkOnlySeconds, int Events, double WallMilliseconds)
{
    /// <summary>What the cache tier sent, in dataset copies.</summary>
    public double TierCopies => TierBytes / StoredBytes;
    /// <summary>Rows with slow nodes: when the last healthy node held the data.</summary>
    public double? HealthySeconds { get; init; }
}

/// <summary>The lab cells replayed, and the predictions at 190, 1,000 and 10,000 nodes.</summary>
public static class Experiments
{
    /// <summary>
    /// The product's own modes from a results file: direct (<c>none</c>), <c>mpi</c> and <c>mpi-ring</c> (the fan-out
    /// with the link probe off), grouped by configuration. A run with slow nodes gives two cells, its healthy nodes and
    /// its slow ones, each timed by its last node.
    /// </summary>
    public static List<LabCell> Cells(IEnumerable<BenchRecord> records) =>
        // A run with a node fault injected (its job's fate recorded) timed the survivors or the hook's failure, not the mode.
        records.Where(r => r.Kind == "cluster" && r.Dataset is not null && CellDelivery(r) is not null && r.MeasuredSeconds > 0 && r.Config.Fault is null && r.JobFate is null)
            .GroupBy(r => (r.Config.Nodes, r.Config.Hosts, r.Config.RateMbit, r.Config.SizeBytes, r.Dataset!.StoredBytes, Delivery: CellDelivery(r)!.Value,
                Probe: Probed(r), Slow: string.Join(",", r.Config.SlowNodes ?? []), SlowRate: r.Config.SlowRateMbit ?? 0, Grid: ClusterSession.GridGroupSize(r.Config.Fanout ?? ""), Kill: r.Config.KillRank, Agents: r.Config.Fanout is "agents" or BurstBufferHook.Fanout, BurstBuffer: r.Config.Fanout == BurstBufferHook.Fanout,
                Ramp: r.BlockRamp ?? 0))
            .SelectMany(g =>
            {
                var slow = SlowIndices(g.First());
                var groups = slow.Count == 0 ? [NodeGroup.All] : new[] { NodeGroup.Healthy, NodeGroup.Slow };
                return groups.Select(group => new LabCell(g.Key.Nodes, g.Key.Hosts, g.Key.RateMbit, g.Key.SizeBytes, g.Key.StoredBytes, g.Key.Delivery,
                    g.Select(r => Time(r, slow, group)).ToList())
                {
                    SlowNodes = slow, SlowRateMbit = g.Key.SlowRate, Probe = g.Key.Probe, Group = group, GridGroupSize = g.Key.Grid,
                    KillRank = g.Key.Kill, Agents = g.Key.Agents, BurstBuffer = g.Key.BurstBuffer, RampBlocks = g.Key.Ramp, KillSeconds = g.Key.Kill is null ? 0 : Calibration.Median(g.Select(r => r.Config.KillSeconds ?? 0).ToList()),
                });
            })
            .OrderBy(c => c.SlowNodes.Count).ThenBy(c => c.Agents).ThenBy(c => c.BurstBuffer).ThenBy(c => c.GridGroupSize ?? 0).ThenBy(c => c.KillRank ?? -1).ThenBy(c => c.RateMbit).ThenBy(c => c.SizeBytes).ThenBy(c => c.Delivery).ThenBy(c => c.Probe).ThenBy(c => c.Nodes).ThenBy(c => c.Group)
            .ToList();

    private static Delivery? CellDelivery(BenchRecord r) => r.Config.Fanout is "mpi-ring" or "agents" or BurstBufferHook.Fanout || ClusterSession.GridGroupSize(r.Config.Fanout ?? "") is not null
        ? Delivery.Fanout : Calibration.Mode(r) switch
    {
        "mpi" => Delivery.Fanout,
        "none" => Delivery.Direct,
        _ => null,
    };

    /// <summary>A fan-out run whose ranks probed their links: they report the probe's time (runs made before the probe, or with it off, report none).</summary>
    private static bool Probed(BenchRecord r) => CellDelivery(r) == Delivery.Fanout && r.Nodes.Any(n => n.ProbeSeconds is > 0);

    /// <summary>The bench names nodes node1 … nodeN in rank order.</summary>
    private static HashSet<int> SlowIndices(BenchRecord r) =>
        (r.Config.SlowNodes ?? []).Select(name => int.Parse(name.AsSpan("node".Length), CultureInfo.InvariantCulture) - 1).ToHashSet();

    private static double Time(BenchRecord r, IReadOnlySet<int> slow, NodeGroup group) => group switch
    {
        NodeGroup.All => r.MeasuredSeconds,
        _ => r.Nodes.Select((n, i) => (n, i)).Where(x => slow.Contains(x.i) == (group == NodeGroup.Slow)).Max(x => x.n.WallSeconds),
    };

    /// <summary>The lab as the simulation sees it: one bridge, H cache hosts and N nodes at the shaped rate, every
    /// process on the lab machine's cores.</summary>
    public static ClusterSpec Lab(LabCell cell, Calibration cal) => new()
    {
        AgentTree = new AgentTreeModel { RequesterSeconds = cal.AgentsStartSeconds ?? new AgentTreeModel().RequesterSeconds, NodeSeconds = 0 },
        Nodes = cell.Nodes, CacheHosts = cell.Hosts, LinkBitsPerSecond = cell.RateMbit * 1e6, Cpu = CpuModel.Shared, Cores = cal.LabCores,
        SlowNodes = cell.SlowNodes, SlowFactor = cell.SlowNodes.Count > 0 ? cell.SlowRateMbit / cell.RateMbit : 1,
    };

    public static ValidationRow Replay(LabCell cell, Calibration cal)
    {
        if (cell.Agents)
        {
            // The agent carries the exchange and the ingest alone; the start is the lab's own (a fresh requester and agents).
            cal = cal with { FanoutCpuPerByte = cal.AgentsCpuPerByte ?? cal.FanoutCpuPerByte };
        }
        var groups = cell.GridGroupSize?.ToString(CultureInfo.InvariantCulture) ?? "auto";
        var job = Simulator.Run(Lab(cell, cal), cal, cell.Delivery, cell.StoredBytes, probe: cell.Probe, ringGroups: groups, agents: cell.Agents,
            rampBlocks: cell.RampBlocks).Jobs[0];
        if (cell.KillRank is { } victim)
        {
            // Killed when the lab killed it, counted from the launch as the bench counts; its kernel closes its
            // connections, so its neighbours know at once (no peer timeout).
            var failAfter = Math.Max(0, cell.KillSeconds - job.ExchangeStart);
            job = Simulator.Run(Lab(cell, cal), cal, cell.Delivery, cell.StoredBytes, failAfter: failAfter, probe: cell.Probe, peerTimeout: 0, ringGroups: groups,
                failRank: victim, agents: cell.Agents, rampBlocks: cell.RampBlocks).Jobs[0];
        }
        var simulated = cell.Group switch
        {
            NodeGroup.All => job.Seconds,
            _ => job.NodeSeconds.Where((_, i) => cell.SlowNodes.Contains(i) == (cell.Group == NodeGroup.Slow)).Max(),
        };
        // Staged by Slurm's burst buffer: the same exchange, inside the pre-run hook, and the script's start after it.
        if (cell.BurstBuffer)
            simulated += (cal.BurstBuffer ?? throw new InvalidOperationException($"{cal.Source}: no burst-buffer runs to read the pre-run hook's cost from")).Seconds;
        return new(cell, simulated) { Leaves = job.Leaves ?? [], ProbeSeconds = job.ProbeSeconds };
    }

    /// <summary>What the predictions assume about a cluster beyond the lab's figures (docs/benchmarks.md says why).</summary>
    public sealed record Assumptions
    {
        public int RackSize { get; init; } = 32;
        public double Oversubscription { get; init; } = 3;
        public double HopLatency { get; init; } = 25e-6;
        public double LaunchPerDoubling { get; init; } = 0.1;
        /// <summary>How the running agents start a fan-out requested of them: measured on the lab machine (docs/benchmarks.md).</summary>
        public AgentTreeModel AgentTree { get; init; } = new();
        /// <summary>
        /// Cores a node's agent can keep busy, for a direct fetch and for a fan-out's ingest alike (both verify, decode
        /// and write on every core: the ingest's --ingest-threads); not measured: the lab has 2 for all its nodes.
        /// </summary>
        public double DirectCores { get; init; } = 8;
        public int CacheHosts { get; init; } = 8;
        public double SlowFraction { get; init; } = 0.01;
        public double SlowFactor { get; init; } = 0.1;
        public int Jobs { get; init; } = 10;
        public double[] StallTimeouts { get; init; } = [120, 10];
    }

    public static ClusterSpec Cluster(int nodes, int hosts, double rateGbit, Assumptions a, bool network = false, IReadOnlySet<int>? slow = null) => new()
    {
        Nodes = nodes, CacheHosts = hosts, LinkBitsPerSecond = rateGbit * 1e9, RackSize = a.RackSize, Oversubscription = a.Oversubscription,
        HopLatency = a.HopLatency, LaunchPerDoubling = a.LaunchPerDoubling, AgentTree = a.AgentTree, Cpu = network ? CpuModel.None : CpuModel.PerNode, Cores = a.DirectCores,
        FanoutIngestCores = a.DirectCores, SlowNodes = slow ?? new HashSet<int>(), SlowFactor = a.SlowFactor,
    };

    /// <summary>
    /// The fewest cache hosts (powers of two up to N) with which the configuration is within 10% of its time with N
    /// hosts, where the tier no longer limits.
    /// </summary>
    public static int HostsNeeded(Func<int, double> secondsWithHosts, int nodes)
    {
        var best = secondsWithHosts(Math.Max(nodes, 1));
        for (var h = 1; h < nodes; h *= 2)
            if (secondsWithHosts(h) <= 1.1 * best) return h;
        return nodes;
    }

    public static IEnumerable<PredictionRow> Seed(Calibration cal, double storedRatio)
    {
        // The reference: 190 nodes, 10 cache hosts, GigE, one switch; 1 GB raw and what our codec stores of this data.
        foreach (var (label, stored) in new[] { ("seed 1 GB raw", 1L << 30), ("seed 1 GB lz4", (long)((1L << 30) * storedRatio)) })
            foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
            {
                ClusterSpec Spec(int h) => new() { Nodes = 190, CacheHosts = h, LinkBitsPerSecond = 1e9, HopLatency = 25e-6, LaunchPerDoubling = 0.1, Cpu = CpuModel.PerNode, Cores = 8 };
                var r = Simulator.Run(Spec(10), cal, d, stored);
                var needed = HostsNeeded(h => Simulator.Run(Spec(h), cal, d, stored).Seconds, 190);
                yield return new(label, 190, 10, 1, d, stored, r.Seconds, r.Jobs[0].TierBytes, needed, null, r.Events, r.WallMilliseconds);
            }
    }

    /// <summary>
    /// Seconds a silent ring neighbour is waited for before the ring closes around it: node prep's default
    /// --peer-timeout (which it passes to the agents' exchange as well), the exchange's own RingAllGather.PeerSilence.
    /// The lab does not reference sdk/Fanout, so the value is repeated here and a test holds it equal to the product's.
    /// </summary>
    public const double PeerTimeout = 5;

    private static string PeerTimeoutLabel => string.Create(CultureInfo.InvariantCulture, $"{PeerTimeout:0.#} s");

    /// <summary>
    /// Seconds the agents' ring waits for a silent neighbour before it closes around it, at that peer timeout
    /// (PrepRequest.SuspicionOf): the requester gives the verdict on the member later, at the peer timeout, while the
    /// survivors go on. Repeated here as <see cref="PeerTimeout"/> is, and held equal to the product's by a test.
    /// </summary>
    public const double AgentsSuspectAfter = 1;

    /// <summary>The predictions' scenarios at one node count (2 or more: one scenario leaves a node out) and link rate.</summary>
    public static IEnumerable<PredictionRow> Scale(Calibration cal, long stored, int nodes, double rateGbit, Assumptions a)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(nodes, 2);
        ArgumentOutOfRangeException.ThrowIfLessThan(a.Jobs, 1);
        var h = a.CacheHosts;
        foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
        {
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a), cal, d, stored);
            var net = Simulator.Run(Cluster(nodes, h, rateGbit, a, network: true), cal, d, stored);
            var needed = HostsNeeded(x => Simulator.Run(Cluster(nodes, x, rateGbit, a), cal, d, stored).Seconds, nodes);
            yield return new("baseline", nodes, h, rateGbit, d, stored, r.Seconds, r.Jobs[0].TierBytes, needed, net.Seconds, r.Events, r.WallMilliseconds);
        }
        {
            // What the grid of rings (node prep's default here) saves against the one ring of every rank.
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a), cal, Delivery.Fanout, stored, ringGroups: "off");
            var net = Simulator.Run(Cluster(nodes, h, rateGbit, a, network: true), cal, Delivery.Fanout, stored, ringGroups: "off");
            yield return new("one ring of every rank (--ring-groups off)", nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds, r.Jobs[0].TierBytes, null, net.Seconds,
                r.Events, r.WallMilliseconds);
        }

        // Requested of the running agents: the same exchange, started by the request's tree instead of a launch.
        var agentsExchange = 0.0;
        {
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a), cal, Delivery.Fanout, stored, agents: true);
            var net = Simulator.Run(Cluster(nodes, h, rateGbit, a, network: true), cal, Delivery.Fanout, stored, agents: true);
            agentsExchange = r.Jobs[0].ExchangeSeconds ?? 0;
            var start = a.AgentTree.Seconds(nodes, a.HopLatency, rateGbit * 1e9 / 8);
            yield return new(string.Create(CultureInfo.InvariantCulture,
                $"requested of the running agents (--fanout agents; start {start * 1e3:0} ms)"),
                nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds, r.Jobs[0].TierBytes, null, net.Seconds, r.Events, r.WallMilliseconds);
            // Staged by Slurm's burst buffer: its pre-run hook makes the same request, and the job's script starts when
            // the hook returns; the hook's process, its scontrol calls and Slurm's start of the script cost what the lab
            // measured (a fixed cost: it does not grow with the data, nor from 8 to 16 nodes in the lab).
            if (cal.BurstBuffer is { } hook)
                yield return new(string.Create(CultureInfo.InvariantCulture,
                    $"staged by Slurm's burst buffer (pre-run hook; start {(start + hook.Seconds) * 1e3:0} ms)"),
                    nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds + hook.Seconds, r.Jobs[0].TierBytes, null, net.Seconds + hook.Seconds, r.Events, r.WallMilliseconds);
        }
        {
            // The others start without a member that is down or wedged when the request comes, a reach timeout later.
            var r = Simulator.Run(Cluster(nodes - 1, h, rateGbit, a), cal, Delivery.Fanout, stored, agents: true, oneDownAtRequest: true);
            yield return new(string.Create(CultureInfo.InvariantCulture, $"requested of the agents, one agent down or wedged at the request (left out after {a.AgentTree.ReachSeconds:0.0#} s)"),
                nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds, r.Jobs[0].TierBytes, null, null, r.Events, r.WallMilliseconds);
        }
        foreach (var (what, peer) in new[] { ("requested of the agents, one agent dies mid-exchange", 0.0),
                                             (string.Create(CultureInfo.InvariantCulture, $"requested of the agents, one node goes silent mid-exchange (routed around after {AgentsSuspectAfter:0.#} s; --peer-timeout {PeerTimeoutLabel})"), AgentsSuspectAfter) })
        {
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a), cal, Delivery.Fanout, stored, failAfter: agentsExchange / 2, peerTimeout: peer, agents: true);
            yield return new(what, nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds, r.Jobs[0].TierBytes, null, null, r.Events, r.WallMilliseconds);
        }

        // Slow nodes spread evenly (every 100th node at 1%): a NIC that came up at a tenth of the rate.
        var every = Math.Max(1, (int)Math.Round(1 / a.SlowFraction));
        var slow = Enumerable.Range(0, nodes).Where(i => i % every == every / 2).ToHashSet();
        var slowLabel = $"{a.SlowFraction:P0} slow nodes (link × {a.SlowFactor})";
        {
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a, slow: slow), cal, Delivery.Direct, stored);
            var needed = HostsNeeded(x => Simulator.Run(Cluster(nodes, x, rateGbit, a, slow: slow), cal, Delivery.Direct, stored).Seconds, nodes);
            yield return new(slowLabel, nodes, h, rateGbit, Delivery.Direct, stored, r.Seconds, r.Jobs[0].TierBytes, needed, null, r.Events, r.WallMilliseconds)
            {
                HealthySeconds = r.Jobs[0].NodeSeconds.Where((_, i) => !slow.Contains(i)).Max(),
            };
        }
        // The fan-out with the probe off (every node in the ring), with it on (node prep's rule decides the leaves), and
        // with the rule's 20 ms floor taken away: what leaves would buy where the probe is too short to judge.
        foreach (var (route, probe, floor) in new (string, bool, double?)[] { ("probe off, every node in the rings", false, null), ("probe on", true, null), ("leaves without the probe's 20 ms floor", true, 0) })
        {
            SimulationResult Run(int hosts) => Simulator.Run(Cluster(nodes, hosts, rateGbit, a, slow: slow), cal, Delivery.Fanout, stored, probe: probe, shortestTelling: floor);
            var r = Run(h);
            var needed = HostsNeeded(x => Run(x).Seconds, nodes);
            var job = r.Jobs[0];
            var leaves = probe ? string.Create(CultureInfo.InvariantCulture, $" → {job.Leaves!.Count} leaves, probe {job.ProbeSeconds * 1e3:0.#} ms") : "";
            yield return new($"{slowLabel}, {route}{leaves}", nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds, job.TierBytes, needed, null, r.Events, r.WallMilliseconds)
            {
                HealthySeconds = job.NodeSeconds.Where((_, i) => !slow.Contains(i)).Max(),
            };
        }

        // One rank dies halfway through the exchange; the survivors wait the stall timeout, then fetch the rest directly.
        var exchange = Simulator.Run(Cluster(nodes, h, rateGbit, a), cal, Delivery.Fanout, stored).Jobs[0].ExchangeSeconds ?? 0;
        foreach (var stall in a.StallTimeouts)
        {
            SimulationResult Failing(int hosts) => Simulator.Run(Cluster(nodes, hosts, rateGbit, a), cal, Delivery.Fanout, stored, failAfter: exchange / 2, stallTimeout: stall);
            var r = Failing(h);
            var needed = HostsNeeded(x => Failing(x).Seconds, nodes);
            yield return new(string.Create(CultureInfo.InvariantCulture, $"one node dies mid-exchange, --stall-timeout {stall:0} s"), nodes, h, rateGbit, Delivery.Fanout, stored,
                r.Seconds, r.Jobs[0].TierBytes, needed, null, r.Events, r.WallMilliseconds);
        }
        // The same death over the TCP ring, which closes around the dead node: at once when its process died (its
        // kernel closes its connections), after the peer timeout when the node went silent (hung, powered off).
        foreach (var (what, peer) in new[] { ("a rank's process dies mid-exchange, its rings close around it at once", 0.0),
                                             ($"one node goes silent mid-exchange, its rings close around it (--peer-timeout {PeerTimeoutLabel})", PeerTimeout) })
        {
            SimulationResult Closing(int hosts) => Simulator.Run(Cluster(nodes, hosts, rateGbit, a), cal, Delivery.Fanout, stored, failAfter: exchange / 2, peerTimeout: peer);
            var r = Closing(h);
            var needed = HostsNeeded(x => Closing(x).Seconds, nodes);
            yield return new(what, nodes, h, rateGbit, Delivery.Fanout, stored, r.Seconds, r.Jobs[0].TierBytes, needed, null, r.Events, r.WallMilliseconds);
        }

        // Jobs on consecutive nodes, each prestaging a dataset of its own, all at once on the same tier. Each job has two
        // nodes at least, so that its fan-out has a ring: on fewer than twice as many nodes as jobs, fewer jobs fit.
        var jobCount = Math.Max(1, Math.Min(a.Jobs, nodes / 2));
        var perJob = nodes / jobCount;
        foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
        {
            SimulationResult Together(int hosts)
            {
                var jobs = Enumerable.Range(0, jobCount).Select(j => new JobSpec(d, j * perJob, perJob, stored)).ToList();
                return Simulator.Run(Cluster(nodes, hosts, rateGbit, a), cal, jobs);
            }
            var r = Together(h);
            var needed = HostsNeeded(x => Together(x).Seconds, nodes);
            yield return new($"{jobCount} jobs × {perJob} nodes, different datasets", nodes, h, rateGbit, d, stored, r.Seconds, r.Jobs.Sum(j => j.TierBytes),
                needed, null, r.Events, r.WallMilliseconds);
        }
    }

    /// <summary>Time against node count for a chart: each delivery at each rate, the cluster assumptions above.</summary>
    public static List<LineChart.Series> Sweep(Calibration cal, long stored, IReadOnlyList<int> nodeCounts, IReadOnlyList<double> ratesGbit, Assumptions a,
        IReadOnlyList<Delivery> deliveries, bool network = false) =>
        ratesGbit.SelectMany(rate => deliveries.Select(d => new LineChart.Series(
            string.Create(CultureInfo.InvariantCulture, $"{(d == Delivery.Direct ? "direct" : "fan-out")}, {rate:0} Gbit/s{(network ? ", network only" : "")}"),
            nodeCounts.Select(n => ((double)n, Simulator.Run(Cluster(n, a.CacheHosts, rate, a, network), cal, d, stored).Seconds)).ToList(),
            Dashed: d == Delivery.Direct || network))).ToList();
}
