using System.Diagnostics;

namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>Routes around a right neighbour that died or hung, and resends what its successor would otherwise miss.</summary>
    private sealed class RingBypass(RingRun run)
    {
        // Connects past the right neighbour that died or hung to the next member that answers, and sends it from the
        // tier what it lacks and no one else will send: the dead member's blocks it never had, and those this rank had
        // sent into the dead one. False: the next member still hears the neighbour, which is only slow.
        private async Task Resend(Block block, bool dead)
        {
            // Marked had only once it is on its way to the node: the last block marked ends the receiving, and with it
            // the node's queue.
            var lacks = run.Ring!.Lacks(block.First);
            var m = Message.Rent(run.Size, holders: lacks ? 2 : 1);
            // A block this rank sent into the lost member is resent as sent while it is still kept; only the rest
            // comes from the tier again.
            m.Length = dead ? -1 : run.Kept!.TryCopy(block.First, m.Buffer);
            if (m.Length >= 0) Interlocked.Add(ref run.RepairBytesKept, m.Length);
            else
            {
                // A dead member's block enters the ring here as this rank's: the member before this one stops it, as
                // it stops this rank's own.
                m.Length = await run.Fetch(dead ? block with { Share = run.Position } : block, m.Buffer, run.Token);
                Interlocked.Increment(ref run.Fetched);
                Interlocked.Add(ref run.FetchedBytes, m.Length);
                Interlocked.Add(ref run.RepairBytes, m.Length);
            }
            (m.Share, m.First, m.Inject) = (block.Share, block.First, true);
            Interlocked.Increment(ref run.Progress);
            if (lacks)
            {
                await run.ToNode.Writer.WriteAsync(m, run.Token);
                run.Ring.Take(block.First);
            }
            run.Outgoing.Add(m, own: true);
        }

        public async Task<bool> BypassAsync(int gone, bool failed)
        {
            await run.Ring!.Bypassing.WaitAsync(run.Token);
            try { return await BypassOnce(gone, failed); }
            finally { run.Ring.Bypassing.Release(); }
        }

        private async Task<bool> BypassOnce(int gone, bool failed)
        {
            var asking = Stopwatch.StartNew();
            var wait = FirstBypassRetry;
            while (true)
            {
                // The sender and the report watcher may both find the neighbour gone: the second finds it passed.
                if (run.Ring!.RightRank != gone) return true;
                var (next, have, skipped) = await run.Ring.ConnectPastAsync(run.RepairLinks!, gone, run.Token);
                if (have is not null)
                {
                    Interlocked.Increment(ref run.Bypassed);
                    foreach (var k in skipped) run.RoutedAround.Enqueue(run.Route!.Members[k]);
                    Interlocked.Exchange(ref run.RoutedAroundAt, Stopwatch.GetTimestamp());
                    if (failed) Volatile.Write(ref run.NeighbourDied, true);
                    // Every member still in the exchange hears of it, so none waits for a barrier the lost one never reaches.
                    await run.HearMemberLost();
                    Interlocked.Increment(ref run.Progress);
                    // The new right neighbour may have everything already: its map says so, and the left neighbour
                    // must hear it from this rank as it would have from the report.
                    if (run.Ring.RightHasAll) await run.RepairLinks!.ReportAsync(run.Ring.LeftRank, Repair.ReportRightHasAll);
                    var again = run.Ring.Resend(have, next);
                    // Fetched beside the ring's flow, a few at once: the new neighbour takes the blocks already queued
                    // meanwhile, and the tier's connections, not one block's round trip, set the repair's pace.
                    run.Outgoing.Hold();
                    run.Repairs.Add(run.Guard(Task.Run(async () =>
                    {
                        try
                        {
                            using var slots = new SemaphoreSlim(RepairFetches);
                            await Task.WhenAll(again.Select(async item =>
                            {
                                await slots.WaitAsync(run.Token);
                                try { await Resend(item.Block, item.Dead); }
                                finally { slots.Release(); }
                            }));
                        }
                        finally { run.Outgoing.Unhold(); }
                    }, run.Token)));
                    return true;
                }
                if (!failed) return false;
                // The neighbour's link failed, yet the next member still hears it: it has just died and its last
                // bytes are still arriving there, or this rank was the one routed around. A few looks tell which.
                // Asked again soon, since the usual case is a death the next member has not yet read to the end; given up
                // on only after twice the silence that marks a peer gone, as before, since a rank that was itself routed
                // around stops being heard within that.
                if (asking.Elapsed >= 2 * run.Ring.Silence) throw new IOException($"rank {gone} closed the ring's link and the next member still hears it: this rank was routed around");
                await Task.Delay(wait, run.Token);
                wait = TimeSpan.FromTicks(Math.Min(wait.Ticks * 2, (run.Ring.Silence / 2).Ticks));
            }
        }
    }
}
