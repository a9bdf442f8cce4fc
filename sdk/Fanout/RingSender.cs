namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>Sends the outbox's blocks to the right neighbour, watched for silence where the ring can be repaired.</summary>
    private sealed class RingSender(RingRun run)
    {
        // More than one send in flight hides the round trip with which a large message starts (its receiver's
        // go-ahead waits behind the data queued on the receiver's own uplink). Each send is accounted for as soon
        // as it completes, not when the next message comes: an own block's fetch slot must come back even when
        // nothing else is queued, or the fetch that would queue the next block waits for ever.
        private readonly SemaphoreSlim _window = new(Math.Max(1, run.Link.SendWindow));

        public async Task SendAll(Task producers)
        {
            using var window = _window;
            _ = producers.ContinueWith(_ => run.Outgoing.Complete(), TaskScheduler.Default);
            var inFlight = new List<Task>();
            // The slot first, then the block: a block taken while every slot is busy would be chosen before an own
            // block fetched meanwhile, and go ahead of it.
            while (true)
            {
                await window.WaitAsync(run.Token);
                if (await run.Outgoing.TakeAsync(run.Token) is not { } m) break;
                // After a bypass, what was queued for the dead neighbour may be what its successor began with.
                if (run.Ring is not null && !m.Inject && !run.Ring.Forwards(m.Share))
                {
                    if (m.Own) run.FetchSlots.Release();
                    m.Release();
                    window.Release();
                    continue;
                }
                inFlight.RemoveAll(t => t.IsCompletedSuccessfully);
                inFlight.Add(run.Ring is null ? SendOne(m) : SendWatched(m));
            }
            await Task.WhenAll(inFlight);
            await Task.WhenAll(run.Repairs);
        }

        private async Task SendOne(Message m)
        {
            try
            {
                await run.Seat!.SendRight(m.Buffer[..m.Length], run.Token);
                Interlocked.Increment(ref run.Sent);
                Interlocked.Add(ref run.SentBytes, m.Length);
                Interlocked.Increment(ref run.Progress);
                if (m.Own) run.FetchSlots.Release();
                m.Release();
            }
            finally { _window.Release(); }
        }

        // One send at a time (the socket's buffer is the window), watched: a right neighbour that fails or takes
        // nothing for the silence is routed around, and this block is among those its successor is sent again.
        private async Task SendWatched(Message m)
        {
            try
            {
                var to = run.Ring!.RightRank;
                run.Ring.Sent(m.First);
                // Kept from the start, so a repair that this very send sets off finds it too; the window takes over
                // this sender's hold and lets it go once enough newer blocks follow.
                run.Kept!.Keep(m);
                var sending = run.Seat!.SendRight(m.Buffer[..m.Length], run.Token);
                while (true)
                {
                    if (await Task.WhenAny(sending, Task.Delay(run.Ring.Silence / 4, run.Token)) == sending)
                    {
                        if (sending.IsCompletedSuccessfully)
                        {
                            Interlocked.Increment(ref run.Sent);
                            Interlocked.Add(ref run.SentBytes, m.Length);
                            Interlocked.Increment(ref run.Progress);
                            break;
                        }
                        if (run.Token.IsCancellationRequested) await sending;
                        await run.Bypass!.BypassAsync(to, failed: true);
                        break;
                    }
                    if (run.RepairLinks!.SilenceTo(to) >= run.Ring.Silence && await run.Bypass!.BypassAsync(to, failed: false))
                    {
                        _ = sending.ContinueWith(t => t.Exception, TaskScheduler.Default);
                        break;
                    }
                }
            }
            finally
            {
                if (m.Own) run.FetchSlots.Release();
                _window.Release();
            }
        }
    }
}
