using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Cache;

namespace Hpc.Integration.Tests;

/// <summary>
/// A dataset name on a cache tier with accounts belongs to the writer account that staged it first: a second writer
/// staging under that name is refused before it sends anything, and readers keep getting the owner's bytes.
/// </summary>
public sealed class OwnershipTests
{
    [Fact]
    public async Task A_second_writer_staging_under_a_name_it_does_not_own_is_refused_up_front_and_readers_keep_the_owners_data()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes("alice writer a-pass\nmallory writer m-pass\nnode reader n-pass\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var real = Cluster.RandomBytes(300_000, seed: 51);
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [Cluster.WriteFile(c.Root, "real.bin", real), "--name", "alice/market", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        await using var reader = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", Password = "n-pass" });
        var version = await reader.Catalog.GetLatestAsync("alice/market");
        var keysBefore = (await reader.ExecuteOnAsync(0, "DBSIZE"u8.ToArray(), [])).Integer;

        var planted = Cluster.WriteFile(c.Root, "planted.bin", Cluster.RandomBytes(300_000, seed: 52));
        var (code, _, stderr) = await c.RunAsync("Hpc.Stager", [planted, "--name", "alice/market", "--cache-hosts", c.HostList], Cluster.As("mallory", "m-pass"));
        Assert.NotEqual(0, code);
        Assert.Contains("dataset alice/market belongs to account alice: User mallory may read it but not change it", stderr);
        Assert.Equal(keysBefore, (await reader.ExecuteOnAsync(0, "DBSIZE"u8.ToArray(), [])).Integer); // nothing was sent

        // Under a name of its own the same writer stages as usual.
        var (own, _, ownErr) = await c.RunAsync("Hpc.Stager", [planted, "--name", "mallory/market", "--cache-hosts", c.HostList], Cluster.As("mallory", "m-pass"));
        Assert.True(own == 0, ownErr);
        Assert.Equal(version, await reader.Catalog.GetLatestAsync("alice/market"));
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", Password = "n-pass" } };
        await using var data = await Dataset.OpenAsync("alice/market", direct);
        Assert.Equal(real, data.GetSpan(0, real.Length).ToArray());
    }
}
