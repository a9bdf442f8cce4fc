using System.Runtime.Versioning;
using Hpc.CommonData;
using Hpc.CommonData.Access;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Commands;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Staging inside the scheduler: a real slurmctld with <c>BurstBufferType=burst_buffer/lua</c> runs
/// deploy/slurm/burst_buffer.lua (only its two site lines set), a user's batch script names its dataset with
/// <c>#BB_LUA hpcdata NAME</c>, and the node's running agent (with <c>--peer-listen</c>) holds the verified copy before
/// the script's first line; the script needs nothing of its own. A name that does not resolve, or a malformed
/// directive, is refused by sbatch with one line.
/// </summary>
[Collection(SlurmTests.Collection)]
[SupportedOSPlatform("linux")] // Slurm's daemons and the job user's account
public sealed class SlurmBurstBufferTests
{
    [Fact]
    public async Task A_batch_script_that_names_its_dataset_starts_with_the_nodes_copy_in_its_environment_and_bad_directives_are_refused_at_submit()
    {
        if (!SlurmTests.Available(out var why)) { Console.Error.WriteLine($"Slurm test not run: {why}"); return; }
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var bytes = Sandbox.RandomBytes(3_000_000, seed: 91);
        var r = await s.RunAsync("Hpc.Stager", [s.WriteFile("prices.bin", bytes), "--name", "risk/bb", "--cache-hosts", s.HostList, "--readers", "all", "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var version = System.Text.Json.JsonDocument.Parse(r.Stdout.Last()).RootElement.GetProperty("version").GetString()!;
        var (slurm, jobs, dataDir) = await StartSiteAsync(s);
        await using var site = slurm;

        // Refused at submit, each with one line naming what is wrong; no job is queued.
        var unknown = await Submit(slurm, jobs, "#BB_LUA hpcdata risk/no-such-dataset\necho never\n");
        Assert.NotEqual(0, unknown.Code);
        Assert.True(unknown.Output.Contains("risk/no-such-dataset"), unknown.Output);
        var malformed = await Submit(slurm, jobs, "#BB_LUA hpcdata risk/bb extra-word\necho never\n");
        Assert.NotEqual(0, malformed.Code);
        Assert.True(malformed.Output.Contains("one dataset per line"), malformed.Output);

        // A user's own script: nothing in it but the directive and its work.
        var submitted = await Submit(slurm, jobs, "#BB_LUA hpcdata risk/bb\necho \"dataset=$HPCDATA_DATASET path=$HPCDATA_DATASET_PATH\"\necho \"bytes=$(wc -c < \"$HPCDATA_DATASET_PATH\")\"\n");
        Assert.True(submitted.Code == 0, submitted.Output + slurm.Logs());
        var job = submitted.Output.Trim().Split(' ').Last();
        var output = await WaitForJobAsync(slurm, jobs, job, TimeSpan.FromMinutes(3));
        Assert.Contains($"dataset=risk/bb@{version} path={Path.Combine(dataDir, "complete", version + ".data")}", output);
        Assert.Contains($"bytes={bytes.Length}", output);

        // Teardown dropped the job's reference on the cache tier and its state. It drops the references first and then
        // the state, so both are waited for: on a loaded machine the hook can be between the two when the tier has none.
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var state = Path.Combine(slurm.Directory, "bb", job + ".datasets");
        for (var i = 0; i < 120 && ((await tier.Catalog.JobsAsync(version)).Count > 0 || File.Exists(state)); i++) await Task.Delay(250);
        Assert.Empty(await tier.Catalog.JobsAsync(version));
        Assert.False(File.Exists(state));
    }

    [Fact]
    public async Task A_job_whose_node_has_no_agent_answering_never_starts_and_says_which_node_is_not_ready()
    {
        if (!SlurmTests.Available(out var why)) { Console.Error.WriteLine($"Slurm test not run: {why}"); return; }
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var r = await s.RunAsync("Hpc.Stager", [s.WriteFile("prices.bin", Sandbox.RandomBytes(1_000_000, seed: 93)), "--name", "risk/bb-down", "--cache-hosts", s.HostList, "--readers", "all", "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var key = AgentsNodePrepTests.KeyFile(s);
        PeerChannelTests.EnsureUser(User);
        string? jobs = null;
        // No agent listens on the node's peer port: the node's agent is down.
        await using var slurm = await SlurmTests.SingleNodeSlurm.StartAsync(s, "BurstBufferType=burst_buffer/lua", dir => jobs = Install(s, dir, key, FreePorts.Next(), Path.Combine(dir, "node-data")));

        var submitted = await Submit(slurm, jobs!, "#BB_LUA hpcdata risk/bb-down\necho started\n");
        Assert.True(submitted.Code == 0, submitted.Output + slurm.Logs());
        var job = submitted.Output.Trim().Split(' ').Last();
        // The job goes back to the queue with the hook's reason, naming the node; its script never runs.
        var clock = System.Diagnostics.Stopwatch.StartNew();
        string shown;
        while (!(shown = (await slurm.RunAsync("scontrol", "show", "job", job)).Output).Contains("Reason=Burst_buffer_pre_run_error"))
        {
            Assert.True(clock.Elapsed < TimeSpan.FromMinutes(2), $"job {job} never said its node was not ready:\n{shown}\n{slurm.Logs()}");
            await Task.Delay(500);
        }
        // Requeued: pending again (a moment's COMPLETING or REQUEUED on the way), never running, its script never run.
        Assert.Matches("JobState=(PENDING|REQUEUED|REQUEUE_HOLD|COMPLETING)", shown);
        Assert.Matches($"SystemComment=.*pre_run: hpcdata: no agent answered .*{System.Net.Dns.GetHostName()}:", shown);
        await Task.Delay(TimeSpan.FromSeconds(3));
        Assert.False(File.Exists(Path.Combine(jobs!, $"slurm-{job}.out")) && File.ReadAllText(Path.Combine(jobs!, $"slurm-{job}.out")).Contains("started"), shown);
        Assert.DoesNotContain("JobState=RUNNING", (await slurm.RunAsync("scontrol", "show", "job", job)).Output);
        await slurm.RunAsync("scancel", job);
    }

    [Fact]
    public async Task A_job_that_names_a_file_or_a_directory_of_its_users_starts_with_it_staged_as_theirs_and_one_the_user_may_not_read_is_never_staged()
    {
        if (!SlurmTests.Available(out var why)) { Console.Error.WriteLine($"Slurm test not run: {why}"); return; }
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var (slurm, jobs, _) = await StartSiteAsync(s);
        await using var site = slurm;
        var uid = UnixAccounts.UserId(User)!.Value;

        // The user's own file, which only they may read: the controller stages it because the user could. Its name has a
        // space, quoted in the directive as in a shell.
        var bytes = Sandbox.RandomBytes(2_000_000, seed: 97);
        var mine = Path.Combine(jobs, "Positions 2026.bin");
        File.WriteAllBytes(mine, bytes);
        Chown(mine, User);
        File.SetUnixFileMode(mine, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var submitted = await Submit(slurm, jobs, $"#BB_LUA hpcdata stage '{mine}'\necho \"dataset=$HPCDATA_DATASET\"\necho \"sum=$(sha256sum < \"$HPCDATA_DATASET_PATH\" | cut -c1-64)\"\n");
        Assert.True(submitted.Code == 0, submitted.Output + slurm.Logs());
        var output = await WaitForJobAsync(slurm, jobs, submitted.Output.Trim().Split(' ').Last(), TimeSpan.FromMinutes(3));
        Assert.Contains($"dataset={User}/positions-2026.bin@", output);
        Assert.Contains($"sum={Convert.ToHexStringLower(System.Security.Cryptography.SHA256.HashData(bytes))}", output);
        // Theirs alone: the version names the job's user as its only reader.
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var (_, manifest) = await tier.Catalog.ResolveAsync($"{User}/positions-2026.bin", null);
        Assert.True(manifest.Readers!.Admits(uid, []));
        Assert.False(manifest.Readers.Admits(uid + 1, []));

        // A directory of theirs, which only they may list: the node's copy is the tree, at the same variable.
        var model = Directory.CreateDirectory(Path.Combine(jobs, "Model")).FullName;
        var weights = Sandbox.RandomBytes(1_000_000, seed: 99);
        File.WriteAllBytes(Path.Combine(model, "weights.bin"), weights);
        Directory.CreateDirectory(Path.Combine(model, "conf"));
        File.WriteAllText(Path.Combine(model, "conf", "run.toml"), "steps = 10\n");
        Chown(model, User, recursive: true);
        File.SetUnixFileMode(model, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        var tree = await Submit(slurm, jobs, $"#BB_LUA hpcdata stage {model}/\necho \"dataset=$HPCDATA_DATASET\"\n" +
            "echo \"conf=$(cat \"$HPCDATA_DATASET_PATH/conf/run.toml\")\"\necho \"sum=$(sha256sum < \"$HPCDATA_DATASET_PATH/weights.bin\" | cut -c1-64)\"\n");
        Assert.True(tree.Code == 0, tree.Output + slurm.Logs());
        output = await WaitForJobAsync(slurm, jobs, tree.Output.Trim().Split(' ').Last(), TimeSpan.FromMinutes(3));
        Assert.Contains($"dataset={User}/model@", output);
        Assert.Contains("conf=steps = 10", output);
        Assert.Contains($"sum={Convert.ToHexStringLower(System.Security.Cryptography.SHA256.HashData(weights))}", output);

        // A file only root may read: the job is never run and says why; nothing of it reaches the cache tier.
        var secret = Path.Combine(jobs, "secret.bin");
        File.WriteAllBytes(secret, Sandbox.RandomBytes(100_000, seed: 98));
        File.SetUnixFileMode(secret, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var refused = await Submit(slurm, jobs, $"#BB_LUA hpcdata stage {secret}\necho started\n");
        if (refused.Code == 0)
        {
            // Slurm 22.05 gives the hook no uid at submit: the check comes while the job is set up, and holds it.
            var job = refused.Output.Trim().Split(' ').Last();
            var clock = System.Diagnostics.Stopwatch.StartNew();
            string shown;
            while (!(shown = (await slurm.RunAsync("scontrol", "show", "job", job)).Output).Contains("may not stage"))
            {
                Assert.True(clock.Elapsed < TimeSpan.FromMinutes(2), $"job {job} never said the user may not stage the file:\n{shown}\n{slurm.Logs()}");
                await Task.Delay(500);
            }
            Assert.Contains("permissions do not let the user read", shown);
            Assert.DoesNotContain("JobState=RUNNING", shown);
            await slurm.RunAsync("scancel", job);
        }
        else Assert.True(refused.Output.Contains("may not stage"), refused.Output);
        await Assert.ThrowsAsync<CommonDataException>(() => tier.Catalog.ResolveAsync($"{User}/secret.bin", null));
    }

    private static void Chown(string path, string user, bool recursive = false)
    {
        using var p = System.Diagnostics.Process.Start("chown", recursive ? ["-R", user, path] : [user, path])!;
        p.WaitForExit();
        Assert.Equal(0, p.ExitCode);
    }

    /// <summary>
    /// A site as it runs staging inside Slurm: the controller with the plugin and the deploy files, the job user's account
    /// (Slurm refuses burst buffers to root), and the node's agent running before any job, which the Epilog's
    /// noderelease talks to. Returns the controller, the folder for the user's jobs and the agent's data directory.
    /// </summary>
    private static async Task<(SlurmTests.SingleNodeSlurm Slurm, string Jobs, string DataDir)> StartSiteAsync(Sandbox s)
    {
        var key = AgentsNodePrepTests.KeyFile(s);
        var port = FreePorts.Next();
        PeerChannelTests.EnsureUser(User);
        string? agentPipe = null, dataDir = null, jobs = null;
        var slurm = await SlurmTests.SingleNodeSlurm.StartAsync(s, "BurstBufferType=burst_buffer/lua", dir =>
        {
            agentPipe = Path.Combine(dir, "agent.sock");
            dataDir = Path.Combine(dir, "node-data");
            jobs = Install(s, dir, key, port, dataDir);
        });
        var agent = s.Track(ComponentProcess.Start(new NodeAgentOptions
        {
            Pipe = agentPipe!, DataDirectory = dataDir!, NodeName = "node0", PeerListen = $"0.0.0.0:{port}", PeerKeyFile = key,
            CacheTier = { Hosts = [.. s.Hosts] },
        }, name: "agent"));
        await agent.WaitReadyAsync(Sandbox.Ready);
        return (slurm, jobs!, dataDir!);
    }

    /// <summary>The deploy files as a site installs them (only the two site lines set) and a folder for the user's jobs.</summary>
    private static string Install(Sandbox s, string dir, string key, int port, string dataDir)
    {
        var lua = File.ReadAllText(Path.Combine(ToolInstallTests.RepositoryRoot(), "deploy", "slurm", "burst_buffer.lua"));
        var hpcdata = string.Join(' ', ComponentLocator.Command("hpcdata"));
        var site = $"--peer-key-file {key} --state-dir {dir}/bb --agents-port {port} --agent-data-dir {dataDir} --cache-hosts {s.HostList} --peer-timeout 2s --stall-timeout 10s";
        lua = lua.Replace("local hpcdata = \"/usr/bin/hpcdata\"", $"local hpcdata = \"HPCDATA_STATE_DIR={s.StateDirectory} {hpcdata}\"")
                 .Replace("local site = \"--peer-key-file /etc/hpcdata/peer.key --state-dir /var/spool/hpcdata/burst-buffer\"", $"local site = \"{site}\"");
        Assert.Contains(site, lua);
        File.WriteAllText(Path.Combine(dir, "burst_buffer.lua"), lua);
        File.Copy(Path.Combine(ToolInstallTests.RepositoryRoot(), "deploy", "slurm", "burst_buffer.conf"), Path.Combine(dir, "burst_buffer.conf"));
        var jobs = Path.Combine(dir, "jobs");
        Directory.CreateDirectory(jobs);
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(jobs, (UnixFileMode)0b111_111_111 | UnixFileMode.StickyBit);
        return jobs;
    }

    private const string User = "hpcd-bb-user";

    private static async Task<(int Code, string Output)> Submit(SlurmTests.SingleNodeSlurm slurm, string jobs, string body)
    {
        var script = Path.Combine(jobs, $"job-{Guid.NewGuid():n}.sh");
        File.WriteAllText(script, "#!/bin/sh\n" + body);
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(script, (UnixFileMode)0b110_100_100);
        return await slurm.RunAsync("runuser", "-u", User, "--", "sbatch", "--chdir", jobs, "--output", Path.Combine(jobs, "slurm-%j.out"), script);
    }

    /// <summary>Waits until the job has left the queue and returns its output.</summary>
    private static async Task<string> WaitForJobAsync(SlurmTests.SingleNodeSlurm slurm, string jobs, string job, TimeSpan timeout)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var output = Path.Combine(jobs, $"slurm-{job}.out");
        while (await slurm.RunAsync("squeue", "-h", "-o", "%i %T %r", "-j", job) is var q && (q.Output.Split('\n').Any(l => l.Trim().StartsWith(job + " ")) || !File.Exists(output)))
        {
            if (clock.Elapsed > timeout) throw new TimeoutException($"job {job} still queued or running after {timeout} ({q.Output.Trim()}):\n{slurm.Logs()}");
            await Task.Delay(500);
        }
        return await File.ReadAllTextAsync(output);
    }
}

/// <summary>The directive a job script names its datasets with, read as the burst buffer hooks read it.</summary>
public sealed class BurstBufferDirectiveTests
{
    [Fact]
    public void Each_directive_names_one_dataset_and_lines_for_other_tools_are_left_alone()
    {
        var found = BurstBufferCommand.Directives(["#!/bin/sh", "#BB_LUA hpcdata risk/prices", "#BB_LUA othertool --size 10G", "#BB_LUA hpcdata ref/curves@3f2a", "echo #BB_LUA hpcdata x/y"]);
        Assert.Equal([("risk/prices", (string?)null), ("ref/curves", "3f2a")], found.Select(f => (f.Dataset!.Value.Name, f.Dataset!.Value.Version)));
    }

    [Fact]
    public void A_stage_line_names_an_absolute_file_or_directory_that_the_jobs_user_will_own_under_its_own_name_or_one_given()
    {
        var found = BurstBufferCommand.Directives(["#BB_LUA hpcdata stage /scratch/alice/Positions_2026.CSV", "#BB_LUA hpcdata stage /scratch/alice/p.bin book-a", "#BB_LUA hpcdata risk/prices"]);
        Assert.Equal([("/scratch/alice/Positions_2026.CSV", "alice/positions_2026.csv"), ("/scratch/alice/p.bin", "alice/book-a"), (null, "risk/prices")],
            found.Select(f => (f.SourcePath, f.NameFor("alice"))));
        Assert.Equal("my-file-.txt", BurstBufferDirective.NameOfFile("/x/.My File!.txt"));
        Assert.Equal("model", BurstBufferDirective.NameOfFile("/scratch/alice/Model/"));
    }

    [Fact]
    public void A_path_with_spaces_is_written_as_in_a_shell_quoted_or_escaped_and_nothing_in_it_is_expanded()
    {
        var found = BurstBufferCommand.Directives([
            "#BB_LUA hpcdata stage '/scratch/alice/Q3 positions.csv'",
            "#BB_LUA hpcdata stage \"/scratch/alice/say \\\"hi\\\" $HOME.bin\" said",
            "#BB_LUA hpcdata stage /scratch/alice/two\\ words.bin two",
            "#BB_LUA   hpcdata   stage   '/scratch/alice/*.bin'   glob",
        ]);
        Assert.Equal([("/scratch/alice/Q3 positions.csv", "alice/q3-positions.csv"), ("/scratch/alice/say \"hi\" $HOME.bin", "alice/said"),
                      ("/scratch/alice/two words.bin", "alice/two"), ("/scratch/alice/*.bin", "alice/glob")],
            found.Select(f => (f.SourcePath, f.NameFor("alice"))));
    }

    [Fact]
    public void An_unclosed_quote_in_our_line_is_refused_naming_it_and_another_tools_line_is_left_alone()
    {
        var e = Assert.Throws<FormatException>(() => BurstBufferCommand.Directives(["#!/bin/sh", "#BB_LUA hpcdata stage '/scratch/a b.bin"]));
        Assert.Contains("line 2", e.Message);
        Assert.Contains("is not closed", e.Message);
        Assert.Empty(BurstBufferCommand.Directives(["#BB_LUA othertool --label 'unclosed"]));
    }

    [Theory]
    [InlineData("#BB_LUA hpcdata stage", "one file or directory per line")]
    [InlineData("#BB_LUA hpcdata stage scratch/p.bin", "not an absolute path")]
    [InlineData("#BB_LUA hpcdata stage /scratch/p.bin risk/p", "cannot name the staged file")]
    [InlineData("#BB_LUA hpcdata stage /scratch/p.bin a b", "one file or directory per line")]
    public void A_malformed_stage_line_is_refused_naming_its_line(string directive, string error)
    {
        var e = Assert.Throws<FormatException>(() => BurstBufferCommand.Directives(["#!/bin/sh", directive]));
        Assert.Contains("line 2", e.Message);
        Assert.Contains(error, e.Message);
    }

    [Fact]
    public void Two_files_staged_under_one_name_are_refused()
    {
        var e = Assert.Throws<FormatException>(() => BurstBufferCommand.Directives(["#BB_LUA hpcdata stage /a/p.bin", "#BB_LUA hpcdata stage /b/p.bin"]));
        Assert.Contains("named twice", e.Message);
    }

    [Theory]
    [InlineData("#BB_LUA hpcdata", "one dataset per line")]
    [InlineData("#BB_LUA hpcdata a/b c/d", "one dataset per line")]
    [InlineData("#BB_LUA hpcdata risk/prices@", "no version after @")]
    [InlineData("#BB_LUA hpcdata ../etc", "line 2")]
    public void A_malformed_directive_is_refused_naming_its_line(string directive, string error)
    {
        var e = Assert.Throws<FormatException>(() => BurstBufferCommand.Directives(["#!/bin/sh", directive]));
        Assert.Contains(error, e.Message);
    }

    [Fact]
    public void A_dataset_named_twice_is_refused()
    {
        var e = Assert.Throws<FormatException>(() => BurstBufferCommand.Directives(["#BB_LUA hpcdata a/b", "#BB_LUA hpcdata a/b@1234"]));
        Assert.Contains("named twice", e.Message);
    }
}

/// <summary>prestage where the site's Slurm stages data itself: the job it writes names its data in a directive and runs no
/// node-prep step; the site says so once, in the client settings file every user's prestage reads.</summary>
public sealed class PrestageBurstBufferTests
{
    [Fact]
    public async Task Where_the_site_file_says_slurm_stages_the_data_the_job_names_it_in_a_directive_and_runs_no_node_prep_step()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(100_000, seed: 95)), "risk/bbdry");
        string[] args = ["prestage", "risk/bbdry", "--scheduler", "slurm", "--cache-hosts", s.HostList, "--dry-run", "--", "my-service"];
        var site = s.WriteFile("client.conf", System.Text.Encoding.UTF8.GetBytes("slurm-staging = burst-buffer\n"));

        var staging = await s.HpcdataAsync(args, new Dictionary<string, string?> { ["HPCDATA_CLIENT_CONFIG"] = site });
        Assert.True(staging.Code == 0, staging.Stderr);
        Assert.Contains($"#BB_LUA hpcdata risk/bbdry@{staged.Version}", staging.Out);
        Assert.DoesNotContain("nodeprep", staging.Out);
        Assert.Contains("noderelease", staging.Out); // the job still lets go of its pins on every way out

        // Without the setting, the job prepares its nodes in its first step, as before.
        var step = await s.HpcdataAsync(args);
        Assert.True(step.Code == 0, step.Stderr);
        Assert.DoesNotContain("#BB_LUA", step.Out);
        Assert.Matches(@"srun[^\n]*nodeprep", step.Out);

        // Where the agents run as a service: one request from the batch script through its node's agent, no job step.
        var agents = await s.HpcdataAsync([.. args[..^2], "--slurm-staging", "agents", "--", "my-service"]);
        Assert.True(agents.Code == 0, agents.Stderr);
        Assert.Contains("nodeprep --fanout agents --agents \"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | paste -sd, -)\"", agents.Out);
        Assert.DoesNotMatch(@"srun[^\n]*nodeprep", agents.Out);

        var bad = await s.HpcdataAsync([.. args[..^2], "--slurm-staging", "lua", "--", "my-service"]);
        Assert.Equal(2, bad.Code);
        Assert.Contains("--slurm-staging 'lua' is not one of step, agents, burst-buffer", bad.Stderr);
    }
}

