using System.Globalization;
using Hpc.CommonData.Report;
using Hpc.Bench.Simulation;

namespace Hpc.Bench.Tests;

/// <summary>bench simulate and Slurm's burst buffer: the pre-run hook's cost read from the lab's healthy runs, the lab's
/// cells replayed as the agents' exchange plus that cost, and the predictions' row for a job the plugin stages.</summary>
public class SimulateBurstBufferTests
{
    private const long Stored = 448L << 20;
    private const long Raw = 64L << 20;

    private static readonly string Records = LabRecords.SlurmNative;
    private static readonly Calibration Lab = LabRecords.SlurmNativeCalibration;

    /// <summary>
    /// A burst-buffer run as the bench records it: every node's wallSeconds the hook's end from the allocation, its
    /// fetchSeconds its own exchange (the slowest <paramref name="exchange"/>), the run's time the script's first line.
    /// </summary>
    private static BenchRecord Run(int nodes, double exchange, double hookEnd, double firstLine, string? fault = null, string? fate = null, int? ready = null) => new()
    {
        Kind = "cluster", Run = $"bb-{exchange.ToString(CultureInfo.InvariantCulture)}-{fault}",
        Config = new RunConfig { Nodes = nodes, Hosts = 2, SizeBytes = Raw, RateMbit = 25, Fanout = BurstBufferHook.Fanout, Fault = fault, FaultNodes = fault is null ? null : ["node3"] },
        Dataset = new DatasetInfo("v1", Raw, 27_500_000, 1025, 4.8),
        MeasuredSeconds = firstLine, JobFate = fate,
        Note = string.Create(CultureInfo.InvariantCulture, $"pre-run hook {hookEnd:0.000} s from allocation"),
        Nodes = Enumerable.Range(0, ready ?? nodes).Select(i => new NodeTime($"node{i + 1}", hookEnd, exchange - 0.01 * i, Raw, "fanout",
            RingSeconds: exchange - 0.2 - 0.01 * i, AgentCpuSeconds: 0.29, ProbeSeconds: 0.03)).ToList(),
    };

    [Fact]
    public void The_hooks_cost_is_the_median_over_healthy_runs_of_the_allocation_to_the_first_line_less_the_slowest_nodes_exchange()
    {
        var records = new[]
        {
            Run(8, exchange: 10.9, hookEnd: 10.96, firstLine: 11.00),   // 0.10 beyond the slowest node
            Run(8, exchange: 11.0, hookEnd: 11.07, firstLine: 11.12),   // 0.12
            Run(16, exchange: 10.5, hookEnd: 10.70, firstLine: 10.80),  // 0.30
        };

        var hook = BurstBufferHook.FromRecords(records, "lab")!;

        Assert.Equal(3, hook.Runs);
        Assert.Equal(0.12, hook.Seconds, 9);
        // Its two parts, each a median of its own: the hook before the nodes' exchange, the script's start after the hook.
        Assert.Equal(0.07, hook.BeforeExchangeSeconds, 9);
        Assert.Equal(0.05, hook.AfterHookSeconds, 9);
    }

    [Fact]
    public void The_hooks_cost_ignores_fault_runs_runs_a_node_missed_and_every_other_mode()
    {
        var healthy = new[] { Run(8, 10.9, 10.96, 11.00), Run(8, 11.0, 11.07, 11.12) };
        var others = new[]
        {
            // A node killed mid-exchange: the hook failed and the job went back (its time is the hook's end).
            Run(8, 12.5, 13.60, 13.60, fault: "kill", fate: "REQUEUE: Burst_buffer_pre_run_error"),
            // A node stopped and brought back in time: the job ran, but the survivors waited for it.
            Run(8, 11.0, 16.00, 16.05, fault: "stop", fate: "ran"),
            // A fault whose fate the record lacks is still a fault run.
            Run(8, 11.0, 15.00, 15.05, fault: "down"),
            // Seven of eight nodes reported: the slowest node's exchange is unknown.
            Run(8, 11.0, 14.00, 14.05, ready: 7),
            Retag(Run(8, 11.0, 14.00, 14.05), "agents"),
            Retag(Run(8, 11.0, 14.00, 14.05), "slurm:mpi"),
        };

        var alone = BurstBufferHook.FromRecords(healthy, "lab")!;
        var mixed = BurstBufferHook.FromRecords([.. others.Take(3), .. healthy, .. others.Skip(3)], "lab")!;

        Assert.Equal(alone with { Source = "" }, mixed with { Source = "" });
        Assert.Equal(2, mixed.Runs);
        Assert.Null(BurstBufferHook.FromRecords(others, "lab"));
        // Nor are the fault runs replayed as lab cells: one cell, the healthy runs' times.
        var cell = Assert.Single(Experiments.Cells([.. healthy, .. others.Take(3)]));
        Assert.True(cell.BurstBuffer && cell.Agents);
        Assert.Equal([11.00, 11.12], cell.Runs);

        static BenchRecord Retag(BenchRecord r, string fanout) { r.Config.Fanout = fanout; return r; }
    }

