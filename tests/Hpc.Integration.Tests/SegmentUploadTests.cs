using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>
/// The stager's write path on the client: a stored segment sent in two parts from where they lie (header and LZ4 block
/// apart from a raw payload), SET NX telling which segments the tier already held, and EXISTS batches.
/// </summary>
public sealed class SegmentUploadTests
{
    private static (SegmentId Id, byte[] Raw, StoredSegmentParts Parts) Segment(int seed, bool compressible)
    {
        var raw = Cluster.RandomBytes(40_000 + seed * 1000, seed);
        if (compressible) Array.Fill(raw, (byte)'a', 0, raw.Length / 2);
        var id = SegmentId.Of(raw);
        var head = new byte[SegmentCodec.MaxHeadLength(raw.Length)];
        var n = SegmentCodec.EncodeHead(raw, head, compress: true, out var storedRaw);
        Assert.Equal(!compressible, storedRaw);
        return (id, raw, new StoredSegmentParts(id, head.AsMemory(0, n), storedRaw ? raw : ReadOnlyMemory<byte>.Empty));
    }

    [Fact]
    public async Task Segments_sent_in_parts_read_back_verified_and_a_second_put_learns_that_the_tier_held_them()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), Replicas = 2 });
        var segments = Enumerable.Range(0, 24).Select(i => Segment(i, compressible: i % 3 == 0)).ToList();
        var first = segments.Take(16).ToList();

        var held = new bool[first.Count];
        var sent = await tier.PutSegmentsAsync(first.Select(s => s.Parts).ToList(), null, held);
        Assert.Equal(2L * first.Sum(s => s.Parts.Length), sent);                  // both replicas
        Assert.All(held, Assert.False);

        // Every replica holds exactly the stored form Encode writes, and it decodes to the raw bytes.
        var ids = first.Select(s => s.Id).ToList();
        await tier.FetchSegmentsAsync(ids, Enumerable.Range(0, ids.Count).ToList(), (i, stored) =>
        {
            var expected = new byte[SegmentCodec.MaxEncodedLength(first[i].Raw.Length)];
            var n = SegmentCodec.Encode(first[i].Raw, expected);
            if (!stored.SequenceEqual(expected.AsSpan(0, n))) return "stored form differs from Encode's";
            var back = new byte[first[i].Raw.Length];
            return SegmentCodec.TryDecode(stored, first[i].Id, back);
        }, "upload");

        // Sent again beside eight new ones, without looking up first: SET NX stores only the new ones and says so.
        var all = segments.Select(s => s.Parts).ToList();
        held = new bool[all.Count];
        await tier.PutSegmentsAsync(all, null, held);
        Assert.Equal(Enumerable.Range(0, all.Count).Select(i => i < 16), held);

        var present = new bool[all.Count];
        await tier.ContainsSegmentsAsync(all.Select(s => s.Id).ToList(), present);
        Assert.All(present, Assert.True);
    }

    [Fact]
    public async Task A_segment_one_replica_lacks_is_not_reported_as_held()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var segment = Segment(1, compressible: false);
        // Only on one of the two hosts (the one a single-replica client places it on).
        await using (var one = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), Replicas = 1 }))
            await one.PutSegmentsAsync([segment.Parts], null, null);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), Replicas = 2 });
        Assert.False((await tier.ContainsSegmentsAsync([segment.Id]))[0]);
        var held = new bool[1];
        await tier.PutSegmentsAsync([segment.Parts], null, held);
        Assert.False(held[0]);
        Assert.True((await tier.ContainsSegmentsAsync([segment.Id]))[0]);
        await tier.PutSegmentsAsync([segment.Parts], null, held);
        Assert.True(held[0]);
    }
}
