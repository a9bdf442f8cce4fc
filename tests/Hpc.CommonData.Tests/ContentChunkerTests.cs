using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

public class ContentChunkerTests
{
    private static List<int> Chunk(ReadOnlySpan<byte> data)
    {
        var cuts = new List<int>();
        while (!data.IsEmpty)
        {
            var cut = ContentChunker.Default.NextCut(data, final: true);
            cuts.Add(cut);
            data = data[cut..];
        }
        return cuts;
    }

    private static byte[] Random(int n, int seed) { var b = new byte[n]; new Random(seed).NextBytes(b); return b; }

    [Fact]
    public void Segments_stay_within_the_bounds_and_average_near_64_KB()
    {
        var cuts = Chunk(Random(32 << 20, 1));
        Assert.All(cuts[..^1], c => Assert.InRange(c, ContentChunker.MinSize + 1, ContentChunker.MaxSize));
        Assert.Equal(32 << 20, cuts.Sum());
        Assert.InRange(cuts.Average(), 48 * 1024, 88 * 1024);
    }

    [Fact]
    public void Boundaries_are_the_same_on_every_machine_and_in_every_build()
    {
        // Any change to the gear table, sizes or masks moves every boundary: then every dataset would be sent again.
        var cuts = Chunk(Random(4 << 20, 42));
        var digest = XxHash.Hash128Of(cuts.SelectMany(BitConverter.GetBytes).ToArray()).ToString("x32");
        Assert.Equal(GoldenDigest, digest);
    }

    private const string GoldenDigest = "f07c113e33b68c82ca1f3082368218bd";

    [Theory]
    [InlineData(100)]
    [InlineData(-100)]
    public void After_an_insert_or_a_delete_the_boundaries_fall_where_they_fell_before(int edit)
    {
        var before = Random(8 << 20, 7);
        const int at = 1 << 20;
        var after = edit > 0 ? [.. before[..at], .. Random(edit, 8), .. before[at..]] : before[..at].Concat(before[(at - edit)..]).ToArray();

        var segmentsBefore = Segments(before);
        var segmentsAfter = Segments(after);
        var changed = segmentsAfter.Except(segmentsBefore).Count();
        Assert.InRange(changed, 1, 3);
        Assert.InRange(segmentsBefore.Count - segmentsBefore.Intersect(segmentsAfter).Count(), 1, 3);
    }

    [Fact]
    public void A_window_too_short_to_decide_asks_for_more_unless_it_is_the_end()
    {
        var data = Random(ContentChunker.MinSize + 10, 3);
        Assert.Equal(0, ContentChunker.Default.NextCut(data, final: false));
        Assert.Equal(data.Length, ContentChunker.Default.NextCut(data, final: true));
        var zeros = new byte[ContentChunker.MaxSize + 1];
        // Constant bytes never meet the cut condition (the hash saturates to the same value): the maximum applies.
        Assert.Equal(ContentChunker.MaxSize, ContentChunker.Default.NextCut(zeros, final: false));
    }

    private static HashSet<SegmentId> Segments(byte[] data)
    {
        var ids = new HashSet<SegmentId>();
        var offset = 0;
        foreach (var cut in Chunk(data)) { ids.Add(SegmentId.Of(data.AsSpan(offset, cut))); offset += cut; }
        return ids;
    }
}