    /// <summary>The lab's file: a fault run's first line (the hook's failure) comes long after its survivors' exchange,
    /// so a calibration that counted it would charge every staged job the wait for a lost node.</summary>
    [Fact]
    public void The_labs_burst_buffer_runs_calibrate_from_their_healthy_runs_alone()
    {
        var file = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "burst-buffer.jsonl");
        var records = ResultReader.Read(file).Records;
        var staged = records.Where(r => r.Config.Fanout == BurstBufferHook.Fanout).ToList();
        var faults = staged.Where(r => r.Config.Fault is not null).ToList();
        Assert.NotEmpty(faults);

        var hook = BurstBufferHook.FromRecords(records, file)!;

        Assert.Equal(staged.Count - faults.Count, hook.Runs);
        Assert.All(faults, r => Assert.True(r.MeasuredSeconds - r.Nodes.Max(n => n.FetchSeconds) > hook.Seconds,
            $"{r.Run} ({r.Config.Fault}): {r.MeasuredSeconds - r.Nodes.Max(n => n.FetchSeconds):0.000} s beyond its slowest survivor"));
        // A fixed cost: a tenth of a second or so, under every healthy run's whole time by far.
        Assert.InRange(hook.Seconds, 0.01, 0.5);
        Assert.Equal(hook.Runs, Experiments.Cells(records).Where(c => c.BurstBuffer).Sum(c => c.Runs.Count));
    }

    [Theory]
    [InlineData(1000, 10)]
    [InlineData(10_000, 10)]
    [InlineData(1000, 100)]
    [InlineData(16, 10)]
    public void The_burst_buffer_row_is_the_agents_row_plus_exactly_the_measured_hook_cost(int nodes, double rateGbit)
    {
        var hook = new BurstBufferHook(0.104, 0.059, 0.045, 2, "lab");
        var a = new Experiments.Assumptions();
        // The scenarios are made as they are read: the baselines, one ring, the agents' request and what follows it.
        var rows = Experiments.Scale(Lab with { BurstBuffer = hook }, Stored, nodes, rateGbit, a).Take(5).ToList();

        var agents = Assert.Single(rows, r => r.Scenario.StartsWith("requested of the running agents", StringComparison.Ordinal));
        var staged = Assert.Single(rows, r => r.Scenario.StartsWith("staged by Slurm's burst buffer", StringComparison.Ordinal));
        Assert.Equal(agents.Seconds + hook.Seconds, staged.Seconds, 12);
        Assert.Equal(agents.NetworkOnlySeconds!.Value + hook.Seconds, staged.NetworkOnlySeconds!.Value, 12);
        // The same exchange: the tier sends what it sends for the agents' request.
        Assert.Equal(agents.TierBytes, staged.TierBytes);
        Assert.Equal((nodes, rateGbit, agents.Delivery), (staged.Nodes, staged.RateGbit, staged.Delivery));
        // The start the label names is the request's tree and the hook.
        var start = a.AgentTree.Seconds(nodes, a.HopLatency, rateGbit * 1e9 / 8) + hook.Seconds;
        Assert.Contains(string.Create(CultureInfo.InvariantCulture, $"start {start * 1e3:0} ms"), staged.Scenario);
        // It follows the agents' row, and without burst-buffer runs there is none.
        Assert.Equal(rows.IndexOf(agents) + 1, rows.IndexOf(staged));
        Assert.DoesNotContain(Experiments.Scale(Lab with { BurstBuffer = null }, Stored, nodes, rateGbit, a).Take(5), r => r.Scenario.Contains("burst buffer", StringComparison.Ordinal));
    }

    [Fact]
    public void A_lab_cell_staged_by_the_burst_buffer_replays_as_the_agents_request_plus_the_hooks_cost()
    {
        var records = new[] { Run(8, 10.9, 10.96, 11.00), Run(8, 11.0, 11.07, 11.12) };
        var cal = Calibration.ForBurstBuffer(records, Lab, "lab");
        var cell = Assert.Single(Experiments.Cells(records));

        var staged = Experiments.Replay(cell, cal);
        var requested = Experiments.Replay(cell with { BurstBuffer = false }, cal);

        Assert.Equal(requested.Simulated + cal.BurstBuffer!.Seconds, staged.Simulated, 12);
        Assert.Equal("fan-out, staged by Slurm's burst buffer", cell.Mode);
        // The file has no direct runs nor N = 4: the ranks' and direct fetch's figures are the lab's given, the agents' its own.
        Assert.Equal(Lab.FanoutStartSeconds, cal.FanoutStartSeconds);
        Assert.Equal(Lab.DirectCpuPerByte, cal.DirectCpuPerByte);
        Assert.Equal(0.29 / 27_500_000, cal.AgentsCpuPerByte!.Value, 15);
        // The agents' start: the slowest node's time outside its ring and probe (10.9 − (10.7 + 0.03), 11.0 − (10.8 + 0.03)).
        Assert.Equal(0.17, cal.AgentsStartSeconds!.Value, 9);
        // Replayed with a calibration that has no burst-buffer runs, the cell cannot be: the hook's cost is not invented.
        Assert.Throws<InvalidOperationException>(() => Experiments.Replay(cell, Lab with { BurstBuffer = null }));
        Assert.Throws<InvalidOperationException>(() => Calibration.ForBurstBuffer([Run(8, 12.5, 13.6, 13.6, fault: "kill", fate: "REQUEUE")], Lab, "lab"));
    }
}
