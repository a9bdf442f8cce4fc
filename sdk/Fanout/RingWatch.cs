namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>The reports against the flow: what this member hears from its right neighbour, and its heartbeat to the left one.</summary>
    private sealed class RightWatch(RingRun run)
    {
        // Reports against the flow: "I have everything" to the left neighbour, and "my right neighbour has everything"
        // when it says so. A member leaves only once its right neighbour and the one after it have everything, so
        // one that dies after the last block reached it, before it forwarded it, is still routed around.
        public async Task WatchRight()
        {
            _ = run.Ring!.AllIn.Task.ContinueWith(_ => run.RepairLinks!.ReportAsync(run.Ring.LeftRank, Repair.ReportHasAll), TaskScheduler.Default);
            Task<int>? reading = null;
            var readingFrom = -1;
            while (true)
            {
                if (run.Ring.RightHasAll && run.Ring.NextHasAll) return;
                var right = run.Ring.RightRank;
                if (reading is null || readingFrom != right)
                {
                    // A read left on a link a bypass dropped fails there; nothing waits for it.
                    if (reading is not null) _ = reading.ContinueWith(t => t.Exception, TaskScheduler.Default);
                    (reading, readingFrom) = (run.RepairLinks!.ReadReportAsync(right, run.Token), right);
                }
                if (await Task.WhenAny(reading, Task.Delay(run.Ring.Silence, run.Token)) != reading)
                {
                    run.Token.ThrowIfCancellationRequested();
                    // Not even a heartbeat for the whole silence: the right neighbour is stopped or its node is gone with
                    // the link still open. Its left neighbour may have nothing left to send it, so no send would tell.
                    if (run.Ring.RightRank == right) await run.Bypass!.BypassAsync(right, failed: false);
                    continue;
                }
                int code;
                try { code = await reading; }
                catch (Exception e) when (!run.Token.IsCancellationRequested && e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException)
                {
                    reading = null;
                    if (run.Ring.RightRank != right) continue;
                    await run.Bypass!.BypassAsync(right, failed: true);
                    continue;
                }
                reading = null;
                if (code == Repair.ReportMemberLost)
                {
                    await run.HearMemberLost();
                    continue;
                }
                if (run.Ring.RightRank != right || code == Repair.ReportAlive) continue;
                if (code == Repair.ReportHasAll && !run.Ring.RightHasAll)
                {
                    run.Ring.RightHasAll = true;
                    await run.RepairLinks!.ReportAsync(run.Ring.LeftRank, Repair.ReportRightHasAll);
                }
                else if (code == Repair.ReportRightHasAll) run.Ring.NextHasAll = true;
                else if (code != Repair.ReportHasAll) throw new InvalidDataException($"rank {right} sent report {code}");
                if (run.Ring.RightHasAll && run.Ring.NextHasAll) return;
            }
        }

        // To the left neighbour, against the flow, while this member is in the exchange: what tells it this member is
        // alive when it has nothing left to send here.
        public async Task Heartbeat(CancellationToken stop)
        {
            try
            {
                while (true)
                {
                    await Task.Delay(run.Ring!.Silence / 4, stop);
                    await run.RepairLinks!.ReportAsync(run.Ring.LeftRank, Repair.ReportAlive);
                }
            }
            catch (OperationCanceledException) { }
        }
    }
}
