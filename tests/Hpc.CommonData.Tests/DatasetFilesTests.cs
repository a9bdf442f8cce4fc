using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

/// <summary>
/// A version's bytes on a node's disk addressed by dataset offset: one file, or the member files of a tree, with the
/// same reads, writes and whole-dataset hash either way.
/// </summary>
public sealed class DatasetFilesTests : IDisposable
{
    private readonly string _root = Path.Combine(Path.GetTempPath(), $"hcd-dsf-{Guid.NewGuid():N}");

    public void Dispose()
    {
        if (Directory.Exists(_root)) TreeWriter.Delete(_root);
    }

    private static Manifest TreeManifest(byte[] data, params (string Path, int Length)[] files)
    {
        long offset = 0;
        var entries = new List<DatasetFile> { new("dir", 0, 0, 0b111_101_101) { Type = DatasetEntryType.Directory } };
        foreach (var (path, length) in files)
        {
            entries.Add(new DatasetFile(path, offset, length, 0b110_100_100));
            offset += length;
        }
        entries.Add(new DatasetFile("dir/link", 0, 0, 0b111_111_111) { Type = DatasetEntryType.SymbolicLink, Target = "a" });
        return new Manifest
        {
            Name = "t/tree", RawLength = data.Length, StoredLength = data.Length, Hash = XxHash.Hash128Of(data).ToString("x32"),
            SegmentSize = 4096, Segments = [new ManifestSegment(SegmentId.Of(data).ToString(), data.Length, data.Length)], Files = entries,
        };
    }

    private static byte[] Bytes(int n)
    {
        var b = new byte[n];
        new Random(5).NextBytes(b);
        return b;
    }

    [Fact]
    public void A_write_spanning_several_member_files_lands_in_each_and_reads_back_whole()
    {
        var data = Bytes(10_000);
        var manifest = TreeManifest(data, ("dir/a", 3000), ("dir/empty", 0), ("b", 10), ("dir/sub/c", 6990));
        var root = Path.Combine(_root, "tree");
        using (var files = DatasetFiles.Create(root, manifest))
        {
            Assert.True(files.IsTree);
            files.Write(data.AsSpan(0, 2995), 0);
            files.Write(data.AsSpan(2995, 7005), 2995); // the last 5 bytes of a, all of b, all of c
            var back = new byte[data.Length];
            files.Read(back, 0);
            Assert.Equal(data, back);
            Assert.True(files.HashMatches(manifest.Hash));
            Assert.False(files.HashMatches(new string('0', 32)));
        }
        Assert.Equal(data[..3000], File.ReadAllBytes(Path.Combine(root, "dir", "a")));
        Assert.Equal(data[3000..3010], File.ReadAllBytes(Path.Combine(root, "b")));
        Assert.Equal(data[3010..], File.ReadAllBytes(Path.Combine(root, "dir", "sub", "c")));
        Assert.Empty(File.ReadAllBytes(Path.Combine(root, "dir", "empty")));
    }

    [Fact]
    public void Finishing_a_tree_read_only_creates_its_links_and_takes_write_away_and_it_can_still_be_deleted()
    {
        var data = Bytes(100);
        var manifest = TreeManifest(data, ("dir/a", 100));
        var root = Path.Combine(_root, "tree");
        using (var files = DatasetFiles.Create(root, manifest)) files.Write(data, 0);
        TreeWriter.Finish(root, manifest.Files!, readOnly: true);

        Assert.Equal("a", new FileInfo(Path.Combine(root, "dir", "link")).LinkTarget);
        if (!OperatingSystem.IsWindows())
        {
            Assert.Equal(UnixFileMode.UserRead | UnixFileMode.GroupRead | UnixFileMode.OtherRead, File.GetUnixFileMode(Path.Combine(root, "dir", "a")));
            Assert.Equal((UnixFileMode)0b101_101_101, File.GetUnixFileMode(Path.Combine(root, "dir")));
        }
        using (var reopened = DatasetFiles.Open(root, manifest, writable: false)) Assert.True(reopened.HashMatches(manifest.Hash));
        TreeWriter.Delete(root);
        Assert.False(Directory.Exists(root));
    }

    [Fact]
    public void Shared_file_modes_are_read_for_all_and_execute_for_all_when_anyone_could_execute()
    {
        Assert.Equal(0b100_100_100, TreeWriter.SharedFileMode(0b110_000_000));   // 0600 → 0444
        Assert.Equal(0b101_101_101, TreeWriter.SharedFileMode(0b111_101_000));   // 0750 → 0555
        Assert.Equal(0b100_100_100, TreeWriter.SharedFileMode(0b110_110_110 | 0b100_000_000_000)); // set-uid never carried
    }

