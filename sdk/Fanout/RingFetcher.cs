namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>Fetches this member's own share from the tier and queues each block for the node, the right neighbour and the leaves.</summary>
    private sealed class OwnShareFetcher(RingRun run)
    {
        public async Task FetchOwn()
        {
            if (run.Leaf is not null) return;
            await FetchShare();
            run.ShareSeconds = run.Clock.Elapsed.TotalSeconds;
        }

        private async Task FetchShare()
        {
            var blocks = run.Plan.Shares[run.Position];
            // Taken in any order, a block a leaf is sent again is found by its first segment.
            var byFirst = run.OwnInAnyOrder is not null && run.Leaves.Count > 0 ? blocks.ToDictionary(b => b.First) : null;
            var next = -1;
            try
            {
                await Task.WhenAll(Enumerable.Range(0, FetchConcurrency).Select(_ => Task.Run(async () =>
                {
                    for (int i; (i = Interlocked.Increment(ref next)) < blocks.Count;)
                    {
                        await run.FetchSlots.WaitAsync(run.Token);
                        // Kept for the leaves while few are waiting; otherwise their senders fetch it again in turn.
                        var keep = false;
                        if (run.Leaves.Count > 0)
                        {
                            var blocksKept = Interlocked.Increment(ref run.Retained);
                            var bytesKept = Interlocked.Add(ref run.RetainedBytes, run.Size);
                            keep = blocksKept <= LeafRetainBlocks || bytesKept <= run.RetainBytes;
                            if (!keep) { Interlocked.Decrement(ref run.Retained); Interlocked.Add(ref run.RetainedBytes, -run.Size); }
                        }
                        var m = Message.Rent(run.Size, holders: (run.Plan.Ranks > 1 ? 2 : 1) + (keep ? run.Leaves.Count : 0));
                        m.LeafHolders = keep ? run.Leaves.Count : 0;
                        m.Length = run.OwnInAnyOrder is null ? await run.Fetch(blocks[i], m.Buffer, run.Token) : await run.OwnInAnyOrder(m.Buffer, run.Token);
                        // The block is whichever the message holds: taken in any order, it need not be the i-th.
                        var first = run.OwnInAnyOrder is null ? blocks[i].First : BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], run.Plan).First;
                        (m.Share, m.First) = (run.Position, first);
                        Interlocked.Increment(ref run.Fetched);
                        Interlocked.Increment(ref run.Progress);
                        Interlocked.Add(ref run.FetchedBytes, m.Length);
                        m.Own = true;
                        await run.ToNode.Writer.WriteAsync(m, run.Token);
                        var own = byFirst is null ? blocks[i] : byFirst[first];
                        foreach (var queue in run.ToLeaves) await queue.Writer.WriteAsync(new LeafItem(keep ? m : null, own), run.Token);
                        if (run.Plan.Ranks > 1) run.Outgoing.Add(m, own: true);
                        else run.FetchSlots.Release();
                    }
                }, run.Token)));
            }
            finally
            {
                foreach (var queue in run.ToLeaves) queue.Writer.TryComplete();
            }
        }
    }
}
