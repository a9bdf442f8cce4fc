using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.NodeAgent;

namespace Hpc.NodeAgent.Tests;

/// <summary>A store over a temporary data directory, fed by the in-memory source; a "restart" is a new store over the same directory.</summary>
public sealed class Node : IDisposable
{
    public string Root { get; } = Path.Combine(Path.GetTempPath(), $"hcd-agent-ut-{Environment.ProcessId}-{Guid.NewGuid():N}");
    public FakeSegmentSource Source { get; } = new();
    public NodeAgentOptions Options { get; }
    public DatasetStore Store { get; private set; }

    public Node(long budget = 1L << 30)
    {
        Options = new NodeAgentOptions
        {
            DataDirectory = Root, Budget = budget, NodeName = "n1", TelemetryFile = "none",
            CacheTier = new CacheTierOptions { Hosts = ["fake:6380"] },
        };
        Store = new DatasetStore(Options, Source);
    }

    public DatasetStore Restart() => Store = new DatasetStore(Options, Source);

    public string Complete(string version) => Path.Combine(Root, "complete", version + ".data");
    public string Partial(string version) => Path.Combine(Root, "partial", version + ".data");
    public string Journal(string version) => Path.Combine(Root, "partial", version + ".done");

    public Task<DatasetStore.Ensured> Prefetch(string name, string? pin = null) => Store.EnsureAsync(name, null, lease: false, pin, CancellationToken.None);
    public Task<DatasetStore.Ensured> Open(string name) => Store.EnsureAsync(name, null, lease: true, null, CancellationToken.None);

    public List<string> Names() => Store.Status().Copies.Select(c => c.Name).ToList();

    public void Dispose()
    {
        try
        {
            Hpc.CommonData.Format.TreeWriter.Delete(Root);
        }
        catch (IOException) { }
        catch (UnauthorizedAccessException) { }
    }
}

public class Fetching
{
    [Fact]
    public async Task A_fetched_copy_is_published_read_only_with_the_staged_bytes_and_then_served_locally()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(10_000);
        var version = node.Source.Stage("risk/a", data);

        var first = await node.Prefetch("risk/a");
        Assert.Equal(("fetched", version, node.Complete(version)), (first.Dataset.Source, first.Version, first.Dataset.Path));
        Assert.Equal(data, File.ReadAllBytes(first.Dataset.Path));
        if (!OperatingSystem.IsWindows()) Assert.Equal(UnixFileMode.UserRead | UnixFileMode.GroupRead | UnixFileMode.OtherRead, File.GetUnixFileMode(first.Dataset.Path));
        Assert.False(File.Exists(node.Partial(version)));
        Assert.False(File.Exists(node.Journal(version)));