    [Fact]
    public void Only_a_file_table_whose_files_tile_the_dataset_is_laid_out_as_a_tree()
    {
        DatasetFile F(string p, long o, long l) => new(p, o, l, 0b110_100_100);
        Assert.True(DatasetFiles.IsTreeLayout([F("a", 0, 5), F("b", 5, 5)], 10));
        Assert.False(DatasetFiles.IsTreeLayout(null, 10));
        Assert.False(DatasetFiles.IsTreeLayout([], 10));
        Assert.False(DatasetFiles.IsTreeLayout([F("a", 0, 5), F("b", 6, 4)], 10));   // a gap
        Assert.False(DatasetFiles.IsTreeLayout([F("a", 0, 5), F("b", 4, 6)], 10));   // an overlap
        Assert.False(DatasetFiles.IsTreeLayout([F("a", 0, 5)], 10));                 // bytes no file holds
    }

    [Fact]
    public void A_single_file_dataset_is_one_file_of_its_length()
    {
        var data = Bytes(5000);
        var manifest = new Manifest
        {
            Name = "t/file", RawLength = data.Length, StoredLength = data.Length, Hash = XxHash.Hash128Of(data).ToString("x32"), SegmentSize = 4096,
            Segments = [new ManifestSegment(SegmentId.Of(data).ToString(), data.Length, data.Length)],
        };
        var path = Path.Combine(_root, "one.data");
        Directory.CreateDirectory(_root);
        using (var files = DatasetFiles.Create(path, manifest))
        {
            Assert.False(files.IsTree);
            files.Write(data, 0);
            Assert.True(files.HashMatches(manifest.Hash));
            Assert.Throws<ArgumentOutOfRangeException>(() => files.Write(data, 1));
        }
        Assert.Equal(data, File.ReadAllBytes(path));
    }

    [Fact]
    public async Task On_Linux_a_copy_that_does_not_fit_its_file_system_is_refused_as_disk_full_before_any_byte_is_written()
    {
        if (!OperatingSystem.IsLinux()) return; // the reservation is Linux's fallocate; elsewhere writes allocate as they come
        static Manifest Of(int length) => new()
        {
            Name = "t/file", RawLength = length, StoredLength = length, Hash = new string('0', 32), SegmentSize = 4096,
            Segments = [new ManifestSegment(SegmentId.Of(new byte[1]).ToString(), length, length)],
        };
        await using var fs = await SmallFileSystem.MountAsync(Path.Combine(_root, "small"), "1m");
        var big = Path.Combine(fs.Path, "big.data");
        var e = Assert.Throws<IOException>(() => DatasetFiles.Create(big, Of(4 << 20)));
        Assert.True(CommonDataException.IsDiskFull(e), e.Message);
        Assert.Contains(big, e.Message);
        Assert.Contains($"{4 << 20} bytes", e.Message);

        // The room a small copy takes is held from the start: a second one that would not fit beside it is refused too.
        using (DatasetFiles.Create(Path.Combine(fs.Path, "a.data"), Of(600 << 10)))
            Assert.Throws<IOException>(() => DatasetFiles.Create(Path.Combine(fs.Path, "b.data"), Of(600 << 10)));
        Assert.Equal(600 << 10, new FileInfo(Path.Combine(fs.Path, "a.data")).Length);
    }

    [Fact]
    public async Task On_Linux_a_large_copy_reserves_its_first_32_MB_at_once_and_the_rest_beside_the_writes_which_fail_as_disk_full_once_the_room_is_gone()
    {
        if (!OperatingSystem.IsLinux()) return;
        static Manifest Of(long length) => new()
        {
            Name = "t/file", RawLength = length, StoredLength = length, Hash = new string('0', 32), SegmentSize = 4096,
            Segments = [new ManifestSegment(SegmentId.Of(new byte[1]).ToString(), (int)Math.Min(length, int.MaxValue), (int)Math.Min(length, int.MaxValue))],
        };
        await using var fs = await SmallFileSystem.MountAsync(Path.Combine(_root, "medium"), "48m");
        var big = Path.Combine(fs.Path, "big.data");
        // More than the file system holds, but its first 32 MB fit: the copy is created without waiting for the rest.
        using var files = DatasetFiles.Create(big, Of(96L << 20));
        Assert.Equal(96L << 20, new FileInfo(big).Length);

        // The reservation beside the writes meets the end of the room, and from then on the copy fails as disk full,
        // even where its bytes would still fit: it cannot be completed, and fails before its last segment is fetched.
        var block = new byte[1 << 20];
        IOException? full = null;
        for (var tries = 0; full is null && tries < 1000; tries++)
        {
            try { files.Write(block, 0); }
            catch (IOException e) { full = e; }
            if (full is null) await Task.Delay(10);
        }
        Assert.NotNull(full);
        Assert.True(CommonDataException.IsDiskFull(full), full.Message);
        Assert.Contains(big, full.Message);
    }
}
