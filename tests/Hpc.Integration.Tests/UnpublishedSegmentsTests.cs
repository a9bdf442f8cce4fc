using System.Diagnostics;
using System.Text;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// The segments a stage sends live only a bounded time until it publishes, so a stage that fails or is killed leaves
/// nothing on the cache hosts for good (only an administrator's collection could free them before). Publishing keeps
/// every segment of the version, including those found already held, which may be another stage's unpublished ones:
/// each cache host gives them the version's life as it takes the version's "latest" pointer, so a stage refused before
/// that leaves its segments expiring too.
/// </summary>
public sealed class UnpublishedSegmentsTests(Xunit.Abstractions.ITestOutputHelper output)
{
    private const string Users = "alice writer a-pass\nops admin o-pass\nnode reader n-pass\nnames alice risk/*\n";

    [Fact]
    public async Task A_killed_stage_leaves_segments_that_expire_by_themselves_and_the_stage_that_publishes_them_keeps_them_for_good()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes(Users));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var file = Cluster.WriteFile(c.Root, "prices.bin", Cluster.RandomBytes(8 << 20, seed: 71));
        await using var ops = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "ops", Password = "o-pass" });

        // Sending at 2 MB/s, the stage is killed once the host holds some of its segments.
        var killed = c.Track(ComponentProcess.Start("Hpc.Stager", [file, "--name", "risk/prices", "--cache-hosts", c.HostList, "--max-rate", "2MB"],
            Cluster.As("alice", "a-pass"), name: "stager-killed"));
        await WaitForSegmentsAsync(ops, 16);
        await killed.KillAsync();
        var left = await SegmentLivesAsync(ops);
        output.WriteLine($"the killed stage left {left.Count} segments");
        Assert.True(left.Count >= 16, $"{left.Count} segments left");
        Assert.All(left.Values, ms => Assert.InRange(ms, 1, (long)CacheKeys.UnpublishedLifetime.TotalMilliseconds));
        Assert.Null(await ops.Catalog.GetLatestAsync("risk/prices"));

        // The same file staged to the end finds those segments held and does not send them again; once published,
        // every segment of the version is kept until removed.
        var (code, stdout, stderr) = await c.RunAsync("Hpc.Stager", [file, "--name", "risk/prices", "--cache-hosts", c.HostList, "--json"], Cluster.As("alice", "a-pass"));
        Assert.True(code == 0, stderr);
        var staged = JsonSerializer.Deserialize<StageResult>(stdout.Last(), JsonSerializerOptions.Web)!;
        Assert.True(staged.SkippedSegments >= left.Count - 4, $"{staged.SkippedSegments} segments found held of the {left.Count} the killed stage left");
        var lives = await SegmentLivesAsync(ops);
        Assert.Equal(staged.Segments, lives.Count);
        Assert.All(lives.Values, ms => Assert.Equal(-1, ms));
    }

    [Fact]
    public async Task A_stage_sends_again_the_held_segments_that_expired_before_it_published_and_readers_get_the_whole_version()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes(Users));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var bytes = Cluster.RandomBytes(8 << 20, seed: 72);
        var file = Cluster.WriteFile(c.Root, "curves.bin", bytes);
        await using var ops = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "ops", Password = "o-pass" });

        // A stage whose unsent-until-published segments live 6 s is killed a quarter of the way in.
        var killed = c.Track(ComponentProcess.Start("Hpc.Stager",
            [file, "--name", "risk/curves", "--cache-hosts", c.HostList, "--max-rate", "2MB", "--unpublished-lifetime", "6s"],
            Cluster.As("alice", "a-pass"), name: "stager-killed"));
        await WaitForSegmentsAsync(ops, 32);
        await killed.KillAsync();
        var left = await SegmentLivesAsync(ops);
        Assert.All(left.Values, ms => Assert.InRange(ms, 1, 6_000));

        // A second stage of the same file finds them held at once, but sends the rest slowly (the remaining ~6 MB at
        // 0.5 MB/s): by the time it publishes they have expired, and it must send them again rather than publish a
        // version whose segments are gone.
        var clock = Stopwatch.StartNew();
        var (code, _, stderr) = await c.RunAsync("Hpc.Stager", [file, "--name", "risk/curves", "--cache-hosts", c.HostList, "--max-rate", "512KB"],
            Cluster.As("alice", "a-pass"));
        output.WriteLine($"second stage: {clock.Elapsed.TotalSeconds:0.0} s, exit {code}\n{stderr}");
        Assert.True(code == 0, stderr);
        Assert.Contains("segments expired or were lost from the cache tier before publishing; sending them again", stderr);
        Assert.All((await SegmentLivesAsync(ops)).Values, ms => Assert.Equal(-1, ms));

        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", Password = "n-pass" } };
        await using var data = await Dataset.OpenAsync("risk/curves", direct);
        Assert.True(data.VerifyHash());
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
    }

    /// <summary>Polls every 20 ms, for at most 60 s, until the host holds at least <paramref name="count"/> segments.</summary>
    private static async Task WaitForSegmentsAsync(CacheTierClient ops, int count)
    {
        for (var wait = Stopwatch.StartNew(); wait.Elapsed < TimeSpan.FromSeconds(60); await Task.Delay(20))
            if ((await ops.KeysAsync(CacheKeys.SegmentPrefix))[0].Count >= count) return;
        Assert.Fail($"the stage did not store {count} segments within 60 s");
    }

    /// <summary>Each segment key's remaining life in milliseconds (−1: kept until removed).</summary>
    private static async Task<Dictionary<string, long>> SegmentLivesAsync(CacheTierClient ops)
    {
        var lives = new Dictionary<string, long>();
        foreach (var key in (await ops.KeysAsync(CacheKeys.SegmentPrefix))[0])
            lives[key] = (await ops.ExecuteOnAsync(0, "PTTL"u8.ToArray(), [key])).Integer;
        return lives;
    }

    /// <summary>
    /// A stage refused at publishing (here: its account lost the name while it ran, so the host refuses the manifest)
    /// leaves the segments it sent with their unpublished life: no host took its pointer, so none gave them the
    /// version's. It says they expire within the hour, and the hosts hold them as it says.
    /// </summary>
    [Fact]
    public async Task A_stage_refused_at_publishing_leaves_its_new_segments_expiring_and_says_so()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes(Users));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var file = Cluster.WriteFile(c.Root, "late.bin", Cluster.RandomBytes(16 << 20, seed: 73));
        await using var ops = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "ops", Password = "o-pass" });
        var stage = c.Track(ComponentProcess.Start("Hpc.Stager", [file, "--name", "risk/late", "--cache-hosts", c.HostList, "--max-rate", "4MB"],
            Cluster.As("alice", "a-pass"), name: "stager-late"));
        for (var clock = Stopwatch.StartNew(); (await ops.KeysAsync(CacheKeys.SegmentPrefix))[0].Count == 0; await Task.Delay(50))
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(60), "the stage sent nothing in 60 s");
        // While it sends, risk/* stops being alice's: the manifest is refused at publishing.
        File.WriteAllText(users, Users.Replace("names alice risk/*\n", ""));
        Assert.Equal("OK", (await ops.ExecuteOnAsync(0, "ACL"u8.ToArray(), ["LOAD"])).Text);

        var code = await stage.WaitForExitAsync(TimeSpan.FromMinutes(2));
        Assert.Equal(ExitCodes.Denied, code);
        Assert.Contains("dataset risk/late is not among the names of account alice", stage.StandardErrorTail);
        Assert.Contains("they expire within 1h unless a stage publishes them", stage.StandardErrorTail);
        Assert.DoesNotContain("do not expire", stage.StandardErrorTail);
        var lives = await SegmentLivesAsync(ops);
        Assert.NotEmpty(lives);
        Assert.All(lives.Values, ms => Assert.InRange(ms, 1, (long)CacheKeys.UnpublishedLifetime.TotalMilliseconds));

        // The name is alice's again: a stage that publishes keeps every segment of the version until removed.
        File.WriteAllText(users, Users);
        Assert.Equal("OK", (await ops.ExecuteOnAsync(0, "ACL"u8.ToArray(), ["LOAD"])).Text);
        var (again, stdout, stderr) = await c.RunAsync("Hpc.Stager", [file, "--name", "risk/late", "--cache-hosts", c.HostList, "--json"], Cluster.As("alice", "a-pass"));
        Assert.True(again == 0, stderr);
        var staged = JsonSerializer.Deserialize<StageResult>(stdout.Last(), JsonSerializerOptions.Web)!;
        lives = await SegmentLivesAsync(ops);
        Assert.Equal(staged.Segments, lives.Count);
        Assert.All(lives.Values, ms => Assert.Equal(-1, ms));
    }
}
