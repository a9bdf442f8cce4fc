using Hpc.Jobs.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary><c>--fanout auto</c>: the cost model's choice between direct fetch and the MPI fan-out, and the line that says why.</summary>
public sealed class FanoutChoiceTests
{
    private const double GigE = 125e6;

    [Fact]
    public void The_reference_experiment_190_nodes_on_10_cache_hosts_over_GigE_fans_out()
    {
        var choice = FanoutChoice.Decide(nodes: 190, cacheHosts: 10, storedBytes: 410L << 20, GigE, "--link-rate", mpiUnavailable: null);
        Assert.True(choice.Mpi);
        Assert.InRange(choice.DirectSeconds, 60, 70);   // 19 × 410 MB over one host link
        Assert.InRange(choice.FanoutSeconds, 4, 5);     // start-up + the ring at 94% of the link + the last block's hops
        Assert.StartsWith("mpi: 190 node(s), 10 cache host(s), 410 MiB stored", choice.Reason);
    }

    [Fact]
    public void Small_data_on_few_nodes_per_cache_host_is_fetched_directly_since_the_fan_out_start_up_costs_more()
    {
        var choice = FanoutChoice.Decide(nodes: 8, cacheHosts: 2, storedBytes: 8L << 20, GigE, "measured from here", mpiUnavailable: null);
        Assert.False(choice.Mpi);
        Assert.True(choice.DirectSeconds < choice.FanoutSeconds);
        Assert.StartsWith("none: 8 node(s), 2 cache host(s)", choice.Reason);
        Assert.Contains("(measured from here)", choice.Reason);
    }

    [Fact]
    public void On_fast_links_the_fan_out_is_held_to_the_agents_ingest_rate_and_few_nodes_per_host_fetch_directly()
    {
        // 32 nodes, 8 hosts, 10 Gbit/s, 448 MB stored: the ring could carry it in 0.38 s, one ingest thread takes 2.1 s;
        // direct fetch moves 4 copies over each host link in 1.4 s.
        var choice = FanoutChoice.Decide(nodes: 32, cacheHosts: 8, storedBytes: 448L << 20, 1.25e9, "--link-rate", mpiUnavailable: null);
        Assert.False(choice.Mpi);
        Assert.InRange(choice.FanoutSeconds, 2.5, 2.8);
        Assert.InRange(choice.DirectSeconds, 1.4, 1.6);
        // Many nodes per host still fan out.
        Assert.True(FanoutChoice.Decide(nodes: 1000, cacheHosts: 8, storedBytes: 448L << 20, 1.25e9, "--link-rate", mpiUnavailable: null).Mpi);
    }

    [Fact]
    public void Where_no_mpi_launch_is_possible_the_choice_is_direct_fetch_with_that_reason()
    {
        var choice = FanoutChoice.Decide(nodes: 190, cacheHosts: 10, storedBytes: 410L << 20, GigE, "--link-rate", "hpcpack's node-preparation task runs on each node alone");
        Assert.False(choice.Mpi);
        Assert.True(choice.FanoutSeconds < choice.DirectSeconds);
        Assert.EndsWith("; hpcpack's node-preparation task runs on each node alone", choice.Reason);
    }

    [Fact]
    public void Two_nodes_never_fan_out()
    {
        var choice = FanoutChoice.Decide(nodes: 2, cacheHosts: 1, storedBytes: 1L << 30, 1e6, "--link-rate", mpiUnavailable: null);
        Assert.False(choice.Mpi);
        Assert.EndsWith("fewer than 3 nodes", choice.Reason);
    }

    [Fact]
    public void Nonsense_inputs_are_refused()
    {
        Assert.Throws<ArgumentOutOfRangeException>(() => FanoutChoice.Decide(0, 1, 1, GigE, "x", null));
        Assert.Throws<ArgumentOutOfRangeException>(() => FanoutChoice.Decide(1, 0, 1, GigE, "x", null));
        Assert.Throws<ArgumentOutOfRangeException>(() => FanoutChoice.Decide(1, 1, 1, 0, "x", null));
    }
}
