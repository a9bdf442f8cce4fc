using Hpc.CommonData.Format;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary>
/// A staged dataset as the fan-out's tests stand it in: a manifest whose segments' stored lengths are drawn from a seed,
/// and each segment's stored bytes its index repeated, so a block that reaches the wrong place or arrives torn shows.
/// </summary>
internal static class RingData
{
    public static Manifest ManifestOf(int segments, int seed = 1, int minStored = 2000)
    {
        var rng = new Random(seed);
        var list = Enumerable.Range(0, segments)
            .Select(i => new ManifestSegment(SegmentId.Of(BitConverter.GetBytes(i)).ToString(), 65536, rng.Next(minStored, 65536))).ToList();
        return new Manifest
        {
            Name = "test/ring", Hash = new string('0', 32), Segments = list,
            RawLength = list.Sum(s => (long)s.RawLength), StoredLength = list.Sum(s => (long)s.StoredLength),
        };
    }

    public static byte[] StoredBytes(Manifest m, int index) => Enumerable.Repeat((byte)(index * 7 + 3), m.Segments[index].StoredLength).ToArray();

    /// <summary>A cache tier that fills a block message with the stand-in segments and notes each index it sent.</summary>
    public static async Task<int> FetchAsync(FanoutPlan plan, Block block, Memory<byte> message, System.Collections.Concurrent.ConcurrentBag<int> fetched)
    {
        var at = BlockMessage.HeaderLength;
        for (var i = block.First; i < block.First + block.Count; i++)
        {
            fetched.Add(i);
            at += BlockMessage.WriteRecord(message.Span[at..], i, StoredBytes(plan.Manifest, i));
        }
        BlockMessage.WriteHeader(message.Span, block, at);
        await Task.Yield();
        return at;
    }
}
