using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// A dataset name on a cache tier with accounts belongs to the writers its users file names: a second writer staging
/// under that name is refused before it sends anything, on every host, before and after a restart, and readers keep
/// getting the owner's bytes. A re-stage repairs what a restarted host lost.
/// </summary>
public sealed class OwnershipTests(Xunit.Abstractions.ITestOutputHelper output)
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
        Assert.Contains("dataset alice/market is not among the names of account mallory (users file: names mallory ...): User mallory may read it but not change it", stderr);
        Assert.Equal(keysBefore, (await reader.ExecuteOnAsync(0, "DBSIZE"u8.ToArray(), [])).Integer); // nothing was sent

        // Under a name of its own the same writer stages as usual.
        var (own, _, ownErr) = await c.RunAsync("Hpc.Stager", [planted, "--name", "mallory/market", "--cache-hosts", c.HostList], Cluster.As("mallory", "m-pass"));
        Assert.True(own == 0, ownErr);
        Assert.Equal(version, await reader.Catalog.GetLatestAsync("alice/market"));
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", Password = "n-pass" } };
        await using var data = await Dataset.OpenAsync("alice/market", direct);
        Assert.Equal(real, data.GetSpan(0, real.Length).ToArray());

        // A reader's remove is refused, and the refusal says what that means for remove, not only which command failed.
        var (removed, _, removeErr) = await c.RunAsync("hpcdata", ["remove", "alice/market", "--cache-hosts", c.HostList], Cluster.As("node", "n-pass"));
        Assert.Equal(ExitCodes.Denied, removed);
        Assert.Contains("cannot remove 'alice/market': the cache-tier account 'node' may only read; removing takes the account that staged it", removeErr);
        Assert.Equal(version, await reader.Catalog.GetLatestAsync("alice/market"));
    }

    [Fact]
    public async Task A_cache_host_restarted_empty_refuses_a_second_writer_the_owners_name_and_the_owners_re_stage_repairs_it()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes("alice writer a-pass\nmallory writer m-pass\nnode reader n-pass\nnames alice risk/*\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var second = await c.StartCacheHostAsync(o => o.UsersFile = users);
        var real = Cluster.WriteFile(c.Root, "real.bin", Cluster.RandomBytes(400_000, seed: 61));
        string[] stage(string file) => [file, "--name", "risk/ha", "--cache-hosts", c.HostList, "--replicas", "2"];
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", stage(real), Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        await using (var tier = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", Password = "n-pass" }))
            Assert.NotNull(await tier.Catalog.GetLatestAsync("risk/ha"));

        // The second host is killed and comes back empty on its port, as after a crash or a routine restart.
        var port = int.Parse(second[(second.LastIndexOf(':') + 1)..]);
        await c.Processes[1].KillAsync();
        var restarted = new CacheHostOptions { Port = port, UsersFile = users };
        await c.Track(ComponentProcess.Start("Hpc.CacheHost", ProgramContract<CacheHostOptions>.ToArguments(restarted), name: "cachehost2b")).WaitReadyAsync(Cluster.Ready);

        // Another writer cannot take the name on the empty host: ownership is the users file's, not the first stage's.
        var planted = Cluster.WriteFile(c.Root, "planted.bin", Cluster.RandomBytes(400_000, seed: 62));
        var (code, _, stderr) = await c.RunAsync("Hpc.Stager", [planted, "--name", "risk/ha", "--cache-hosts", second], Cluster.As("mallory", "m-pass"));
        Assert.NotEqual(0, code);
        Assert.Contains("dataset risk/ha is not among the names of account mallory", stderr);

        // An operator sees the hosts disagree; the owner's unchanged re-stage puts back what the restarted host lost:
        // pointer, manifest and segments.
        var (status, before, statusErr) = await c.RunAsync("hpcdata", ["status", "--cache-tier", "--cache-hosts", c.HostList], Cluster.As("node", "n-pass"));
        Assert.True(status == 0, statusErr);
        Assert.Contains(before, l => l.StartsWith("hosts disagree on risk/ha: ", StringComparison.Ordinal) && l.Contains($"{second} (none)"));
        var (again, output, againErr) = await c.RunAsync("Hpc.Stager", stage(real), Cluster.As("alice", "a-pass"));
        Assert.True(again == 0, againErr);
        Assert.Contains(output, l => l.Contains("unchanged: nothing new published"));
        Assert.Contains(output, l => l.Contains($"repaired {second}: given this version's manifest and latest pointer"));
        var (_, after, _) = await c.RunAsync("hpcdata", ["status", "--cache-tier", "--cache-hosts", c.HostList], Cluster.As("node", "n-pass"));
        Assert.DoesNotContain(after, l => l.StartsWith("hosts disagree", StringComparison.Ordinal));

        // With the first host gone, readers get the owner's bytes from the repaired one.
        await c.Processes[0].KillAsync();
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", Password = "n-pass", Replicas = 2, MaxAttempts = 1 } };
        await using var data = await Dataset.OpenAsync("risk/ha", direct);
        Assert.Equal(File.ReadAllBytes(real), data.GetSpan(0, 400_000).ToArray());
    }

    /// <summary>
    /// A host restarted empty lacks the version's manifest: another writer's removal record for it is refused there
    /// (it would have kept the owner's removal out), and the owner's <c>hpcdata remove</c> gives that host the manifest
    /// and its record, and removes the version everywhere.
    /// </summary>
    [Fact]
    public async Task Another_writer_cannot_block_the_owners_removal_on_a_host_restarted_empty_and_the_owners_remove_records_it_on_every_host()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes("alice writer a-pass\nmallory writer m-pass\nnode reader n-pass\nops admin o-pass\nnames alice risk/*\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var second = await c.StartCacheHostAsync(o => o.UsersFile = users);
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [Cluster.WriteFile(c.Root, "rb.bin", Cluster.RandomBytes(200_000, seed: 63)), "--name", "risk/rb",
            "--cache-hosts", c.HostList, "--replicas", "2"], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        CacheTierOptions As(string user, string password) => new() { Hosts = c.Hosts.ToList(), User = user, Password = password };
        await using var reader = new CacheTierClient(As("node", "n-pass"));
        var version = (await reader.GetLatestAsync("risk/rb"))!;

        var port = int.Parse(second[(second.LastIndexOf(':') + 1)..]);
        await c.Processes[1].KillAsync();
        await c.Track(ComponentProcess.Start("Hpc.CacheHost", ProgramContract<CacheHostOptions>.ToArguments(new CacheHostOptions { Port = port, UsersFile = users }),
            name: "cachehost2b")).WaitReadyAsync(Cluster.Ready);

        await using var mallory = new CacheTierClient(As("mallory", "m-pass"));
        var squat = await mallory.ExecuteOnAsync(1, "SET"u8.ToArray(), [CacheKeys.Removed(version), "mallory/own", "PX", "600000"]);
        Assert.Equal($"NOPERM this host cannot tell the owner of version {version}: this host holds no manifest hcd:m:{version}; its owner stores the manifest here first, then the record", squat.Text);
        // A record naming another dataset that got there some other way (an administrator's, one left before this
        // rule) gives way to the owner's.
        await using (var ops = new CacheTierClient(As("ops", "o-pass")))
            Assert.Equal("OK", (await ops.ExecuteOnAsync(1, "SET"u8.ToArray(), [CacheKeys.Removed(version), "mallory/own", "PX", "600000"])).Text);

        var (removed, output, removeErr) = await c.RunAsync("hpcdata", ["remove", $"risk/rb@{version}", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(removed == 0, $"remove exited {removed}: {removeErr}");
        Assert.Contains(output, l => l.StartsWith($"removed risk/rb version {version}", StringComparison.Ordinal));
        for (var h = 0; h < 2; h++)
        {
            Assert.Equal("risk/rb", Encoding.UTF8.GetString((await reader.ExecuteOnAsync(h, "GET"u8.ToArray(), [CacheKeys.Removed(version)])).Bulk ?? []));
            Assert.Equal(0, (await reader.ExecuteOnAsync(h, "EXISTS"u8.ToArray(), [CacheKeys.Manifest(version)])).Integer);
        }
        Assert.Null(await reader.GetLatestAsync("risk/rb"));
        Assert.True(await reader.Catalog.WasRemovedAsync("risk/rb", version));
    }

    /// <summary>
    /// Another writer takes a version's lock and polls it with its own value every few milliseconds, so that it would
    /// take it again the moment it expires: the host counts its hold whole and refuses it for a while, and the owner's
    /// job end step takes the lock after that one hold (15 s at most), well within its 30 s.
    /// </summary>
    [Fact]
    public async Task Another_writer_polling_a_versions_lock_does_not_keep_the_owners_end_step_out()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes("alice writer a-pass\nmallory writer m-pass\nnames alice risk/*\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [Cluster.WriteFile(c.Root, "polled.bin", Cluster.RandomBytes(100_000, seed: 72)), "--name", "risk/polled",
            "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        CacheTierOptions As(string user, string password) => new() { Hosts = c.Hosts.ToList(), User = user, Password = password };
        await using var alice = new CacheTierClient(As("alice", "a-pass"));
        var version = (await alice.GetLatestAsync("risk/polled"))!;
        await alice.Catalog.AddJobAsync(version, "job-a");

        await using var mallory = new CacheTierClient(As("mallory", "m-pass"));
        var lockKey = CacheKeys.Lock(version);
        Assert.Equal("OK", (await mallory.ExecuteOnAsync(0, "SET"u8.ToArray(), [lockKey, "mallory:x", "NX", "PX", "15000"])).Text);
        using var stop = new CancellationTokenSource();
        int takes = 0, refusals = 0;
        var poller = Task.Run(async () =>
        {
            while (!stop.IsCancellationRequested)
            {
                var reply = await mallory.ExecuteOnAsync(0, "SET"u8.ToArray(), [lockKey, "mallory:x", "NX", "PX", "15000"]);
                if (reply.Kind == RespKind.SimpleString) takes++;
                else if (reply.Kind == RespKind.Error) refusals++;
                await Task.Delay(5);
            }
        });

        var clock = System.Diagnostics.Stopwatch.StartNew();
        var (removed, _, removeErr) = await c.RunAsync("hpcdata", ["remove", "risk/polled", "--job", "job-a", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        var took = clock.Elapsed;
        await stop.CancelAsync();
        await poller;
        output.WriteLine($"the owner's end step took {took.TotalSeconds:0.0} s; the poller took the lock again {takes} time(s) and was refused {refusals} time(s)");
        Assert.True(removed == 0, $"the owner's end step exited {removed} after {took.TotalSeconds:0.0} s: {removeErr}");
        Assert.Equal(0, takes);
        Assert.True(refusals > 0);
        Assert.Null(await alice.GetLatestAsync("risk/polled"));
    }

    /// <summary>
    /// Four other writer accounts take a version's lock in turn, each the moment it is free and for the longest life a
    /// host gives: each is refused for a while after its hold, but together they could keep it held without a gap. The
    /// owner's job end step, waiting for it, takes it next, when the hold in progress ends.
    /// </summary>
    [Fact]
    public async Task Four_writer_accounts_taking_turns_at_a_versions_lock_do_not_keep_the_owners_end_step_out()
    {
        string[] others = ["mallory", "mallet", "trudy", "eve"];
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes(
            "alice writer a-pass\nnames alice risk/*\n" + string.Concat(others.Select(o => $"{o} writer {o}-pass\n"))));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [Cluster.WriteFile(c.Root, "chained.bin", Cluster.RandomBytes(100_000, seed: 73)), "--name", "risk/chained",
            "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        CacheTierOptions As(string user, string password) => new() { Hosts = c.Hosts.ToList(), User = user, Password = password };
        await using var alice = new CacheTierClient(As("alice", "a-pass"));
        var version = (await alice.GetLatestAsync("risk/chained"))!;
        await alice.Catalog.AddJobAsync(version, "job-a");

        var lockKey = CacheKeys.Lock(version);
        using var stop = new CancellationTokenSource();
        var takes = 0;
        var pollers = others.Select(other => Task.Run(async () =>
        {
            await using var client = new CacheTierClient(As(other, other + "-pass"));
            while (!stop.IsCancellationRequested)
                if ((await client.ExecuteOnAsync(0, "SET"u8.ToArray(), [lockKey, other + ":x", "NX", "PX", "15000"])).Kind == RespKind.SimpleString)
                    Interlocked.Increment(ref takes);
        })).ToArray();
        while (Volatile.Read(ref takes) == 0) await Task.Delay(5);

        var clock = System.Diagnostics.Stopwatch.StartNew();
        var (removed, _, removeErr) = await c.RunAsync("hpcdata", ["remove", "risk/chained", "--job", "job-a", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        var took = clock.Elapsed;
        await stop.CancelAsync();
        await Task.WhenAll(pollers);
        output.WriteLine($"the owner's end step took {took.TotalSeconds:0.0} s against {others.Length} accounts polling; they took the lock {takes} time(s)");
        Assert.True(removed == 0, $"the owner's end step exited {removed} after {took.TotalSeconds:0.0} s: {removeErr}");
        Assert.True(took < TimeSpan.FromSeconds(20), $"the owner's end step took {took.TotalSeconds:0.0} s");
        Assert.Null(await alice.GetLatestAsync("risk/chained"));
    }

    [Fact]
    public async Task A_jobs_reference_is_its_accounts_alone_and_the_writer_that_registered_it_ends_it()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", Encoding.UTF8.GetBytes("alice writer a-pass\nmallory writer m-pass\nnames alice risk/*\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var file = Cluster.WriteFile(c.Root, "short.bin", Cluster.RandomBytes(200_000, seed: 71));
        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [file, "--name", "risk/short", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(staged == 0, stageErr);
        CacheTierOptions As(string user, string password) => new() { Hosts = c.Hosts.ToList(), User = user, Password = password };
        await using var alice = new CacheTierClient(As("alice", "a-pass"));
        var version = (await alice.GetLatestAsync("risk/short"))!;
        await alice.Catalog.AddJobAsync(version, "job-a");
        await alice.Catalog.AddJobAsync(version, "job-b");

        // Another writer's attempts to drop or overwrite alice's references change nothing.
        await using var mallory = new CacheTierClient(As("mallory", "m-pass"));
        Assert.Equal(["alice:job-a", "alice:job-b"], await mallory.Catalog.RemoveJobAsync(version, "job-b"));
        var overwrite = await mallory.ExecuteOnAsync(0, "SET"u8.ToArray(), [CacheKeys.JobReference(version, "alice", "job-b"), "x", "PX", "1000"]);
        Assert.StartsWith("NOPERM", overwrite.Text);
        var (removed, _, removeErr) = await c.RunAsync("hpcdata", ["remove", "risk/short", "--job", "job-a", "--cache-hosts", c.HostList], Cluster.As("mallory", "m-pass"));
        Assert.True(removed == 0, removeErr);
        Assert.Equal(["job-a", "job-b"], await alice.Catalog.JobsAsync(version));

        // Alice's end steps, as the writer that registered the jobs: the first keeps the version, the last removes it.
        var (first, firstOut, firstErr) = await c.RunAsync("hpcdata", ["remove", "risk/short", "--job", "job-a", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(first == 0, firstErr);
        Assert.Contains("still used by job(s) job-b", firstErr);
        var (last, lastOut, lastErr) = await c.RunAsync("hpcdata", ["remove", "risk/short", "--job", "job-b", "--cache-hosts", c.HostList], Cluster.As("alice", "a-pass"));
        Assert.True(last == 0, lastErr);
        Assert.Contains(lastOut, l => l.StartsWith($"removed risk/short version {version}", StringComparison.Ordinal));
        Assert.Null(await alice.GetLatestAsync("risk/short"));
        Assert.True(await alice.Catalog.WasRemovedAsync("risk/short", version));
    }
}
