using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// <c>hpcdata nodeprep --fanout mpi</c> under the real launchers, three ranks on this machine standing in for three
/// nodes: each rank starts its own agent (<c>{rank}</c> in the pipe and data directory), the ranks share the fetching
/// and exchange the rest, and every node ends with the verified version pinned for the job.
/// </summary>
public sealed class MpiNodePrepTests
{
    public static TheoryData<string> Launchers => ["hydra", "openmpi"];

    private static string[] Launcher(string name) => name == "hydra"
        ? ["mpiexec.hydra", "-n", "3"]
        : ["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-n", "3"];


    /// <summary>Both launchers with the default TCP ring, and the MPI library's own link once.</summary>
    public static TheoryData<string, string> LaunchersAndRings => new() { { "hydra", "tcp" }, { "openmpi", "tcp" }, { "hydra", "mpi" } };

    [Theory]
    [MemberData(nameof(LaunchersAndRings))]
    public async Task Three_ranks_prepare_three_nodes_and_the_cache_tier_sends_the_data_about_once(string launcher, string ring)
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(8 << 20, seed: 11)), "risk/mpi");
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);
        var pipe = s.NewPipe() + "r{rank}";

        await using var job = ComponentProcess.Start("hpcdata",
            ["nodeprep", "--fanout", "mpi", "--ring", ring, "risk/mpi", "--job", "job-7", "--pipe", pipe,
             "--data-dir", Path.Combine(s.Root, "node{rank}"), "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["HPCDATA_STATE_DIR"] = s.StateDirectory, ["TERM"] = "dumb" }, name: "mpi nodeprep",
            launcher: Launcher(launcher));
        var code = await EndsWithinAsync(job, TimeSpan.FromMinutes(3));
        var lines = job.StandardOutput.Where(l => l.Contains("node=")).ToList();

        Assert.True(code == 0, $"exit {code}: {job.StandardErrorTail}");
        Assert.Equal(3, lines.Count);
        Assert.All(lines, l => Assert.Contains($"version={staged.Version}", l));
        Assert.All(lines, l => Assert.Contains($" source=fanout fanout=mpi ranks=3 ring={ring}", l));
        for (var r = 0; r < 3; r++)
        {
            var status = await s.StatusAsync(pipe.Replace("{rank}", r.ToString()));
            var copy = Assert.Single(status.Copies);
            Assert.Equal(("complete", staged.Version), (copy.State, copy.Version));
            Assert.Contains("job-7", copy.Pins);
        }
        // 8 MB to three nodes: each segment left the cache tier once, not three times.
        var sent = await Sandbox.BytesSentAsync(tier) - before;
        Assert.InRange(sent, 8L << 20, (8L << 20) * 13 / 10);
    }

    [Theory]
    [MemberData(nameof(Launchers))]
    public async Task A_rank_killed_mid_exchange_loses_no_verified_segment_and_a_plain_node_prep_completes_every_node(string launcher)
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        const int size = 12 << 20;
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(size, seed: 17)), "risk/kill");
        // A slow cache tier (512 KB/s per connection) keeps the exchange going long enough to kill a rank in the middle of it.
        await using var slowLink = new ThrottledRelay(s.HostList, 512 << 10);
        var pipe = s.NewPipe() + "r";
        string[] NodePrep(params string[] extra) =>
            ["nodeprep", .. extra, "risk/kill", "--job", "job-k", "--cache-hosts", slowLink.Address];
        var env = new Dictionary<string, string?> { ["HPCDATA_STATE_DIR"] = s.StateDirectory, ["TERM"] = "dumb" };

        await using var job = ComponentProcess.Start("hpcdata",
            NodePrep("--fanout", "mpi", "--stall-timeout", "5s", "--pipe", pipe + "{rank}", "--data-dir", Path.Combine(s.Root, "node{rank}")),
            env, name: "mpi nodeprep", launcher: Launcher(launcher));
        await Sandbox.KillRankOnceTheExchangeMovesAsync("job-k", rank: 1, ranks: 3, TimeSpan.FromSeconds(60), job);
        var code = await EndsWithinAsync(job, TimeSpan.FromMinutes(2));

        // What every node holds now was verified by its agent; the plain node prep the job runs next keeps it. A fetch
        // the killed rank had asked its agent for may still be running: what is kept is read once every agent is at rest.
        var kept = new int[3];
        var segments = staged.Segments;
        var atExit = (await s.StatusAsync(pipe + 1)).Copies.Where(c => c.Version == staged.Version).Sum(c => c.SegmentsDone);
        for (var r = 0; r < 3; r++)
        {
            var settled = DateTime.UtcNow + TimeSpan.FromSeconds(90);
            List<CopyStatus> copies;
            while ((copies = (await s.StatusAsync(pipe + r)).Copies.Where(c => c.Version == staged.Version).ToList()).Any(c => c.State is "fetching" or "ingesting")
                   && DateTime.UtcNow < settled)
                await Task.Delay(200);
            kept[r] = copies.Sum(c => c.SegmentsDone);
        }
        Assert.True(kept.Sum() > 0, $"nothing kept after the kill (mpiexec exit {code})");
        // The killed rank's node at least had not been given everything: the kill landed mid-exchange.
        Assert.True(atExit < segments, $"node 1 was complete before its rank was killed ({atExit} of {segments})");
        // The plain node prep the job runs next, on every node at once as a scheduler would.
        var directs = await Task.WhenAll(Enumerable.Range(0, 3).Select(r => s.HpcdataAsync([.. NodePrep("--pipe", pipe + r)], env, TimeSpan.FromMinutes(3))));
        for (var r = 0; r < 3; r++)
        {
            var direct = directs[r];
            Assert.True(direct.Code == 0, $"node {r}: {direct.Stderr}");
            Assert.Contains($"version={staged.Version}", direct.Out);
            // What the stopped exchange left is kept, said in bytes, and not fetched again.
            if (kept[r] > 0) Assert.Matches(@"source=(resumed resumed-bytes=[1-9]\d*|local) ", direct.Out);
            var copy = Assert.Single((await s.StatusAsync(pipe + r)).Copies);
            Assert.Equal(("complete", size), (copy.State, (int)copy.Length));
        }
    }

    [Fact]
    public async Task Nine_ranks_in_groups_of_three_exchange_over_a_grid_of_rings_and_the_tier_sends_the_data_about_once()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(8 << 20, seed: 13)), "risk/grid");
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);
        var pipe = s.NewPipe() + "r{rank}";

        await using var job = ComponentProcess.Start("hpcdata",
            ["nodeprep", "--fanout", "mpi", "--ring-groups", "3", "risk/grid", "--job", "job-g", "--pipe", pipe,
             "--data-dir", Path.Combine(s.Root, "node{rank}"), "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["HPCDATA_STATE_DIR"] = s.StateDirectory, ["TERM"] = "dumb" }, name: "mpi nodeprep",
            launcher: ["mpiexec.hydra", "-n", "9"]);
        var code = await EndsWithinAsync(job, TimeSpan.FromMinutes(3));
        var lines = job.StandardOutput.Where(l => l.Contains("node=")).ToList();

        Assert.True(code == 0, $"exit {code}: {job.StandardErrorTail}");
        Assert.Equal(9, lines.Count);
        // Three groups of three (ranks 0-2, 3-5, 6-8) and three columns across them (0, 3, 6; 1, 4, 7; 2, 5, 8).
        Assert.All(lines, l => Assert.Contains($"version={staged.Version}", l));
        Assert.All(lines, l => Assert.Contains(" source=fanout fanout=mpi ranks=9 ring=tcp route=grid:3x3 ", l));
        for (var r = 0; r < 9; r++)
        {
            var copy = Assert.Single((await s.StatusAsync(pipe.Replace("{rank}", r.ToString()))).Copies);
            Assert.Equal(("complete", staged.Version), (copy.State, copy.Version));
        }
        var sent = await Sandbox.BytesSentAsync(tier) - before;
        Assert.InRange(sent, 8L << 20, (8L << 20) * 13 / 10);
    }

    [Fact]
    public async Task Of_eight_ranks_one_killed_mid_exchange_costs_the_others_only_its_share_and_they_finish_by_the_ring()
    {
        const int size = 16 << 20;
        var run = await KillOneMidExchangeAsync(ranks: 8, victim: 3, size, seed: 23, []);

        Assert.True(run.Lines.All(l => l.Contains(" source=fanout ")), $"not all by the ring:\n{string.Join("\n", run.Lines)}\n{run.Errors}");
        // The member before the dead one closed the ring around it.
        Assert.Single(run.Lines, l => l.Contains(" bypassed=1 "));
        // Every survivor heard of it, so none waited for a closing barrier the dead rank could never reach.
        Assert.All(run.Lines, l => Assert.Contains(" member-lost=1", l));
        // The tier sent the data once and the dead member's share again at most: not each survivor what it lacked.
        Assert.InRange(run.Sent, (long)size, size * 12L / 10);
    }

    [Fact]
    public async Task Of_nine_ranks_in_groups_of_three_one_killed_mid_exchange_is_routed_around_in_its_group_and_its_column()
    {
        const int size = 16 << 20;
        // Rank 4 is in the middle of group 1 (ranks 3, 4, 5) and of column 1 (ranks 1, 4, 7).
        var run = await KillOneMidExchangeAsync(ranks: 9, victim: 4, size, seed: 29, ["--ring-groups", "3"]);

        Assert.True(run.Lines.All(l => l.Contains(" source=fanout ") && l.Contains(" route=grid:3x3 ")), $"not all by the grid:\n{string.Join("\n", run.Lines)}\n{run.Errors}");
        // The member before the dead one in its group (rank 3) and in its column (rank 1) each closed their ring around it.
        Assert.Equal(2, run.Lines.Count(l => l.Contains(" bypassed=1 ")));
        // Word of it crossed from ring to ring: the ranks outside its group and column (0, 2, 6, 8) heard it too.
        Assert.All(run.Lines, l => Assert.Contains(" member-lost=1", l));
        // The tier sent the data once and at most what only the dead member held again: its column's part in its
        // group (a third) and its share of that part in its column (a ninth).
        Assert.InRange(run.Sent, (long)size, size + size / 3 + size / 9 + (1L << 20));
    }

    private sealed record KilledRun(List<string> Lines, long Sent, string Errors);

    /// <summary>
    /// Node prep over <paramref name="ranks"/> ranks under Open MPI, one of them killed once the exchange moves; every
    /// other node must end ready with the version. Returns the survivors' lines and what the tier sent.
    /// </summary>
    private static async Task<KilledRun> KillOneMidExchangeAsync(int ranks, int victim, int size, int seed, string[] switches)
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var name = $"risk/kill{ranks}";
        var jobId = $"job{ranks}-kill";
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(size, seed: seed)), name);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);
        // A slow cache tier (512 KB/s per connection) keeps the exchange going long enough to kill a rank in the middle of it.
        await using var slowLink = new ThrottledRelay(s.HostList, 512 << 10);
        var pipe = s.NewPipe() + "r";
        var env = new Dictionary<string, string?> { ["HPCDATA_STATE_DIR"] = s.StateDirectory, ["TERM"] = "dumb" };

        // The launcher leaves the other ranks running when one dies (Open MPI's --enable-recovery; srun does so by
        // itself; MPICH's hydra 4.0 ends them all even with -disable-auto-cleanup). A neighbour silent for 5 s is
        // routed around (2 s by default: the ranks and their agents share this machine's cores).
        await using var job = ComponentProcess.Start("hpcdata",
            ["nodeprep", "--fanout", "mpi", .. switches, name, "--job", jobId, "--cache-hosts", slowLink.Address, "--stall-timeout", "90s",
             "--peer-timeout", "5s", "--pipe", pipe + "{rank}", "--data-dir", Path.Combine(s.Root, "node{rank}")],
            env, name: "mpi nodeprep", launcher: ["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe", "--enable-recovery", "--mca", "mpi_yield_when_idle", "1", "-n", $"{ranks}"]);
        await Sandbox.KillRankOnceTheExchangeMovesAsync(jobId, rank: victim, ranks: ranks, TimeSpan.FromSeconds(90), job);
        await EndsWithinAsync(job, TimeSpan.FromMinutes(4));

        // Every other node is ready by the exchange itself, not by the direct fetch that follows a failed one (the caller checks the source).
        var lines = job.StandardOutput.Where(l => l.StartsWith("node=", StringComparison.Ordinal)).ToList();
        Assert.True(lines.Count == ranks - 1, $"{lines.Count} nodes ready:\n{string.Join("\n", job.StandardOutput)}\n{job.StandardErrorTail}");
        Assert.All(lines, l => Assert.Contains($"version={staged.Version}", l));
        for (var r = 0; r < ranks; r++)
        {
            if (r == victim) continue;
            var copy = Assert.Single((await s.StatusAsync(pipe + r)).Copies);
            Assert.Equal(("complete", staged.Version), (copy.State, copy.Version));
        }
        return new KilledRun(lines, await Sandbox.BytesSentAsync(tier) - before, job.StandardErrorTail);
    }

    [Fact]
    public async Task Without_an_mpi_launcher_node_prep_fetches_directly_and_says_so()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(1 << 20)), "risk/solo");
        // A single process with the MPI library present is a world of one: the exchange is this node alone.
        var r = await s.HpcdataAsync(["nodeprep", "--fanout", "mpi", "risk/solo", "--job", "j", "--pipe", s.NewPipe(),
            "--data-dir", Path.Combine(s.Root, "n"), "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["HPCDATA_MPI_LIBRARY"] = "/nonexistent/libmpi.so" });
        Assert.True(r.Code == 0, r.Stderr);
        Assert.Contains("no MPI for the fan-out here", r.Stderr);
        Assert.Contains($"version={staged.Version}", r.Out);
    }

    /// <summary>The job's exit code; a job still running after <paramref name="limit"/> fails the test with what its ranks said.</summary>
    private static async Task<int> EndsWithinAsync(ComponentProcess job, TimeSpan limit)
    {
        try
        {
            return await job.WaitForExitAsync(limit);
        }
        catch (TimeoutException)
        {
            Assert.Fail($"the job was still running after {limit.TotalMinutes:0} min; its output:\n{string.Join("\n", job.StandardOutput)}\n{job.StandardErrorTail}");
            throw;
        }
    }
}
