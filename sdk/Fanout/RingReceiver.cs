namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>Takes blocks from the left neighbour (a leaf: from every member) and passes them to the node and the right neighbour.</summary>
    private sealed class RingReceiver(RingRun run)
    {
        // Several receives stay posted, so a neighbour's next block never waits for this rank to ask for it (with
        // a rendezvous protocol a large send cannot start before its receive is posted). They match in the order
        // posted, so they are taken in that order. A member forwards what it receives; a leaf receives only each
        // member's own share.
        public async Task ReceiveFrom(Func<Memory<byte>, CancellationToken, Task<int>> receive, int total, int from, int? onlyShare)
        {
            var posted = new Queue<(Message Message, Task<int> Length)>();
            var asked = 0;
            void Post()
            {
                var m = Message.Rent(run.Size, holders: 2);
                posted.Enqueue((m, receive(m.Buffer, run.Token)));
                asked++;
            }
            while (asked < total && posted.Count < ReceiveWindow) Post();
            while (posted.Count > 0)
            {
                var (m, pending) = posted.Dequeue();
                m.Length = await pending;
                if (asked < total) Post();
                var (share, _, _, length) = BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], run.Plan);
                if (length != m.Length) throw new InvalidDataException($"block message of {m.Length} bytes says {length}");
                if (onlyShare is { } own && share != own) throw new InvalidDataException($"rank {from} sent a block of share {share}; a leaf gets only share {own} from it");
                if (onlyShare is { } mine) Interlocked.Increment(ref run.Leaf!.FromMember[mine]);
                Interlocked.Increment(ref run.Received);
                Interlocked.Add(ref run.ReceivedBytes, m.Length);
                Interlocked.Increment(ref run.Progress);
                await run.ToNode.Writer.WriteAsync(m, run.Token);
                if (onlyShare is null && share != run.Seat!.Right) run.Outgoing.Add(m, own: false);
                else m.Release();
            }
        }

        public Task ReceiveAll() => run.Leaf is { } leaf ? leaf.ReceiveAll(this)
            : run.RepairLinks is not null ? ReceiveRepairable()
            : run.Plan.Ranks > 1 ? ReceiveFrom(run.Seat!.ReceiveLeft, run.Expected, run.Seat.LeftRank, null) : Task.CompletedTask;

        // The ring that can be repaired: blocks are counted by what this rank still lacks, not by what one neighbour
        // sends, for when the left neighbour dies, the member before it connects past it and sends what is missing.
        private async Task ReceiveRepairable()
        {
            run.RepairLinks!.AcceptBypasses(run.Ring!.AnswerBypassAsync(run.RepairLinks));
            var from = run.Seat!.LeftRank;
            while (true)
            {
                Exception failure;
                try
                {
                    await ReceiveLink(from);
                    return;
                }
                catch (Exception e) when (!run.Token.IsCancellationRequested && e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException or OperationCanceledException)
                {
                    failure = e;
                }
                run.Ring.LeftFailed = true;
                Repair.Swap swap;
                try { swap = await run.Ring.Swaps.Reader.ReadAsync(run.Token).AsTask().WaitAsync(run.Limit, run.Token); }
                catch (TimeoutException) { throw new IOException($"rank {from} stopped sending and no member connected past it within {run.Limit.TotalSeconds:0} s", failure); }
                from = swap.Rank;
                // The new left neighbour first, then the map: a report made meanwhile goes to it, after the answer.
                run.Ring.LeftRank = from;
                run.Ring.LeftFailed = false;
                swap.Have.TrySetResult(run.Ring.HaveMap());
                Interlocked.Increment(ref run.Progress);
            }
        }

        private async Task ReceiveLink(int from)
        {
            using var stopLink = CancellationTokenSource.CreateLinkedTokenSource(run.Token);
            var posted = new Queue<(Message Message, Task<int> Length)>();
            try
            {
                while (!run.Ring!.AllIn.Task.IsCompleted)
                {
                    while (posted.Count < Math.Min(ReceiveWindow, run.Ring.Remaining))
                    {
                        var fresh = Message.Rent(run.Size, holders: 2);
                        posted.Enqueue((fresh, run.Peers!.ReceiveFromAsync(from, fresh.Buffer, stopLink.Token)));
                    }
                    var (m, pending) = posted.Peek();
                    if (await Task.WhenAny(pending, run.Ring.AllIn.Task) != pending) break;
                    posted.Dequeue();
                    try { m.Length = await pending; }
                    catch
                    {
                        m.Release();
                        m.Release();
                        throw;
                    }
                    var (share, first, _, length) = BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], run.Plan);
                    if (length != m.Length) throw new InvalidDataException($"block message of {m.Length} bytes says {length}");
                    (m.Share, m.First) = (share, first);
                    if (!run.Ring.Take(first))
                    {
                        m.Release();
                        m.Release();
                        continue;
                    }
                    Interlocked.Increment(ref run.Received);
                    Interlocked.Add(ref run.ReceivedBytes, m.Length);
                    Interlocked.Increment(ref run.Progress);
                    await run.ToNode.Writer.WriteAsync(m, run.Token);
                    if (run.Ring.Forwards(share)) run.Outgoing.Add(m, own: false);
                    else m.Release();
                }
            }
            finally
            {
                stopLink.Cancel();
                foreach (var (m, pending) in posted)
                {
                    try { await pending; } catch { /* cancelled with the link */ }
                    m.Release();
                    m.Release();
                }
            }
        }
    }
}
