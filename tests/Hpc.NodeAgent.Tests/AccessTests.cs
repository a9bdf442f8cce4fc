using System.IO.Pipes;
using Hpc.CommonData.Access;
using Hpc.CommonData.Format;

namespace Hpc.NodeAgent.Tests;

/// <summary>A fact that runs only on Linux, where readers are enforced with uids, ACLs and socket credentials.</summary>
public sealed class LinuxFactAttribute : FactAttribute
{
    public LinuxFactAttribute()
    {
        if (!OperatingSystem.IsLinux()) Skip = "per-dataset access is enforced on Linux only (uids, SO_PEERCRED, POSIX ACLs)";
    }
}

public class AccessPolicyTests
{
    private const uint Agent = 500, Alice = 1001, Bob = 1002, Risk = 2000, Other = 3000;

    private static Manifest WithReaders(DatasetReaders? readers) => new()
    {
        Name = "risk/secret", RawLength = 1, StoredLength = 1, Hash = new string('0', 32),
        Segments = [new ManifestSegment(new string('0', SegmentId.HexLength), 1, 1)], Readers = readers,
    };

    private static PeerCredentials Peer(uint uid, uint gid, params uint[] groups) => new(4242, uid, gid, groups);

    [Fact]
    public void A_version_without_readers_may_be_read_by_anyone_even_an_unidentified_process()
    {
        var policy = new AccessPolicy(Agent);
        Assert.True(policy.MayRead(WithReaders(null), Peer(Bob, Other)));
        Assert.True(policy.MayRead(WithReaders(null), null));
    }

    [Fact]
    public void A_named_user_or_a_member_of_a_named_group_may_read_and_nobody_else()
    {
        var policy = new AccessPolicy(Agent);
        var manifest = WithReaders(DatasetReaders.Of([Alice], [Risk]));
        Assert.True(policy.MayRead(manifest, Peer(Alice, Other)));
        Assert.True(policy.MayRead(manifest, Peer(Bob, Risk)), "primary group named");
        Assert.True(policy.MayRead(manifest, Peer(Bob, Other, 17, Risk)), "supplementary group named");
        Assert.False(policy.MayRead(manifest, Peer(Bob, Other, 17)));
        Assert.False(policy.MayRead(manifest, null), "a process whose credentials are unknown is a stranger");
    }

    [Fact]
    public void Root_and_the_agents_own_user_may_read_every_version()
    {
        var policy = new AccessPolicy(Agent);
        var manifest = WithReaders(DatasetReaders.Of([Alice], []));
        Assert.True(policy.MayRead(manifest, Peer(0, 0)));
        Assert.True(policy.MayRead(manifest, Peer(Agent, Other)));
    }

    [Fact]
    public void A_refusal_is_AccessDenied_naming_the_dataset_and_the_user()
    {
        var policy = new AccessPolicy(Agent);
        var e = Assert.Throws<CommonDataException>(() => policy.Check(WithReaders(DatasetReaders.Of([Alice], [])), Peer(Bob, Other)));
        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Contains("'risk/secret'", e.Message);
        Assert.Contains($"uid {Bob}", e.Message);
    }
}

[System.Runtime.Versioning.SupportedOSPlatform("linux")]
public class PosixAclTests
{
    [LinuxFact]
    public void The_binary_ACL_is_version_2_with_entries_ordered_by_tag_then_id_and_no_access_for_others()
    {
        var acl = PosixAcl.Encode(DatasetReaders.Of([1002, 1001], [50]), PosixAcl.Read, PosixAcl.Read);
        Assert.Equal(4 + 7 * 8, acl.Length);
        Assert.Equal([2, 0, 0, 0], acl[..4]);
        var none = uint.MaxValue;
        Assert.Equal(
        [
            (PosixAcl.UserObj, PosixAcl.Read, none), (PosixAcl.User, PosixAcl.Read, 1001u), (PosixAcl.User, PosixAcl.Read, 1002u),
            (PosixAcl.GroupObj, (ushort)0, none), (PosixAcl.Group, PosixAcl.Read, 50u), (PosixAcl.Mask, PosixAcl.Read, none), (PosixAcl.Other, (ushort)0, none),
        ], PosixAcl.Decode(acl));
    }
}

