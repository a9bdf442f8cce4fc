using System.Text.Json;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>The stager program run on its own (as a site's scripts and the services' units run it) honours --quiet as hpcdata stage does.</summary>
public sealed class StagerQuietTests
{
    [Fact]
    public async Task A_quiet_stager_prints_nothing_but_still_publishes_and_with_json_prints_only_its_line()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var file = Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(1 << 20));

        var (code, stdout, stderr) = await c.RunStagerAsync([file, "--name", "risk/quiet", "--cache-hosts", c.HostList, "--quiet"]);
        Assert.True(code == 0, stderr);
        Assert.DoesNotContain(stdout, l => l.Length > 0);
        await using (var tier = c.Tier())
            Assert.NotNull(await tier.Catalog.GetLatestAsync("risk/quiet"));

        var json = await c.RunStagerAsync([file, "--name", "risk/quiet", "--cache-hosts", c.HostList, "--quiet", "--json"]);
        Assert.True(json.Code == 0, json.Stderr);
        var line = Assert.Single(json.Stdout, l => l.Length > 0);
        Assert.True(JsonSerializer.Deserialize<StageResult>(line, JsonSerializerOptions.Web)!.Unchanged);
    }
}
