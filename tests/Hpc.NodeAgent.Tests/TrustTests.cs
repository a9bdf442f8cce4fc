using Hpc.CommonData.Access;
using Hpc.CommonData.Format;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// What the store trusts and what it keeps to itself: pins belong to whoever made them (also across a restart), status
/// lists a caller only what that caller may read, ingested data is taken only for versions the agent's own cache tier
/// holds, and the agent's own files are its user's only.
/// </summary>
public class TrustTests
{
    private const uint AgentUid = 500, Alice = 1001, Bob = 1002;
    private static PeerCredentials As(uint uid) => new(4242, uid, uid, []);

    [LinuxFact]
    [System.Runtime.Versioning.SupportedOSPlatform("linux")]
    public async Task A_pins_owner_survives_a_restart_and_still_decides_who_may_release_it()
    {
        using var node = new Node();
        node.Source.Stage("t/a", FakeSegmentSource.Bytes(8192, 1));
        await node.Store.EnsureAsync("t/a", null, lease: false, "job-7", CancellationToken.None, pinOwner: Alice);

        node.Restart();
        var access = new AccessPolicy(AgentUid);
        var e = Assert.Throws<CommonDataException>(() => node.Store.Release("t/a", null, "job-7", evict: true, access, As(Bob)));
        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Equal(["t/a"], node.Names());
        Assert.True(node.Store.Release("t/a", null, "job-7", evict: true, access, As(Alice)));
        Assert.Empty(node.Names());
    }

    [LinuxFact]
    [System.Runtime.Versioning.SupportedOSPlatform("linux")]
    public async Task Pins_kept_from_before_pins_had_owners_may_be_released_only_by_root_or_the_agents_user()
    {
        using var node = new Node();
        var version = node.Source.Stage("t/a", FakeSegmentSource.Bytes(8192, 1));
        await node.Prefetch("t/a");
        File.WriteAllText(Path.Combine(node.Root, "pins.json"), $$"""{"{{version}}":["job-7"]}""");

        node.Restart();
        Assert.Equal(["job-7"], node.Store.Status().Copies.Single().Pins);
        var access = new AccessPolicy(AgentUid);
        Assert.Throws<CommonDataException>(() => node.Store.Release("t/a", null, "job-7", evict: true, access, As(Alice)));
        Assert.True(node.Store.Release("t/a", null, "job-7", evict: true, access, As(AgentUid)));
    }

    [Fact]
    public async Task Status_lists_a_caller_only_the_copies_it_may_read()
    {
        using var node = new Node();
        node.Source.Stage("t/open", FakeSegmentSource.Bytes(5_000, 1));
        node.Source.Stage("t/secret", FakeSegmentSource.Bytes(5_000, 2), readers: DatasetReaders.Of([Alice], []));
        await node.Prefetch("t/open");
        await node.Prefetch("t/secret");
        var access = new AccessPolicy(AgentUid);

        Assert.Equal(["t/open"], node.Store.Status(m => access.MayRead(m, As(Bob))).Copies.Select(c => c.Name));
        Assert.Equal(["t/open", "t/secret"], node.Store.Status(m => access.MayRead(m, As(Alice))).Copies.Select(c => c.Name));
        Assert.Equal(["t/open", "t/secret"], node.Store.Status(m => access.MayRead(m, As(AgentUid))).Copies.Select(c => c.Name));
    }

    [Fact]
    public async Task An_ingest_of_a_version_the_agents_cache_tier_does_not_hold_is_refused_and_nothing_is_written()
    {
        using var node = new Node();
        node.Source.Stage("t/prices", FakeSegmentSource.Bytes(20_000, 1));
        // The same name staged on a cache host of someone else's: a real manifest, but not one the agent's tier holds.
        var elsewhere = new FakeSegmentSource();
        var planted = elsewhere.Stage("t/prices", FakeSegmentSource.Bytes(20_000, 99));

        var e = await Assert.ThrowsAsync<CommonDataException>(() =>
            node.Store.BeginIngestAsync("t/prices", planted, elsewhere.ManifestBytes(planted), CancellationToken.None));

        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Contains("'t/prices'", e.Message);
        Assert.Contains(planted, e.Message);
        Assert.Contains("does not vouch", e.Message);
        Assert.Empty(node.Names());
        Assert.False(File.Exists(Path.Combine(node.Root, "manifests", planted + ".json")));
    }

    [Fact]
    public async Task An_ingest_that_cannot_be_checked_because_the_cache_tier_is_down_is_refused()
    {
        using var node = new Node();
        var version = node.Source.Stage("t/prices", FakeSegmentSource.Bytes(20_000, 1));
        node.Source.Down = true;

        var e = await Assert.ThrowsAsync<CommonDataException>(() =>
            node.Store.BeginIngestAsync("t/prices", version, node.Source.ManifestBytes(version), CancellationToken.None));

        Assert.Equal(ErrorCode.Unavailable, e.Code);
        Assert.Contains("refused", e.Message);
        Assert.Contains("cannot be reached to vouch", e.Message);
        Assert.Empty(node.Names());
    }