        Assert.Equal("local", (await node.Open("risk/a")).Dataset.Source);
        Assert.Equal(1, node.Source.Fetches);
    }

    [Fact]
    public async Task Concurrent_requests_for_one_version_cause_one_fetch()
    {
        using var node = new Node();
        node.Source.Stage("risk/a", FakeSegmentSource.Bytes(20_000));
        node.Source.PauseAfter = 1;

        var requests = Enumerable.Range(0, 8).Select(_ => node.Open("risk/a")).ToList();
        await node.Source.Paused;
        node.Source.Resume();
        var results = await Task.WhenAll(requests);

        Assert.Equal(1, node.Source.Fetches);
        Assert.Equal(5, node.Source.SegmentsServed.Count);
        Assert.Single(results.Select(r => r.Dataset.Path).Distinct());
        Assert.Equal(8, node.Store.Status().Copies.Single().Leases);
    }

    [Fact]
    public async Task A_caller_that_gives_up_does_not_cancel_the_fetch_for_the_others()
    {
        using var node = new Node();
        node.Source.Stage("risk/a", FakeSegmentSource.Bytes(20_000));
        node.Source.PauseAfter = 2;
        using var impatient = new CancellationTokenSource();

        var cancelled = node.Store.EnsureAsync("risk/a", null, lease: true, null, impatient.Token);
        await node.Source.Paused;
        var patient = node.Open("risk/a");
        impatient.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => cancelled);
        node.Source.Resume();

        Assert.Equal("fetched", (await patient).Dataset.Source);
        Assert.Equal(1, node.Source.Fetches);
    }

    [Fact]
    public async Task After_an_interrupted_fetch_a_restarted_store_fetches_only_the_missing_segments()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(10 * 4096);
        var version = node.Source.Stage("risk/a", data);
        node.Source.FailAfter = 4;

        var failed = await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("risk/a"));
        Assert.Equal(ErrorCode.Unavailable, failed.Code);
        Assert.True(File.Exists(node.Partial(version)));    // kept for the next request to resume
        Assert.Equal(16, new FileInfo(node.Journal(version)).Length);

        node.Source.FailAfter = null;
        while (node.Source.SegmentsServed.TryDequeue(out _)) { }
        node.Restart();
        var partial = node.Store.Status().Copies.Single();
        Assert.Equal(("partial", 10, 4, 4 * 4096L), (partial.State, partial.Segments, partial.SegmentsDone, partial.BytesDone));

        var resumed = await node.Prefetch("risk/a");
        Assert.Equal("resumed", resumed.Dataset.Source);
        Assert.Equal([4, 5, 6, 7, 8, 9], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(resumed.Dataset.Path));
    }

    [Fact]
    public async Task On_resume_a_journal_entry_whose_bytes_did_not_reach_the_disk_is_fetched_again()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(6 * 4096);
        var version = node.Source.Stage("risk/a", data);
        node.Source.FailAfter = 3;
        await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("risk/a"));
        await using (var f = new FileStream(node.Partial(version), FileMode.Open, FileAccess.Write))
        {
            f.Position = 4096 + 7; // segment 1, journaled but damaged
            f.WriteByte(0x5A);
        }

        node.Source.FailAfter = null;
        while (node.Source.SegmentsServed.TryDequeue(out _)) { }
        node.Restart();
        var resumed = await node.Prefetch("risk/a");

        Assert.Equal([1, 3, 4, 5], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(resumed.Dataset.Path));
    }

    [Fact]
    public async Task A_damaged_segment_fails_the_fetch_with_Integrity_and_is_never_published()
    {
        using var node = new Node();
        var version = node.Source.Stage("risk/a", FakeSegmentSource.Bytes(5 * 4096));
        node.Source.Damaged.Add(2);

        var e = await Assert.ThrowsAsync<CommonDataException>(() => node.Open("risk/a"));
        Assert.Equal(ErrorCode.Integrity, e.Code);
        Assert.False(File.Exists(node.Complete(version)));
        Assert.False(File.Exists(node.Partial(version)));
        Assert.False(File.Exists(node.Journal(version)));
        Assert.Empty(node.Store.Status().Copies);

        node.Source.Damaged.Clear();
        Assert.Equal("fetched", (await node.Open("risk/a")).Dataset.Source); // nothing of the bad copy is reused
    }

    [Fact]
    public async Task A_full_disk_during_a_fetch_is_NoSpace_and_the_partial_copy_is_removed()
    {
        using var node = new Node();
        var version = node.Source.Stage("risk/a", FakeSegmentSource.Bytes(5 * 4096));
        node.Source.FailAfter = 2;
        node.Source.Failure = new IOException("No space left on device", 28); // ENOSPC, as RandomAccess.Write reports it

        var e = await Assert.ThrowsAsync<CommonDataException>(() => node.Open("risk/a"));
        Assert.Equal(ErrorCode.NoSpace, e.Code);
        Assert.False(File.Exists(node.Partial(version)));
        Assert.False(File.Exists(node.Journal(version)));
        Assert.Empty(node.Store.Status().Copies);

        node.Source.FailAfter = null;
        Assert.Equal("fetched", (await node.Open("risk/a")).Dataset.Source);
    }

    [Fact]
    public async Task A_complete_copy_damaged_while_the_agent_was_down_is_discarded_on_first_use()
    {
        using var node = new Node();
        var version = node.Source.Stage("risk/a", FakeSegmentSource.Bytes(3 * 4096));
        await node.Prefetch("risk/a");
        var path = node.Complete(version);
        File.SetAttributes(path, FileAttributes.Normal);
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        await using (var f = new FileStream(path, FileMode.Open, FileAccess.Write)) f.WriteByte(0);

        node.Restart();
        var e = await Assert.ThrowsAsync<CommonDataException>(() => node.Open("risk/a"));
        Assert.Equal(ErrorCode.Integrity, e.Code);
        Assert.False(File.Exists(path));
        Assert.Equal("fetched", (await node.Open("risk/a")).Dataset.Source);
    }

    [Fact]
    public async Task While_the_cache_tier_is_down_latest_is_the_newest_complete_local_copy()
    {
        using var node = new Node();
        node.Source.Stage("risk/a", FakeSegmentSource.Bytes(4096, seed: 1), created: DateTimeOffset.UtcNow.AddHours(-2));
        var older = await node.Prefetch("risk/a");
        var newer = node.Source.Stage("risk/a", FakeSegmentSource.Bytes(4096, seed: 2), created: DateTimeOffset.UtcNow.AddHours(-1));
        await node.Prefetch("risk/a");
        node.Source.Down = true;

        var served = await node.Open("risk/a");
        Assert.Equal(newer, served.Version);
        Assert.NotEqual(older.Version, served.Version);
        var none = await Assert.ThrowsAsync<CommonDataException>(() => node.Open("risk/never-fetched"));
        Assert.Equal(ErrorCode.Unavailable, none.Code);
    }

    [Fact]
    public async Task A_node_keeps_serving_its_copy_when_the_cache_tier_forgets_the_dataset_and_stops_once_the_tier_records_its_removal()
    {
        using var node = new Node();
        var version = node.Source.Stage("risk/a", FakeSegmentSource.Bytes(4096));
        await node.Prefetch("risk/a");

        node.Source.Forget("risk/a"); // every host restarted empty: no pointer, no manifest, no record of a removal
        var served = await node.Open("risk/a");
        Assert.Equal((version, "local"), (served.Version, served.Dataset.Source));

        node.Source.Remove("risk/a", version);
        var gone = await Assert.ThrowsAsync<CommonDataException>(() => node.Open("risk/a"));
        Assert.Equal(ErrorCode.NotFound, gone.Code);
        var never = await Assert.ThrowsAsync<CommonDataException>(() => node.Open("risk/never-fetched"));
        Assert.Equal(ErrorCode.NotFound, never.Code);
    }

    [Fact]
    public async Task A_version_of_another_dataset_is_not_found()
    {
        using var node = new Node();
        var version = node.Source.Stage("risk/a", FakeSegmentSource.Bytes(4096));
        await node.Prefetch("risk/a");
        var e = await Assert.ThrowsAsync<CommonDataException>(() => node.Store.EnsureAsync("risk/b", version, false, null, CancellationToken.None));
        Assert.Equal(ErrorCode.NotFound, e.Code);
    }
}

