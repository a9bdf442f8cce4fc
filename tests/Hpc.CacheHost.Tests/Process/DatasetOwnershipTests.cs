using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// On a host with accounts, a dataset name belongs to the writers the users file names for it (its <c>names</c> lines,
/// and each writer's own owner prefix): other writers read it but cannot move, expire or replace anything of it.
/// Segments and manifests are content-addressed: stored only with the bytes their id names, never replaced, and a
/// writer only lengthens their life. Bookkeeping keys belong to the account they name and always expire.
/// Administrators are not limited.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class DatasetOwnershipTests : IDisposable
{
    private static (string Key, byte[] Stored, ManifestSegment Entry) Segment(string text) => StoredObjects.Segment(text);

    private static (string Version, string Key, byte[] Stored) Version(string name, ManifestSegment segment) => StoredObjects.Version(name, segment);

    private readonly string _usersFile = Path.GetTempFileName();
    private readonly CacheHostProcess _host;

    public DatasetOwnershipTests()
    {
        File.WriteAllText(_usersFile, """
            alice   writer  alice-pass
            mallory writer  mallory-pass
            node    reader  node-pass
            ops     admin   ops-pass
            names   alice   risk/* market/ticks
            """);
        _host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
    }

    private (string Segment, string Manifest, string Version) StageAsAlice(string name, string content)
    {
        using var alice = Login("alice", "alice-pass");
        var segment = Segment(content);
        var version = Version(name, segment.Entry);
        Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
        Assert.Equal("OK", alice.Call("SET", version.Key, version.Stored));
        Assert.Equal("OK", alice.Call("SET", "hcd:latest:" + name, version.Version));
        return (segment.Key, version.Key, version.Version);
    }

    [Fact]
    public void Another_writer_cannot_move_expire_replace_or_delete_a_dataset_it_does_not_own()
    {
        var staged = StageAsAlice("alice/market", "prices of the day");
        using var mallory = Login("mallory", "mallory-pass");

        // A version of its own under alice's name: segments are welcome (content is content), the manifest is not.
        var planted = Segment("planted prices");
        Assert.Equal("OK", mallory.Call("SET", planted.Key, planted.Stored));
        var forged = Version("alice/market", planted.Entry);
        Assert.Equal("NOPERM dataset alice/market is not among the names of account mallory (users file: names mallory ...): User mallory may read it but not change it",
            Refusal(mallory.Call("SET", forged.Key, forged.Stored)));
        Assert.StartsWith("NOPERM dataset alice/market is not among the names of account mallory", Refusal(mallory.Call("SET", "hcd:latest:alice/market", staged.Version)));
        Assert.StartsWith("NOPERM dataset alice/market is not among the names of account mallory", Refusal(mallory.Call("PEXPIRE", "hcd:latest:alice/market", "1")));
        Assert.StartsWith("NOPERM User mallory may only lengthen the life of", Refusal(mallory.Call("PEXPIRE", staged.Manifest, "1")));
        Assert.StartsWith("NOPERM User mallory may only lengthen the life of", Refusal(mallory.Call("EXPIRE", staged.Segment, "1")));
        // GT cannot shorten a life, so any writer may ask it of a shared key (a stage keeping segments it found held);
        // on a key kept until removed it changes nothing.
        Assert.Equal(0L, mallory.Call("PEXPIRE", staged.Segment, "1", "GT"));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("DEL", staged.Manifest, staged.Segment, "hcd:latest:alice/market")));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", staged.Segment, planted.Stored)));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", "hcd:owner:alice/market", "mallory")));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", "hcd:removed:" + staged.Version, "alice/market", "PX", "60000")));

        // Everything of alice's is as she left it, and mallory may still read it.
        Assert.Equal(staged.Version, mallory.ReadStringOf("GET", "hcd:latest:alice/market"));
        Assert.Equal(-1L, mallory.Call("PTTL", staged.Manifest));
        Assert.Equal(-1L, mallory.Call("PTTL", staged.Segment));
        Assert.Equal(-1L, mallory.Call("PTTL", "hcd:latest:alice/market"));
        Assert.IsType<byte[]>(mallory.Call("GET", staged.Manifest));

        // The owner moves her own pointer, and removes her own version (its segments are shared: they stay).
        using var alice = Login("alice", "alice-pass");
        Assert.Equal(1L, alice.Call("PEXPIRE", "hcd:latest:alice/market", "600000"));
        Assert.Equal("OK", alice.Call("SET", "hcd:removed:" + staged.Version, "alice/market", "PX", "60000"));
        Assert.Equal(2L, alice.Call("DEL", "hcd:latest:alice/market", staged.Manifest));
        Assert.StartsWith("NOPERM User alice has no permissions to delete shared keys", Refusal(alice.Call("DEL", staged.Segment)));
    }

    [Fact]
    public void A_segment_is_stored_in_one_form_under_one_key()
    {
        using var alice = Login("alice", "alice-pass");
        var segment = Segment("one form only");
        var upper = "hcd:s:" + segment.Key["hcd:s:".Length..].ToUpperInvariant();
        Assert.StartsWith($"NOPERM {upper} is not a key this system writes", Refusal(alice.Call("SET", upper, segment.Stored)));
        var reserved = (byte[])segment.Stored.Clone();
        reserved[5] = 1;
        Assert.Contains("reserved header bytes are not zero", Refusal(alice.Call("SET", segment.Key, reserved)));
        Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
        Assert.Equal(1L, alice.Call("DBSIZE"));
    }

    [Fact]
    public void A_removal_record_belongs_to_its_versions_owner_and_no_other_writer_replaces_shortens_or_deletes_it()
    {
        var staged = StageAsAlice("risk/rb", "book of the day");
        using var mallory = Login("mallory", "mallory-pass");
        using var alice = Login("alice", "alice-pass");
        var record = "hcd:removed:" + staged.Version;

        // Before the removal: a record for alice's version naming a dataset of mallory's own is refused.
        Assert.Equal($"NOPERM version {staged.Version} is of dataset risk/rb, not mallory/own: a removal record names its version's dataset",
            Refusal(mallory.Call("SET", record, "mallory/own", "PX", "600000")));

        // alice removes it: the record first, then the manifest and pointer.
        Assert.Equal("OK", alice.Call("SET", record, "risk/rb", "PX", "600000"));
        Assert.Equal(2L, alice.Call("DEL", "hcd:latest:risk/rb", staged.Manifest));

        // With the manifest gone, mallory can neither take the record over, nor shorten or delete it.
        Assert.StartsWith($"NOPERM {record} records the removal of risk/rb: only its owner or an administrator changes it (this host cannot tell the owner of version",
            Refusal(mallory.Call("SET", record, "mallory/own", "PX", "600000")));
        Assert.StartsWith("NOPERM dataset risk/rb is not among the names of account mallory", Refusal(mallory.Call("PEXPIRE", record, "1")));
        Assert.StartsWith("NOPERM dataset risk/rb is not among the names of account mallory", Refusal(mallory.Call("DEL", record)));
        Assert.Equal("risk/rb", mallory.ReadStringOf("GET", record));
        Assert.InRange((long)mallory.Call("PTTL", record)!, 590_000L, 600_000L);

        // The owner renews her own record; an administrator may drop it.
        Assert.Equal("OK", alice.Call("SET", record, "risk/rb", "PX", "600000"));
        using var ops = Login("ops", "ops-pass");
        Assert.Equal(1L, ops.Call("DEL", record));
    }

    /// <summary>
    /// A host restarted empty or newly added lacks the version's manifest, so it cannot tell whose version it is: it
    /// takes no removal record on trust (one from another writer would keep the owner's removal out), and takes the
    /// owner's once the owner has stored the manifest there; a record naming another dataset gives way to it then.
    /// </summary>
    [Fact]
    public void A_host_without_the_versions_manifest_takes_no_removal_record_until_it_can_tell_the_owner_and_then_takes_the_owners()
    {
        var segment = Segment("book held elsewhere");
        var version = Version("risk/rb", segment.Entry); // staged on other hosts; this one never had it
        using var mallory = Login("mallory", "mallory-pass");
        using var alice = Login("alice", "alice-pass");
        var record = "hcd:removed:" + version.Version;

        var unknown = $"NOPERM this host cannot tell the owner of version {version.Version}: this host holds no manifest hcd:m:{version.Version}; its owner stores the manifest here first, then the record";
        Assert.Equal(unknown, Refusal(mallory.Call("SET", record, "mallory/own", "PX", "600000")));
        Assert.Equal(unknown, Refusal(alice.Call("SET", record, "risk/rb", "PX", "600000")));
        Assert.Equal(0L, alice.Call("EXISTS", record));

        // A record naming another dataset, whoever left it (here an administrator, who is not limited), gives way to the
        // owner's once the host holds the manifest; another writer cannot store the owner's manifest.
        using var ops = Login("ops", "ops-pass");
        Assert.Equal("OK", ops.Call("SET", record, "mallory/own", "PX", "600000"));
        Assert.Equal($"NOPERM {record} records the removal of mallory/own: only its owner or an administrator changes it " +
            $"(this host cannot tell the owner of version {version.Version} without its manifest hcd:m:{version.Version}; the owner stores the manifest here first)",
            Refusal(alice.Call("SET", record, "risk/rb", "PX", "600000")));
        Assert.StartsWith("NOPERM dataset risk/rb is not among the names of account mallory", Refusal(mallory.Call("SET", version.Key, version.Stored, "NX", "PX", "600000")));
        Assert.Equal("OK", alice.Call("SET", version.Key, version.Stored, "NX", "PX", "600000"));
        Assert.Equal("OK", alice.Call("SET", record, "risk/rb", "PX", "600000"));
        Assert.Equal(1L, alice.Call("DEL", version.Key));

        // The owner's record, once there, is hers to renew without the manifest, and no one else's to replace.
        Assert.Equal("OK", alice.Call("SET", record, "risk/rb", "PX", "600000"));
        Assert.StartsWith($"NOPERM {record} records the removal of risk/rb: only its owner or an administrator changes it",
            Refusal(mallory.Call("SET", record, "mallory/own", "PX", "600000")));
        Assert.Equal("risk/rb", mallory.ReadStringOf("GET", record));
    }

    [Fact]
    public void The_users_file_names_who_owns_a_dataset_and_a_refused_write_leaves_no_claim_behind()
    {
        using var mallory = Login("mallory", "mallory-pass");
        using var alice = Login("alice", "alice-pass");
        var segment = Segment("tomorrow's prices");
        Assert.Equal("OK", mallory.Call("SET", segment.Key, segment.Stored));

        // Refused writes to a name the file gives alice: nothing is recorded, so her first stage goes through.
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", "hcd:latest:risk/future", "nonsense")));
        var squat = Version("risk/future", segment.Entry);
        Assert.StartsWith("NOPERM dataset risk/future is not among the names of account mallory", Refusal(mallory.Call("SET", squat.Key, squat.Stored)));
        Assert.Equal("OK", alice.Call("SET", squat.Key, squat.Stored));
        Assert.Equal("OK", alice.Call("SET", "hcd:latest:risk/future", squat.Version));

        // An exact name, an owner prefix, the writer's own prefix; nothing else.
        var ticks = Version("market/ticks", segment.Entry);
        Assert.Equal("OK", alice.Call("SET", ticks.Key, ticks.Stored));
        var quotes = Version("market/quotes", segment.Entry);
        Assert.StartsWith("NOPERM dataset market/quotes is not among the names of account alice", Refusal(alice.Call("SET", quotes.Key, quotes.Stored)));
        var own = Version("mallory/mine", segment.Entry);
        Assert.Equal("OK", mallory.Call("SET", own.Key, own.Stored));
        Assert.Equal("OK", mallory.Call("SET", "hcd:latest:mallory/mine", own.Version));
    }

    [Fact]
    public void Hosts_started_from_the_same_users_file_agree_on_every_owner_before_and_after_a_restart()
    {
        using var other = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
        var segment = Segment("the real bytes");
        var staged = Version("risk/ha", segment.Entry);
        using (var alice = Login("alice", "alice-pass"))
        {
            Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
            Assert.Equal("OK", alice.Call("SET", staged.Key, staged.Stored));
            Assert.Equal("OK", alice.Call("SET", "hcd:latest:risk/ha", staged.Version));
        }
        // The second host never saw alice's stage (it restarted empty, or was added): mallory is refused there too.
        var planted = Segment("someone else's bytes");
        var forged = Version("risk/ha", planted.Entry);
        using (var mallory = new RespTestClient(other))
        {
            Assert.Equal("OK", mallory.Call("AUTH", "mallory", "mallory-pass"));
            Assert.Equal("OK", mallory.Call("SET", planted.Key, planted.Stored));
            Assert.StartsWith("NOPERM dataset risk/ha is not among the names of account mallory", Refusal(mallory.Call("SET", forged.Key, forged.Stored)));
            Assert.Equal(0L, mallory.Call("EXISTS", forged.Key, "hcd:latest:risk/ha"));
        }
        using var repair = new RespTestClient(other);
        Assert.Equal("OK", repair.Call("AUTH", "alice", "alice-pass"));
        Assert.Equal("OK", repair.Call("SET", segment.Key, segment.Stored));
        Assert.Equal("OK", repair.Call("SET", staged.Key, staged.Stored));
        Assert.Equal("OK", repair.Call("SET", "hcd:latest:risk/ha", staged.Version));
    }

    [Fact]
    public void Job_references_locks_and_staging_leases_belong_to_their_account_and_always_expire()
    {
        var staged = StageAsAlice("alice/jobbed", "kept for jobs");
        using var alice = Login("alice", "alice-pass");
        using var mallory = Login("mallory", "mallory-pass");
        var mine = $"hcd:jobs:{{{staged.Version}}}:alice:4711";
        var theirs = $"hcd:jobs:{{{staged.Version}}}:mallory:4711";

        // Each account writes references under its own name only, and only with an expiry the host bounds.
        Assert.Equal("OK", alice.Call("SET", mine, "4711", "PX", "600000"));
        Assert.StartsWith($"NOPERM {mine} belongs to account alice", Refusal(mallory.Call("SET", mine, "other", "PX", "600000")));
        Assert.StartsWith($"NOPERM {mine} belongs to account alice", Refusal(mallory.Call("DEL", mine)));
        Assert.StartsWith($"NOPERM {mine} belongs to account alice", Refusal(mallory.Call("PEXPIRE", mine, "1")));
        Assert.StartsWith($"NOPERM {theirs} must expire within", Refusal(mallory.Call("SET", theirs, "4711")));
        Assert.StartsWith($"NOPERM {theirs} must expire within", Refusal(mallory.Call("SET", theirs, "4711", "EX", "99999999")));
        Assert.Equal("OK", mallory.Call("SET", theirs, "4711", "EX", "3600"));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("PERSIST", theirs)));
        Assert.StartsWith("NOPERM hcd:jobs:" + staged.Version + " is not a key this system writes", Refusal(mallory.Call("SET", "hcd:jobs:" + staged.Version, "job-A", "EX", "60")));

        // A lock is taken with NX only, names its holder, lives at most 15 s, and only its holder releases it.
        var lockKey = "hcd:lock:" + staged.Version;
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", lockKey, "mallory:x")));
        Assert.StartsWith("NOPERM a lock's value starts with its holder's account", Refusal(mallory.Call("SET", lockKey, "alice:x", "NX", "PX", "10000")));
        Assert.StartsWith($"NOPERM {lockKey} must expire within 15 s", Refusal(mallory.Call("SET", lockKey, "mallory:x", "NX")));
        Assert.Equal("OK", alice.Call("SET", lockKey, "alice:4711", "NX", "PX", "10000"));
        Assert.StartsWith($"NOPERM {lockKey} is held by account alice", Refusal(mallory.Call("DEL", lockKey)));
        Assert.StartsWith($"NOPERM {lockKey} is held by account alice", Refusal(mallory.Call("PEXPIRE", lockKey, "50000")));
        Assert.Equal(1L, alice.Call("DEL", lockKey));

        // Staging leases: the account's own, for at most ten minutes.
        Assert.Equal("OK", alice.Call("SET", "hcd:staging:alice:1", "n1", "PX", "15000"));
        Assert.StartsWith("NOPERM hcd:staging:alice:1 belongs to account alice", Refusal(mallory.Call("PEXPIRE", "hcd:staging:alice:1", "999999999")));
        Assert.StartsWith("NOPERM hcd:staging:mallory:1 must expire within 600 s", Refusal(mallory.Call("SET", "hcd:staging:mallory:1", "n1")));

        using var ops = Login("ops", "ops-pass");
        Assert.Equal(2L, ops.Call("DEL", mine, theirs));
    }

    [Fact]
    public void Segments_and_manifests_are_stored_only_with_the_bytes_their_id_names()
    {
        using var alice = Login("alice", "alice-pass");
        var segment = Segment("a segment");
        var other = Segment("another segment");
        Assert.StartsWith("NOPERM the value is not segment", Refusal(alice.Call("SET", segment.Key, other.Stored)));
        Assert.StartsWith("NOPERM the value is not segment", Refusal(alice.Call("SET", segment.Key, "garbage")));
        Assert.StartsWith("NOPERM hcd:s:abc is not a key this system writes", Refusal(alice.Call("SET", "hcd:s:abc", segment.Stored)));

        // Garbage under a manifest key would leave every later collection unable to prove a segment unused.
        var version = Version("alice/ok", segment.Entry);
        Assert.StartsWith("NOPERM the value is not manifest", Refusal(alice.Call("SET", version.Key, "garbage")));
        Assert.StartsWith("NOPERM the value is not manifest", Refusal(alice.Call("SET", version.Key, segment.Stored)));
        Assert.Equal(0L, alice.Call("EXISTS", segment.Key, version.Key));

        // A pointer names a version this host holds, of the same dataset.
        Assert.StartsWith("NOPERM the latest pointer of alice/ok must name a version whose manifest this host holds",
            Refusal(alice.Call("SET", "hcd:latest:alice/ok", version.Version)));
        Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
        Assert.Equal("OK", alice.Call("SET", version.Key, version.Stored));
        Assert.StartsWith($"NOPERM version {version.Version} is of dataset alice/ok, not alice/other",
            Refusal(alice.Call("SET", "hcd:latest:alice/other", version.Version)));
        Assert.Equal("OK", alice.Call("SET", "hcd:latest:alice/ok", version.Version));

        // Keys outside this system's namespace are left to the role check, within the host's quota for them.
        Assert.Equal("OK", alice.Call("SET", "greeting", "hello"));
    }

    [Fact]
    public void A_writer_cannot_keep_a_version_locked_by_renewing_its_lock_or_taking_it_again_and_again()
    {
        var staged = StageAsAlice("alice/locked", "wanted by every job");
        using var alice = Login("alice", "alice-pass");
        using var mallory = Login("mallory", "mallory-pass");
        var lockKey = "hcd:lock:" + staged.Version;

        // Job steps take and release a lock in a moment: a burst of them all pass.
        for (var i = 0; i < 200; i++)
        {
            Assert.Equal("OK", alice.Call("SET", lockKey, $"alice:{i}", "NX", "PX", "10000"));
            Assert.Equal(1L, alice.Call("DEL", lockKey));
        }

        // Held for its whole life: never renewed, and not taken again until the time held is paid back.
        Assert.Equal("OK", mallory.Call("SET", lockKey, "mallory:1", "NX", "PX", "6000"));
        Assert.StartsWith($"NOPERM {lockKey} is never renewed", Refusal(mallory.Call("PEXPIRE", lockKey, "6000")));
        Assert.StartsWith($"NOPERM {lockKey} is never renewed", Refusal(mallory.Call("PERSIST", lockKey)));
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(20);
        while (mallory.Call("EXISTS", lockKey) is 1L && DateTime.UtcNow < deadline) Thread.Sleep(100);
        Assert.Equal(0L, mallory.Call("EXISTS", lockKey));
        Assert.StartsWith($"NOPERM account mallory has held {lockKey} too long of late", Refusal(mallory.Call("SET", lockKey, "mallory:2", "NX", "PX", "6000")));

        // Meanwhile the owner's job steps go on.
        Assert.Equal("OK", alice.Call("SET", lockKey, "alice:end", "NX", "PX", "10000"));
        Assert.Equal(1L, alice.Call("DEL", lockKey));
    }

    /// <summary>
    /// A SET NX that finds the lock held takes nothing, even with the holder's own value: polling it while held neither
    /// restarts the poller's hold nor keeps it from being counted whole when it expires.
    /// </summary>
    [Fact]
    public void Polling_a_held_lock_with_its_holders_value_is_not_a_take_and_the_hold_is_counted_whole()
    {
        var staged = StageAsAlice("alice/polled", "wanted by every job");
        using var alice = Login("alice", "alice-pass");
        using var mallory = Login("mallory", "mallory-pass");
        var lockKey = "hcd:lock:" + staged.Version;

        Assert.Equal("OK", mallory.Call("SET", lockKey, "mallory:1", "NX", "PX", "6000"));
        // While it is held, each poll stores nothing (nil), or, once the hold so far is over the burst, is refused.
        var polls = 0;
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(30);
        while (mallory.Call("EXISTS", lockKey) is 1L && DateTime.UtcNow < deadline)
        {
            var poll = mallory.Call("SET", lockKey, "mallory:1", "NX", "PX", "6000");
            if (poll is not null) Assert.StartsWith($"NOPERM account mallory has held {lockKey} too long of late", Refusal(poll));
            polls++;
            Thread.Sleep(250);
        }
        Assert.True(polls > 0, "the lock was held while polled");
        Assert.Equal(0L, mallory.Call("EXISTS", lockKey));
        // Expired after its 6 s, counted whole: over the 5 s burst, so not taken again.
        Assert.StartsWith($"NOPERM account mallory has held {lockKey} too long of late", Refusal(mallory.Call("SET", lockKey, "mallory:1", "NX", "PX", "6000")));
        Assert.Equal("OK", alice.Call("SET", lockKey, "alice:end", "NX", "PX", "10000"));
        Assert.Equal(1L, alice.Call("DEL", lockKey));
    }

    [Fact]
    public void Writers_keys_outside_the_system_namespace_are_refused_past_the_hosts_quota_for_them()
    {
        using var host = CacheHostProcess.Start(o => { o.UsersFile = _usersFile; o.ForeignKeyQuota = new(1 << 20); });
        using var mallory = new RespTestClient(host);
        Assert.Equal("OK", mallory.Call("AUTH", "mallory", "mallory-pass"));
        var value = new string('x', 300 << 10);

        var stored = 0;
        string? refusal = null;
        for (var i = 0; i < 10 && refusal is null; i++)
        {
            if (mallory.Call("SET", $"junk:{i}", value) is RespError e) refusal = e.Message;
            else stored++;
        }
        Assert.Equal(3, stored);
        Assert.StartsWith("NOPERM keys outside hcd: would hold", refusal);
        Assert.Contains("over its --foreign-key-quota of", refusal);
        // Replacing a key counts what it held back first, and what is deleted is free again.
        Assert.Equal("OK", mallory.Call("SET", "junk:0", value));
        Assert.Equal(1L, mallory.Call("DEL", "junk:0"));
        Assert.Equal("OK", mallory.Call("SET", "junk:9", value));

        // Datasets are not counted, and an administrator is not limited.
        using var ops = new RespTestClient(host);
        Assert.Equal("OK", ops.Call("AUTH", "ops", "ops-pass"));
        Assert.Equal("OK", ops.Call("SET", "ops:big", new string('y', 2 << 20)));
    }

    [Fact]
    public void Sending_bytes_a_shared_key_already_holds_never_shortens_its_life()
    {
        var staged = StageAsAlice("alice/kept", "kept for good");
        using var mallory = Login("mallory", "mallory-pass");
        var same = Segment("kept for good");
        Assert.Equal("OK", mallory.Call("SET", staged.Segment, same.Stored, "PX", "1000"));
        Assert.Null(mallory.Call("SET", staged.Segment, same.Stored, "NX", "PX", "1000"));
        Assert.Equal(-1L, mallory.Call("PTTL", staged.Segment));

        // A segment staged with a lifetime gains life from a later, longer-lived stage, and PERSIST keeps it for good.
        using var alice = Login("alice", "alice-pass");
        var shortLived = Segment("staged for an hour");
        Assert.Equal("OK", alice.Call("SET", shortLived.Key, shortLived.Stored, "PX", "3600000"));
        Assert.Equal("OK", mallory.Call("SET", shortLived.Key, shortLived.Stored, "PX", "7200000"));
        Assert.InRange((long)mallory.Call("PTTL", shortLived.Key)!, 3_700_000L, 7_200_000L);
        Assert.Equal(1L, mallory.Call("PEXPIRE", shortLived.Key, "9000000"));
        Assert.Equal(1L, mallory.Call("PERSIST", shortLived.Key));
        Assert.Equal(-1L, mallory.Call("PTTL", shortLived.Key));
    }

    [Fact]
    public void The_collection_flag_and_keys_this_system_does_not_define_are_for_administrators_only()
    {
        using var alice = Login("alice", "alice-pass");
        Assert.Equal("NOPERM User alice has no permissions to write hcd:gc: that takes the admin role",
            Refusal(alice.Call("SET", "hcd:gc", "token", "NX", "PX", "15000")));
        Assert.StartsWith("NOPERM", Refusal(alice.Call("SET", "hcd:owner:alice/anything", "alice")));
        Assert.Equal(0L, alice.Call("EXISTS", "hcd:gc"));
        using var ops = Login("ops", "ops-pass");
        Assert.Equal("OK", ops.Call("SET", "hcd:gc", "token", "NX", "PX", "15000"));
    }

    [Fact]
    public void Acl_dryrun_and_getuser_say_what_an_account_may_do_without_doing_it()
    {
        var staged = StageAsAlice("alice/asked", "asked about");
        using var mallory = Login("mallory", "mallory-pass");
        Assert.Equal("OK", mallory.Call("ACL", "DRYRUN", "mallory", "GET", staged.Manifest));
        Assert.Equal("NOPERM User mallory has no permissions to delete shared keys (segments, and what this system keeps for itself): that takes the admin role",
            mallory.ReadStringOf("ACL", "DRYRUN", "mallory", "DEL", staged.Segment));
        Assert.StartsWith("NOPERM dataset alice/asked is not among the names of account mallory",
            mallory.ReadStringOf("ACL", "DRYRUN", "mallory", "SET", "hcd:latest:alice/asked", staged.Version));
        Assert.StartsWith("NOPERM User mallory may ask only about itself", Refusal(mallory.Call("ACL", "DRYRUN", "alice", "GET", "x")));

        var mine = Version("mallory/new", Segment("asked about").Entry);
        Assert.Equal("OK", mallory.Call("ACL", "DRYRUN", "mallory", "SET", mine.Key, mine.Stored));
        Assert.Equal(0L, mallory.Call("EXISTS", mine.Key));
        using var ops = Login("ops", "ops-pass");
        Assert.Equal("OK", ops.Call("ACL", "DRYRUN", "mallory", "GET", "x"));
        var alice = (object?[])ops.Call("ACL", "GETUSER", "alice")!;
        Assert.Equal("writer", Encoding.UTF8.GetString((byte[])alice[1]!));
        Assert.Equal(["alice/*", "risk/*", "market/ticks"], ((object?[])alice[3]!).Select(n => Encoding.UTF8.GetString((byte[])n!)));
        var node = (object?[])ops.Call("ACL", "GETUSER", "node")!;
        Assert.Equal("reader", Encoding.UTF8.GetString((byte[])node[1]!));
    }

    private static string Refusal(object? reply) => Assert.IsType<RespError>(reply).Message;

    private RespTestClient Login(string user, string password) => RespTestClient.LoggedIn(_host, user, password);

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
