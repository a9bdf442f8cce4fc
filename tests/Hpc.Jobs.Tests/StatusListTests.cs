using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary><c>hpcdata status</c> (the node, the cache hosts) and <c>hpcdata list</c> (the versions on the tier), run as users run them.</summary>
public sealed class StatusListTests
{
    [Fact]
    public async Task List_shows_every_version_with_sizes_latest_lifetime_and_the_jobs_keeping_it()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StartCacheHostAsync();
        var first = await s.StageAsync(s.WriteFile("a1.bin", Sandbox.RandomBytes(5 * 65536, seed: 1)), "risk/a");
        var r = await s.RunAsync("Hpc.Stager", [s.WriteFile("a2.bin", Sandbox.RandomBytes(3 * 65536, seed: 2)), "--name", "risk/a", "--lifetime", "12h",
            "--cache-hosts", s.HostList, "--json"]);
        Assert.Equal(0, r.Code);
        var second = JsonSerializer.Deserialize<Sandbox.Staged>(r.Stdout.Last())!;
        var other = await s.StageAsync(s.WriteFile("b.bin", Sandbox.RandomBytes(65536 + 7, seed: 3)), "risk/b");
        int newestSegments;
        await using (var tier = new CacheTierClient(new CacheTierOptions { Hosts = s.Hosts.ToList() }))
        {
            await tier.Catalog.AddJobAsync(other.Version, "job-9");
            newestSegments = (await tier.ResolveAsync("risk/a", second.Version)).Manifest.Segments.Count;
        }

