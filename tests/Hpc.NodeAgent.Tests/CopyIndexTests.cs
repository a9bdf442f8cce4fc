using Hpc.CommonData.Format;
using Hpc.NodeAgent;

namespace Hpc.NodeAgent.Tests;

/// <summary>The in-memory index on its own: budget, LRU order, leases and pins, with the removal hook observed.</summary>
public class CopyIndexTests
{
    private static (string Version, Manifest Manifest) Version(string name, int length, int seed)
    {
        var source = new FakeSegmentSource();
        var version = source.Stage(name, FakeSegmentSource.Bytes(length, seed));
        return (version, source.GetManifestAsync(name, version, default).Result);
    }

    private static (string, Manifest) A = Version("i/a", 100, 1), B = Version("i/b", 100, 2), C = Version("i/c", 100, 3), D = Version("i/d", 100, 4);

    private static CopyIndex Index(long budget, List<string> removed, List<IReadOnlyDictionary<string, Pin[]>>? pins = null) =>
        new(budget, c => removed.Add(c.Manifest.Name), p => pins?.Add(p));

    private static void Complete(CopyIndex index, (string Version, Manifest Manifest) v)
    {
        index.BeginFetch(v.Version, v.Manifest);
        index.Completed(v.Version);
    }

    [Fact]
    public void Copies_that_fit_the_budget_are_all_kept()
    {
        var removed = new List<string>();
        var index = Index(300, removed);
        Complete(index, A); Complete(index, B); Complete(index, C);
        Assert.Empty(removed);
        Assert.Equal(300, index.UsedBytes);
    }

    [Fact]
    public void Eviction_takes_the_least_recently_used_first_and_only_as_many_as_needed()
    {
        var removed = new List<string>();
        var index = Index(300, removed);
        Complete(index, A); Complete(index, B); Complete(index, C);
        index.Acquire(A.Item1, lease: false, pin: null); // A used again: B, then C, are older now
        Complete(index, D);
        Assert.Equal(["i/b"], removed);
        Assert.Equal(["i/a", "i/c", "i/d"], index.Snapshot().Select(c => c.Name));
    }

    [Fact]
    public void Leased_pinned_and_in_flight_copies_are_never_evicted()
    {
        var removed = new List<string>();
        var index = Index(300, removed);
        Complete(index, A); Complete(index, B);
        index.Acquire(A.Item1, lease: true, pin: null);
        index.Acquire(B.Item1, lease: false, pin: "job1");
        index.BeginFetch(C.Item1, C.Item2);  // still fetching

        var e = Assert.Throws<CommonDataException>(() => index.BeginFetch(D.Item1, D.Item2));
        Assert.Equal(ErrorCode.NoSpace, e.Code);
        Assert.Empty(removed);

        index.Lease(A.Item1, -1);
        index.BeginFetch(D.Item1, D.Item2);
        Assert.Equal(["i/a"], removed);
    }

    [Fact]
    public void An_abandoned_partial_copy_goes_before_any_complete_one()
    {
        var removed = new List<string>();
        var index = Index(300, removed);
        Complete(index, A);
        index.BeginFetch(B.Item1, B.Item2);
        index.EndFetch(B.Item1);             // failed, nobody asked again
        Complete(index, C);
        Complete(index, D);
        Assert.Equal(["i/b"], removed);
    }

    [Fact]
    public void Every_pin_change_hands_the_whole_pin_set_to_be_saved()
    {
        var pins = new List<IReadOnlyDictionary<string, Pin[]>>();
        var index = Index(1000, [], pins);
        Complete(index, A);
        index.Acquire(A.Item1, lease: false, pin: "job2", pinOwner: 1001);
        index.Acquire(A.Item1, lease: false, pin: "job1", pinOwner: 1002);
        Assert.Equal([new Pin("job1", 1002), new Pin("job2", 1001)], pins[^1][A.Item1]);
        index.Release("i/a", null, "job1", evict: false);
        index.Release("i/a", null, "job2", evict: false);
        Assert.Empty(pins[^1]);
    }

    private const uint AgentUid = 500, Alice = 1001, Bob = 1002;
    private static PeerCredentials As(uint uid) => new(4242, uid, uid, []);

    [Fact]
    public void Another_user_cannot_release_or_evict_a_pin_and_nothing_changes()
    {
        var removed = new List<string>();
        var index = Index(1000, removed);
        var access = new AccessPolicy(AgentUid);
        Complete(index, A);
        index.Acquire(A.Item1, lease: false, pin: "job-7", pinOwner: Alice);

        var e = Assert.Throws<CommonDataException>(() => index.Release("i/a", null, "job-7", evict: true, access, As(Bob)));

        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Contains("'job-7'", e.Message);
        Assert.Contains("'i/a'", e.Message);
        Assert.Contains($"uid {Alice}", e.Message);
        Assert.Contains($"uid {Bob}", e.Message);
        Assert.Empty(removed);
        Assert.Equal(["job-7"], index.Snapshot().Single().Pins);
        Assert.Throws<CommonDataException>(() => index.Release("i/a", null, "job-7", evict: false, access, null)); // nor can an unidentified process
    }

    [LinuxFact]
    public void The_pins_owner_root_and_the_agents_user_may_release_it()
    {
        var access = new AccessPolicy(AgentUid);
        foreach (var caller in new[] { Alice, 0u, AgentUid })
        {
            var removed = new List<string>();
            var index = Index(1000, removed);
            Complete(index, A);
            index.Acquire(A.Item1, lease: false, pin: "job-7", pinOwner: Alice);
            Assert.True(index.Release("i/a", null, "job-7", evict: true, access, As(caller)), $"uid {caller}");
            Assert.Equal(["i/a"], removed);
        }
    }

