using System.Diagnostics;
using Hpc.Bench;
using Hpc.CommonData;
using Hpc.CommonData.Cache;

namespace Hpc.Integration.Tests;

/// <summary>
/// The cache tier on a Redis Cluster a site already runs: three masters with a replica each, started by the test.
/// Keys go where their hash slots live, moved slots are followed, and a master killed mid-fetch costs the node nothing.
/// </summary>
public sealed class RedisClusterTests
{
    [Fact]
    public async Task Stage_list_read_remove_and_collect_on_a_redis_cluster()
    {
        await using var redis = await RedisClusterNodes.StartAsync();
        await using var c = new Cluster();
        c.Hosts.Add(redis.Seeds[0]);
        var bytes = Cluster.Csvish(40 * 65536 + 11);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", bytes), "rc/data", "--cache-cluster");
        Assert.True((await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", bytes), "rc/data", "--cache-cluster")).Unchanged);

        // Content-addressed segments spread over every master's slots, not one node.
        foreach (var master in await redis.MastersAsync()) Assert.True(await redis.KeyCountAsync(master) > 1, $"master {master} holds no segments");

        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = redis.Options() };
        await using (var data = await Dataset.OpenAsync("rc/data", direct))
        {
            Assert.Equal(staged.Version, data.Version);
            Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
        }
        var (_, pipe, _) = await c.StartAgentAsync(configure: o => o.CacheTier.Cluster = true);
        await using (var viaAgent = await Dataset.OpenAsync("rc/data", Cluster.Via(pipe)))
            Assert.True(viaAgent.VerifyHash());

        await using var tier = new CacheTierClient(redis.Options());
        var listed = Assert.Single(await tier.Catalog.ListAsync(), e => e.Name == "rc/data");
        Assert.Equal((staged.Version, true, staged.Segments), (listed.Version, listed.Latest, listed.Segments));
        Assert.Equal(6, (await tier.GetHostStatusAsync()).Count(s => s.Error is null)); // every node learned from one seed

        var (latestRemoved, collection) = await tier.Catalog.RemoveVersionAsync("rc/data", staged.Version);
        Assert.True(latestRemoved && collection!.Ran);
        Assert.Equal(staged.Segments, collection.SegmentsDeleted);
        // All that is left is the record of the removal, which tells nodes holding a copy to stop serving it.
        var left = 0L;
        foreach (var master in await redis.MastersAsync()) left += await redis.KeyCountAsync(master);
        Assert.Equal(1, left);
        Assert.True(await tier.Catalog.WasRemovedAsync("rc/data", staged.Version));
    }

    [Fact]
    public async Task A_client_with_an_old_slot_map_follows_MOVED_after_the_slots_are_resharded()
    {
        await using var redis = await RedisClusterNodes.StartAsync();
        await using var c = new Cluster();
        c.Hosts.Add(redis.Seeds[0]);
        var bytes = Cluster.Csvish(24 * 65536);
        await c.StageAsync(Cluster.WriteFile(c.Root, "m.csv", bytes), "rc/moved", "--cache-cluster");
        await using var tier = new CacheTierClient(redis.Options());
        var (_, manifest) = await tier.ResolveAsync("rc/moved"); // the client has learned the map

        // Move every slot of one master (and so its keys) to another, behind the client's back.
        var masters = await redis.MastersAsync();
        var (from, to) = (await NodeIdAsync(redis, masters[0]), await NodeIdAsync(redis, masters[1]));
        var moved = await redis.CliAsync(masters[0], "--cluster", "reshard", $"127.0.0.1:{masters[0]}", "--cluster-from", from, "--cluster-to", to,
            "--cluster-slots", "16384", "--cluster-yes");
        Assert.Equal(0, await redis.KeyCountAsync(masters[0]));
        Assert.Contains("Moving slot", moved);

        var got = new byte[bytes.Length];
        var ids = manifest.SegmentIds.ToArray();
        await tier.FetchSegmentsAsync(ids, Enumerable.Range(0, ids.Length).ToArray(), (i, stored) =>
            Hpc.CommonData.Format.SegmentCodec.TryDecode(stored, ids[i], got.AsSpan((int)manifest.Offsets[i], manifest.Segments[i].RawLength)), "rc/moved");
        Assert.Equal(bytes, got);
        Assert.Equal(manifest.Name, (await tier.ResolveAsync("rc/moved")).Manifest.Name);
    }

    [Fact]
    public async Task A_master_killed_mid_fetch_still_leaves_the_node_a_verified_copy()
    {
        await using var redis = await RedisClusterNodes.StartAsync();
        await using var c = new Cluster();
        c.Hosts.Add(redis.Seeds[0]);
        var bytes = Cluster.Csvish(16 << 20, seed: 11);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "f.csv", bytes), "rc/failover", "--cache-cluster");
        await redis.WaitReplicatedAsync();