public class Progress
{
    [Fact]
    public async Task Status_reports_segments_and_bytes_done_while_a_fetch_runs_and_in_full_once_complete()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(4 * 4096 + 100);
        node.Source.Stage("risk/a", data);
        node.Source.PauseAfter = 3;

        var fetch = node.Prefetch("risk/a");
        await node.Source.Paused;
        var running = node.Store.Status().Copies.Single();
        Assert.Equal(("fetching", 5, 3, 3 * 4096L, (long)data.Length), (running.State, running.Segments, running.SegmentsDone, running.BytesDone, running.Length));

        node.Source.Resume();
        await fetch;
        var done = node.Store.Status().Copies.Single();
        Assert.Equal(("complete", 5, 5, (long)data.Length), (done.State, done.Segments, done.SegmentsDone, done.BytesDone));
    }
}

public class EvictionAndPins
{
    [Fact]
    public async Task Past_its_budget_the_store_evicts_the_least_recently_used_copy_and_deletes_its_files()
    {
        using var node = new Node(budget: 2 * 8192);
        var a = node.Source.Stage("e/a", FakeSegmentSource.Bytes(8192, 1));
        node.Source.Stage("e/b", FakeSegmentSource.Bytes(8192, 2));
        node.Source.Stage("e/c", FakeSegmentSource.Bytes(8192, 3));
        await node.Prefetch("e/a");
        await node.Prefetch("e/b");
        await node.Prefetch("e/a");  // a is used again: b is now the least recently used
        await node.Prefetch("e/c");

        Assert.Equal(["e/a", "e/c"], node.Names());
        Assert.Equal(2 * 8192, node.Store.Status().UsedBytes);
        Assert.True(File.Exists(node.Complete(a)));
        Assert.Equal(2, Directory.GetFiles(Path.Combine(node.Root, "complete")).Length);
        Assert.Equal(2, Directory.GetFiles(Path.Combine(node.Root, "manifests")).Length);
    }

    [Fact]
    public async Task A_leased_copy_is_not_evicted_and_when_nothing_can_go_the_fetch_is_refused_with_NoSpace()
    {
        using var node = new Node(budget: 2 * 8192);
        node.Source.Stage("e/a", FakeSegmentSource.Bytes(8192, 1));
        node.Source.Stage("e/b", FakeSegmentSource.Bytes(8192, 2));
        node.Source.Stage("e/c", FakeSegmentSource.Bytes(8192, 3));
        var a = await node.Open("e/a");      // leased, and the oldest
        await node.Prefetch("e/b", pin: "job7");

        var full = await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("e/c"));
        Assert.Equal(ErrorCode.NoSpace, full.Code);
        Assert.Equal(["e/a", "e/b"], node.Names());

