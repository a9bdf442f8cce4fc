using Hpc.CommonData.Hosting;
using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>
/// <c>hpcdata gc</c> against a real cache host: who may run it, and what it does with a manifest key whose content is
/// not a manifest.
/// </summary>
public sealed class CollectionTests
{
    [Fact]
    public async Task Gc_with_a_writer_account_is_refused_up_front_naming_the_admin_role_and_leaves_no_flag_for_stagers_to_wait_on()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes("stager writer w-pass\nops admin a-pass\nnames stager *\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var path = Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(200_000, seed: 41));
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [path, "--name", "gc/owned", "--cache-hosts", c.HostList], Cluster.As("stager", "w-pass"));
        Assert.True(staged == 0, stageErr);

        var (code, stdout, stderr) = await c.RunAsync("hpcdata", ["gc", "--cache-hosts", c.HostList], Cluster.As("stager", "w-pass"));
        Assert.Equal(ExitCodes.Denied, code);
        Assert.Contains("admin role", stderr);
        Assert.Empty(stdout);
        await using var admin = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "ops", Password = "a-pass" });
        Assert.Equal(0, (await admin.ExecuteOnAsync(0, "EXISTS"u8.ToArray(), [CacheKeys.Collection])).Integer);

        var (adminCode, adminOut, adminErr) = await c.RunAsync("hpcdata", ["gc", "--cache-hosts", c.HostList], Cluster.As("ops", "a-pass"));
        Assert.True(adminCode == 0, adminErr);
        Assert.Contains("freed 0 segments", string.Join("\n", adminOut));
        Assert.Equal(0, (await admin.ExecuteOnAsync(0, "EXISTS"u8.ToArray(), [CacheKeys.Collection])).Integer); // gone with its process

        // A writer's staging lease holds the collection back, and gc names whose it is; an administrator can drop it.
        await using var writer = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "stager", Password = "w-pass" });
        var lease = CacheKeys.Staging("stager", "held");
        Assert.Equal("OK", (await writer.ExecuteOnAsync(0, "SET"u8.ToArray(), [lease, "x", "PX", "60000"])).Text);
        var (held, _, heldErr) = await c.RunAsync("hpcdata", ["gc", "--cache-hosts", c.HostList], Cluster.As("ops", "a-pass"));
        Assert.Equal(ExitCodes.TryLater, held);
        Assert.Contains($"not collected now: 1 stager(s) running, as account(s) stager (their leases: {lease})", heldErr);
        var (broke, brokeOut, brokeErr) = await c.RunAsync("hpcdata", ["gc", "--break-leases", "stager", "--cache-hosts", c.HostList], Cluster.As("ops", "a-pass"));
        Assert.True(broke == 0, brokeErr);
        Assert.Contains("deleted 1 staging lease(s) of stager", brokeErr);
        Assert.Contains("freed 0 segments", string.Join("\n", brokeOut));
        Assert.Equal(0, (await admin.ExecuteOnAsync(0, "EXISTS"u8.ToArray(), [lease])).Integer);
    }

    [Fact]
    public async Task Gc_skips_a_manifest_key_holding_garbage_with_a_warning_naming_it_collects_the_rest_and_drops_it_when_asked()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var kept = await c.StageAsync(Cluster.WriteFile(c.Root, "a.bin", Cluster.RandomBytes(3 * 65536, seed: 42)), "gc/kept");
        await using var tier = c.Tier();
        // Bytes that are not a stored segment at all, and a stored segment (valid, matching its id) that is not a manifest.
        var garbageKey = CacheKeys.Manifest(SegmentId.Of("not a manifest"u8).ToString());
        await tier.ExecuteOnAllAsync("SET"u8.ToArray(), [garbageKey, "garbage"]);
        var notManifest = Encoding.UTF8.GetBytes("{\"hello\": 1}");
        var stored = new byte[SegmentCodec.MaxEncodedLength(notManifest.Length)];
        var storedLength = SegmentCodec.Encode(notManifest, stored);
        var wrongKind = CacheKeys.Manifest(SegmentId.Of(notManifest).ToString());
        await tier.Catalog.PutManifestAsync(SegmentId.Of(notManifest).ToString(), stored.AsMemory(0, storedLength));
        // An orphan segment that the unreadable keys must not keep alive.
        var orphan = Cluster.RandomBytes(1000, seed: 43);
        var encoded = new byte[SegmentCodec.MaxEncodedLength(orphan.Length)];
        await tier.PutSegmentsAsync([(SegmentId.Of(orphan), encoded.AsMemory(0, SegmentCodec.Encode(orphan, encoded)))], null, CancellationToken.None);

        var (code, stdout, stderr) = await c.RunAsync("hpcdata", ["gc", "--cache-hosts", c.HostList]);
        Assert.True(code == 0, stderr);
        Assert.Contains($"freed 1 segments; 1 versions reference {kept.Segments} segments, kept", string.Join("\n", stdout));
        Assert.Contains($"skipped {garbageKey}", stderr);
        Assert.Contains("--drop-unreadable", stderr);
        Assert.Equal(1, (await tier.ExecuteOnAsync(0, "EXISTS"u8.ToArray(), [garbageKey])).Integer);

        var (dropCode, _, dropErr) = await c.RunAsync("hpcdata", ["gc", "--drop-unreadable", "--cache-hosts", c.HostList]);
        Assert.True(dropCode == 0, dropErr);
        Assert.Contains($"deleted {garbageKey}", dropErr);
        Assert.Equal(0, (await tier.ExecuteOnAsync(0, "EXISTS"u8.ToArray(), [garbageKey, wrongKind])).Integer);
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } };
        await using var data = await Dataset.OpenAsync("gc/kept", direct);
        Assert.True(data.VerifyHash());
    }
}