        // The node's link is slow enough that the fetch is still under way when a master dies, and one connection per
        // master asks for one batch at a time: with four, every batch a master holds could be answered into the
        // node's socket buffers before it died, and the fetch would never meet the dead master.
        var rate = Math.Max(CacheTierOptions.MinimumRate, staged.StoredBytes / 4);
        var (agent, pipe, _) = await c.StartAgentAsync(configure: o =>
        {
            o.CacheTier.Cluster = true;
            o.CacheTier.MaxRate = new ByteRate(rate);
            o.CacheTier.ConnectionsPerHost = 1;
        });
        var clock = Stopwatch.StartNew();
        var open = Dataset.OpenAsync("rc/failover", Cluster.Via(pipe));
        await Task.Delay(TimeSpan.FromSeconds(1));
        Assert.False(open.IsCompleted, "the fetch ended before the master was killed");
        var victim = (await redis.MastersAsync())[0];
        redis.Kill(victim);

        await using var data = await open.WaitAsync(TimeSpan.FromSeconds(90));
        Assert.Equal(staged.Version, data.Version);
        Assert.True(data.VerifyHash());
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
        Assert.True(clock.Elapsed > TimeSpan.FromSeconds(1));
        Assert.DoesNotContain(victim, await redis.MastersAsync()); // its replica took over
        var log = string.Join("\n", agent.StandardOutput) + agent.StandardErrorTail;
        Assert.True(log.Contains($"127.0.0.1:{victim}"), log); // and the agent met the dead master
    }

    [Fact]
    public async Task A_key_in_the_middle_of_a_migration_is_read_from_the_node_the_ASK_names()
    {
        await using var redis = await RedisClusterNodes.StartAsync(replicasPerMaster: 0);
        await using var c = new Cluster();
        c.Hosts.Add(redis.Seeds[0]);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "a.csv", Cluster.Csvish(3 * 65536)), "rc/ask", "--cache-cluster");

        // Leave the manifest's slot half-migrated: its key already on the importing node, the slot still the old one's.
        var key = CacheKeys.Manifest(staged.Version);
        var masters = await redis.MastersAsync();
        var from = 0;
        foreach (var p in masters) if ((await redis.CliAsync(p, "EXISTS", key)).Trim() == "1") from = p;
        var to = masters.First(p => p != from);
        var slot = (await redis.CliAsync(from, "CLUSTER", "KEYSLOT", key)).Trim();
        await redis.CliAsync(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", await NodeIdAsync(redis, from));
        await redis.CliAsync(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", await NodeIdAsync(redis, to));
        Assert.Equal("OK", (await redis.CliAsync(from, "MIGRATE", "127.0.0.1", to.ToString(), key, "0", "5000")).Trim());
        Assert.StartsWith("ASK ", (await redis.CliAsync(from, "GET", key)).Trim());

        await using var tier = new CacheTierClient(redis.Options());
        var (version, manifest) = await tier.ResolveAsync("rc/ask");
        Assert.Equal((staged.Version, "rc/ask"), (version, manifest.Name));
    }

    private static async Task<string> NodeIdAsync(RedisClusterNodes redis, int port) => (await redis.CliAsync(port, "CLUSTER", "MYID")).Trim();
}
