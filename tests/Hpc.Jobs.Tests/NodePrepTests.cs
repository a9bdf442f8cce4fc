using Hpc.CommonData.Hosting;
using System.Text.RegularExpressions;

namespace Hpc.Jobs.Tests;

/// <summary>The node preparation and node release tasks, run as the real <c>hpcdata</c> program.</summary>
public class NodePrepTests
{
    private static Dictionary<string, string?> Node(string pipe, string? job = "job-1") => new() { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_JOB_ID"] = job };

    [Fact]
    public async Task Node_prep_starts_the_agent_pins_the_version_confirms_it_and_prints_one_line()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(2_000_000)), "risk/prep");
        var pipe = s.NewPipe();

        var first = await s.HpcdataAsync(["nodeprep", "risk/prep", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node")], Node(pipe));
        Assert.True(first.Code == 0, first.Stderr);
        var line = Assert.Single(first.Stdout);
        var shape = new Regex($@"^node=\S+ dataset=risk/prep version={staged.Version} bytes=2000000 seconds=\d+\.\d+ source=fetched " +
                              $@"cpu-seconds=(?<cpu>\d+\.\d+) agent-cpu-seconds=(?<agent>\d+\.\d+) path=\S+/complete/{staged.Version}\.data$");
        Assert.Matches(shape, line);
        var fields = shape.Match(line);
        Assert.Contains("starting one", first.Stderr);
        // The node's cost is stated: this process's CPU and, for the agent it started, the agent's from its start.
        Assert.True(double.Parse(fields.Groups["cpu"].Value, System.Globalization.CultureInfo.InvariantCulture) > 0, line);
        Assert.True(double.Parse(fields.Groups["agent"].Value, System.Globalization.CultureInfo.InvariantCulture) > 0, line);

        var status = await s.StatusAsync(pipe);
        Assert.Equal(["job-1"], status.Copies.Single().Pins);

        // Safe to run twice: the copy is local, the pin is not doubled.
        var second = await s.HpcdataAsync(["nodeprep", "risk/prep"], Node(pipe));
        Assert.True(second.Code == 0, second.Stderr);
        Assert.Contains(" source=local ", second.Stdout.Single());
        Assert.DoesNotContain("starting one", second.Stderr);
        Assert.Equal(["job-1"], (await s.StatusAsync(pipe)).Copies.Single().Pins);

        // Release unpins; the agent nodeprep started has nothing left to serve, so it is stopped.
        var release = await s.HpcdataAsync(["noderelease", "risk/prep"], Node(pipe));
        Assert.Equal(0, release.Code);
        Assert.Contains("released", release.Out);
        Assert.Contains("stopped the node agent", release.Stderr);
        Assert.Empty(Sandbox.ProcessesMentioning(pipe));

        // Releasing again, with the data and the agent gone, is not an error.
        var again = await s.HpcdataAsync(["noderelease", "risk/prep", "--evict"], Node(pipe));
        Assert.Equal(0, again.Code);
        Assert.Contains("nothing to release", again.Stderr);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Node_release_deletes_the_copies_in_memory_of_the_agent_node_prep_started_unless_told_to_keep_them(bool keep)
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(3_000_000, seed: 8)), "risk/shm");
        var pipe = s.NewPipe();
        var data = Hpc.Jobs.Commands.NodePrepCommand.DefaultDataDirectory(pipe);
        try
        {
            var prep = await s.HpcdataAsync(["nodeprep", "risk/shm", "--cache-hosts", s.HostList], Node(pipe));
            Assert.True(prep.Code == 0, prep.Stderr);
            Assert.StartsWith("/dev/shm/", data);
            Assert.True(Directory.Exists(data));

            var release = await s.HpcdataAsync(["noderelease", "risk/shm", .. keep ? new[] { "--keep-data" } : []], Node(pipe));
            Assert.True(release.Code == 0, release.Stderr);
            Assert.Contains("stopped the node agent", release.Stderr);
            Assert.Equal(keep, Directory.Exists(data));
            if (!keep) Assert.Matches(@"deleted its copies in /dev/shm/\S+ \([\d.]+ MiB of memory", release.Stderr);
            else Assert.DoesNotContain("deleted", release.Stderr);
        }
        finally
        {
            if (Directory.Exists(data)) Directory.Delete(data, recursive: true);
        }
    }

    [Fact]
    public async Task The_agent_node_prep_starts_uses_the_password_file_node_prep_was_given()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret");
        var data = s.WriteFile("d.bin", Sandbox.RandomBytes(1_000_000, seed: 5));
        var stage = await s.RunAsync("Hpc.Stager", [data, "--name", "risk/secured", "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["HPCDATA_CACHE_PASSWORD"] = "tier-secret" });
        Assert.True(stage.Code == 0, stage.Stderr);
        var secret = s.WriteFile("tier.password", "tier-secret\n"u8.ToArray());
        var pipe = s.NewPipe();

        var prep = await s.HpcdataAsync(["nodeprep", "risk/secured", "--cache-hosts", s.HostList, "--cache-password-file", secret,
            "--data-dir", Path.Combine(s.Root, "node")], Node(pipe));
        Assert.True(prep.Code == 0, prep.Stderr);
        Assert.Contains("starting one", prep.Stderr);
        Assert.Contains(" source=fetched ", Assert.Single(prep.Stdout));
        Assert.Equal(0, (await s.HpcdataAsync(["noderelease", "risk/secured"], Node(pipe))).Code);
    }

    [Fact]
    public async Task The_agent_node_prep_starts_takes_the_agents_switches_from_the_command_line_and_their_variables()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(100_000)), "risk/sized");
        var pipe = s.NewPipe();
        var dataDir = Path.Combine(s.Root, "from-variable");
        var env = Node(pipe);
        env["HPCDATA_AGENT_DATA_DIR"] = dataDir;

        var prep = await s.HpcdataAsync(["nodeprep", "risk/sized", "--cache-hosts", s.HostList, "--budget", "64MB", "--node", "n7"], env);
        Assert.True(prep.Code == 0, prep.Stderr);
        Assert.Contains($"starting one (data in {dataDir})", prep.Stderr);
        var status = await s.StatusAsync(pipe);
        Assert.Equal(("n7", 64L << 20), (status.Node, status.BudgetBytes));
        Assert.StartsWith(dataDir, Assert.Single(prep.Stdout).Split(" path=")[1]);
        Assert.Equal(0, (await s.HpcdataAsync(["noderelease", "risk/sized"], Node(pipe))).Code);
    }

    [Fact]
    public async Task Release_keeps_an_agent_that_another_job_still_pins()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(300_000)), "risk/shared");
        var pipe = s.NewPipe();
        var args = new[] { "nodeprep", "risk/shared", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node") };
        Assert.Equal(0, (await s.HpcdataAsync(args, Node(pipe, "job-a"))).Code);

        // The second run found the agent the first had started: the switches that would configure a new one are named.
        var second = await s.HpcdataAsync([.. args, "--max-rate", "100MB/s"], Node(pipe, "job-b"));
        Assert.Equal(0, second.Code);
        Assert.Contains($"the node agent on '{pipe}' was already running, with its own settings: --cache-hosts, --data-dir, --max-rate apply only to an agent node prep starts", second.Stderr);
        var quiet = await s.HpcdataAsync(["nodeprep", "risk/shared"], Node(pipe, "job-b"));
        Assert.DoesNotContain("already running", quiet.Stderr);

        var a = await s.HpcdataAsync(["noderelease", "risk/shared", "--evict"], Node(pipe, "job-a"));
        Assert.Equal(0, a.Code);
        Assert.Contains("state=in-use", a.Out);
        Assert.Equal(["job-b"], (await s.StatusAsync(pipe)).Copies.Single().Pins);

        // No dataset named, as a Slurm Epilog would call it: every copy job-b pinned.
        var b = await s.HpcdataAsync(["noderelease", "--evict"], Node(pipe, "job-b"));
        Assert.Equal(0, b.Code);
        Assert.Empty(Sandbox.ProcessesMentioning(pipe));
    }

    [Fact]
    public async Task A_dataset_nobody_staged_fails_node_prep_with_its_name_and_leaves_no_pin()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        var r = await s.HpcdataAsync(["nodeprep", "nobody/staged-this", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node")], Node(pipe));
        Assert.Equal(ExitCodes.NotFound, r.Code);
        Assert.Contains("nobody/staged-this", r.Stderr);
        Assert.Contains("not found", r.Stderr);
        Assert.Empty((await s.StatusAsync(pipe)).Copies);
    }

    [Fact]
    public async Task A_node_whose_agent_cannot_start_fails_with_the_agents_reason_and_leaves_no_process()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        var notADirectory = s.WriteFile("plain-file", [1]);
        var r = await s.HpcdataAsync(["nodeprep", "a/b", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(notADirectory, "data")], Node(pipe));
        // A data directory that cannot be created is the node's problem, not an unreachable tier (a prolog would requeue on 69).
        Assert.Equal(ExitCodes.NoSpace, r.Code);
        Assert.Contains("exited during start-up", r.Stderr);
        Assert.Contains("plain-file", r.Stderr); // the agent's own error, from its log
        Assert.Empty(Sandbox.ProcessesMentioning(pipe));

        var fixedRun = await s.HpcdataAsync(["nodeprep", "a/b", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node")], Node(pipe));
        Assert.Contains("not found", fixedRun.Stderr); // the agent starts now; only the dataset is missing
    }

    [Fact]
    public async Task With_a_service_managed_agent_node_prep_does_not_start_another()
    {
        await using var s = new Sandbox();
        var pipe = s.NewPipe();
        var env = Node(pipe);
        env["HPCDATA_AGENT_MANAGED"] = "1";
        var r = await s.HpcdataAsync(["nodeprep", "a/b"], env);
        Assert.Equal(ExitCodes.Unavailable, r.Code);
        Assert.Contains("managed by HPCDATA_AGENT_MANAGED", r.Stderr);
        Assert.Empty(Sandbox.ProcessesMentioning(pipe));
    }

    [Fact]
    public async Task A_cache_tier_down_during_node_prep_is_named_and_the_next_run_works()
    {
        await using var s = new Sandbox();
        var port = FreePorts.Next();
        await s.StartCacheHostAsync(port);
        var data = s.WriteFile("d.bin", Sandbox.RandomBytes(500_000));
        await s.StageAsync(data, "risk/down");
        await s.StopCacheHostsAsync();

        var pipe = s.NewPipe();
        var args = new[] { "nodeprep", "risk/down", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node") };
        var down = await s.HpcdataAsync(args, Node(pipe));
        Assert.Equal(ExitCodes.Unavailable, down.Code);
        Assert.Contains("cache tier is unreachable", down.Stderr);
        Assert.Contains($"127.0.0.1:{port}", down.Stderr);
        Assert.DoesNotContain((await s.StatusAsync(pipe)).Copies, c => c.Pins.Count > 0);

        s.Hosts.Clear();
        await s.StartCacheHostAsync(port);
        await s.StageAsync(data, "risk/down");
        var up = await s.HpcdataAsync(args, Node(pipe));
        Assert.True(up.Code == 0, up.Stderr);
        Assert.Contains("dataset=risk/down", up.Out);
    }

    [Fact]
    public async Task Node_prep_cancelled_mid_fetch_leaves_no_pin_and_the_next_run_completes()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("big.bin", Sandbox.RandomBytes(96 << 20)), "risk/cancel");
        // 96 MB at 24 MB/s: about four seconds of fetching, however fast this machine is.
        await using var slowLink = new ThrottledRelay(s.HostList, 24 << 20);
        var pipe = s.NewPipe();
        var args = new[] { "nodeprep", "risk/cancel", "--cache-hosts", slowLink.Address, "--data-dir", Path.Combine(s.Root, "node") };
        var prep = s.StartHpcdata(args, Node(pipe));

        var fetching = false;
        for (var i = 0; i < 600 && !fetching && !prep.HasExited; i++)
        {
            await Task.Delay(20);
            try { fetching = (await s.StatusAsync(pipe)).Copies.Any(c => c.State != "complete"); }
            catch (Exception e) when (e is IOException or TimeoutException) { }
        }
        Assert.True(fetching, "the fetch was over before it could be cancelled");
        await prep.StopAsync(TimeSpan.FromSeconds(20)); // SIGTERM, as scancel sends
        Assert.Equal(130, prep.ExitCode);
        Assert.Contains("cancelled", prep.StandardErrorTail);

        // The agent finishes the fetch on its own; no pin appears for the cancelled job.
        for (var i = 0; i < 300 && (await s.StatusAsync(pipe)).Copies.Any(c => c.State != "complete"); i++) await Task.Delay(100);
        Assert.All((await s.StatusAsync(pipe)).Copies, c => Assert.Empty(c.Pins));

        var next = await s.HpcdataAsync(args, Node(pipe));
        Assert.True(next.Code == 0, next.Stderr);
        Assert.Contains("bytes=100663296", next.Out);
    }

    [Fact]
    public async Task Missing_job_id_or_dataset_is_a_usage_error()
    {
        await using var s = new Sandbox();
        var noJob = await s.HpcdataAsync(["nodeprep", "a/b"], Node(s.NewPipe(), job: null));
        Assert.Equal(2, noJob.Code);
        Assert.Contains("no job id", noJob.Stderr);
        var noData = await s.HpcdataAsync(["nodeprep"], Node(s.NewPipe()));
        Assert.Equal(2, noData.Code);
        Assert.Contains("no dataset", noData.Stderr);
    }
}
