using System.Text.Json;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cache;

namespace Hpc.Jobs.Tests;

/// <summary><c>hpcdata prestage</c> with the embedded <c>local</c> scheduler, end to end with real processes.</summary>
public class PrestageLocalTests
{
    private const string ShowEnvironment = "echo \"$HPCDATA_DATASET $HPCDATA_VERSION $HPCDATA_JOB_ID $HPCDATA_AGENT_PIPE $HPCDATA_CACHE_HOSTS $HPCDATA_DATASET_PATH\"";

    [Fact]
    public async Task Prestage_stages_prepares_every_node_runs_the_hosts_with_the_job_environment_and_releases()
    {
        await using var s = new Sandbox();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(1_000_000));
        var r = await s.HpcdataAsync(["prestage", data, "--name", "risk/local", "--nodes", "2", "--hosts-per-node", "3", "--job", "job-42",
            "--", "/bin/sh", "-c", ShowEnvironment]);
        Assert.True(r.Code == 0, r.Stderr + r.Out);
        Assert.Contains("job job-42", r.Out);
        Assert.Equal(2, r.Stdout.Count(l => l.Contains("nodeprep") && l.Contains("dataset=risk/local") && l.Contains("bytes=1000000")));
        var hostLines = r.Stdout.Where(l => l.StartsWith("[node")).ToList();
        Assert.Equal(6, hostLines.Count);
        Assert.All(hostLines, l => Assert.Matches(@"risk/local [0-9a-f]{64} job-42 \S+ 127\.0\.0\.1:\d+ /\S+/complete/[0-9a-f]{64}\.data$", l));
        Assert.Equal(2, hostLines.Select(l => l.Split(' ')[4]).Distinct().Count()); // one agent pipe per node
        Assert.Equal(2, hostLines.Select(l => l.Split(' ')[6]).Distinct().Count()); // each node's own copy
        Assert.Equal(2, r.Stdout.Count(l => l.Contains("release") && l.Contains("job=job-42")));
        Assert.Empty(Sandbox.ProcessesMentioning("job-42"));
    }

    [Fact]
    public async Task A_directory_dataset_job_of_Python_workers_reads_each_node_s_tree_through_HPCDATA_DATASET_PATH()
    {
        await using var s = new Sandbox();
        var history = Path.Combine(s.Root, "history");
        var generated = await s.HpcdataAsync(["generate", history, "--data", "history-files", "--size", "1MB", "--instruments", "10"]);
        Assert.True(generated.Code == 0, generated.Stderr);
        var reader = Path.Combine(ToolInstallTests.RepositoryRoot(), "samples", "python", "history_reader.py");

        var r = await s.HpcdataAsync(["prestage", history, "--name", "risk/history", "--nodes", "2", "--job", "job-py", "--", "python3", reader]);

        Assert.True(r.Code == 0, r.Stderr + r.Out);
        var results = r.Stdout.Where(l => l.StartsWith("[node", StringComparison.Ordinal)).Select(l => JsonDocument.Parse(l[(l.IndexOf(']') + 2)..]).RootElement).ToList();
        Assert.Equal(2, results.Count);
        Assert.Equal(2, results.Select(j => j.GetProperty("tree").GetString()).Distinct().Count()); // each node's own tree
        Assert.All(results, j => Assert.Equal(10, j.GetProperty("files").GetInt32()));
        Assert.All(results, j => Assert.Equal(Directory.GetFiles(history).Sum(f => File.ReadAllLines(f).Length - 1), j.GetProperty("rows").GetInt32()));
    }

    [Fact]
    public async Task A_tree_of_python_packages_staged_as_a_dataset_is_what_every_rank_of_the_job_imports()
    {
        await using var s = new Sandbox();
        // Debian's numpy and scipy (.ci/run installs python3-numpy and python3-scipy), copied out as a site would stage
        // them: the job must import them from each node's copy, found on the PYTHONPATH that node prep's environment sets.
        const string system = "/usr/lib/python3/dist-packages";
        Assert.True(Directory.Exists(Path.Combine(system, "numpy")) && Directory.Exists(Path.Combine(system, "scipy")),
            $"numpy and scipy are not in {system}: install python3-numpy and python3-scipy");
        var tree = Path.Combine(s.Root, "sw");
        Directory.CreateDirectory(tree);
        using (var copy = System.Diagnostics.Process.Start("cp", ["-a", Path.Combine(system, "numpy"), Path.Combine(system, "scipy"), tree]))
        {
            await copy.WaitForExitAsync();
            Assert.Equal(0, copy.ExitCode);
        }
        var job = Path.Combine(ToolInstallTests.RepositoryRoot(), "samples", "python", "risk_numpy.py");

        var r = await s.HpcdataAsync(["prestage", tree, "--name", "sw/numpy", "--nodes", "2", "--hosts-per-node", "2", "--job", "job-np",
            "--", "python3", job], timeout: TimeSpan.FromMinutes(5));

        Assert.True(r.Code == 0, r.Stderr + r.Out);
        var ranks = r.Stdout.Where(l => l.StartsWith("[node", StringComparison.Ordinal)).Select(l => JsonDocument.Parse(l[(l.IndexOf(']') + 2)..]).RootElement).ToList();
        Assert.Equal(4, ranks.Count);
        Assert.All(ranks, j => Assert.True(j.GetProperty("from_node_copy").GetBoolean(), j.ToString()));
        Assert.All(ranks, j => Assert.StartsWith(j.GetProperty("tree").GetString() + "/numpy/", j.GetProperty("sources").GetProperty("numpy").GetString()));
        Assert.Equal(2, ranks.Select(j => j.GetProperty("tree").GetString()).Distinct().Count()); // each node's own copy
        Assert.DoesNotContain(ranks, j => j.GetProperty("tree").GetString()!.StartsWith(tree, StringComparison.Ordinal));
        // The same portfolio and seed per rank index: the packages compute, not only import.
        Assert.All(ranks, j => Assert.InRange(j.GetProperty("var99_monte_carlo").GetInt64(), 0.9 * j.GetProperty("var99_normal").GetInt64(), 1.1 * j.GetProperty("var99_normal").GetInt64()));
    }

    [Fact]
    public async Task A_virtual_environment_staged_as_a_dataset_is_the_python_the_job_runs()
    {
        await using var s = new Sandbox();
        var env = Path.Combine(s.Root, "env");
        using (var venv = System.Diagnostics.Process.Start("/usr/bin/python3", ["-m", "venv", "--without-pip", env]))
        {
            await venv.WaitForExitAsync();
            Assert.Equal(0, venv.ExitCode);
        }
        var site = Directory.GetDirectories(Path.Combine(env, "lib")).Single();
        Directory.CreateDirectory(Path.Combine(site, "site-packages", "riskkit"));
        File.WriteAllText(Path.Combine(site, "site-packages", "riskkit", "__init__.py"), "VALUE = 42\n");

        // A bare `python`: the job's PATH must lead to the environment's own interpreter on the node.
        var r = await s.HpcdataAsync(["prestage", env, "--name", "sw/venv", "--nodes", "2", "--job", "job-venv",
            "--", "/bin/sh", "-c", "python -c 'import sys, riskkit; print(riskkit.VALUE, sys.prefix, riskkit.__file__)'; echo \"$VIRTUAL_ENV\""]);

        Assert.True(r.Code == 0, r.Stderr + r.Out);
        var lines = r.Stdout.Where(l => l.StartsWith("[node", StringComparison.Ordinal)).Select(l => l[(l.IndexOf(']') + 2)..]).ToList();
        Assert.Equal(4, lines.Count);
        var imports = lines.Where(l => l.StartsWith("42 ", StringComparison.Ordinal)).Select(l => l.Split(' ')).ToList();
        Assert.Equal(2, imports.Count);
        Assert.All(imports, f => Assert.StartsWith(f[1] + "/lib/", f[2])); // the package came from the environment on the node
        Assert.Equal(2, imports.Select(f => f[1]).Distinct().Count());     // each node's own copy
        Assert.DoesNotContain(imports, f => f[1] == env);
        Assert.Equal(imports.Select(f => f[1]).Order(), lines.Where(l => !l.StartsWith("42 ", StringComparison.Ordinal)).Order());
    }

    [Fact]
    public async Task With_fanout_mpi_the_local_nodes_are_prepared_by_one_mpi_job_that_shares_the_fetching()
    {
        await using var s = new Sandbox();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(3_000_000, seed: 21));
        var r = await s.HpcdataAsync(["prestage", data, "--name", "risk/fan", "--nodes", "3", "--fanout", "mpi", "--job", "job-fan",
            "--", "/bin/sh", "-c", ShowEnvironment]);
        Assert.True(r.Code == 0, r.Stderr + r.Out);
        var preps = r.Stdout.Where(l => l.Contains("nodeprep") && l.Contains("dataset=risk/fan") && l.Contains("bytes=3000000")).ToList();
        Assert.Equal(3, preps.Count);
        // A node that fell back to a direct fetch is still prepared, but it left the exchange: its reason is on stderr.
        Assert.True(preps.All(l => l.Contains("fanout=mpi ranks=3")), string.Join("\n", r.Stdout) + "\n" + r.Stderr);
        Assert.Equal(3, r.Stdout.Count(l => l.StartsWith("[node")));
        Assert.Empty(Sandbox.ProcessesMentioning("job-fan"));
    }

    [Fact]
    public async Task Fanout_auto_chooses_mpi_on_slow_links_and_direct_fetch_on_fast_ones_and_says_why()
    {
        await using var s = new Sandbox();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(256_000, seed: 22));
        // 3 nodes and one cache host: direct fetch sends the data 3 times over the host's link, the ring about once plus
        // its start-up. At 8 Mbit/s that start-up is worth it; at the rate measured on loopback it is not (256 KB keeps
        // it so down to about 5 MB/s, which even a loopback measured on a busy machine exceeds).
        var slow = await s.HpcdataAsync(["prestage", data, "--name", "risk/auto", "--nodes", "3", "--link-rate", "8mbit", "--job", "job-auto-slow",
            "--", "/bin/sh", "-c", ShowEnvironment]);
        Assert.True(slow.Code == 0, slow.Stderr + slow.Out);
        Assert.Contains(slow.Stdout, l => l.StartsWith("prestage: fan-out auto → mpi: 3 node(s) of ") && l.Contains(" 1 cache host(s)") && l.Contains("(--link-rate)"));
        Assert.Equal(3, slow.Stdout.Count(l => l.Contains("nodeprep") && l.Contains("fanout=mpi ranks=3")));

        var fast = await s.HpcdataAsync(["prestage", data, "--name", "risk/auto", "--nodes", "3", "--job", "job-auto-fast",
            "--", "/bin/sh", "-c", ShowEnvironment]);
        Assert.True(fast.Code == 0, fast.Stderr + fast.Out);
        Assert.Contains(fast.Stdout, l => l.StartsWith("prestage: fan-out auto → none: 3 node(s)") && l.Contains("(measured from here)"));
        Assert.Equal(3, fast.Stdout.Count(l => l.Contains("nodeprep") && l.Contains("dataset=risk/auto")));
        Assert.DoesNotContain(fast.Stdout, l => l.Contains("fanout=mpi"));
        Assert.Empty(Sandbox.ProcessesMentioning("job-auto"));
    }

    [Fact]
    public async Task When_a_fanout_rank_dies_the_nodes_it_left_unprepared_are_completed_by_direct_fetch_and_the_job_runs()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        const int size = 12 << 20;
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(size, seed: 23));
        await s.StageAsync(data, "risk/die");
        await using var slowLink = new ThrottledRelay(s.HostList, 512 << 10);
        var prestage = s.StartHpcdata(["prestage", "risk/die", "--cache-hosts", slowLink.Address, "--nodes", "3", "--fanout", "mpi",
            "--job", "job-die", "--", "/bin/sh", "-c", ShowEnvironment]);
        await Sandbox.KillRankOnceTheExchangeMovesAsync("job-die", rank: 1, ranks: 3, TimeSpan.FromSeconds(60), prestage);
        var code = await prestage.WaitForExitAsync(TimeSpan.FromMinutes(3));
        var output = string.Join("\n", prestage.StandardOutput);

        Assert.True(code == 0, prestage.StandardErrorTail + output);
        Assert.Contains("completing them by direct fetch", output);
        Assert.Equal(3, prestage.StandardOutput.Count(l => l.Contains("nodeprep") && l.Contains("dataset=risk/die") && l.Contains($"bytes={size}")));
        Assert.Equal(3, prestage.StandardOutput.Count(l => l.StartsWith("[node")));
        Assert.Empty(Sandbox.ProcessesMentioning("job-die"));
    }

    [Fact]
    public async Task Unchanged_content_is_not_staged_again_and_a_failing_job_still_releases_its_nodes()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(700_000));
        var first = await s.HpcdataAsync(["prestage", data, "--name", "risk/again", "--cache-hosts", s.HostList, "--", "true"]);
        Assert.True(first.Code == 0, first.Stderr);
        Assert.Contains("staged", first.Out);

        var second = await s.HpcdataAsync(["prestage", data, "--name", "risk/again", "--cache-hosts", s.HostList, "--job", "job-fails", "--", "/bin/sh", "-c", "exit 7"]);
        Assert.Equal(7, second.Code);
        Assert.Contains("unchanged: nothing moved", second.Out);
        Assert.Contains("failed (exit 7)", second.Out);
        Assert.Contains(second.Stdout, l => l.Contains("release") && l.Contains("job=job-fails"));

        // By name, once staged.
        var byName = await s.HpcdataAsync(["prestage", "risk/again", "--cache-hosts", s.HostList, "--", "true"]);
        Assert.True(byName.Code == 0, byName.Stderr);
        Assert.Contains("already staged", byName.Out);
    }

    [Fact]
    public async Task A_path_that_does_not_exist_or_a_dataset_nobody_staged_is_refused_before_anything_starts()
    {
        await using var s = new Sandbox();
        var missing = await s.HpcdataAsync(["prestage", "/no/such/prices.csv", "--name", "risk/x", "--", "true"]);
        Assert.Equal(ExitCodes.NotFound, missing.Code);
        Assert.Contains("'/no/such/prices.csv' does not exist", missing.Stderr);

        await s.StartCacheHostAsync();
        var unknown = await s.HpcdataAsync(["prestage", "nobody/staged-this", "--cache-hosts", s.HostList, "--", "true"]);
        Assert.Equal(ExitCodes.NotFound, unknown.Code);
        Assert.Contains("'nobody/staged-this' has not been staged", unknown.Stderr);

        var noCommand = await s.HpcdataAsync(["prestage", "nobody/staged-this"]);
        Assert.Equal(2, noCommand.Code);
        Assert.Contains("no job command", noCommand.Stderr);
    }

    [Fact]
    public async Task Lifetime_job_removes_the_version_when_the_last_job_using_it_ends()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(400_000));
        var staged = await s.StageAsync(data, "risk/short");
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = s.Hosts.ToList() });
        await tier.Catalog.AddJobAsync(staged.Version, "other-job");

        var r = await s.HpcdataAsync(["prestage", data, "--name", "risk/short", "--cache-hosts", s.HostList, "--lifetime", "job", "--job", "j1", "--", "true"]);
        Assert.True(r.Code == 0, r.Stderr);
        Assert.Contains("kept for job(s) other-job", r.Out);
        Assert.Equal(staged.Version, await tier.GetLatestAsync("risk/short"));

        var last = await s.HpcdataAsync(["remove", "risk/short", "--job", "other-job", "--cache-hosts", s.HostList]);
        Assert.Equal(0, last.Code);
        Assert.Null(await tier.GetLatestAsync("risk/short"));
        Assert.Equal(ErrorCode.NotFound, (await Assert.ThrowsAsync<CommonDataException>(() => tier.ResolveAsync("risk/short", staged.Version))).Code);

        // Removing it again finds nothing: not found, as list and get say it.
        var gone = await s.HpcdataAsync(["remove", "risk/short", "--cache-hosts", s.HostList]);
        Assert.Equal(ExitCodes.NotFound, gone.Code);
        Assert.Contains("nothing to remove", gone.Stderr);
    }

    [Fact]
    public async Task Prestage_cancelled_during_node_prep_releases_and_stops_everything()
    {
        await using var s = new Sandbox();
        var data = s.WriteFile("big.bin", Sandbox.RandomBytes(96 << 20));
        var prestage = s.StartHpcdata(["prestage", data, "--name", "risk/interrupt", "--nodes", "2", "--job", "job-cancelled", "--", "sleep", "60"]);
        for (var i = 0; i < 1200 && !prestage.StandardOutput.Any(l => l.Contains("job job-cancelled")); i++) await Task.Delay(50);
        Assert.Contains(prestage.StandardOutput, l => l.Contains("job job-cancelled"));
        await Task.Delay(300);
        await prestage.StopAsync(TimeSpan.FromSeconds(60));
        Assert.Equal(130, prestage.ExitCode);
        Assert.Empty(Sandbox.ProcessesMentioning("job-cancelled"));
        Assert.Empty(Sandbox.ProcessesMentioning($"hd{prestage.Id}"));
        Assert.DoesNotContain(prestage.StandardOutput, l => l.StartsWith("[node"));
    }

    [Fact]
    public async Task The_soa_sample_serves_requests_from_the_common_data_and_the_client_times_them()
    {
        await using var s = new Sandbox();
        var csv = Path.Combine(s.Root, "prices.csv");
        Assert.Equal(0, (await s.HpcdataAsync(["generate", csv, "--size", "2MB"])).Code);
        // The sample service is a program of its own, started by the job as any user's service would be.
        string[] sample = [ComponentProcess.DotnetHost(), ComponentLocator.Find("Hpc.Samples")];
        var r = await s.HpcdataAsync(["prestage", csv, "--name", "risk/soa", "--nodes", "2", "--hosts-per-node", "2",
            "--client", string.Join(' ', sample) + " soa-client --requests 200", "--", .. sample, "soa-host"]);
        Assert.True(r.Code == 0, r.Stderr + r.Out);
        Assert.Contains(r.Stdout, l => l.Contains("soa-client: 200 requests to 4 service hosts") && !l.Contains("history of 0 days"));
        Assert.Equal(4, r.Stdout.Count(l => l.Contains("opened via map")));
        Assert.Empty(Sandbox.ProcessesMentioning("soa-host"));
    }

    [Fact]
    public async Task A_submitted_job_gets_the_agent_pipe_given_on_the_command_line_not_the_submitting_shells()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(100_000)), "risk/dry");
        // The login shell's variable names this machine's agent; the nodes have their own setting.
        var shell = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = "/home/me/laptop-agent" };
        string[] args = ["prestage", "risk/dry", "--scheduler", "slurm", "--cache-hosts", s.HostList, "--fanout", "none", "--dry-run"];

        var inherited = await s.HpcdataAsync([.. args, "--", "my-service"], shell);
        Assert.True(inherited.Code == 0, inherited.Stderr);
        Assert.Contains("#SBATCH", inherited.Out);
        Assert.DoesNotContain("HPCDATA_AGENT_PIPE=", inherited.Out);
        Assert.DoesNotContain("laptop-agent", inherited.Out);

        var given = await s.HpcdataAsync([.. args, "--pipe", "/run/hpcdata/agent", "--", "my-service"], shell);
        Assert.True(given.Code == 0, given.Stderr);
        Assert.Contains("HPCDATA_AGENT_PIPE=", given.Out);
        Assert.Contains("/run/hpcdata/agent", given.Out);
    }
}
