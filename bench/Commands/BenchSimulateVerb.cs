using Hpc.CommonData.Fanout;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.Bench.Simulation;

namespace Hpc.Bench.Commands;

public sealed class BenchSimulateOptions : IVerbOptions
{
    public static string Verb => "simulate";

    public static string Summary => "Flow-level simulation of direct fetch and the MPI fan-out: replays the lab cells recorded in --records, the slow-node runs in --slow-records and the grid's in --grid-records, the agents' in --agents-records and Slurm's burst buffer's in --burst-buffer-records (simulated beside measured), " +
    "then predicts the reference's 190 nodes on GigE and 1,000 / 10,000 nodes at 10 and 100 Gbit/s (slow nodes, a failure, concurrent jobs, cache hosts needed).";

    [Switch("--records", "Recorded lab runs (bench cluster --scheduler slurm): the cells replayed and the calibration's source.")]
    public string Records { get; set; } = "docs/results/slurm-native.jsonl";

    [Switch("--slow-records", "Recorded lab runs with a slow node (bench cluster --slow-nodes), comma-separated files, each replayed with a calibration read from its own runs without one; a file that is absent is skipped.")]
    public string SlowRecords { get; set; } = "docs/results/slow-node.jsonl,docs/results/slow-node-grid.jsonl,docs/results/slow-node-grid-fast-tier.jsonl";

    [Switch("--grid-records", "Recorded lab runs of the fan-out as a grid of rings (bench cluster --fanout mpi,mpi-grid<G>), comma-separated files, each replayed with a calibration read from its own runs over one ring; a file that is absent is skipped.")]
    public string GridRecords { get; set; } = "docs/results/grid.jsonl,docs/results/grid-native.jsonl,docs/results/grid-fast-tier.jsonl";

    [Switch("--agents-records", "Recorded lab runs of the fan-out requested of the running agents beside MPI's (bench cluster --fanout mpi,agents), comma-separated files, each replayed with a calibration read from its own MPI and direct runs; a file that is absent is skipped.")]
    public string AgentsRecords { get; set; } = "docs/results/agents.jsonl,docs/results/agents-1gbit.jsonl,docs/results/agents-fast-tier.jsonl,docs/results/agents-fast-tier-100mbit.jsonl";

    [Switch("--burst-buffer-records", "Recorded lab runs of Slurm's burst buffer (bench cluster --scheduler slurm --fanout burst-buffer), comma-separated files: " +
        "their healthy runs give the pre-run hook's cost that the predictions add to the agents' exchange, and each file is replayed (the agents' figures " +
        "from its own runs, the ranks' and direct fetch's from its own or --records'); a file that is absent is skipped.")]
    public string BurstBufferRecords { get; set; } = "docs/results/burst-buffer.jsonl";

    [Switch("--kill-records", "Recorded lab runs with a rank killed mid-exchange (bench cluster --fanout mpi --kill-rank R), replayed with a calibration read from the same file's runs without one; skipped when the file is absent.")]
    public string KillRecords { get; set; } = "docs/results/kill.jsonl";

    [Switch("--out", "Directory to write simulate.jsonl, simulate.md and simulate-time-vs-nodes.svg to (replaced: the simulation is deterministic).")]
    public string? Out { get; set; }

    [Switch("--validate-only", "Replay the recorded cells only.")]
    public bool ValidateOnly { get; set; }

    [Switch("--size", "Predictions: raw dataset size (stored at the recorded runs' LZ4 ratio).")]
    public string Size { get; set; } = "1GB";

    [Switch("--nodes", "Predictions: node counts.")]
    public string Nodes { get; set; } = "1000,10000";

    [Switch("--rates", "Predictions: link rates in Gbit/s.")]
    public string Rates { get; set; } = "10,100";

    [Switch("--cache-host-count", "Predictions: cache hosts (the 'hosts needed' column searches its own).")]
    public int CacheHosts { get; set; } = 8;