[System.Runtime.Versioning.SupportedOSPlatform("linux")]
public class PublishedAccessTests
{
    [LinuxFact]
    public async Task A_version_with_readers_is_published_owner_read_only_with_an_ACL_granting_read_to_exactly_its_readers()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(9_000);
        var version = node.Source.Stage("risk/secret", data, readers: DatasetReaders.Of([4001, 4002], [4100]));

        var copy = await node.Prefetch("risk/secret");

        Assert.Equal(data, File.ReadAllBytes(copy.Dataset.Path));
        var acl = PosixAcl.Get(copy.Dataset.Path);
        Assert.NotNull(acl); // tmpfs and ext4, where the tests run, keep ACLs
        Assert.Equal(
        [
            (PosixAcl.UserObj, PosixAcl.Read, uint.MaxValue), (PosixAcl.User, PosixAcl.Read, 4001u), (PosixAcl.User, PosixAcl.Read, 4002u),
            (PosixAcl.GroupObj, (ushort)0, uint.MaxValue), (PosixAcl.Group, PosixAcl.Read, 4100u), (PosixAcl.Mask, PosixAcl.Read, uint.MaxValue),
            (PosixAcl.Other, (ushort)0, uint.MaxValue),
        ], PosixAcl.Decode(acl));
        // With an ACL the group bits show the mask: read for the named readers, nothing for others.
        Assert.Equal(UnixFileMode.UserRead | UnixFileMode.GroupRead, File.GetUnixFileMode(copy.Dataset.Path));
        Assert.Equal(version, copy.Version);
    }

    [LinuxFact]
    public void Others_may_pass_through_the_data_directory_to_a_copy_but_not_list_it_nor_reach_partial_copies_and_manifests()
    {
        using var node = new Node();
        const UnixFileMode traversable = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute | UnixFileMode.GroupExecute | UnixFileMode.OtherExecute;
        const UnixFileMode owner = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute;
        Assert.Equal(traversable, File.GetUnixFileMode(node.Root));
        Assert.Equal(traversable, File.GetUnixFileMode(Path.Combine(node.Root, "complete")));
        Assert.Equal(owner, File.GetUnixFileMode(Path.Combine(node.Root, "partial")));
        Assert.Equal(owner, File.GetUnixFileMode(Path.Combine(node.Root, "manifests")));
    }

    [Fact]
    public async Task A_refused_caller_gets_AccessDenied_and_no_lease_on_a_local_copy()
    {
        using var node = new Node();
        node.Source.Stage("risk/secret", FakeSegmentSource.Bytes(5_000), readers: DatasetReaders.Of([4001], []));
        await node.Prefetch("risk/secret");
        var stranger = new PeerCredentials(1, 4999, 4999, []);

        var e = await Assert.ThrowsAsync<CommonDataException>(() => node.Store.EnsureAsync("risk/secret", null, lease: true, null, CancellationToken.None,
            m => new AccessPolicy(agentUid: 4500).Check(m, stranger)));

        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Equal(0, node.Store.Status().Copies.Single().Leases);
    }
}

[System.Runtime.Versioning.SupportedOSPlatform("linux")]
public class PeerCredentialsTests
{
    [LinuxFact]
    public async Task The_agent_learns_the_connected_process_user_groups_and_pid_from_the_kernel()
    {
        var name = $"hcd-peer-{Environment.ProcessId}-{Guid.NewGuid():N}"[..24];
        await using var server = new NamedPipeServerStream(name, PipeDirection.InOut, 1, PipeTransmissionMode.Byte, System.IO.Pipes.PipeOptions.Asynchronous);
        var accepted = server.WaitForConnectionAsync();
        await using var client = new NamedPipeClientStream(".", name, PipeDirection.InOut, System.IO.Pipes.PipeOptions.Asynchronous);
        await client.ConnectAsync(5000);
        await accepted;

        var peer = PeerCredentials.Of(server);

        Assert.NotNull(peer);
        Assert.Equal(Environment.ProcessId, peer.Pid);
        Assert.Equal(UnixAccounts.EffectiveUserId, peer.Uid);
        Assert.Equal(UnixAccounts.EffectiveGroupId, peer.Gid);
        var statusGroups = File.ReadLines("/proc/self/status").Single(l => l.StartsWith("Groups:"))[7..]
            .Split([' ', '\t'], StringSplitOptions.RemoveEmptyEntries).Select(uint.Parse);
        Assert.Equal(statusGroups.Order(), peer.Groups.Order());
    }
}
