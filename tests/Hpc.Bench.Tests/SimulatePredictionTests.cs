using System.Globalization;
using System.Text.Json;
using Hpc.CommonData.Fanout;
using Hpc.Bench.Simulation;

namespace Hpc.Bench.Tests;

/// <summary>bench simulate's predictions at small node counts: every scenario runs, and what it predicts is physically possible.</summary>
public class SimulatePredictionTests
{
    private const long Stored = 448L << 20;

    private static readonly string Records = LabRecords.SlurmNative;
    private static readonly Calibration Lab = LabRecords.SlurmNativeCalibration;

    /// <summary>The fastest any node can hold the data: every stored byte over its own link at the line rate.</summary>
    private static double LinkBound(double rateGbit) => Stored / (rateGbit * 1e9 / 8);

    [Theory]
    [InlineData(2, 10)]
    [InlineData(3, 10)]
    [InlineData(8, 10)]
    [InlineData(16, 10)]
    [InlineData(8, 1)]
    [InlineData(8, 100)]
    public void A_prediction_for_a_few_nodes_runs_every_scenario_no_faster_than_the_links_and_the_tier_sends_a_copy_at_least(int nodes, double rateGbit)
    {
        var rows = Experiments.Scale(Lab, Stored, nodes, rateGbit, new Experiments.Assumptions()).ToList();

        // Fewer nodes than --jobs still runs the jobs at once, as many as have two nodes each.
        var together = rows.Where(r => r.Scenario.Contains(" jobs × ", StringComparison.Ordinal)).ToList();
        Assert.Equal([Delivery.Direct, Delivery.Fanout], together.Select(r => r.Delivery));
        Assert.All(together, r => Assert.StartsWith(string.Create(CultureInfo.InvariantCulture, $"{Math.Min(10, nodes / 2)} jobs × {nodes / Math.Min(10, nodes / 2)} nodes"), r.Scenario));

        Assert.All(rows, r =>
        {
            Assert.Equal(nodes, r.Nodes);
            Assert.True(double.IsFinite(r.Seconds) && r.Seconds >= LinkBound(rateGbit), $"{r.Scenario}, {r.Delivery}: {r.Seconds} s against the link's {LinkBound(rateGbit):0.000} s");
            Assert.True(r.TierBytes >= r.StoredBytes * (1 - 1e-9), $"{r.Scenario}, {r.Delivery}: the tier sent {r.TierCopies:0.000} copies");
            if (r.HealthySeconds is { } healthy) Assert.InRange(healthy, LinkBound(rateGbit), r.Seconds);
            if (r.NetworkOnlySeconds is { } network) Assert.True(double.IsFinite(network) && network >= LinkBound(rateGbit), $"{r.Scenario}: network only {network} s");
            if (r.HostsNeeded is { } hosts) Assert.InRange(hosts, 1, nodes);
        });
    }

