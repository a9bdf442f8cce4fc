using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

public class ManifestTests
{
    private static Manifest Make(int segments, int size = 65536, IReadOnlyList<DatasetFile>? files = null, string name = "risk/market-history") => new()
    {
        Name = name, Created = new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero), RawLength = (long)segments * size, StoredLength = segments * 100L,
        Hash = XxHash.Hash128Of("x"u8).ToString("x32"), Segments = Enumerable.Range(0, segments).Select(i => new ManifestSegment(SegmentId.Of(BitConverter.GetBytes(i)).ToString(), size, 100)).ToList(),
        Files = files,
    };

    [Fact]
    public void Offsets_past_4_GB_are_exact()
    {
        var m = Make(70_000);
        Assert.Equal(70_000L * 65536, m.Offsets[^1]);
        Assert.True(m.Offsets[^1] > uint.MaxValue);
        Assert.Equal(69_999L * 65536, m.Offsets[69_999]);
    }

    [Fact]
    public void Round_trips_and_its_version_names_its_exact_bytes()
    {
        var m = Make(3, files: [new DatasetFile("a/b.csv", 0, 10, 420), new DatasetFile("c", 10, 100, 493)]);
        var bytes = m.Serialize();
        var back = Manifest.Parse(bytes);
        Assert.Equal(m.Segments, back.Segments);
        Assert.Equal(m.Files, back.Files);
        Assert.Equal(Manifest.VersionOf(bytes), Manifest.VersionOf(back.Serialize()));
        Assert.NotEqual(Manifest.VersionOf(bytes), Manifest.VersionOf(Make(4).Serialize()));
    }

    [Fact]
    public void Empty_dataset_has_no_segments_and_zero_length()
    {
        var m = Make(0);
        Assert.Equal(0, Manifest.Parse(m.Serialize()).RawLength);
        Assert.Equal([0L], m.Offsets);
    }

    [Fact]
    public void Inconsistent_manifests_are_rejected()
    {
        var bad = Make(2);
        var json = System.Text.Encoding.UTF8.GetString(bad.Serialize()).Replace("\"rawLength\":131072", "\"rawLength\":131073");
        Assert.Throws<InvalidDataException>(() => Manifest.Parse(System.Text.Encoding.UTF8.GetBytes(json)));
        Assert.Throws<InvalidDataException>(() => Manifest.Parse("{not json"u8));
    }

    [Theory]
    [InlineData("../etc/passwd")]
    [InlineData("/abs/path")]
    [InlineData("a/../../b")]
    [InlineData("a\\b")]
    [InlineData("a//b")]
    [InlineData("c:/x")]
    public void File_tables_with_unsafe_paths_are_rejected(string path)
    {
        var m = Make(1, files: [new DatasetFile(path, 0, 1, 420)]);
        Assert.Throws<InvalidDataException>(() => Manifest.Parse(m.Serialize()));
    }

    [Theory]
    [InlineData(DatasetEntryType.File)]
    [InlineData(DatasetEntryType.SymbolicLink)]
    public void Nothing_may_lie_below_an_entry_that_is_not_a_directory(DatasetEntryType type)
    {
        var parent = new DatasetFile("a", 0, type == DatasetEntryType.File ? 1 : 0, 420) { Type = type, Target = type == DatasetEntryType.SymbolicLink ? "b" : null };
        var m = Make(1, size: 2, files: [parent, new DatasetFile("a/c", type == DatasetEntryType.File ? 1 : 0, type == DatasetEntryType.File ? 1 : 2, 420)]);
        var e = Assert.Throws<InvalidDataException>(() => Manifest.Parse(m.Serialize()));
        Assert.Contains("'a/c' lies below 'a'", e.Message);

        var fine = Make(1, size: 2, files: [new DatasetFile("a", 0, 0, 493) { Type = DatasetEntryType.Directory }, new DatasetFile("a/c", 0, 2, 420)]);
        Assert.Single(Manifest.Parse(fine.Serialize()).Files!, f => f.Path == "a/c");
    }
}
