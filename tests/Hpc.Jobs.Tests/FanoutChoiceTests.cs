using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary><c>--fanout auto</c>: the cost model's choice between direct fetch and the MPI fan-out, and the line that says why.</summary>
public sealed class FanoutChoiceTests
{
    private const double GigE = 125e6;

    [Fact]
    public void The_reference_experiment_190_nodes_on_10_cache_hosts_over_GigE_fans_out()
    {
        var choice = FanoutChoice.Decide(nodes: 190, cacheHosts: 10, storedBytes: 410L << 20, GigE, "--link-rate", mpiUnavailable: null, nodeCores: 8);
        Assert.True(choice.Mpi);
        Assert.InRange(choice.DirectSeconds, 60, 70);   // 19 × 410 MB over one host link
        Assert.InRange(choice.FanoutSeconds, 4.0, 5.0); // start-up and launch + the rings at 94% of the link + the last block's 26 hops (grid of 13 × 14)
        Assert.StartsWith("mpi: 190 node(s) of 8 core(s), 10 cache host(s), 410 MiB stored", choice.Reason);
    }

    [Fact]
    public void Small_data_on_as_many_nodes_as_cache_hosts_is_fetched_directly_since_the_fan_out_start_up_costs_more()
    {
        var choice = FanoutChoice.Decide(nodes: 4, cacheHosts: 4, storedBytes: 8L << 20, GigE, "measured from here", mpiUnavailable: null, nodeCores: 8);
        Assert.False(choice.Mpi);
        Assert.True(choice.DirectSeconds < choice.FanoutSeconds);
        Assert.StartsWith("none: 4 node(s) of 8 core(s), 4 cache host(s)", choice.Reason);
        Assert.Contains("(measured from here)", choice.Reason);
    }

    [Fact]
    public void On_fast_links_the_nodes_cores_bound_both_modes()
    {
        // 32 nodes, 8 hosts, 10 Gbit/s, 448 MB stored. On one core the ingest takes 2.2 s where the ring could carry
        // the data in 0.4 s, and a direct fetch's decode 4.3 s: the fan-out is still faster.
        var one = FanoutChoice.Decide(nodes: 32, cacheHosts: 8, storedBytes: 448L << 20, 1.25e9, "--link-rate", mpiUnavailable: null, nodeCores: 1);
        Assert.True(one.Mpi);
        Assert.InRange(one.FanoutSeconds, 2.6, 2.9);
        Assert.InRange(one.DirectSeconds, 4.2, 4.4);
        // On 8 cores the links bound both: direct fetch moves 4 copies over each host link (1.6 s), the ring 1 plus start-up.
        var eight = FanoutChoice.Decide(nodes: 32, cacheHosts: 8, storedBytes: 448L << 20, 1.25e9, "--link-rate", mpiUnavailable: null, nodeCores: 8);
        Assert.InRange(eight.DirectSeconds, 1.5, 1.8);
        Assert.InRange(eight.FanoutSeconds, 0.7, 0.9);
        // Even with a host per node the ring wins this size: the ingest takes a byte for half the CPU a direct fetch's
        // decode does (215 against 110 MB/s a core). Where the data moves in milliseconds, direct fetch skips the start-up.
        Assert.True(FanoutChoice.Decide(nodes: 8, cacheHosts: 8, storedBytes: 448L << 20, 1.25e9, "--link-rate", mpiUnavailable: null, nodeCores: 8).Mpi);
        Assert.False(FanoutChoice.Decide(nodes: 4, cacheHosts: 4, storedBytes: 8L << 20, 1.25e9, "--link-rate", mpiUnavailable: null, nodeCores: 8).Mpi);
    }

    [Fact]
    public void Where_no_mpi_launch_is_possible_the_choice_is_direct_fetch_with_that_reason()
    {
        var choice = FanoutChoice.Decide(nodes: 190, cacheHosts: 10, storedBytes: 410L << 20, GigE, "--link-rate", "hpcpack's node-preparation task runs on each node alone", nodeCores: 8);
        Assert.False(choice.Mpi);
        Assert.True(choice.FanoutSeconds < choice.DirectSeconds);
        Assert.EndsWith("; hpcpack's node-preparation task runs on each node alone", choice.Reason);
    }

    [Fact]
    public void Two_nodes_never_fan_out()
    {
        var choice = FanoutChoice.Decide(nodes: 2, cacheHosts: 1, storedBytes: 1L << 30, 1e6, "--link-rate", mpiUnavailable: null, nodeCores: 8);
        Assert.False(choice.Mpi);
        Assert.EndsWith("fewer than 3 nodes", choice.Reason);
    }

    [Fact]
    public void Nonsense_inputs_are_refused()
    {
        Assert.Throws<ArgumentOutOfRangeException>(() => FanoutChoice.Decide(0, 1, 1, GigE, "x", null, 1));
        Assert.Throws<ArgumentOutOfRangeException>(() => FanoutChoice.Decide(1, 0, 1, GigE, "x", null, 1));
        Assert.Throws<ArgumentOutOfRangeException>(() => FanoutChoice.Decide(1, 1, 1, 0, "x", null, 1));
    }
}