    [Fact]
    public async Task An_ingest_into_a_version_the_node_already_holds_needs_no_answer_from_the_cache_tier()
    {
        using var node = new Node();
        var version = node.Source.Stage("t/prices", FakeSegmentSource.Bytes(20_000, 1));
        node.Source.FailAfter = 1;
        await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("t/prices")); // a partial copy, its manifest from the tier
        node.Source.Down = true;

        using var ingest = await node.Store.BeginIngestAsync("t/prices", version, node.Source.ManifestBytes(version), CancellationToken.None);
        Assert.Equal(4, ingest.Begun().Missing);
    }

    [LinuxFact]
    [System.Runtime.Versioning.SupportedOSPlatform("linux")]
    public async Task The_agents_own_files_are_readable_by_its_user_only()
    {
        var root = Path.Combine(Path.GetTempPath(), $"hcd-files-{Guid.NewGuid():N}");
        var source = new FakeSegmentSource();
        try
        {
            var options = new Hpc.CommonData.Hosting.NodeAgentOptions
            {
                DataDirectory = root, NodeName = "n1", CacheTier = new Hpc.CommonData.Cache.CacheTierOptions { Hosts = ["fake:6380"] },
            };
            // An older agent's files, left with a umask of 022.
            Directory.CreateDirectory(root);
            File.WriteAllText(Path.Combine(root, "telemetry.jsonl"), "");
            File.SetUnixFileMode(Path.Combine(root, "telemetry.jsonl"), (UnixFileMode)0x1A4); // 0644
            var store = new DatasetStore(options, source);
            var partial = source.Stage("t/partial", FakeSegmentSource.Bytes(20_000, 1));
            source.FailAfter = 1;
            await Assert.ThrowsAsync<CommonDataException>(() => store.EnsureAsync("t/partial", null, false, null, CancellationToken.None));
            source.FailAfter = null;
            var complete = source.Stage("t/complete", FakeSegmentSource.Bytes(20_000, 2));
            await store.EnsureAsync("t/complete", null, lease: false, "job-1", CancellationToken.None);

            string[] own = ["telemetry.jsonl", "pins.json", $"manifests/{partial}.json", $"manifests/{complete}.json", $"partial/{partial}.done"];
            foreach (var file in own)
                Assert.Equal((file, AgentFiles.OwnerOnly), (file, File.GetUnixFileMode(Path.Combine(root, file))));
            Assert.NotEmpty(File.ReadAllText(Path.Combine(root, "telemetry.jsonl")));
            // A published copy without readers is for everyone, as before.
            Assert.Equal((UnixFileMode)0x124, File.GetUnixFileMode(Path.Combine(root, "complete", complete + ".data"))); // 0444
        }
        finally
        {
            Hpc.CommonData.Format.TreeWriter.Delete(root);
        }
    }
}

public class AdminGroupTests
{
    private const uint AgentUid = 500, Alice = 1001, Bob = 1002, Admins = 2500;

    [LinuxFact]
    [System.Runtime.Versioning.SupportedOSPlatform("linux")]
    public void A_member_of_the_admin_group_may_release_any_pin_and_see_every_copy_but_not_read_a_restricted_one()
    {
        var policy = new AccessPolicy(AgentUid, adminGroup: Admins);
        var secret = new Hpc.CommonData.Format.Manifest
        {
            Name = "t/secret", RawLength = 1, StoredLength = 1, Hash = new string('0', 32),
            Segments = [new Hpc.CommonData.Format.ManifestSegment(new string('0', Hpc.CommonData.Format.SegmentId.HexLength), 1, 1)], Readers = Hpc.CommonData.Access.DatasetReaders.Of([Alice], []),
        };
        var admin = new PeerCredentials(1, Bob, Bob, [Admins]);
        var stranger = new PeerCredentials(1, Bob, Bob, []);

        Assert.True(policy.MayRelease(Alice, admin));
        Assert.True(policy.MaySee(secret, admin));
        Assert.False(policy.MayRead(secret, admin));
        policy.CheckEvict(secret, admin);
        Assert.False(policy.MayRelease(Alice, stranger));
        Assert.False(policy.MaySee(secret, stranger));
        Assert.Throws<CommonDataException>(() => policy.CheckEvict(secret, stranger));
    }

    [LinuxFact]
    [System.Runtime.Versioning.SupportedOSPlatform("linux")]
    public async Task With_an_admin_group_the_agents_own_files_are_0640_in_that_group()
    {
        using var node = new Node();
        node.Options.AdminGroup = Hpc.CommonData.Access.UnixAccounts.EffectiveGroupId.ToString(); // a group this process may give files to
        var store = node.Restart();
        node.Source.Stage("t/a", FakeSegmentSource.Bytes(8192, 1));
        await store.EnsureAsync("t/a", null, lease: false, "job-1", CancellationToken.None);

        Assert.Equal(AgentFiles.OwnerAndGroupRead, File.GetUnixFileMode(Path.Combine(node.Root, "pins.json")));
        Assert.All(Directory.GetFiles(Path.Combine(node.Root, "manifests")), f => Assert.Equal(AgentFiles.OwnerAndGroupRead, File.GetUnixFileMode(f)));
    }
}
