using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// A version staged with two replicas stays readable while either replica host restarts empty, whatever replica count
/// and host order a reader is given; an operator sees what the tier lost and copies it back from the tier's own copies
/// (no source files), so the other host may then restart too.
/// </summary>
public sealed class ReplicaRepairTests
{
    private const string Users = "alice writer a-pass\nnode reader n-pass\nops admin o-pass\nnames alice risk/*\n";

    [Fact]
    public async Task Each_replica_host_restarted_empty_in_turn_leaves_the_version_readable_and_repair_restores_the_lost_copies_from_the_other()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes(Users));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var hostProcesses = c.Processes.ToArray();
        var data = Cluster.RandomBytes(4 << 20, seed: 521);
        var source = Cluster.WriteFile(c.Root, "rb.bin", data);
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [source, "--name", "risk/rb", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        File.Delete(source); // what follows works from the tier's own copies

        for (var victim = 1; victim >= 0; victim--)
        {
            var port = int.Parse(c.Hosts[victim][(c.Hosts[victim].LastIndexOf(':') + 1)..]);
            await hostProcesses[victim].KillAsync();
            await c.Track(ComponentProcess.Start("Hpc.CacheHost", ProgramContract<CacheHostOptions>.ToArguments(new CacheHostOptions { Port = port, UsersFile = users }),
                name: $"cachehost{victim}b")).WaitReadyAsync(Cluster.Ready);

            // Readers without --replicas, and with the hosts in either order, read what the other host holds.
            foreach (var hosts in new[] { c.HostList, string.Join(",", c.Hosts.AsEnumerable().Reverse()) })
            {
                var dest = Path.Combine(c.Root, $"got-{victim}-{hosts.GetHashCode():x}");
                var (got, _, getErr) = await c.RunAsync("hpcdata", ["get", "risk/rb", dest, "--cache-hosts", hosts], Cluster.As("node", "n-pass"));
                Assert.True(got == 0, $"host {c.Hosts[victim]} restarted empty: {getErr}");
                Assert.Equal(data, File.ReadAllBytes(dest));
            }
            // A node agent reads it too.
            var (_, pipe, _) = await c.StartAgentAsync(configure: o =>
                o.CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", PasswordFile = Cluster.WriteFile(c.Root, "node.secret", "n-pass"u8.ToArray()) });
            await using (var copy = await Dataset.OpenAsync("risk/rb", Cluster.Via(pipe)))
                Assert.Equal(data, copy.GetSpan(0, data.Length).ToArray());

            // The operator is told what the tier lost; a reader may not repair it; an admin does, from the other host.
            var (_, status, _) = await c.RunAsync("hpcdata", ["status", "--cache-tier", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("node", "n-pass"));
            Assert.Contains(status, l => l.StartsWith("under-replicated risk/rb@", StringComparison.Ordinal) && l.Contains("on fewer than 2 host(s)") && l.Contains("hpcdata repair"));
            var (refused, _, refusal) = await c.RunAsync("hpcdata", ["repair", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("node", "n-pass"));
            Assert.Equal(ExitCodes.Denied, refused);
            Assert.Contains("repair needs an account with the admin role", refusal);
            var (repaired, output, repairErr) = await c.RunAsync("hpcdata", ["repair", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("ops", "o-pass"));
            Assert.True(repaired == 0, repairErr + string.Join("\n", output));
            Assert.Contains(output, l => l.StartsWith("repaired in ", StringComparison.Ordinal) && l.Contains("1 manifest(s)") && !l.Contains(" 0 segment copies"));
            var (_, again, _) = await c.RunAsync("hpcdata", ["repair", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("ops", "o-pass"));
            Assert.Contains(again, l => l.Contains("nothing to copy"));
            var (_, after, _) = await c.RunAsync("hpcdata", ["status", "--cache-tier", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("node", "n-pass"));
            Assert.DoesNotContain(after, l => l.StartsWith("under-replicated", StringComparison.Ordinal) || l.StartsWith("hosts disagree", StringComparison.Ordinal));
        }
    }

    /// <summary>
    /// Real data repeats itself (zero pages, padding): its segments compress to a few hundred bytes, and its manifest
    /// lists the zero block's id many times. A host restarted empty gets them back and serves the version alone; a
    /// repair cut short (the manifest and part of the segments copied) is flagged by status and finished by the next.
    /// </summary>
    [Fact]
    public async Task Repair_of_repeated_content_completes_the_emptied_host_serves_it_again_and_a_repair_cut_short_is_finished_by_the_next()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes(Users));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var hostProcesses = c.Processes.ToArray();
        // Cut at fixed 64 KB: 100 zero blocks each marked with its number (100 ids, each a few hundred bytes stored),
        // every other one followed by a plain zero block (one id, 50 times over), then 1 MiB of random data.
        const int block = 64 << 10;
        var data = new byte[150 * block + (1 << 20)];
        for (var b = 0; b < 100; b++) BitConverter.TryWriteBytes(data.AsSpan((b + b / 2) * block), b + 1L);
        Cluster.RandomBytes(1 << 20, seed: 524).CopyTo(data, 150 * block);
        var source = Cluster.WriteFile(c.Root, "zeros.bin", data);
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [source, "--name", "risk/zeros", "--cache-hosts", c.HostList, "--replicas", "2",
            "--chunking", "fixed", "--segment-size", "64KB"], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        File.Delete(source);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "ops", Password = "o-pass" });
        var (_, manifest) = await tier.ResolveAsync("risk/zeros");
        Assert.Equal(166, manifest.SegmentIds.Count);
        Assert.Equal(117, manifest.SegmentIds.Distinct().Count());

        var port = int.Parse(c.Hosts[1][(c.Hosts[1].LastIndexOf(':') + 1)..]);
        await hostProcesses[1].KillAsync();
        await c.Track(ComponentProcess.Start("Hpc.CacheHost", ProgramContract<CacheHostOptions>.ToArguments(new CacheHostOptions { Port = port, UsersFile = users }),
            name: "cachehost1b")).WaitReadyAsync(Cluster.Ready);

        var repair = new[] { "repair", "--cache-hosts", c.HostList, "--replicas", "2" };
        var (repaired, output, repairErr) = await c.RunAsync("hpcdata", repair, Cluster.As("ops", "o-pass"));
        Assert.True(repaired == 0, $"repair exited {repaired}: {repairErr}{string.Join("\n", output)}");
        Assert.Contains(output, l => l.StartsWith("repaired in ", StringComparison.Ordinal) && l.Contains("117 segment copies") && l.Contains("1 manifest(s)"));
        await AssertServedByAsync(c.Hosts[1], "after the repair");

        // What a repair stopped part way leaves: the manifest and some segments on the host, not all.
        var dropped = (await tier.KeysAsync(CacheKeys.SegmentPrefix))[1].Where((_, i) => i % 3 == 0).ToList();
        Assert.Equal(dropped.Count, await tier.DeleteAsync(1, dropped));
        var (_, status, _) = await c.RunAsync("hpcdata", ["status", "--cache-tier", "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("node", "n-pass"));
        Assert.Contains(status, l => l.StartsWith("under-replicated risk/zeros@", StringComparison.Ordinal) && l.Contains("on fewer than 2 host(s)")
            && l.Contains($"{c.Hosts[1]} holds the manifest but lacks {dropped.Count} of the segments placed on it"));
        (repaired, output, repairErr) = await c.RunAsync("hpcdata", repair, Cluster.As("ops", "o-pass"));
        Assert.True(repaired == 0, $"the second repair exited {repaired}: {repairErr}{string.Join("\n", output)}");
        Assert.Contains(output, l => l.StartsWith("repaired in ", StringComparison.Ordinal) && l.Contains($"{dropped.Count} segment copies"));
        await AssertServedByAsync(c.Hosts[1], "after the second repair");
        var (_, again, _) = await c.RunAsync("hpcdata", repair, Cluster.As("ops", "o-pass"));
        Assert.Contains(again, l => l.Contains("nothing to copy"));

        async Task AssertServedByAsync(string host, string when)
        {
            var dest = Path.Combine(c.Root, $"got-{Guid.NewGuid():n}");
            var (got, _, getErr) = await c.RunAsync("hpcdata", ["get", "risk/zeros", dest, "--cache-hosts", host], Cluster.As("node", "n-pass"));
            Assert.True(got == 0, $"{host} alone {when}: {getErr}");
            Assert.Equal(data, File.ReadAllBytes(dest));
        }
    }

    [Fact]
    public async Task A_host_added_after_staging_does_not_hide_the_copies_readers_need_when_an_original_host_is_lost()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var data = Cluster.RandomBytes(2 << 20, seed: 522);
        await c.StageAsync(Cluster.WriteFile(c.Root, "grow.bin", data), "risk/grow", "--replicas", "2");
        await c.StartCacheHostAsync();
        await c.Processes[0].KillAsync();

        // Placement over the three hosts now names hosts that never held the version; the one that does is still asked.
        var dest = Path.Combine(c.Root, "got");
        var (got, _, err) = await c.RunAsync("hpcdata", ["get", "risk/grow", dest, "--cache-hosts", c.HostList, "--replicas", "2"]);
        Assert.True(got == 0, err);
        Assert.Equal(data, File.ReadAllBytes(dest));

        // Without the lost host in the list, repair puts every segment where placement over the hosts left looks first.
        var left = string.Join(",", c.Hosts.Skip(1));
        var (repaired, output, repairErr) = await c.RunAsync("hpcdata", ["repair", "--cache-hosts", left, "--replicas", "2"]);
        Assert.True(repaired == 0, repairErr + string.Join("\n", output));
        var (_, status, _) = await c.RunAsync("hpcdata", ["status", "--cache-tier", "--cache-hosts", left, "--replicas", "2"]);
        Assert.DoesNotContain(status, l => l.StartsWith("under-replicated", StringComparison.Ordinal));
    }

    [Fact]
    public async Task A_segment_no_host_holds_still_fails_naming_it_as_missing()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "gone.bin", Cluster.RandomBytes(1 << 20, seed: 523)), "risk/gone");
        await using var tier = c.Tier();
        for (var h = 0; h < 2; h++)
        {
            var segments = (await tier.KeysAsync(CacheKeys.SegmentPrefix))[h];
            if (segments.Count > 0) await tier.DeleteAsync(h, segments);
        }
        var (got, _, err) = await c.RunAsync("hpcdata", ["get", "risk/gone", Path.Combine(c.Root, "got"), "--cache-hosts", c.HostList]);
        Assert.NotEqual(0, got);
        Assert.Contains("could not be fetched intact", err);
        Assert.Contains("missing on", err);
        var (repaired, _, repairErr) = await c.RunAsync("hpcdata", ["repair", "--cache-hosts", c.HostList]);
        Assert.Equal(1, repaired);
        Assert.Contains("on no reachable host; the owner's re-stage from the source files brings them back", repairErr);
        _ = staged;
    }
}
