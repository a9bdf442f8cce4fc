using System.Text;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// A host that takes a version's "latest" pointer publishes the version: before it replies, every segment the
/// version's manifest lists and that it holds gets the version's life (kept until removed, or the manifest's lifetime),
/// never a shorter one than it had. Until then a stage's segments keep the short life they were sent with, so a stage
/// refused at publishing leaves them expiring.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class PublishedSegmentLifeTests : IDisposable
{
    private const string Unpublished = "3600000";

    private readonly string _usersFile = Path.GetTempFileName();
    private readonly CacheHostProcess _host;

    public PublishedSegmentLifeTests()
    {
        File.WriteAllText(_usersFile, """
            alice   writer  alice-pass
            mallory writer  mallory-pass
            ops     admin   ops-pass
            names   alice   risk/*
            """);
        _host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
    }

    [Fact]
    public void Taking_the_pointer_keeps_the_versions_segments_until_removed_and_a_refused_publish_leaves_them_expiring()
    {
        using var alice = Login("alice", "alice-pass");
        var (first, second, other) = (StoredObjects.Segment("first half"), StoredObjects.Segment("second half"), StoredObjects.Segment("another stage's"));
        foreach (var s in new[] { first, second, other }) Assert.Equal("OK", alice.Call("SET", s.Key, s.Stored, "NX", "PX", Unpublished));
        var version = Version("risk/curves", null, first.Entry, second.Entry);
        Assert.Equal("OK", alice.Call("SET", version.Key, version.Stored));

        // Another writer's pointer is refused, and gives nothing a life.
        using var mallory = Login("mallory", "mallory-pass");
        Assert.IsType<RespError>(mallory.Call("SET", "hcd:latest:risk/curves", version.Version));
        Assert.InRange((long)alice.Call("PTTL", first.Key)!, 1, 3_600_000);

        Assert.Equal("OK", alice.Call("SET", "hcd:latest:risk/curves", version.Version));
        Assert.Equal(-1L, alice.Call("PTTL", first.Key));
        Assert.Equal(-1L, alice.Call("PTTL", second.Key));
        // A segment the version does not list keeps its unpublished life.
        Assert.InRange((long)alice.Call("PTTL", other.Key)!, 1, 3_600_000);
    }

    [Fact]
    public void A_version_with_a_lifetime_lengthens_its_segments_life_and_never_shortens_one_another_version_keeps()
    {
        using var alice = Login("alice", "alice-pass");
        var (sent, shared) = (StoredObjects.Segment("sent by this stage"), StoredObjects.Segment("kept by an older version"));
        Assert.Equal("OK", alice.Call("SET", sent.Key, sent.Stored, "NX", "PX", Unpublished));
        Assert.Equal("OK", alice.Call("SET", shared.Key, shared.Stored, "NX"));
        var version = Version("risk/week", lifetimeSeconds: 7 * 86400, sent.Entry, shared.Entry);
        Assert.Equal("OK", alice.Call("SET", version.Key, version.Stored, "PX", (7 * 86400_000L).ToString()));

        using var ops = Login("ops", "ops-pass");
        Assert.Equal("OK", ops.Call("SET", "hcd:latest:risk/week", version.Version));
        Assert.InRange((long)alice.Call("PTTL", sent.Key)!, 7 * 86400_000L - 60_000, 7 * 86400_000L);
        Assert.Equal(-1L, alice.Call("PTTL", shared.Key));
    }

    [Fact]
    public void Info_says_the_host_keeps_a_versions_segments_as_it_publishes_it()
    {
        using var alice = Login("alice", "alice-pass");
        var info = Encoding.UTF8.GetString((byte[])alice.Call("INFO", "server")!);
        Assert.Contains(CacheKeys.PublishKeepsSegmentsInfoField + ":1\r\n", info);
    }

    private static (string Version, string Key, byte[] Stored) Version(string name, long? lifetimeSeconds, params ManifestSegment[] segments)
    {
        var manifest = new Manifest
        {
            Name = name, Hash = new string('0', 32), Segments = segments, LifetimeSeconds = lifetimeSeconds,
            RawLength = segments.Sum(s => (long)s.RawLength), StoredLength = segments.Sum(s => (long)s.StoredLength),
        };
        var bytes = manifest.Serialize();
        var version = Manifest.VersionOf(bytes);
        var encoded = new byte[SegmentCodec.MaxEncodedLength(bytes.Length)];
        var n = SegmentCodec.Encode(bytes, encoded);
        return (version, "hcd:m:" + version, encoded[..n]);
    }

    private RespTestClient Login(string user, string password) => RespTestClient.LoggedIn(_host, user, password);

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
