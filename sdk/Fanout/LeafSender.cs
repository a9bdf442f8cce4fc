using System.Buffers;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>Serves one leaf: sends it this member's own share, a block at a time, and gives it up when it fails or goes silent.</summary>
    private sealed class LeafSender(RingRun run)
    {
        // One block at a time to each leaf: its own link is the limit, so more in flight would only queue there.
        // A leaf that fails, or takes nothing for the peer silence, is its own loss: its node fetches what it lacks, and
        // this member's exchange goes on (its blocks kept for that leaf are let go as they come).
        public async Task SendToLeaf(int leafRank, ChannelReader<LeafItem> items)
        {
            byte[]? again = null;
            var gone = false;
            using var watching = new CancellationTokenSource();
            var watch = run.Peers is IRingRepair links ? WatchLeaf(links, leafRank, watching.Token) : Task.CompletedTask;
            try
            {
                await foreach (var (m, block) in items.ReadAllAsync(run.Token))
                {
                    var length = 0;
                    try
                    {
                        if (gone) continue;
                        if (m is not null)
                        {
                            await run.Peers!.SendToAsync(leafRank, m.Buffer[..m.Length], run.Token);
                            length = m.Length;
                        }
                        else
                        {
                            again ??= ArrayPool<byte>.Shared.Rent(run.Size);
                            var fetchedAgain = await run.Fetch(block, again, run.Token);
                            Interlocked.Increment(ref run.Refetched);
                            await run.Peers!.SendToAsync(leafRank, again.AsMemory(0, fetchedAgain), run.Token);
                            length = fetchedAgain;
                        }
                    }
                    catch (Exception) when (!run.Token.IsCancellationRequested)
                    {
                        gone = true;
                        continue;
                    }
                    finally
                    {
                        if (m is not null)
                        {
                            if (Interlocked.Decrement(ref m.LeafHolders) == 0) { Interlocked.Decrement(ref run.Retained); Interlocked.Add(ref run.RetainedBytes, -run.Size); }
                            m.Release();
                        }
                    }
                    Interlocked.Increment(ref run.Sent);
                    Interlocked.Add(ref run.SentBytes, length);
                    Interlocked.Add(ref run.LeafBytes, length);
                    Interlocked.Increment(ref run.Progress);
                }
            }
            finally
            {
                await watching.CancelAsync();
                await watch;
                if (again is not null) ArrayPool<byte>.Shared.Return(again);
            }
        }

        // A send to a leaf that has taken nothing for the peer silence is given up: its links are closed, so the send fails.
        private async Task WatchLeaf(IRingRepair links, int leafRank, CancellationToken stop)
        {
            try
            {
                while (true)
                {
                    await Task.Delay(run.Silence / 4, stop);
                    if (links.SilenceTo(leafRank) < run.Silence) continue;
                    links.Drop(leafRank);
                    return;
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested) { }
        }
    }
}
