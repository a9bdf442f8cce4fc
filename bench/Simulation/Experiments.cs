using System.Globalization;

namespace Hpc.Bench.Simulation;

/// <summary>A configuration the lab measured, with its runs' times.</summary>
public sealed record LabCell(int Nodes, int Hosts, int RateMbit, long SizeBytes, long StoredBytes, Delivery Delivery, IReadOnlyList<double> Runs)
{
    public double Median => Calibration.Median(Runs);
    public string Describe() => string.Create(CultureInfo.InvariantCulture,
        $"{RateMbit} Mbit/s, {SizeBytes / (1 << 20)} MB, N = {Nodes}, {(Delivery == Delivery.Direct ? "direct" : "fan-out")}");
}

/// <summary>A lab cell beside what the simulation gives for it.</summary>
public sealed record ValidationRow(LabCell Cell, double Simulated)
{
    public double Error => Simulated / Cell.Median - 1;
}

/// <summary>One predicted configuration.</summary>
public sealed record PredictionRow(string Scenario, int Nodes, int Hosts, double RateGbit, Delivery Delivery, long StoredBytes, double Seconds,
    double TierBytes, int? HostsNeeded, double? NetworkOnlySeconds, int Events, double WallMilliseconds)
{
    /// <summary>What the cache tier sent, in dataset copies.</summary>
    public double TierCopies => TierBytes / StoredBytes;
}

/// <summary>The lab cells replayed, and the predictions at 190, 1,000 and 10,000 nodes.</summary>
public static class Experiments
{
    /// <summary>The product's own modes from a results file: direct (<c>none</c>) and <c>mpi</c>, grouped by configuration.</summary>
    public static List<LabCell> Cells(IEnumerable<BenchRecord> records) =>
        records.Where(r => r.Kind == "cluster" && r.Dataset is not null && Calibration.Mode(r) is not null && r.MeasuredSeconds > 0)
            .GroupBy(r => (r.Config.Nodes, r.Config.Hosts, r.Config.RateMbit, r.Config.SizeBytes, r.Dataset!.StoredBytes, Mode: Calibration.Mode(r)))
            .Select(g => new LabCell(g.Key.Nodes, g.Key.Hosts, g.Key.RateMbit, g.Key.SizeBytes, g.Key.StoredBytes,
                g.Key.Mode == "mpi" ? Delivery.Fanout : Delivery.Direct, g.Select(r => r.MeasuredSeconds).ToList()))
            .OrderBy(c => c.RateMbit).ThenBy(c => c.SizeBytes).ThenBy(c => c.Delivery).ThenBy(c => c.Nodes)
            .ToList();

    /// <summary>The lab as the simulation sees it: one bridge, H cache hosts and N nodes at the shaped rate, every
    /// process on the lab machine's cores.</summary>
    public static ClusterSpec Lab(LabCell cell, Calibration cal) => new()
    {
        Nodes = cell.Nodes, CacheHosts = cell.Hosts, LinkBitsPerSecond = cell.RateMbit * 1e6, Cpu = CpuModel.Shared, Cores = cal.LabCores,
    };

    public static ValidationRow Replay(LabCell cell, Calibration cal) =>
        new(cell, Simulator.Run(Lab(cell, cal), cal, cell.Delivery, cell.StoredBytes).Seconds);

    /// <summary>What the predictions assume about a cluster beyond the lab's figures (docs/benchmarks.md says why).</summary>
    public sealed record Assumptions
    {
        public int RackSize { get; init; } = 32;
        public double Oversubscription { get; init; } = 3;
        public double HopLatency { get; init; } = 25e-6;
        public double LaunchPerDoubling { get; init; } = 0.1;
        /// <summary>Cores a node's direct fetch can keep busy (not measured: the lab has 2 for all its nodes).</summary>
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
        HopLatency = a.HopLatency, LaunchPerDoubling = a.LaunchPerDoubling, Cpu = network ? CpuModel.None : CpuModel.PerNode, Cores = a.DirectCores,
        SlowNodes = slow ?? new HashSet<int>(), SlowFactor = a.SlowFactor,
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

    public static IEnumerable<PredictionRow> Scale(Calibration cal, long stored, int nodes, double rateGbit, Assumptions a)
    {
        var h = a.CacheHosts;
        foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
        {
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a), cal, d, stored);
            var net = Simulator.Run(Cluster(nodes, h, rateGbit, a, network: true), cal, d, stored);
            var needed = HostsNeeded(x => Simulator.Run(Cluster(nodes, x, rateGbit, a), cal, d, stored).Seconds, nodes);
            yield return new("baseline", nodes, h, rateGbit, d, stored, r.Seconds, r.Jobs[0].TierBytes, needed, net.Seconds, r.Events, r.WallMilliseconds);
        }

        // Slow nodes spread evenly (every 100th node at 1%): a NIC that came up at a tenth of the rate.
        var every = Math.Max(1, (int)Math.Round(1 / a.SlowFraction));
        var slow = Enumerable.Range(0, nodes).Where(i => i % every == every / 2).ToHashSet();
        foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
        {
            var r = Simulator.Run(Cluster(nodes, h, rateGbit, a, slow: slow), cal, d, stored);
            var needed = HostsNeeded(x => Simulator.Run(Cluster(nodes, x, rateGbit, a, slow: slow), cal, d, stored).Seconds, nodes);
            yield return new($"{a.SlowFraction:P0} slow nodes (link × {a.SlowFactor})", nodes, h, rateGbit, d, stored, r.Seconds, r.Jobs[0].TierBytes, needed, null, r.Events, r.WallMilliseconds);
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

        // Jobs on consecutive nodes, each prestaging a dataset of its own, all at once on the same tier.
        foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
        {
            SimulationResult Together(int hosts)
            {
                var per = nodes / a.Jobs;
                var jobs = Enumerable.Range(0, a.Jobs).Select(j => new JobSpec(d, j * per, per, stored)).ToList();
                return Simulator.Run(Cluster(nodes, hosts, rateGbit, a), cal, jobs);
            }
            var r = Together(h);
            var needed = HostsNeeded(x => Together(x).Seconds, nodes);
            yield return new($"{a.Jobs} jobs × {nodes / a.Jobs} nodes, different datasets", nodes, h, rateGbit, d, stored, r.Seconds, r.Jobs.Sum(j => j.TierBytes),
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
