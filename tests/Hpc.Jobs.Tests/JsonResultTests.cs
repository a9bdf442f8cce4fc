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

        var removed = One(await s.HpcdataAsync(["remove", "risk/json", "--cache-hosts", s.HostList, "--json"], env));
        Assert.True(removed.GetProperty("removed").GetBoolean());
        Assert.True(removed.GetProperty("wasLatest").GetBoolean());
        var gone = One(await s.HpcdataAsync(["remove", "risk/json", "--cache-hosts", s.HostList, "--json"], env));
        Assert.False(gone.GetProperty("removed").GetBoolean());
        Assert.Contains("nothing to remove", gone.GetProperty("why").GetString());

        var gc = One(await s.HpcdataAsync(["gc", "--cache-hosts", s.HostList, "--json"], env));
        Assert.Equal(0, gc.GetProperty("versions").GetInt32());
        Assert.Equal(JsonValueKind.Array, gc.GetProperty("unreadable").ValueKind);
    }
}
