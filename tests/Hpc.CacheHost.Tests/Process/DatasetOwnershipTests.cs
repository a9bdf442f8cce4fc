using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// On a host with accounts, a dataset name belongs to the writer that staged it first: other writers read it but
/// cannot move, expire or replace anything of it. Segments and manifests are content-addressed: stored only with the
/// bytes their id names, never replaced, and a writer only lengthens their life. Administrators are not limited.
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
        Assert.Equal("NOPERM dataset alice/market belongs to account alice: User mallory may read it but not change it",
            Refusal(mallory.Call("SET", forged.Key, forged.Stored)));
        Assert.StartsWith("NOPERM dataset alice/market belongs to account alice", Refusal(mallory.Call("SET", "hcd:latest:alice/market", staged.Version)));
        Assert.StartsWith("NOPERM dataset alice/market belongs to account alice", Refusal(mallory.Call("PEXPIRE", "hcd:latest:alice/market", "1")));
        Assert.StartsWith("NOPERM User mallory may only lengthen the life of", Refusal(mallory.Call("PEXPIRE", staged.Manifest, "1")));
        Assert.StartsWith("NOPERM User mallory may only lengthen the life of", Refusal(mallory.Call("EXPIRE", staged.Segment, "1")));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("DEL", staged.Manifest, staged.Segment, "hcd:latest:alice/market")));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", staged.Segment, planted.Stored)));
        Assert.StartsWith("NOPERM", Refusal(mallory.Call("SET", "hcd:owner:alice/market", "mallory")));

        // Everything of alice's is as she left it, and mallory may still read it.
        Assert.Equal(staged.Version, mallory.ReadStringOf("GET", "hcd:latest:alice/market"));
        Assert.Equal(-1L, mallory.Call("PTTL", staged.Manifest));
        Assert.Equal(-1L, mallory.Call("PTTL", staged.Segment));
        Assert.Equal(-1L, mallory.Call("PTTL", "hcd:latest:alice/market"));
        Assert.IsType<byte[]>(mallory.Call("GET", staged.Manifest));

        // The owner moves her own pointer; an administrator may do anything, including hand the name over.
        using var alice = Login("alice", "alice-pass");
        Assert.Equal(1L, alice.Call("PEXPIRE", "hcd:latest:alice/market", "600000"));
        using var ops = Login("ops", "ops-pass");
        Assert.Equal(1L, ops.Call("DEL", "hcd:owner:alice/market"));
        Assert.Equal("OK", mallory.Call("SET", forged.Key, forged.Stored));
        Assert.Equal("OK", mallory.Call("SET", "hcd:latest:alice/market", forged.Version));
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

        // Keys outside this system's namespace are left to the role check.
        Assert.Equal("OK", alice.Call("SET", "greeting", "hello"));
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
    public void The_collection_flag_and_ownership_records_are_for_administrators_only()
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
        Assert.Equal("NOPERM User mallory has no permissions to delete shared keys (segments, manifests, latest pointers): that takes the admin role",
            mallory.ReadStringOf("ACL", "DRYRUN", "mallory", "DEL", staged.Segment));
        Assert.StartsWith("NOPERM dataset alice/asked belongs to account alice",
            mallory.ReadStringOf("ACL", "DRYRUN", "mallory", "SET", "hcd:latest:alice/asked", staged.Version));
        Assert.StartsWith("NOPERM User mallory may ask only about itself", Refusal(mallory.Call("ACL", "DRYRUN", "alice", "GET", "x")));

        // A dry run claims nothing: the name mallory asked about is still free.
        var mine = Version("mallory/new", Segment("asked about").Entry);
        Assert.Equal("OK", mallory.Call("ACL", "DRYRUN", "mallory", "SET", mine.Key, mine.Stored));
        using var ops = Login("ops", "ops-pass");
        Assert.Equal(0L, ops.Call("EXISTS", "hcd:owner:mallory/new"));
        Assert.Equal("OK", ops.Call("ACL", "DRYRUN", "mallory", "GET", "x"));
        var alice = (object?[])ops.Call("ACL", "GETUSER", "alice")!;
        Assert.Equal("writer", Encoding.UTF8.GetString((byte[])alice[1]!));
        Assert.Equal(["alice/asked"], ((object?[])alice[3]!).Select(n => Encoding.UTF8.GetString((byte[])n!)));
        var node = (object?[])ops.Call("ACL", "GETUSER", "node")!;
        Assert.Equal("reader", Encoding.UTF8.GetString((byte[])node[1]!));
    }

    private static string Refusal(object? reply) => Assert.IsType<RespError>(reply).Message;

    private RespTestClient Login(string user, string password)
    {
        var client = new RespTestClient(_host);
        Assert.Equal("OK", client.Call("AUTH", user, password));
        return client;
    }

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