    [Switch("--rack-size", "Predictions: nodes per top-of-rack switch.")]
    public int RackSize { get; set; } = 32;

    [Switch("--oversubscription", "Predictions: a rack's downlink over uplink capacity.")]
    public double Oversubscription { get; set; } = 3;

    [Switch("--jobs", "Predictions: concurrent jobs in the 'jobs at once' scenario.")]
    public int Jobs { get; set; } = 10;

    [Switch("--hop-latency", "Predictions: microseconds a block waits at each hop beyond its own transmission (the network's latency plus what queues ahead of it in a switch port).")]
    public double HopLatencyMicroseconds { get; set; } = 25;
}

public static class BenchSimulateVerb
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;

    public static Task<int> RunAsync(BenchSimulateOptions o, CancellationToken ct)
    {
        ResultReader.Data data;
        try { data = ResultReader.Read(o.Records); }
        catch (FileNotFoundException e) { Console.Error.WriteLine($"hpcdata bench simulate: {e.Message}"); return Task.FromResult(2); }
        if (!ByteSize.TryParse(o.Size, out var size)) { Console.Error.WriteLine($"hpcdata bench simulate: --size '{o.Size}' is not a size"); return Task.FromResult(2); }
        int[] nodeCounts;
        double[] rates;
        try
        {
            nodeCounts = o.Nodes.Split(',').Select(s => int.Parse(s, Inv)).ToArray();
            rates = o.Rates.Split(',').Select(s => double.Parse(s, Inv)).ToArray();
        }
        catch (FormatException) { Console.Error.WriteLine("hpcdata bench simulate: --nodes and --rates are comma-separated numbers"); return Task.FromResult(2); }
        // A failure scenario leaves one node out and the others must still be a cluster.
        if (nodeCounts.Where(n => n < 2).Select(n => (int?)n).FirstOrDefault() is { } few) { Console.Error.WriteLine($"hpcdata bench simulate: --nodes {few} is too few (2 or more)"); return Task.FromResult(2); }
        if (!rates.All(r => r > 0 && double.IsFinite(r))) { Console.Error.WriteLine($"hpcdata bench simulate: --rates '{o.Rates}': link rates are Gbit/s above 0"); return Task.FromResult(2); }
        if (o.Jobs < 1 || o.CacheHosts < 1) { Console.Error.WriteLine("hpcdata bench simulate: --jobs and --cache-host-count are 1 or more"); return Task.FromResult(2); }
        if (!(o.HopLatencyMicroseconds >= 0)) { Console.Error.WriteLine($"hpcdata bench simulate: --hop-latency {o.HopLatencyMicroseconds.ToString(Inv)} is not a number of microseconds (0 or more)"); return Task.FromResult(2); }

        Calibration cal;
        try { cal = Calibration.FromRecords(data.Records, o.Records); }
        catch (InvalidOperationException e) { Console.Error.WriteLine($"hpcdata bench simulate: {e.Message}"); return Task.FromResult(2); }
        // Slurm's burst buffer: the hook's cost from every healthy run of every file given, for the predictions.
        var burstBuffer = o.BurstBufferRecords.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Where(File.Exists)
            .Select(f => (File: f, ResultReader.Read(f).Records)).ToList();
        if (BurstBufferHook.FromRecords(burstBuffer.SelectMany(b => b.Records), string.Join(", ", burstBuffer.Select(b => b.File))) is { } hook)
            cal = cal with { BurstBuffer = hook };
        var cells = Experiments.Cells(data.Records);
        var md = new StringBuilder();
        var lines = new List<string>();
        md.AppendLine("# Simulation: the lab's cells replayed, and predictions").AppendLine();
        md.AppendLine(CalibrationText(cal)).AppendLine();

        var validation = cells.Select(c => Experiments.Replay(c, cal)).ToList();
        md.AppendLine(ValidationTable(validation));
        foreach (var v in validation)
            lines.Add(Json(new
            {
                kind = "simulation", scenario = "lab", nodes = v.Cell.Nodes, hosts = v.Cell.Hosts, rateMbit = v.Cell.RateMbit, sizeBytes = v.Cell.SizeBytes,
                storedBytes = v.Cell.StoredBytes, delivery = Name(v.Cell.Delivery), simulatedSeconds = v.Simulated, measuredSeconds = v.Cell.Runs, measuredMedian = v.Cell.Median, error = v.Error,
            }));

        // The slow-node runs and the grid's come from other sessions of the lab (bench cluster under mpiexec), so each
        // file is calibrated from its own runs of the fan-out over one ring without a slow node, by the same rule as above.
        var files = o.SlowRecords.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(f => (f, "lab, slow node"))
            .Concat(o.GridRecords.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(f => (f, "lab, grid of rings")))
            .Append((o.KillRecords, "lab, rank killed"))
            .Concat(o.AgentsRecords.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Select(f => (f, "lab, requested of the agents")));
        foreach (var (file, records) in burstBuffer)
        {
            Calibration ownCal;
            try { ownCal = Calibration.ForBurstBuffer(records, cal, file); }
            catch (InvalidOperationException e) { Console.Error.WriteLine($"hpcdata bench simulate: {e.Message}"); return Task.FromResult(2); }
            var ownRows = Experiments.Cells(records).Select(c => Experiments.Replay(c, ownCal)).ToList();
            md.AppendLine(CalibrationText(ownCal)).AppendLine();
            md.AppendLine(SlowNodeTable(ownRows));
            foreach (var v in ownRows)
                lines.Add(Json(new
                {
                    kind = "simulation", scenario = v.Cell.BurstBuffer ? "lab, staged by Slurm's burst buffer" : "lab, beside Slurm's burst buffer", nodes = v.Cell.Nodes,
                    hosts = v.Cell.Hosts, rateMbit = v.Cell.RateMbit, sizeBytes = v.Cell.SizeBytes, storedBytes = v.Cell.StoredBytes, delivery = Name(v.Cell.Delivery),
                    mode = v.Cell.Mode, hookSeconds = v.Cell.BurstBuffer ? ownCal.BurstBuffer!.Seconds : (double?)null,
                    simulatedSeconds = v.Simulated, measuredSeconds = v.Cell.Runs, measuredMedian = v.Cell.Median, error = v.Error,
                }));
            validation.AddRange(ownRows);
        }
        foreach (var (file, scenario) in files)
        {
            if (!File.Exists(file)) continue;
            var ownData = ResultReader.Read(file);
            Calibration ownCal;
            try { ownCal = Calibration.FromRecords(ownData.Records, file); }
            catch (InvalidOperationException e) { Console.Error.WriteLine($"hpcdata bench simulate: {e.Message}"); return Task.FromResult(2); }
            var ownRows = Experiments.Cells(ownData.Records).Select(c => Experiments.Replay(c, ownCal)).ToList();
            md.AppendLine(CalibrationText(ownCal)).AppendLine();
            md.AppendLine(SlowNodeTable(ownRows));
            foreach (var v in ownRows)
                lines.Add(Json(new
                {
                    kind = "simulation", scenario, nodes = v.Cell.Nodes, hosts = v.Cell.Hosts, rateMbit = v.Cell.RateMbit, sizeBytes = v.Cell.SizeBytes,
                    storedBytes = v.Cell.StoredBytes, delivery = Name(v.Cell.Delivery), probe = v.Cell.Probe, ringGroups = v.Cell.GridGroupSize,
                    slowNodes = v.Cell.SlowNodes.Order().ToArray(), slowRateMbit = v.Cell.SlowRateMbit,
                    nodesTimed = v.Cell.Group.ToString().ToLowerInvariant(), simulatedLeaves = v.Leaves, simulatedProbeSeconds = v.ProbeSeconds,
                    simulatedSeconds = v.Simulated, measuredSeconds = v.Cell.Runs, measuredMedian = v.Cell.Median, error = v.Error,
                }));
            validation.AddRange(ownRows);
        }

        if (!o.ValidateOnly)
        {
            ct.ThrowIfCancellationRequested();
            var ratio = cells.Count > 0 ? cells.Average(c => (double)c.StoredBytes / c.SizeBytes) : 0.4;
            var stored = (long)(size.Bytes * ratio);
            var a = new Experiments.Assumptions { CacheHosts = o.CacheHosts, RackSize = o.RackSize, Oversubscription = o.Oversubscription, Jobs = o.Jobs, HopLatency = o.HopLatencyMicroseconds * 1e-6 };
            var rows = Experiments.Seed(cal, ratio).ToList();
            foreach (var n in nodeCounts)
                foreach (var rate in rates)
                {
                    ct.ThrowIfCancellationRequested();
                    rows.AddRange(Experiments.Scale(cal, stored, n, rate, a));
                }
            md.AppendLine(PredictionTable(rows, a, size.Bytes, ratio));
            foreach (var r in rows)
                lines.Add(Json(new
                {
                    kind = "simulation", scenario = r.Scenario, nodes = r.Nodes, hosts = r.Hosts, rateGbit = r.RateGbit, storedBytes = r.StoredBytes, delivery = Name(r.Delivery),
                    simulatedSeconds = r.Seconds, healthySeconds = r.HealthySeconds, networkOnlySeconds = r.NetworkOnlySeconds, tierCopies = r.TierCopies, hostsNeeded = r.HostsNeeded, events = r.Events, wallMs = r.WallMilliseconds,
                }));
            if (o.Out is not null)
            {
                int[] counts = [128, 256, 512, 1000, 2000, 4000, 10000];
                var title = string.Create(Inv, $"{ByteSize.Format(size.Bytes)} (lz4) to every node, {o.CacheHosts} cache hosts, racks of {o.RackSize} at {o.Oversubscription:0}:1");
                Directory.CreateDirectory(o.Out);
                var both = new LineChart { Title = $"Simulated: {title}", XLabel = "nodes", YLabel = "seconds until every node holds the data" };
                both.Lines.AddRange(Experiments.Sweep(cal, stored, counts, rates, a, [Delivery.Direct, Delivery.Fanout]));
                both.Save(Path.Combine(o.Out, "simulate-time-vs-nodes.svg"));
                // The fan-out's seconds vanish beside direct fetch's minutes: its own chart, with what the links alone would allow.
                var fan = new LineChart { Title = $"Simulated fan-out: {title}", XLabel = "nodes", YLabel = "seconds until every node holds the data" };
                fan.Lines.AddRange(Experiments.Sweep(cal, stored, counts, rates, a, [Delivery.Fanout]));
                fan.Lines.AddRange(Experiments.Sweep(cal, stored, counts, rates, a, [Delivery.Fanout], network: true));
                fan.Save(Path.Combine(o.Out, "simulate-fanout-time-vs-nodes.svg"));
                md.AppendLine("![simulated fan-out time vs nodes](simulate-fanout-time-vs-nodes.svg)").AppendLine();
                md.AppendLine("![simulated time vs nodes](simulate-time-vs-nodes.svg)").AppendLine();
            }
        }

        Console.WriteLine(md.ToString());
        if (o.Out is not null)
        {
            Directory.CreateDirectory(o.Out);
            File.WriteAllText(Path.Combine(o.Out, "simulate.md"), md.ToString());
            File.WriteAllLines(Path.Combine(o.Out, "simulate.jsonl"), lines);
        }
        var outside = validation.Count(v => Math.Abs(v.Error) > 0.10);
        Console.Error.WriteLine($"{validation.Count} lab cells replayed, {outside} outside ±10%");
        return Task.FromResult(0);
    }

    private static string Name(Delivery d) => d == Delivery.Direct ? "direct" : "fanout";

    [System.Diagnostics.CodeAnalysis.UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "The lab runs JIT-compiled.")]
    [System.Diagnostics.CodeAnalysis.UnconditionalSuppressMessage("AOT", "IL3050", Justification = "The lab runs JIT-compiled.")]
    private static string Json(object o) => JsonSerializer.Serialize(o, BenchJson.Options);

    public static string CalibrationText(Calibration c) => string.Create(Inv,
        $"Calibration from {c.Source}: link efficiency {c.Efficiency:0.000} (TCP payload of a 1500-byte-MTU frame); per node, fan-out start-up {c.FanoutStartSeconds:0.00} s " +
        $"+ {c.FanoutStartCpu:0.000} CPU-s, rank + agent {c.FanoutCpuPerByte * (1 << 30):0.00} CPU-s per GiB stored (agent alone {c.FanoutIngestCpuPerByte * (1 << 30):0.00}); " +
        $"direct start-up {c.DirectStartSeconds:0.00} s + {c.DirectStartCpu:0.000} CPU-s, {c.DirectCpuPerByte * (1 << 30):0.00} CPU-s per GiB stored (agent alone {c.DirectIngestCpuPerByte * (1 << 30):0.00}); " +
        $"the lab's {c.LabCores:0} cores shared by every emulated node.") + BurstBufferText(c);

    private static string BurstBufferText(Calibration c) => c.BurstBuffer is not { } b ? "" : string.Create(Inv,
        $" Slurm's burst buffer ({b.Source}, {b.Runs} healthy runs): allocation to the script's first line {b.Seconds:0.000} s beyond the slowest node's exchange " +
        $"(the hook before the exchange {b.BeforeExchangeSeconds:0.000} s, the script's start after the hook {b.AfterHookSeconds:0.000} s; medians)") +
        (c.AgentsStartSeconds is { } s ? string.Create(Inv, $"; the agents' start {s:0.000} s, {c.AgentsCpuPerByte * (1 << 30):0.00} CPU-s per GiB stored.") : ".");

    public static string ValidationTable(IReadOnlyList<ValidationRow> rows)
    {
        var sb = new StringBuilder();
        sb.AppendLine("| rate | size | mode | N | H | measured s (runs) | median | simulated s | error |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|");
        foreach (var v in rows)
        {
            var c = v.Cell;
            var flag = Math.Abs(v.Error) > 0.10 ? " **outside ±10%**" : "";
            sb.AppendLine(string.Create(Inv,
                $"| {c.RateMbit} Mbit/s | {ByteSize.Format(c.SizeBytes)} | {(c.Delivery == Delivery.Direct ? "direct" : "fan-out")} | {c.Nodes} | {c.Hosts} | {string.Join(", ", c.Runs.Select(r => r.ToString("0.00", Inv)))} | {c.Median:0.00} | {v.Simulated:0.00} | {SignedPercent(v.Error)}{flag} |"));
        }
        var abs = rows.Select(r => Math.Abs(r.Error)).ToList();
        if (abs.Count > 0)
            sb.AppendLine().AppendLine(string.Create(Inv, $"{rows.Count} cells; mean |error| {abs.Average():0.0%}, largest {abs.Max():0.0%}; {abs.Count(e => e > 0.10)} outside ±10%."));
        return sb.ToString();
    }

    /// <summary>The slow-node runs: each run's healthy nodes and its slow node as cells of their own, beside the runs without one.</summary>
    public static string SlowNodeTable(IReadOnlyList<ValidationRow> rows)
    {
        var sb = new StringBuilder();
        sb.AppendLine("| rate | slow node | mode | N | H | nodes timed | measured s (runs) | median | simulated s | error | simulated route, probe |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|");
        foreach (var v in rows)
        {
            var c = v.Cell;
            var flag = Math.Abs(v.Error) > 0.10 ? " **outside ±10%**" : "";
            var slow = c.SlowNodes.Count == 0 ? "none" : string.Create(Inv, $"{string.Join(",", c.SlowNodes.Order().Select(n => $"node{n + 1}"))} at {c.SlowRateMbit:0.##} Mbit/s");
            var rings = RingGrid.For(c.Nodes, c.GridGroupSize?.ToString(Inv) ?? "auto")?.ToString() ?? "ring";
            var route = !c.Probe ? "" : v.Leaves.Count == 0 ? string.Create(Inv, $"{rings}, probe {v.ProbeSeconds:0.00} s")
                : string.Create(Inv, $"leaves:{string.Join(",", v.Leaves)}, probe {v.ProbeSeconds:0.00} s");
            sb.AppendLine(string.Create(Inv,
                $"| {c.RateMbit} Mbit/s | {slow} | {c.Mode} | {c.Nodes} | {c.Hosts} | {c.Group.ToString().ToLowerInvariant()} | {string.Join(", ", c.Runs.Select(r => r.ToString("0.00", Inv)))} | {c.Median:0.00} | {v.Simulated:0.00} | {SignedPercent(v.Error)}{flag} | {route} |"));
        }
        var abs = rows.Select(r => Math.Abs(r.Error)).ToList();
        if (abs.Count > 0)
            sb.AppendLine().AppendLine(string.Create(Inv, $"{rows.Count} cells; mean |error| {abs.Average():0.0%}, largest {abs.Max():0.0%}; {abs.Count(e => e > 0.10)} outside ±10%."));
        return sb.ToString();
    }

    public static string PredictionTable(IReadOnlyList<PredictionRow> rows, Experiments.Assumptions a, long rawBytes, double ratio)
    {
        var sb = new StringBuilder();
        sb.AppendLine(string.Create(Inv, $"Predictions: {ByteSize.Format(rawBytes)} raw, {ratio:P1} stored (lz4, the lab's data) unless marked raw; racks of {a.RackSize} nodes at " +
            $"{a.Oversubscription:0}:1, cache hosts non-blocking, {a.HopLatency * 1e6:0} µs per hop, launch +{a.LaunchPerDoubling:0.00} s per doubling of ranks beyond 4, " +
            $"a fan-out's ingest and a direct fetch's each on {a.DirectCores:0} cores per node (the agent's ingest threads and its fetch's connections). 'network only': the same without the ingest's CPU. 'hosts needed': fewest hosts (powers of two) within 10% of the time with N hosts."));
        sb.AppendLine();
        sb.AppendLine("| scenario | N | rate | H | mode | seconds | healthy nodes s | network only | tier sent (× S) | hosts needed | sim events / ms |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|");
        foreach (var r in rows)
            sb.AppendLine(string.Create(Inv,
                $"| {r.Scenario} | {r.Nodes} | {(r.RateGbit >= 1 ? $"{r.RateGbit:0} Gbit/s" : $"{r.RateGbit * 1000:0} Mbit/s")} | {r.Hosts} | {(r.Delivery == Delivery.Direct ? "direct" : "fan-out")} | {r.Seconds:0.00} | {(r.HealthySeconds is { } healthy ? healthy.ToString("0.00", Inv) : "")} | {(r.NetworkOnlySeconds is { } n ? n.ToString("0.00", Inv) : "")} | {r.TierCopies:0.0} | {r.HostsNeeded} | {r.Events} / {r.WallMilliseconds:0} |"));
        return sb.ToString();
    }

    /// <summary>An error as "+1.2%" or "-0.4%"; one that rounds to nothing is "0.0%" (the format alone writes "-+0.0%").</summary>
    private static string SignedPercent(double error)
    {
        var rounded = Math.Round(error, 3);
        return rounded == 0 ? "0.0%" : rounded.ToString("+0.0%;-0.0%", CultureInfo.InvariantCulture);
    }
}
