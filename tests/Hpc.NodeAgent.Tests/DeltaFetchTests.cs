using Hpc.CommonData.Format;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// Building a version while other versions are on the node: segments they hold are taken from them, checked; only
/// the rest is fetched; the result verifies as a full fetch would.
/// </summary>
public class DeltaFetch
{
    private static (byte[] V1, byte[] V2) Versions()
    {
        var v1 = FakeSegmentSource.Bytes(64 * 4096, seed: 3);
        var v2 = (byte[])v1.Clone();
        v2[10 * 4096 + 5] ^= 0xff;                 // one segment changed
        return (v1, [.. v2, .. FakeSegmentSource.Bytes(2 * 4096, seed: 4)]); // and two appended
    }

    [Fact]
    public async Task Segments_another_local_version_holds_are_copied_from_it_and_only_the_rest_is_fetched()
    {
        using var node = new Node();
        var (v1, v2) = Versions();
        node.Source.Stage("risk/d", v1);
        await node.Prefetch("risk/d");
        var second = node.Source.Stage("risk/d", v2);
        node.Source.SegmentsServed.Clear();

        var update = await node.Prefetch("risk/d");

        Assert.Equal(second, update.Version);
        Assert.Equal(63L * 4096, update.Dataset.ReusedBytes);
        Assert.Equal([10, 64, 65], node.Source.SegmentsServed.Order());
        Assert.Equal(v2, File.ReadAllBytes(update.Dataset.Path));
        Assert.Equal(2, node.Names().Count);
    }

    [Fact]
    public async Task A_local_copy_damaged_on_disk_is_not_trusted_for_the_delta()
    {
        using var node = new Node();
        var (v1, v2) = Versions();
        var first = node.Source.Stage("risk/d", v1);
        await node.Prefetch("risk/d");
        var complete = node.Complete(first);
        File.SetAttributes(complete, FileAttributes.Normal);
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(complete, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        await using (var f = new FileStream(complete, FileMode.Open, FileAccess.Write)) { f.Position = 3 * 4096; f.WriteByte(1); }
        node.Source.Stage("risk/d", v2);
        node.Source.SegmentsServed.Clear();

        var update = await node.Prefetch("risk/d");

        Assert.Contains(3, node.Source.SegmentsServed);
        Assert.Equal(v2, File.ReadAllBytes(update.Dataset.Path));
    }

    [Fact]
    public async Task When_the_budget_cannot_keep_the_old_copy_beside_the_new_one_the_new_one_is_fetched_whole()
    {
        var (v1, v2) = Versions();
        using var node = new Node(budget: v2.Length + 4096);
        node.Source.Stage("risk/d", v1);
        await node.Prefetch("risk/d");
        node.Source.Stage("risk/d", v2);
        node.Source.SegmentsServed.Clear();

        var update = await node.Prefetch("risk/d");

        Assert.Equal(0, update.Dataset.ReusedBytes);
        Assert.Equal(66, node.Source.SegmentsServed.Count);
        Assert.Equal(v2, File.ReadAllBytes(update.Dataset.Path));
        Assert.Single(node.Names());
    }
}
