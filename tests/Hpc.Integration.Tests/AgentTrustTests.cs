using Hpc.CommonData.Hosting;
using System.Runtime.Versioning;
using System.Text.Json;
using Hpc.CommonData.Agent;

namespace Hpc.Integration.Tests;

/// <summary>
/// What another user of the node can do to the agent rather than read through it (issue 22, rows 1, 2, 9 and 10): a
/// real cache host, stager and agent (as root), and hpcdata run as two users the tests create, a job's owner and a
/// stranger.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class AgentTrustTests
{
    private const string Alice = AccessTests.Alice, Bob = AccessTests.Bob;

    [RootOnLinuxFact]
    public async Task Another_user_cannot_release_or_evict_a_jobs_pin()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "prices.bin", Cluster.RandomBytes(200_000, seed: 5)), "risk/pinned",
            "--readers", "all");
        var (agent, pipe, dataDir) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        var copy = Path.Combine(dataDir, "complete", staged.Version + ".data");

        var prep = await run.AsUserAsync(Alice, [.. run.Worker, "nodeprep", "risk/pinned", "--job", "job-7", "--pipe", pipe, "--no-start"]);
        Assert.True(prep.Code == 0, $"node prep as the job's owner failed ({prep.Code}): {prep.Stderr}");
        Assert.Equal(["job-7"], (await StatusAsync(pipe)).Copies.Single().Pins); // what the stranger sees too

        // The pin's owner survives a restart of the agent: it is kept with the pin.
        await agent.KillAsync();
        await cluster.StartAgentAsync(dataDir, pipe: pipe);

        string[] release = ["noderelease", "risk/pinned", "--job", "job-7", "--evict", "--pipe", pipe, "--stop-agent", "never"];
        var bob = await run.AsUserAsync(Bob, [.. run.Worker, .. release]);
        Assert.Equal(0, bob.Code); // node release never fails; it says why nothing was released
        Assert.Contains("access denied", bob.Stderr);
        Assert.Contains("'job-7'", bob.Stderr);
        Assert.Contains(Alice, bob.Stderr);
        var kept = Assert.Single((await StatusAsync(pipe)).Copies);
        Assert.Equal("complete", kept.State);
        Assert.Equal(["job-7"], kept.Pins);
        Assert.True(File.Exists(copy), "the job's pinned copy was evicted by another user");

        var alice = await run.AsUserAsync(Alice, [.. run.Worker, .. release]);
        Assert.True(alice.Code == 0, alice.Stderr);
        Assert.Contains("state=evicted", alice.Text);
        Assert.Empty((await StatusAsync(pipe)).Copies);
        Assert.False(File.Exists(copy));
    }

    [RootOnLinuxFact]
    public async Task A_version_planted_on_someone_elses_cache_host_is_not_ingested_and_readers_keep_getting_the_staged_bytes_when_the_cache_tier_is_down()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        var tier = await cluster.StartCacheHostAsync();
        var real = Cluster.RandomBytes(300_000, seed: 21);
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "real.bin", real), "risk/prices", "--readers", $"user:{Alice}");
        var (_, pipe, _) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        var env = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_CACHE_HOSTS"] = "127.0.0.1:1" };
        var first = await run.AsUserAsync(Alice, [.. run.Worker, "worker", "risk/prices", "--verify", "--reopens", "0"], env);
        Assert.True(first.Code == 0, first.Stderr);

        // The stranger's own cache host, with its own bytes staged under the same name, later than the real ones.
        var own = await cluster.StartCacheHostAsync();
        var (code, stdout, stderr) = await cluster.RunStagerAsync(
            [Cluster.WriteFile(cluster.Root, "planted.bin", Cluster.RandomBytes(300_000, seed: 99)), "--name", "risk/prices", "--cache-hosts", own, "--readers", "all", "--json"]);
        Assert.True(code == 0, stderr);
        var planted = JsonSerializer.Deserialize<Cluster.Staged>(stdout.Last(), JsonSerializerOptions.Web)!.Version;

        var attack = await run.AsUserAsync(Bob, ["mpiexec.hydra", "-n", "1", .. run.Worker, "nodeprep", "--fanout", "mpi", "risk/prices",
            "--job", "job-b", "--pipe", pipe, "--no-start", "--cache-hosts", own],
            // One rank on this machine: UCX needs no network device, and the Slurm tests beside this one add some.
            new Dictionary<string, string?> { ["HPCDATA_STATE_DIR"] = cluster.Root, ["UCX_NET_DEVICES"] = "lo" });
        Assert.DoesNotContain((await StatusAsync(pipe)).Copies, c => c.Version == planted);
        Assert.Contains("does not vouch for that version", attack.Stderr);
        Assert.Contains(planted, attack.Stderr);

        await cluster.Processes.Single(p => p.ReadyText == tier).KillAsync(); // the agent's cache tier goes down
        var reader = await run.AsUserAsync(Alice, [.. run.Worker, "worker", "risk/prices", "--verify", "--reopens", "0"], env);
        Assert.True(reader.Code == 0, reader.Stderr);
        var result = JsonDocument.Parse(reader.Text.Trim().Split('\n').Last()).RootElement;
        Assert.Equal(staged.Version, result.GetProperty("version").GetString());
        Assert.True(result.GetProperty("verified").GetBoolean());
    }

    [Fact]
    public async Task Path_asked_of_a_pipe_where_no_agent_listens_names_the_pipe_and_says_no_agent_answers_there_as_status_does()
    {
        await using var cluster = new Cluster();
        var missing = Path.Combine(cluster.Root, "nonexistent");

        var path = await cluster.RunAsync("hpcdata", ["path", "risk/prices", "--pipe", missing]);
        var status = await cluster.RunAsync("hpcdata", ["status", "--pipe", missing]);

        Assert.Equal((ExitCodes.Unavailable, ExitCodes.Unavailable), (path.Code, status.Code));
        var line = Assert.Single(path.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries));
        Assert.Equal($"hpcdata path: no node agent answers on pipe '{missing}' (no socket at {missing}); start one with `hpcdata agent --pipe {missing}`, or check the node's hpcdata-agent service", line);
        Assert.Equal(line.Replace("hpcdata path:", "hpcdata status:"), status.Stderr.Trim());
    }

    [RootOnLinuxFact]
    public async Task Another_user_cannot_read_the_agents_own_files_and_status_shows_them_only_datasets_they_may_read()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var secret = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "secret.bin", Cluster.RandomBytes(120_000, seed: 3)), "risk/secret",
            "--readers", $"user:{Alice}");
        var open = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "open.bin", Cluster.RandomBytes(50_000, seed: 4)), "risk/open", "--readers", "all");
        var (_, pipe, dataDir) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        foreach (var name in new[] { "risk/secret", "risk/open" })
        {
            var prep = await run.AsUserAsync(Alice, [.. run.Worker, "nodeprep", name, "--job", "job-a", "--pipe", pipe, "--no-start"]);
            Assert.True(prep.Code == 0, prep.Stderr);
        }

        foreach (var file in new[] { "telemetry.jsonl", "pins.json", Path.Combine("manifests", secret.Version + ".json") })
        {
            var path = Path.Combine(dataDir, file);
            Assert.Matches($"risk/secret|{secret.Version}", File.ReadAllText(path)); // the file does name the restricted dataset
            var bobCat = await run.AsUserAsync(Bob, ["cat", path]);
            Assert.True(bobCat.Code != 0, $"another user read {file}: {bobCat.Text}");
            Assert.Contains("Permission denied", bobCat.Stderr);
            Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(path));
        }

        var bob = await run.AsUserAsync(Bob, [.. run.Worker, "status", "--pipe", pipe, "--json"]);
        Assert.True(bob.Code == 0, bob.Stderr);
        var bobSees = JsonSerializer.Deserialize(bob.Text.Trim(), AgentJson.Default.AgentStatus)!;
        Assert.Equal([open.Version], bobSees.Copies.Select(c => c.Version));
        Assert.DoesNotContain("risk/secret", bob.Text);
        Assert.DoesNotContain(secret.Version, bob.Text);
        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "status", "--pipe", pipe, "--json"]);
        Assert.True(alice.Code == 0, alice.Stderr);
        Assert.Equal(["risk/open", "risk/secret"], JsonSerializer.Deserialize(alice.Text.Trim(), AgentJson.Default.AgentStatus)!.Copies.Select(c => c.Name));
        Assert.Equal(2, (await StatusAsync(pipe)).Copies.Count); // root sees every copy
    }

    [RootOnLinuxFact]
    public async Task A_member_of_the_agents_admin_group_reads_its_files_sees_every_copy_and_may_release_any_pin()
    {
        const string Admins = "hpcdata-t-admins", Carol = "hpcdata-t-carol";
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        AccessTests.EnsureGroupMember(Admins, Carol);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var secret = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "secret.bin", Cluster.RandomBytes(80_000, seed: 8)), "risk/secret",
            "--readers", $"user:{Alice}");
        var (_, pipe, dataDir) = await cluster.StartAgentAsync(configure: o => o.AdminGroup = Admins);
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        var prep = await run.AsUserAsync(Alice, [.. run.Worker, "nodeprep", "risk/secret", "--job", "job-a", "--pipe", pipe, "--no-start"]);
        Assert.True(prep.Code == 0, prep.Stderr);
        var telemetry = Path.Combine(dataDir, "telemetry.jsonl");

        Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead, File.GetUnixFileMode(telemetry));
        var carolCat = await run.AsUserAsync(Carol, ["cat", telemetry]);
        Assert.True(carolCat.Code == 0, carolCat.Stderr);
        Assert.Contains(secret.Version, carolCat.Text);
        Assert.NotEqual(0, (await run.AsUserAsync(Bob, ["cat", telemetry])).Code);
        var carolStatus = await run.AsUserAsync(Carol, [.. run.Worker, "status", "--pipe", pipe, "--json"]);
        Assert.Contains(secret.Version, carolStatus.Text);
        var carolRead = await run.AsUserAsync(Carol, ["cat", Path.Combine(dataDir, "complete", secret.Version + ".data")]);
        Assert.NotEqual(0, carolRead.Code); // administering the agent is not reading its restricted data

        var release = await run.AsUserAsync(Carol, [.. run.Worker, "noderelease", "risk/secret", "--job", "job-a", "--evict", "--pipe", pipe,
            "--stop-agent", "never"]);
        Assert.True(release.Code == 0, release.Stderr);
        Assert.Contains("state=evicted", release.Text);
    }

    private static async Task<AgentStatus> StatusAsync(string pipe)
    {
        await using var client = await AgentClient.ConnectAsync(pipe);
        return await client.StatusAsync();
    }
}
