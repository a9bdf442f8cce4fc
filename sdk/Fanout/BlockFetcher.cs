using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fanout;

/// <summary>Fills a block message with this rank's own segments, straight from the cache tier.</summary>
public sealed class BlockFetcher(CacheTierClient tier, FanoutPlan plan, string version)
{
    public async Task<int> FetchAsync(Block block, Memory<byte> message, CancellationToken ct)
    {
        var segments = plan.Manifest.Segments;
        // Each record's place is known from the manifest, so segments arriving from several hosts at once are
        // written straight into place.
        var offsets = new int[block.Count];
        var at = BlockMessage.HeaderLength;
        for (var i = 0; i < block.Count; i++)
        {
            offsets[i] = at;
            at += BlockMessage.RecordHeaderLength + segments[block.First + i].StoredLength;
        }
        var wanted = Enumerable.Range(block.First, block.Count).ToArray();
        await tier.FetchSegmentsAsync(plan.Manifest.SegmentIds, wanted, (index, stored) =>
        {
            var segment = segments[index];
            if (stored.Length != segment.StoredLength) return $"stored length {stored.Length}, the manifest says {segment.StoredLength}";
            // Only the checksum here: the node that keeps the segment decodes and checks its content id.
            if (SegmentCodec.CheckStored(stored, segment.RawLength) is { } problem) return problem;
            BlockMessage.WriteRecord(message.Span[offsets[index - block.First]..], index, stored);
            return null;
        }, $"dataset '{plan.Manifest.Name}' version {version}", ct);
        BlockMessage.WriteHeader(message.Span, block, at);
        return at;
    }
}