        var json = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList, "--json"]);
        Assert.True(json.Code == 0, json.Stderr);
        var entries = JsonSerializer.Deserialize(json.Stdout.Last(), CacheStatusJson.Default.CatalogEntryArray)!;
        Assert.Equal([("risk/a", second.Version), ("risk/a", first.Version), ("risk/b", other.Version)], entries.Select(e => (e.Name, e.Version)));
        var (newest, oldest, b) = (entries[0], entries[1], entries[2]);
        Assert.True(newest.Latest);
        Assert.False(oldest.Latest);
        Assert.Equal((3 * 65536L, newestSegments, 2), (newest.RawBytes, newest.Segments, newest.Hosts));
        Assert.Equal(12 * 3600, newest.LifetimeSeconds);
        Assert.Equal(newest.Created.AddHours(12), newest.Expires);
        Assert.Null(oldest.LifetimeSeconds);
        Assert.Equal(["job-9"], b.Jobs);

        var text = await s.HpcdataAsync(["list", "risk/a", "--cache-hosts", s.HostList]);
        Assert.Equal(0, text.Code);
        var rows = text.Stdout.Where(l => l.StartsWith("risk/", StringComparison.Ordinal)).ToList();
        Assert.Equal(2, rows.Count);
        Assert.Contains("latest", rows[0]);
        Assert.Contains("12h, 11h", rows[0]);
        Assert.Contains("until removed", rows[1]);
        AssertFits(text.Stdout);
        AssertFits((await s.HpcdataAsync(["list", "--cache-hosts", s.HostList])).Stdout);
    }

    /// <summary>A table for people fits a standard terminal: no line wider than 100 columns.</summary>
    private static void AssertFits(List<string> lines)
    {
        var widest = lines.MaxBy(l => l.Length) ?? "";
        Assert.True(widest.Length <= 100, $"{widest.Length} columns: {widest}\n{string.Join("\n", lines)}");
    }

    [Fact]
    public async Task Status_of_the_cache_hosts_reports_memory_keys_hit_rate_and_traffic_and_names_a_dead_host()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(4 * 65536)), "risk/st");
        int segments;
        await using (var tier = new CacheTierClient(new CacheTierOptions { Hosts = s.Hosts.ToList() }))
            segments = (await tier.ResolveAsync("risk/st")).Manifest.Segments.Count; // lookups that hit

        var r = await s.HpcdataAsync(["status", "--cache-hosts", $"{s.HostList},127.0.0.1:1", "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var hosts = JsonSerializer.Deserialize(r.Stdout.Last(), CacheStatusJson.Default.CacheHostStatusArray)!;
        Assert.Equal(2, hosts.Length);
        var live = hosts.Single(h => h.Host == s.Hosts[0]);
        Assert.Null(live.Error);
        Assert.StartsWith("hpc-cachehost", live.Server);
        Assert.Equal(segments + 2, live.Keys); // segments, the manifest, latest
        Assert.Equal(512L << 20, live.MaxMemory);
        Assert.True(live.UsedMemory >= 4 * 65536, $"used {live.UsedMemory}");
        Assert.True(live.HitRate > 0);
        Assert.True(live.BytesReceived >= 4 * 65536);
        Assert.NotNull(hosts.Single(h => h.Host == "127.0.0.1:1").Error);

        var text = await s.HpcdataAsync(["status", "--cache-hosts", $"{s.HostList},127.0.0.1:1"]);
        Assert.Equal(0, text.Code);
        Assert.Contains(text.Stdout, l => l.StartsWith(s.Hosts[0], StringComparison.Ordinal) && l.Contains("cachehost 1.") && l.Contains("512M"));
        Assert.Contains(text.Stdout, l => l.StartsWith("127.0.0.1:1", StringComparison.Ordinal) && l.Contains("unreachable"));
        Assert.Contains("127.0.0.1:1: ", text.Stderr);   // why, below the table rather than in a column as wide as the reason
        AssertFits(text.Stdout);

        var dead = await s.HpcdataAsync(["status", "--cache-hosts", "127.0.0.1:1"]);
        Assert.Equal(1, dead.Code);
    }

    [Fact]
    public async Task Status_on_a_node_shows_the_agents_copies_with_pins_by_job_and_leases()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(3 * 65536 + 5)), "risk/node");
        var pipe = s.NewPipe();
        var agent = s.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(s.Root, "node"), CacheTier = new CacheTierOptions { Hosts = s.Hosts.ToList() },
        }), name: "agent"));
        await agent.WaitReadyAsync(Sandbox.Ready);
        await using var client = await AgentClient.ConnectAsync(pipe);
        await client.PrefetchAsync("risk/node", pin: "job-42");
        await client.OpenAsync("risk/node"); // a lease, held while this connection is open

        var r = await s.HpcdataAsync(["status", "--pipe", pipe, "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var status = JsonSerializer.Deserialize(r.Stdout.Last(), AgentJson.Default.AgentStatus)!;
        var copy = Assert.Single(status.Copies);
        Assert.Equal(("risk/node", staged.Version, "complete", 3 * 65536L + 5), (copy.Name, copy.Version, copy.State, copy.Length));
        Assert.Equal(["job-42"], copy.Pins);
        Assert.Equal(1, copy.Leases);

        var text = await s.HpcdataAsync(["status", "--pipe", pipe]);
        Assert.Equal(0, text.Code);
        Assert.Contains(text.Stdout, l => l.StartsWith("risk/node", StringComparison.Ordinal) && l.Contains(staged.Version[..12]) && l.Contains("job-42") && l.Contains("100%"));
        // The column holds the jobs that pinned the copy, and is named for them, not as if it counted pins.
        var header = text.Stdout.Single(l => l.StartsWith("DATASET", StringComparison.Ordinal));
        Assert.Contains("PINNED BY", header);
        Assert.Equal(header.IndexOf("PINNED BY", StringComparison.Ordinal), text.Stdout.Single(l => l.StartsWith("risk/node", StringComparison.Ordinal)).IndexOf("job-42", StringComparison.Ordinal));
        AssertFits(text.Stdout);

        var none = await s.HpcdataAsync(["status", "--pipe", s.NewPipe()]);
        Assert.Equal(1, none.Code);
        Assert.Contains("no node agent answers", none.Stderr);
    }
}
