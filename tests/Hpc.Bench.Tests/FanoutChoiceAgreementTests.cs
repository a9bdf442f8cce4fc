using System.Globalization;
using Hpc.Bench.Simulation;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;

namespace Hpc.Bench.Tests;

/// <summary>
/// <c>prestage --fanout auto</c> decides with a closed-form cost model (<see cref="FanoutChoice"/>); the simulation
/// replays the protocols on a cluster and is validated against the lab. Over nodes, cache hosts, link rates and sizes,
/// the choice must never be a mode the simulation finds slower than the other, and must not pass up a fan-out the
/// simulation finds much faster. The network is flat (every node at its link rate to every other and to the hosts): the
/// model knows no racks, and an oversubscribed rack's downlink only slows direct fetch further, so a fan-out chosen on a
/// flat network is faster on that one too.
/// </summary>
public sealed class FanoutChoiceAgreementTests
{
    private static readonly string Records = Path.Combine(LabRecords.RepoRoot(), "docs", "results", "slurm-native.jsonl");

    [Fact]
    public void The_choice_is_never_a_mode_the_simulation_finds_slower()
    {
        var cal = Calibration.FromRecords(ResultReader.Read(Records).Records, Records);
        var a = new Experiments.Assumptions();
        var wrong = new List<string>();
        var cases = 0;
        foreach (var gbit in new[] { 0.025, 0.1, 1, 10, 100 })
        foreach (var nodes in new[] { 3, 4, 8, 16, 64, 190, 1000 })
        foreach (var hosts in new[] { 1, 2, 8 })
        foreach (var stored in new[] { 8L << 20, 64L << 20, 448L << 20 })
        {
            var choice = FanoutChoice.Decide(nodes, hosts, stored, gbit * 1e9 / 8, "test", mpiUnavailable: null, nodeCores: (int)a.DirectCores);
            var spec = Experiments.Cluster(nodes, hosts, gbit, a) with { RackSize = 0 };
            var direct = Simulator.Run(spec, cal, Delivery.Direct, stored).Seconds;
            var fanout = Simulator.Run(spec, cal, Delivery.Fanout, stored).Seconds;
            cases++;
            // Within 10% either way is a tie: the two models round differently (racks, the ingest's overlap).
            var chosen = choice.Mpi ? fanout : direct;
            var other = choice.Mpi ? direct : fanout;
            var passedUp = !choice.Mpi && fanout < 0.75 * direct;
            if (chosen > 1.1 * other || passedUp)
                wrong.Add(string.Create(CultureInfo.InvariantCulture,
                    $"N={nodes} H={hosts} {gbit} Gbit/s {stored >> 20} MiB: chose {(choice.Mpi ? "mpi" : "none")} (model direct {choice.DirectSeconds:0.00} s, fan-out {choice.FanoutSeconds:0.00} s); simulated direct {direct:0.00} s, fan-out {fanout:0.00} s"));
        }
        Assert.True(cases == 315 && wrong.Count == 0, $"{wrong.Count} of {cases} choices disagree with the simulation:\n{string.Join("\n", wrong)}");
    }

    [Fact]
    public void The_cost_model_s_rates_are_the_simulation_s_calibration()
    {
        var cal = Calibration.FromRecords(ResultReader.Read(Records).Records, Records);
        // CPU-seconds per stored byte in the records, as bytes per second of one core.
        Assert.InRange(FanoutChoice.IngestBytesPerSecond / (1 / cal.FanoutIngestCpuPerByte), 0.9, 1.1);
        Assert.InRange(FanoutChoice.DirectBytesPerSecond / (1 / cal.DirectIngestCpuPerByte), 0.9, 1.1);
        Assert.InRange(FanoutChoice.StartCpuSeconds / cal.FanoutStartCpu, 0.9, 1.1);
        Assert.InRange(FanoutChoice.DirectStartCpuSeconds / cal.DirectStartCpu, 0.9, 1.1);
        Assert.InRange(FanoutChoice.StartSeconds - cal.FanoutStartSeconds, -0.01, 0.01);
        Assert.InRange(FanoutChoice.DirectStartSeconds - cal.DirectStartSeconds, -0.01, 0.01);
        Assert.InRange(FanoutChoice.RingEfficiency / cal.Efficiency, 0.995, 1.005);
        Assert.Equal(FanoutChoice.LaunchPerDoubling, new Experiments.Assumptions().LaunchPerDoubling);
    }
}
