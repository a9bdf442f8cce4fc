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
        Assert.InRange(cuts.Average(), 0.95 * ContentChunker.AverageSize, 1.05 * ContentChunker.AverageSize);
    }

    [Fact]
    public void The_segment_an_edit_falls_in_is_not_much_longer_than_the_average_segment()
    {
        // An edit lands in a segment with a chance proportional to its length, so what a re-stage moves per edited place
        // is the size-weighted mean length; a wide spread of sizes would make it much more than the average segment.
        var cuts = Chunk(Random(32 << 20, 2));
        var weighted = cuts.Sum(c => (double)c * c) / cuts.Sum();
        Assert.InRange(weighted / cuts.Average(), 1.0, 1.12);
    }

    [Fact]
    public void Boundaries_are_the_same_on_every_machine_and_in_every_build()
    {
        // Any change to the gear table, sizes or masks moves every boundary: then every dataset would be sent again.
        var cuts = Chunk(Random(4 << 20, 42));
        var digest = XxHash.Hash128Of(cuts.SelectMany(BitConverter.GetBytes).ToArray()).ToString("x32");
        Assert.Equal(GoldenDigest, digest);
    }

    private const string GoldenDigest = "4bbae4b7f20e7094de329e74368d5dd2";

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

    [Theory]
    [InlineData(ContentChunker.MinSize - 1)]
    [InlineData(ContentChunker.MinSize)]
    [InlineData(ContentChunker.MinSize + 1)]
    [InlineData(ContentChunker.MinSize + 2)]
    [InlineData(ContentChunker.NormalSize - 1)]
    [InlineData(ContentChunker.NormalSize)]
    [InlineData(ContentChunker.NormalSize + 1)]
    [InlineData(ContentChunker.AverageSize)]
    [InlineData(ContentChunker.MaxSize - 1)]
    [InlineData(ContentChunker.MaxSize)]
    [InlineData(ContentChunker.MaxSize + 1)]
    public void A_cut_found_in_a_prefix_is_the_cut_of_the_whole(int length)
    {
        // The stager cuts a slab at a time and carries the rest over: a cut it accepts before the end of the data must
        // be the one a scan of all the data finds, or boundaries would depend on where the slabs happened to end.
        foreach (var seed in new[] { 11, 12, 13, 14 })
        {
            var data = Random(ContentChunker.MaxSize + 4096, seed);
            var whole = ContentChunker.Default.NextCut(data, final: true);
            var prefix = data.AsSpan(0, length);
            var partial = ContentChunker.Default.NextCut(prefix, final: false);
            if (partial != 0) Assert.Equal(whole, partial);
            else Assert.True(whole > length || length <= ContentChunker.MinSize, $"length {length}: a cut at {whole} was not found in the prefix");
            var last = ContentChunker.Default.NextCut(prefix, final: true);
            Assert.Equal(whole <= length ? whole : length, last);
        }
    }

    [Fact]
    public void Cuts_land_on_the_first_position_that_meets_the_condition_and_never_inside_the_minimum()
    {
        var data = Random(16 << 20, 21);
        var cuts = Chunk(data);
        Assert.All(cuts[..^1], c => Assert.InRange(c, ContentChunker.MinSize + 1, ContentChunker.MaxSize));
        // Where a segment ended before the maximum, none of the shorter lengths past the minimum would have been a cut:
        // the same scan, stopped one byte earlier, finds nothing.
        var offset = 0;
        foreach (var cut in cuts[..^1])
        {
            if (cut < ContentChunker.MaxSize)
                Assert.Equal(0, ContentChunker.Default.NextCut(data.AsSpan(offset, cut - 1), final: false));
            offset += cut;
        }
    }

    [Theory]
    [InlineData("random")]
    [InlineData("text")]
    [InlineData("mixed")]
    public void Cuts_are_those_of_a_byte_by_byte_gear_hash(string kind)
    {
        // The specification written out plainly: SplitMix64 from "hcd-gear" for the table, one hash chain from the
        // minimum on, 18 top bits zero before 53 KB, 14 after, at most 256 KB. The chunker's own scan must agree at
        // every length, however it spreads the work.
        var data = kind switch
        {
            "random" => Random(6 << 20, 5),
            "text" => Text(6 << 20),
            _ => Random(6 << 20, 6).Select((b, i) => i / 40_000 % 3 == 0 ? (byte)(i % 97) : b).ToArray(),
        };
        Assert.Equal(ByteByByte(data), Chunk(data));
        foreach (var length in new[] { ContentChunker.MinSize + 1, ContentChunker.MinSize + 8 * 1024 + 63, ContentChunker.NormalSize, ContentChunker.NormalSize + 16 * 1024 + 1, ContentChunker.MaxSize })
            for (var offset = 0; offset < 600_000; offset += 37_123)
                Assert.Equal(ByteByByte(data.AsSpan(offset, length).ToArray()).First(), ContentChunker.Default.NextCut(data.AsSpan(offset, length), final: true));
    }

    private static List<int> ByteByByte(byte[] data)
    {
        var gear = new ulong[256];
        ulong state = 0x6863642d67656172;
        for (var i = 0; i < 256; i++)
        {
            var z = state += 0x9E3779B97F4A7C15;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
            gear[i] = z ^ (z >> 31);
        }
        var cuts = new List<int>();
        for (var at = 0; at < data.Length;)
        {
            var left = data.Length - at;
            var cut = Math.Min(left, ContentChunker.MaxSize);
            ulong hash = 0;
            for (var i = ContentChunker.MinSize; i < Math.Min(left, ContentChunker.MaxSize); i++)
            {
                hash = (hash << 1) + gear[data[at + i]];
                var bits = i < ContentChunker.NormalSize ? ContentChunker.StrictBits : ContentChunker.LooseBits;
                if (hash >> (64 - bits) == 0) { cut = i + 1; break; }
            }
            cuts.Add(cut);
            at += cut;
        }
        return cuts;
    }

    private static byte[] Text(int n)
    {
        var r = new Random(9);
        var sb = new System.Text.StringBuilder();
        while (sb.Length < n) sb.Append($"2024-01-{r.Next(1, 29):00},INST{r.Next(0, 5000):00000},{r.Next(10, 500)}.{r.Next(0, 9999):0000}\n");
        return System.Text.Encoding.ASCII.GetBytes(sb.ToString(0, n));
    }

    [Fact]
    public void All_zero_and_constant_data_is_cut_at_the_maximum()
    {
        foreach (var value in new byte[] { 0, 0xFF, (byte)'a' })
        {
            var data = new byte[3 * ContentChunker.MaxSize + 5000];
            Array.Fill(data, value);
            Assert.Equal([ContentChunker.MaxSize, ContentChunker.MaxSize, ContentChunker.MaxSize, 5000], Chunk(data));
        }
    }

    [Fact]
    public void Cutting_slab_by_slab_gives_the_boundaries_of_one_pass()
    {
        // As the stager does it: cut what a slab holds, carry the bytes after the last cut into the next slab.
        var data = Random(12 << 20, 31);
        var expected = Chunk(data);
        foreach (var slab in new[] { ContentChunker.MaxSize, ContentChunker.MaxSize + 1, 1 << 20, (4 << 20) - 7 })
        {
            var cuts = new List<int>();
            var start = 0;
            while (start < data.Length)
            {
                var end = Math.Min(data.Length, start + slab);
                var eof = end == data.Length;
                var at = start;
                while (at < end)
                {
                    var cut = ContentChunker.Default.NextCut(data.AsSpan(at, end - at), final: eof);
                    if (cut == 0) break;
                    cuts.Add(cut);
                    at += cut;
                }
                start = at;
            }
            Assert.Equal(expected, cuts);
        }
    }

    [Theory]
    [InlineData(1)]
    [InlineData(7)]
    [InlineData(4096)]
    [InlineData(-1)]
    [InlineData(-5000)]
    public void Edits_anywhere_change_only_the_segments_around_them(int edit)
    {
        var before = Random(6 << 20, 41);
        var segmentsBefore = Segments(before);
        var rng = new Random(edit + 1000);
        for (var trial = 0; trial < 6; trial++)
        {
            var at = rng.Next(1, before.Length - 10_000);
            var after = edit > 0 ? [.. before[..at], .. Random(edit, trial), .. before[at..]] : before[..at].Concat(before[(at - edit)..]).ToArray();
            var segmentsAfter = Segments(after);
            // One edit touches the segment it falls in and, through the minimum size, at most a couple after it.
            Assert.InRange(segmentsAfter.Except(segmentsBefore).Count(), 1, 3);
            Assert.InRange(segmentsBefore.Except(segmentsAfter).Count(), 1, 3);
        }
    }

    private static HashSet<SegmentId> Segments(byte[] data)
    {
        var ids = new HashSet<SegmentId>();
        var offset = 0;
        foreach (var cut in Chunk(data)) { ids.Add(SegmentId.Of(data.AsSpan(offset, cut))); offset += cut; }
        return ids;
    }
}
