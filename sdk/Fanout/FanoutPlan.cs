using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fanout;

/// <summary>A run of consecutive segments that travels the ring as one message.</summary>
public readonly record struct Block(int Share, int First, int Count, long StoredBytes);

/// <summary>
/// Who fetches what, computed alike by every rank from the manifest alone: the segment list cut into N contiguous
/// shares of about equal stored size (rank k fetches share k from the cache tier), each share cut into blocks of at most
/// <see cref="MaxBlockBytes"/> stored bytes (the unit that is pipelined: fetched, sent, forwarded and written while the
/// next one is on its way).
/// </summary>
public sealed class FanoutPlan
{
    /// <param name="maxBlockBytes">Default: <see cref="BlockSizing.For"/> a share's stored size (a share's first blocks are
    /// smaller: <see cref="BlockSizing.RampBlocks"/>).
    /// The last block of the exchange crosses N−1 links one after another, each in a block's time; small blocks keep
    /// that tail short at many ranks, large ones keep per-message costs small at few.</param>
    /// <param name="needed">Which segments travel (those some node lacks); null: all. A block is a run of needed
    /// segments, so one that is not needed ends a block.</param>
    public FanoutPlan(Manifest manifest, int ranks, int? maxBlockBytes = null, IReadOnlyList<bool>? needed = null)
    {
        if (ranks < 1) throw new ArgumentOutOfRangeException(nameof(ranks));
        if (needed is not null && needed.Count != manifest.Segments.Count) throw new ArgumentException("one flag per segment", nameof(needed));
        Ranks = ranks;
        var segments = manifest.Segments;
        bool Needed(int i) => needed is null || needed[i];
        long StoredIfNeeded(int i) => Needed(i) ? segments[i].StoredLength : 0;
        var total = Enumerable.Range(0, segments.Count).Sum(StoredIfNeeded);
        var block = maxBlockBytes ?? (int)BlockSizing.For((double)total / ranks);
        MaxBlockBytes = Math.Max(block, segments.Count == 0 ? 1 : segments.Max(s => s.StoredLength));
        var shares = new List<Block>[ranks];
        var start = 0;
        long done = 0;
        for (var k = 0; k < ranks; k++)
        {
            shares[k] = [];
            // Share k ends where the running stored size passes (k+1)/N of the whole: equal bytes, not equal counts.
            var target = total * (k + 1) / ranks;
            var end = start;
            while (end < segments.Count)
            {
                var next = StoredIfNeeded(end);
                // The last share takes the rest; the others stop where the cut is nearest their target.
                if (k < ranks - 1 && next > 0 && (done >= target || done + next - target > target - done)) break;
                done += next;
                end++;
            }
            for (var first = start; first < end;)
            {
                if (!Needed(first)) { first++; continue; }
                long bytes = 0;
                var count = 0;
                var cap = BlockSizing.Cap(MaxBlockBytes, shares[k].Count);
                while (first + count < end && Needed(first + count) && (count == 0 || bytes + segments[first + count].StoredLength <= cap))
                    bytes += segments[first + count++].StoredLength;
                shares[k].Add(new Block(k, first, count, bytes));
                first += count;
            }
            start = end;
        }
        Shares = shares;
        Manifest = manifest;
    }

    /// <summary>A plan whose shares are given (every rank must give the same): blocks keep their runs of segments,
    /// and their share is their place in <paramref name="shares"/>.</summary>
    internal FanoutPlan(Manifest manifest, IReadOnlyList<IReadOnlyList<Block>> shares)
    {
        Manifest = manifest;
        Ranks = shares.Count;
        Shares = shares.Select((share, k) => (IReadOnlyList<Block>)share.Select(b => b with { Share = k }).ToArray()).ToArray();
        MaxBlockBytes = (int)Math.Max(1, Shares.SelectMany(s => s).Select(b => b.StoredBytes).DefaultIfEmpty(1).Max());
    }

    public Manifest Manifest { get; }
    public int Ranks { get; }
    public int MaxBlockBytes { get; }
    /// <summary>Blocks of each share, in segment order.</summary>
    public IReadOnlyList<IReadOnlyList<Block>> Shares { get; }

    /// <summary>Bytes of the largest block message (header, record headers and payloads).</summary>
    public int MaxMessageBytes => BlockMessage.HeaderLength + MaxBlockBytes + BlockMessage.RecordHeaderLength * Shares.SelectMany(s => s).Select(b => b.Count).DefaultIfEmpty(0).Max();

    /// <summary>How many block messages rank <paramref name="rank"/> receives from its left neighbour: every block but its own.</summary>
    public int BlocksReceivedBy(int rank) => Shares.Where((_, k) => k != rank).Sum(s => s.Count);
}
