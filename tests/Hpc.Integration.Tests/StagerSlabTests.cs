using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>
/// The stager cuts slabs of the source on all its cores, each from its own first byte, and stitches them in order: the
/// segments must be exactly those one pass over the whole source finds, wherever the slabs fall, so a dataset staged by
/// any build on any number of cores names and dedupes its segments the same way.
/// </summary>
public class StagerSlabTests
{
    private const int Slab = (4 << 20) + ContentChunker.MaxSize;

    public static TheoryData<int> Lengths => new()
    {
        Slab,                          // fills one slab exactly: the next read finds nothing
        2 * Slab - ContentChunker.MaxSize,
        (13 << 20) + 37,
        ContentChunker.MinSize - 1,
    };

    [Theory]
    [MemberData(nameof(Lengths))]
    public async Task Content_defined_segments_are_those_of_one_pass_over_the_whole_source(int length)
    {
        var data = Mixed(length);
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "mixed.bin", data), "slabs/content");

        await using var tier = c.Tier();
        var (_, manifest) = await tier.ResolveAsync("slabs/content", staged.Version);
        var expected = new List<int>();
        for (var at = 0; at < data.Length;)
        {
            var cut = ContentChunker.Default.NextCut(data.AsSpan(at), final: true);
            expected.Add(cut);
            at += cut;
        }
        Assert.Equal(expected, manifest.Segments.Select(s => s.RawLength));
        var offset = 0;
        foreach (var s in manifest.Segments)
        {
            Assert.Equal(SegmentId.Of(data.AsSpan(offset, s.RawLength)).ToString(), s.Id);
            offset += s.RawLength;
        }
        Assert.Equal(XxHash.Hash128Of(data).ToString("x32"), manifest.Hash);
    }

    [Fact]
    public async Task Fixed_size_segments_cross_slab_edges_unchanged()
    {
        var data = Mixed((9 << 20) + 1234);
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "fixed.bin", data), "slabs/fixed", "--chunking", "fixed", "--segment-size", "100KB");

        await using var tier = c.Tier();
        var (_, manifest) = await tier.ResolveAsync("slabs/fixed", staged.Version);
        var size = 100 * 1024;
        Assert.Equal(Enumerable.Range(0, (data.Length + size - 1) / size).Select(i => Math.Min(size, data.Length - i * size)), manifest.Segments.Select(s => s.RawLength));
        Assert.Equal(XxHash.Hash128Of(data).ToString("x32"), manifest.Hash);
    }

    /// <summary>Market-history text, random bytes and long runs of one byte (cut only at the largest size), in turns of a few hundred KB.</summary>
    private static byte[] Mixed(int length)
    {
        var data = new byte[length];
        var text = Cluster.Csvish(Math.Max(length, 1), seed: 5);
        var random = Cluster.RandomBytes(length, seed: 6);
        var rng = new Random(7);
        for (var at = 0; at < length;)
        {
            var n = Math.Min(length - at, rng.Next(100_000, 700_000));
            var kind = rng.Next(3);
            var part = data.AsSpan(at, n);
            if (kind == 0) text.AsSpan(at, n).CopyTo(part);
            else if (kind == 1) random.AsSpan(at, n).CopyTo(part);
            else part.Fill((byte)rng.Next(256));
            at += n;
        }
        return data;
    }
}