        node.Store.Lease(a.Version, -1);     // the worker's connection closed
        await node.Prefetch("e/c");
        Assert.Equal(["e/b", "e/c"], node.Names());
    }

    [Fact]
    public async Task Pins_survive_a_restart_and_keep_protecting_the_copy()
    {
        using var node = new Node(budget: 2 * 8192);
        node.Source.Stage("e/a", FakeSegmentSource.Bytes(8192, 1));
        node.Source.Stage("e/b", FakeSegmentSource.Bytes(8192, 2));
        node.Source.Stage("e/c", FakeSegmentSource.Bytes(8192, 3));
        await node.Prefetch("e/a", pin: "job1");
        await node.Prefetch("e/a", pin: "job2");
        await node.Prefetch("e/b");

        node.Restart();
        Assert.Equal(["job1", "job2"], node.Store.Status().Copies.Single(c => c.Name == "e/a").Pins);
        await node.Prefetch("e/c");
        Assert.Equal(["e/a", "e/c"], node.Names());
        Assert.Equal("local", (await node.Open("e/a")).Dataset.Source);
    }

    [Fact]
    public async Task Releasing_the_last_pin_with_evict_removes_the_copy_and_releasing_again_does_not_fail()
    {
        using var node = new Node();
        var version = node.Source.Stage("e/a", FakeSegmentSource.Bytes(8192, 1));
        await node.Prefetch("e/a", pin: "job1");
        await node.Prefetch("e/a", pin: "job2");

        Assert.False(node.Store.Release("e/a", null, "job1", evict: true)); // job2 still holds it
        Assert.True(node.Store.Release("e/a", null, "job2", evict: true));
        Assert.False(node.Store.Release("e/a", null, "job2", evict: true));
        Assert.Empty(node.Names());
        Assert.False(File.Exists(node.Complete(version)));

        node.Restart();
        Assert.Empty(node.Names());
    }

    [Fact]
    public async Task A_partial_copy_nobody_is_fetching_is_evicted_before_complete_ones()
    {
        using var node = new Node(budget: 3 * 8192);
        node.Source.Stage("e/a", FakeSegmentSource.Bytes(8192, 1));
        var b = node.Source.Stage("e/b", FakeSegmentSource.Bytes(8192, 2));
        node.Source.Stage("e/c", FakeSegmentSource.Bytes(8192, 3));
        node.Source.Stage("e/d", FakeSegmentSource.Bytes(8192, 4));
        await node.Prefetch("e/a");
        node.Source.FailAfter = 1;
        await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("e/b"));
        node.Source.FailAfter = null;
        await node.Prefetch("e/c");

        await node.Prefetch("e/d");
        Assert.Equal(["e/a", "e/c", "e/d"], node.Names());
        Assert.False(File.Exists(node.Partial(b)));
    }
}

public class VersionPrefixes
{
    [Fact]
    public async Task A_version_given_by_the_start_of_its_id_is_fetched_and_answered_by_its_whole_id()
    {
        using var node = new Node();
        var older = node.Source.Stage("risk/p", FakeSegmentSource.Bytes(5_000, seed: 1));
        node.Source.Stage("risk/p", FakeSegmentSource.Bytes(5_000, seed: 2));

        var fetched = await node.Store.EnsureAsync("risk/p", older[..12], lease: false, pin: "j", CancellationToken.None);

        Assert.Equal((older, "fetched"), (fetched.Version, fetched.Dataset.Source));
        Assert.Equal(older, fetched.Dataset.Version);
    }

    [Fact]
    public async Task A_copy_on_the_node_answers_a_prefix_while_the_tier_is_down_and_its_pin_is_released_by_it()
    {
        using var node = new Node();
        var version = node.Source.Stage("risk/p", FakeSegmentSource.Bytes(5_000));
        await node.Store.EnsureAsync("risk/p", version, lease: false, pin: "j", CancellationToken.None);
        node.Source.Down = true;

        var local = await node.Store.EnsureAsync("risk/p", version[..8].ToUpperInvariant(), lease: false, pin: null, CancellationToken.None);
        Assert.Equal((version, "local"), (local.Version, local.Dataset.Source));

        node.Store.Release("risk/p", version[..10], "j", evict: true);
        Assert.Empty(node.Names());
    }

    [Fact]
    public async Task A_start_of_an_id_no_version_has_is_not_found_and_too_few_digits_are_refused_saying_how_many()
    {
        using var node = new Node();
        node.Source.Stage("risk/p", FakeSegmentSource.Bytes(5_000));
        var none = await Assert.ThrowsAsync<CommonDataException>(() => node.Store.EnsureAsync("risk/p", "0000000000", false, null, CancellationToken.None));
        Assert.Equal(ErrorCode.NotFound, none.Code);
        Assert.Contains("no version on fake:6380 starts with '0000000000'", none.Message);
        var shortId = await Assert.ThrowsAsync<CommonDataException>(() => node.Store.EnsureAsync("risk/p", "abc", false, null, CancellationToken.None));
        Assert.Contains("give its 64 hex digits or at least the first 8", shortId.Message);
    }
}
