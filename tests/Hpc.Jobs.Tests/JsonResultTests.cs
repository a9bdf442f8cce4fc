using System.Text.Json;

namespace Hpc.Jobs.Tests;

/// <summary>Every verb that reports a result prints it, with <c>--json</c>, as one JSON object whose keys are camelCase.</summary>
public sealed class JsonResultTests
{
    private static JsonElement One(Sandbox.Result r)
    {
        Assert.True(r.Code == 0, r.Stderr);
        var doc = JsonDocument.Parse(Assert.Single(r.Stdout)).RootElement;
        Assert.All(doc.EnumerateObject(), p => Assert.True(char.IsLower(p.Name[0]) && !p.Name.Contains('-'), $"key '{p.Name}'"));
        return doc;
    }

    [Fact]
    public async Task Get_nodeprep_remove_and_gc_print_their_result_as_one_json_object()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(300_000)), "risk/json");
        var env = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe(), ["HPCDATA_JOB_ID"] = "job-json" };

        var copy = Path.Combine(s.Root, "copy.bin");
        var get = One(await s.HpcdataAsync(["get", "risk/json", copy, "--cache-hosts", s.HostList, "--json"], env));
        Assert.Equal((staged.Version, 300_000L, copy), (get.GetProperty("version").GetString(), get.GetProperty("bytes").GetInt64(), get.GetProperty("path").GetString()));

        var prep = One(await s.HpcdataAsync(["nodeprep", "risk/json", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node"), "--json"], env));
        Assert.Equal(staged.Version, prep.GetProperty("version").GetString());
        Assert.Equal("fetched", prep.GetProperty("source").GetString());
        Assert.True(prep.GetProperty("agentCpuSeconds").GetDouble() > 0);
        Assert.True(File.Exists(prep.GetProperty("path").GetString()));

        var released = One(await s.HpcdataAsync(["noderelease", "risk/json", "--json"], env));
        Assert.Equal(("risk/json", "job-json", 1), (released.GetProperty("dataset").GetString(), released.GetProperty("job").GetString(), released.GetProperty("released").GetInt32()));
        Assert.Equal("cached", released.GetProperty("state").GetString());
        // Node prep's own agent stopped with that release: the next one says there was no agent, still as the object.
        var nothing = One(await s.HpcdataAsync(["noderelease", "risk/json", "--json"], env));
        Assert.Equal(("no-agent", 0), (nothing.GetProperty("state").GetString(), nothing.GetProperty("released").GetInt32()));
        Assert.Contains("nothing to release", nothing.GetProperty("message").GetString());

        var repaired = One(await s.HpcdataAsync(["repair", "--cache-hosts", s.HostList, "--json"], env));
        Assert.Equal(1, repaired.GetProperty("versions").GetInt32());
        Assert.Empty(repaired.GetProperty("unhealthy").EnumerateArray());
        Assert.Empty(repaired.GetProperty("unreachable").EnumerateArray());

        var removed = One(await s.HpcdataAsync(["remove", "risk/json", "--cache-hosts", s.HostList, "--json"], env));
        Assert.True(removed.GetProperty("removed").GetBoolean());
        Assert.True(removed.GetProperty("wasLatest").GetBoolean());
        // Removing it again finds nothing: not found (66), as list and get say it, and the object still says why.
        var again = await s.HpcdataAsync(["remove", "risk/json", "--cache-hosts", s.HostList, "--json"], env);
        Assert.True(again.Code == Hpc.CommonData.Hosting.ExitCodes.NotFound, again.Stderr);
        var gone = JsonDocument.Parse(Assert.Single(again.Stdout)).RootElement;
        Assert.False(gone.GetProperty("removed").GetBoolean());
        Assert.Contains("nothing to remove", gone.GetProperty("why").GetString());

        var gc = One(await s.HpcdataAsync(["gc", "--cache-hosts", s.HostList, "--json"], env));
        Assert.Equal(0, gc.GetProperty("versions").GetInt32());
        Assert.Equal(JsonValueKind.Array, gc.GetProperty("unreadable").ValueKind);
    }

    [Fact]
    public async Task Prestage_prints_one_object_for_a_job_it_ran_and_for_one_it_would_submit_and_the_job_s_own_lines_go_to_stderr()
    {
        await using var s = new Sandbox();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(200_000));
        var ran = One(await s.HpcdataAsync(["prestage", data, "--name", "risk/jsonjob", "--nodes", "1", "--job", "job-j", "--fanout", "none", "--json",
            "--", "/bin/sh", "-c", "echo job-line $HPCDATA_VERSION"]));
        var version = ran.GetProperty("version").GetString();
        Assert.Matches("^[0-9a-f]{64}$", version);
        Assert.Equal(("local", "job-j", "risk/jsonjob", 0), (ran.GetProperty("scheduler").GetString(), ran.GetProperty("job").GetString(),
            ran.GetProperty("dataset").GetString(), ran.GetProperty("exitCode").GetInt32()));
        Assert.True(ran.GetProperty("prepareSeconds").GetDouble() > 0);

        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(100_000)), "risk/jsondry");
        var dry = await s.HpcdataAsync(["prestage", "risk/jsondry", "--scheduler", "slurm", "--cache-hosts", s.HostList, "--fanout", "none", "--dry-run", "--json", "--", "my-service"]);
        var job = One(dry);
        Assert.False(job.GetProperty("submitted").GetBoolean());
        Assert.Contains("#SBATCH", job.GetProperty("scriptText").GetString());
        Assert.Equal("slurm", job.GetProperty("scheduler").GetString());
    }
}