    [Theory]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(8)]
    [InlineData(16)]
    public void In_a_prediction_for_a_few_nodes_every_node_holds_the_data_and_a_node_lost_mid_exchange_leaves_every_other_holding_it(int nodes)
    {
        var a = new Experiments.Assumptions();
        var cluster = Experiments.Cluster(nodes, a.CacheHosts, 10, a);
        foreach (var d in new[] { Delivery.Direct, Delivery.Fanout })
        {
            var job = Simulator.Run(cluster, Lab, d, Stored).Jobs[0];
            Assert.Equal(nodes, job.NodeSeconds.Length);
            Assert.All(job.NodeSeconds, s => Assert.True(double.IsFinite(s) && s >= LinkBound(10), $"{d}: a node done at {s} s"));
        }

        var clean = Simulator.Run(cluster, Lab, Delivery.Fanout, Stored).Jobs[0];
        var exchange = clean.ExchangeSeconds!.Value;
        // Silent (the ring closes after the peer timeout where it can) and dead with the survivors waiting out the
        // stall timeout: either way the lost rank alone never finishes, and what the others hold came from the tier.
        foreach (double? peer in new double?[] { Experiments.PeerTimeout, null })
        {
            var lost = Simulator.Run(cluster, Lab, Delivery.Fanout, Stored, failAfter: exchange / 2, peerTimeout: peer).Jobs[0];
            Assert.True(double.IsNaN(lost.NodeSeconds[nodes / 2]));
            Assert.All(lost.NodeSeconds.Where((_, r) => r != nodes / 2), s => Assert.True(double.IsFinite(s) && s >= LinkBound(10), $"a survivor done at {s} s"));
            Assert.True(lost.Seconds >= clean.Seconds + Experiments.PeerTimeout, $"lost a node: {lost.Seconds:0.00} s, without: {clean.Seconds:0.00} s");
            Assert.True(lost.TierBytes >= Stored * (1 - 1e-9), $"the tier sent {lost.TierBytes / Stored:0.000} copies");
        }
    }

    [Fact]
    public void The_predictions_wait_for_a_silent_node_as_long_as_node_prep_and_the_agents_ring_do_by_default()
    {
        Assert.Equal(Experiments.PeerTimeout, RingAllGather.PeerSilence.TotalSeconds);
        var rows = Experiments.Scale(Lab, Stored, 8, 10, new Experiments.Assumptions()).ToList();
        var silent = rows.Where(r => r.Scenario.Contains("goes silent", StringComparison.Ordinal)).ToList();
        Assert.Equal(2, silent.Count);
        Assert.All(silent, r => Assert.Contains(string.Create(CultureInfo.InvariantCulture, $"--peer-timeout {RingAllGather.PeerSilence.TotalSeconds:0.#} s)"), r.Scenario));
        // The agents' ring closes around the silent node once it is suspect; the requester's verdict waits the rest.
        Assert.Equal(Experiments.AgentsSuspectAfter, PrepRequest.SuspicionOf(RingAllGather.PeerSilence).TotalSeconds);
        Assert.Contains(silent, r => r.Scenario.Contains(string.Create(CultureInfo.InvariantCulture, $"routed around after {Experiments.AgentsSuspectAfter:0.#} s"), StringComparison.Ordinal));
    }

    [Fact]
    public async Task Simulate_predicts_two_three_eight_and_sixteen_nodes_with_every_scenario_at_each()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-simulate-").FullName;
        try
        {
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(3), "bench", "simulate", "--records", Records, "--slow-records", "", "--grid-records", "",
                "--agents-records", "", "--kill-records", Path.Combine(dir, "none.jsonl"), "--nodes", "2,3,8,16", "--rates", "10", "--out", dir);
            Assert.True(r.Code == 0, $"bench simulate exited {r.Code}: {r.Stderr}");

            var predictions = File.ReadAllLines(Path.Combine(dir, "simulate.jsonl")).Select(l => JsonDocument.Parse(l).RootElement)
                .Where(x => x.TryGetProperty("rateGbit", out var rate) && rate.GetDouble() == 10).ToList();
            var byNodes = predictions.GroupBy(x => x.GetProperty("nodes").GetInt32()).ToDictionary(g => g.Key, g => g.ToList());
            Assert.Equal([2, 3, 8, 16], byNodes.Keys.Order());
            // The same scenarios at every node count.
            Assert.Single(byNodes.Values.Select(g => g.Count).Distinct());
            Assert.All(predictions, x =>
            {
                var stored = x.GetProperty("storedBytes").GetInt64();
                Assert.True(x.GetProperty("simulatedSeconds").GetDouble() >= stored / (10e9 / 8), x.ToString());
                Assert.True(x.GetProperty("tierCopies").GetDouble() >= 1 - 1e-9, x.ToString());
            });
            Assert.Contains("| baseline | 8 | 10 Gbit/s |", r.Stdout);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Theory]
    [InlineData("--nodes", "1", "--nodes 1 is too few")]
    [InlineData("--rates", "0", "--rates '0'")]
    [InlineData("--jobs", "0", "--jobs and --cache-host-count are 1 or more")]
    public async Task Simulate_refuses_what_it_cannot_predict(string option, string value, string message)
    {
        var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(1), "bench", "simulate", "--records", Records, option, value);
        Assert.Equal(2, r.Code);
        Assert.Contains(message, r.Stderr);
    }
}
