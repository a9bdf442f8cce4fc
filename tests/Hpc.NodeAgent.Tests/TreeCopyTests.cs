using Hpc.CommonData.Format;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// A directory dataset on the node is its tree, and the tree is the copy: fetched into its files, resumed from its
/// journal, delta-copied from another version's tree, published read-only, evicted as a whole.
/// </summary>
public class TreeCopies
{
    /// <summary>Files x/a, x/b and c tiling <paramref name="data"/>, an empty directory and a link.</summary>
    private static List<DatasetFile> Files(byte[] data) =>
    [
        new("x", 0, 0, 0b111_101_101) { Type = DatasetEntryType.Directory },
        new("x/a", 0, 5000, 0b110_100_100),
        new("x/b", 5000, 30000, 0b111_101_101),
        new("c", 35000, data.Length - 35000, 0b110_100_100),
        new("empty", 0, 0, 0b111_101_101) { Type = DatasetEntryType.Directory },
        new("x/to-c", 0, 0, 0b111_111_111) { Type = DatasetEntryType.SymbolicLink, Target = "../c" },
    ];

    private static void AssertTree(string root, byte[] data)
    {
        Assert.Equal(data[..5000], File.ReadAllBytes(Path.Combine(root, "x", "a")));
        Assert.Equal(data[5000..35000], File.ReadAllBytes(Path.Combine(root, "x", "b")));
        Assert.Equal(data[35000..], File.ReadAllBytes(Path.Combine(root, "c")));
        Assert.Equal(data[35000..], File.ReadAllBytes(Path.Combine(root, "x", "to-c")));
        Assert.True(Directory.Exists(Path.Combine(root, "empty")));
    }

    [Fact]
    public async Task An_interrupted_tree_fetch_resumes_into_the_same_tree_and_publishes_it_read_only_in_complete()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(10 * 4096);
        var version = node.Source.Stage("risk/tree", data, files: Files(data));
        node.Source.FailAfter = 4;

        await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("risk/tree"));
        Assert.True(Directory.Exists(Path.Combine(node.Root, "partial", version)));   // the partial copy is the tree being filled
        Assert.False(File.Exists(node.Partial(version)));

        node.Source.FailAfter = null;
        while (node.Source.SegmentsServed.TryDequeue(out _)) { }
        node.Restart();
        var resumed = await node.Prefetch("risk/tree", pin: "job-1");

        Assert.Equal("resumed", resumed.Dataset.Source);
        Assert.Equal([4, 5, 6, 7, 8, 9], node.Source.SegmentsServed.Order());
        Assert.Equal(Path.Combine(node.Root, "complete", version), resumed.Dataset.Path);
        AssertTree(resumed.Dataset.Path, data);
        Assert.False(Directory.Exists(Path.Combine(node.Root, "partial", version)));
        if (!OperatingSystem.IsWindows())
        {
            Assert.Equal((UnixFileMode)0b101_101_101, File.GetUnixFileMode(Path.Combine(resumed.Dataset.Path, "x", "b")));
            Assert.Equal((UnixFileMode)0b100_100_100, File.GetUnixFileMode(Path.Combine(resumed.Dataset.Path, "c")));
        }

        Assert.True(node.Store.Release("risk/tree", version, "job-1", evict: true));
        Assert.False(Directory.Exists(resumed.Dataset.Path));
        Assert.Empty(node.Names());
    }

    [Fact]
    public async Task A_new_tree_version_takes_the_segments_it_shares_from_the_old_tree_and_fetches_the_rest()
    {
        using var node = new Node();
        var v1 = FakeSegmentSource.Bytes(10 * 4096);
        node.Source.Stage("risk/tree", v1, files: Files(v1));
        await node.Prefetch("risk/tree");

        var v2 = (byte[])v1.Clone();
        v2[^10] ^= 0xFF;                                   // one byte of c, in the last segment
        while (node.Source.SegmentsServed.TryDequeue(out _)) { }
        node.Source.Stage("risk/tree", v2, files: Files(v2));
        var second = await node.Prefetch("risk/tree");

        Assert.Equal([9], node.Source.SegmentsServed.Order());
        Assert.Equal(9 * 4096L, second.Dataset.ReusedBytes);
        AssertTree(second.Dataset.Path, v2);
    }

    [Fact]
    public async Task A_restarted_store_finds_a_published_tree_and_checks_it_whole_before_serving_it()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(10 * 4096);
        var version = node.Source.Stage("risk/tree", data, files: Files(data));
        var first = await node.Prefetch("risk/tree");

        node.Restart();
        var again = await node.Prefetch("risk/tree");
        Assert.Equal(("local", first.Dataset.Path), (again.Dataset.Source, again.Dataset.Path));

        // Damaged on disk behind the agent's back: the next restart's first use finds it and discards the tree.
        var b = Path.Combine(first.Dataset.Path, "x", "b");
        if (OperatingSystem.IsWindows()) File.SetAttributes(b, FileAttributes.Normal);
        else File.SetUnixFileMode(b, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        await using (var f = new FileStream(b, FileMode.Open, FileAccess.Write)) { f.Position = 100; f.WriteByte((byte)(data[5100] ^ 1)); }
        node.Restart();
        var e = await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("risk/tree"));
        Assert.Equal(ErrorCode.Integrity, e.Code);
        Assert.False(Directory.Exists(first.Dataset.Path));
        Assert.Equal(version, (await node.Prefetch("risk/tree")).Version); // asked again, fetched again
    }
}