    [LinuxFact]
    public void A_pin_name_taken_by_two_users_is_two_pins_and_each_drops_only_their_own()
    {
        var removed = new List<string>();
        var index = Index(1000, removed);
        var access = new AccessPolicy(AgentUid);
        Complete(index, A);
        index.Acquire(A.Item1, lease: false, pin: "job-7", pinOwner: Bob); // squatting the job's pin name first
        index.Acquire(A.Item1, lease: false, pin: "job-7", pinOwner: Alice);

        Assert.False(index.Release("i/a", null, "job-7", evict: true, access, As(Bob))); // Alice's pin keeps the copy
        Assert.Empty(removed);
        Assert.Equal(["job-7"], index.Snapshot().Single().Pins);
        Assert.Throws<CommonDataException>(() => index.Release("i/a", null, "job-7", evict: true, access, As(Bob)));
        Assert.True(index.Release("i/a", null, "job-7", evict: true, access, As(Alice)));
        Assert.Equal(["i/a"], removed);
    }

    [LinuxFact]
    public void Evicting_an_unpinned_copy_needs_the_right_to_read_it()
    {
        var removed = new List<string>();
        var index = Index(1000, removed);
        var access = new AccessPolicy(AgentUid);
        var source = new FakeSegmentSource();
        var secret = source.Stage("i/secret", FakeSegmentSource.Bytes(100, 9), readers: Hpc.CommonData.Access.DatasetReaders.Of([Alice], []));
        Complete(index, (secret, source.GetManifestAsync("i/secret", secret, default).Result));

        var e = Assert.Throws<CommonDataException>(() => index.Release("i/secret", null, "any", evict: true, access, As(Bob)));
        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Empty(removed);
        Assert.True(index.Release("i/secret", null, "any", evict: true, access, As(Alice)));
    }

    [Fact]
    public void Acquiring_a_copy_that_was_evicted_meanwhile_fails_so_the_caller_asks_again()
    {
        var index = Index(1000, []);
        Complete(index, A);
        index.Remove(A.Item1);
        Assert.Throws<IOException>(() => index.Acquire(A.Item1, lease: true, pin: null));
    }

    [Fact]
    public void A_pin_past_its_owners_quota_is_refused_naming_the_quota_and_changes_nothing()
    {
        var pins = new List<IReadOnlyDictionary<string, Pin[]>>();
        var index = Index(1000, [], pins);
        Complete(index, A); Complete(index, B);
        index.Acquire(A.Item1, lease: false, pin: "job-1", pinOwner: Alice, pinQuota: 150);

        var e = Assert.Throws<CommonDataException>(() => index.Acquire(B.Item1, lease: true, pin: "job-1", pinOwner: Alice, pinQuota: 150));

        Assert.Equal(ErrorCode.Limit, e.Code);
        Assert.Contains("pin quota", e.Message);
        Assert.Contains("--pin-quota 150", e.Message);
        Assert.Contains($"uid {Alice}", e.Message);
        Assert.Single(pins);
        var b = index.Snapshot().Single(c => c.Name == "i/b");
        Assert.Equal((0, 0), (b.Pins.Count, b.Leases));
        index.Acquire(A.Item1, lease: false, pin: "job-2", pinOwner: Alice, pinQuota: 150); // a copy already pinned counts once
        index.Acquire(B.Item1, lease: false, pin: "job-1", pinOwner: Bob, pinQuota: 150); // each user has a quota of its own
        index.Acquire(B.Item1, lease: false, pin: "job-1", pinOwner: Alice); // no quota: an administrator's pin
        Assert.Equal(["job-1"], index.Snapshot().Single(c => c.Name == "i/b").Pins);
    }

    [LinuxFact]
    public void A_release_counts_the_callers_pins_it_dropped_and_status_lists_only_the_pins_the_caller_may_release()
    {
        var index = Index(1000, []);
        var access = new AccessPolicy(AgentUid);
        Complete(index, A);
        index.Acquire(A.Item1, lease: false, pin: "job-7", pinOwner: Alice);
        index.Acquire(A.Item1, lease: false, pin: "job-8", pinOwner: Bob);

        Assert.Equal(["job-8"], index.Snapshot(mayRelease: owner => access.MayRelease(owner, As(Bob))).Single().Releasable);
        index.Release("i/a", null, "job-9", evict: false, access, As(Bob), out var none);
        index.Release("i/a", null, "job-8", evict: false, access, As(Bob), out var one);

        Assert.Equal((0, 1), (none, one));
        Assert.Equal(["job-7"], index.Snapshot().Single().Pins);
    }
}

public class DataDirectoryTests
{
    [Fact]
    public void Paths_are_built_only_from_version_ids()
    {
        var root = Path.Combine(Path.GetTempPath(), $"hcd-dd-{Guid.NewGuid():N}");
        try
        {
            var dir = new DataDirectory(root);
            var version = new string('a', Hpc.CommonData.Format.SegmentId.HexLength);
            Assert.Equal(Path.Combine(root, "complete", version + ".data"), dir.CompletePath(version));
            Assert.Equal(Path.Combine(root, "partial", version + ".done"), dir.JournalPath(version));
            Assert.Throws<ArgumentException>(() => dir.PartialPath("../../etc/passwd"));
            Assert.Throws<ArgumentException>(() => dir.ManifestPath("risk/a"));
        }
        finally { Directory.Delete(root, recursive: true); }
    }
}
