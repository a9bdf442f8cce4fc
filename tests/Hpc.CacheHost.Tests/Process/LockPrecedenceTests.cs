using System.Collections.Concurrent;
using System.Diagnostics;
using Hpc.CommonData.Cache;
using Xunit.Abstractions;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// A version's lock serializes its job references across every account using the version, and its owner's end step
/// needs it too. Each other writer account may hold it at most 15 s and not again at once, but several taking turns
/// could chain their holds for ever; so while the owner (or an administrator) waits for the lock, the next take is
/// theirs, and the owner's end step goes once the hold in progress ends, whatever the others do.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class LockPrecedenceTests(ITestOutputHelper output) : IDisposable
{
    private static readonly string[] Others = ["mallory", "mallet", "trudy", "eve"];

    private readonly string _usersFile = WriteUsers();

    private static string WriteUsers()
    {
        var file = Path.GetTempFileName();
        File.WriteAllText(file, $"""
            alice   writer  alice-pass
            ops     admin   ops-pass
            {string.Join("\n", Others.Select(a => $"{a} writer {a}-pass"))}
            """);
        return file;
    }

    [Theory]
    [InlineData("alice")]
    [InlineData("ops")]
    public async Task The_owners_end_step_goes_within_20_s_while_four_other_writer_accounts_take_turns_holding_the_versions_lock(string account)
    {
        using var host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
        var version = Stage(host, "alice/shared", "wanted by every job");
        var lockKey = CacheKeys.Lock(version);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [$"{host.Host}:{host.Port}"], User = account, Password = account + "-pass" });
        await tier.Catalog.AddJobAsync(version, "4242");

        // Every other account takes the lock the moment it is free, for the longest life a host gives, and never lets
        // go: each is held back for about 30 s after its hold, so four of them could keep it taken without a gap.
        using var stop = new CancellationTokenSource();
        var takes = new ConcurrentDictionary<string, int>();
        var pollers = Others.Select(other => Task.Run(() =>
        {
            using var c = new RespTestClient(host);
            Assert.Equal("OK", c.Call("AUTH", other, other + "-pass"));
            while (!stop.IsCancellationRequested)
                if (c.Call("SET", lockKey, other + ":hold", "NX", "PX", "15000") is "OK")
                    takes.AddOrUpdate(other, 1, (_, n) => n + 1);
        })).ToArray();

        // The end step starts as one of them has just taken it: the longest wait there is.
        using (var watcher = new RespTestClient(host))
        {
            Assert.Equal("OK", watcher.Call("AUTH", "ops", "ops-pass"));
            var deadline = Stopwatch.StartNew();
            while (watcher.Call("PTTL", lockKey) is not (> 14_500L) && deadline.Elapsed < TimeSpan.FromSeconds(60)) Thread.Sleep(5);
            Assert.True(deadline.Elapsed < TimeSpan.FromSeconds(60), "another account took the lock");
        }

        // What `hpcdata remove alice/shared@VERSION --job 4242` does at the job's end.
        var clock = Stopwatch.StartNew();
        var others = await tier.Catalog.RemoveJobAsync(version, "4242");
        await tier.Catalog.RemoveVersionAsync("alice/shared", version);
        clock.Stop();
        stop.Cancel();
        await Task.WhenAll(pollers);

        output.WriteLine($"{account}'s end step: {clock.Elapsed.TotalSeconds:0.0} s against {Others.Length} accounts polling; takes: {string.Join(", ", takes.Select(t => $"{t.Key} {t.Value}"))}");
        Assert.Empty(others);
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(20), $"the end step took {clock.Elapsed.TotalSeconds:0.0} s");
        Assert.NotEmpty(takes);
    }

    private static string Stage(CacheHostProcess host, string name, string content)
    {
        using var alice = new RespTestClient(host);
        Assert.Equal("OK", alice.Call("AUTH", "alice", "alice-pass"));
        var segment = StoredObjects.Segment(content);
        var version = StoredObjects.Version(name, segment.Entry);
        Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
        Assert.Equal("OK", alice.Call("SET", version.Key, version.Stored));
        Assert.Equal("OK", alice.Call("SET", "hcd:latest:" + name, version.Version));
        return version.Version;
    }

    public void Dispose() => File.Delete(_usersFile);
}
