using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>
    /// One rank's exchange, from its start to its result: the state that fetching, receiving, sending, delivering and
    /// watching share while they run concurrently.
    /// </summary>
    private sealed class RingRun
    {
        private readonly Stopwatch _clock = Stopwatch.StartNew();
        private readonly FanoutPlan _plan;
        private readonly IRingLink _link;
        private readonly Func<Block, Memory<byte>, CancellationToken, Task<int>> _fetch;
        private readonly Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> _deliver;
        private readonly FanoutRoute _route;
        private readonly bool _awaitLeaves;
        private readonly Func<Memory<byte>, CancellationToken, Task<int>>? _ownInAnyOrder;
        private readonly long _leafRetainBytes;
        private readonly IPeerLinks? _peers;
        private readonly int _rank, _position, _right, _rightRank, _leftRank, _size, _expected;
        private readonly bool _leaf;
        private readonly Func<ReadOnlyMemory<byte>, CancellationToken, Task> _sendRight;
        private readonly Func<Memory<byte>, CancellationToken, Task<int>> _receiveLeft;
        private readonly IReadOnlyList<int> _leaves;
        private readonly CancellationTokenSource _failed;
        private readonly CancellationToken _token;
        private readonly Outbox _outgoing = new();
        private readonly Channel<Message> _toNode = Channel.CreateUnbounded<Message>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = false });
        private readonly Channel<LeafItem>[] _toLeaves;
        private readonly SemaphoreSlim _fetchSlots = new(FetchAhead);
        private long _fetchedBytes, _receivedBytes, _sentBytes, _leafBytes;
        private int _fetched, _received, _sent, _refetched, _retained;
        private long _retainedBytes;
        private long _progress;
        private double _shareSeconds;
        /// <summary>A leaf counts what each member has sent it, so a member that owes it blocks and has gone silent is found.</summary>
        private readonly int[] _fromMember;
        private readonly IRingRepair? _silentMember;
        private readonly TimeSpan _silence, _limit;
        private readonly IRingRepair? _repair;
        private readonly Repair? _ring;
        private int _bypassed;
        private readonly ConcurrentQueue<int> _routedAround = new();
        private bool _neighbourDied;
        private long _repairBytes;
        private readonly ConcurrentBag<Task> _repairs = [];

        public RingRun(FanoutPlan plan, IRingLink link, Func<Block, Memory<byte>, CancellationToken, Task<int>> fetch,
            Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout, FanoutRoute? route,
            bool awaitLeaves, TimeSpan? peerSilence, Func<Memory<byte>, CancellationToken, Task<int>>? ownInAnyOrder, long leafRetainBytes)
        {
            (_plan, _link, _fetch, _deliver, _awaitLeaves, _ownInAnyOrder, _leafRetainBytes) = (plan, link, fetch, deliver, awaitLeaves, ownInAnyOrder, leafRetainBytes);
            route ??= FanoutRoute.Ring(link.Size);
            _route = route;
            if (route.Members.Count != plan.Ranks) throw new ArgumentException($"the plan has {plan.Ranks} shares for {route.Members.Count} ring members", nameof(route));
            var peers = link as IPeerLinks;
            _peers = peers;
            if (route.HasLeaves && peers is null) throw new ArgumentException("routing around slow members needs links to every rank", nameof(link));
            var rank = _rank = link.Rank;
            var leaf = _leaf = route.IsLeaf(rank);
            var position = _position = route.PositionOf(rank);
            _right = leaf ? -1 : (position + 1) % plan.Ranks;
            var rightRank = _rightRank = leaf ? -1 : route.RightOf(rank);
            var leftRank = _leftRank = leaf ? -1 : route.LeftOf(rank);
            // Without leaves the neighbours are the link's own: exactly the ring as it always ran.
            _sendRight = route.HasLeaves ? (m, t) => peers!.SendToAsync(rightRank, m, t) : link.SendAsync;
            _receiveLeft = route.HasLeaves ? (b, t) => peers!.ReceiveFromAsync(leftRank, b, t) : link.ReceiveAsync;
            _leaves = leaf ? [] : route.Leaves;
            _size = plan.MaxMessageBytes;
            _failed = CancellationTokenSource.CreateLinkedTokenSource(ct);
            _token = _failed.Token;
            _toLeaves = _leaves.Select(_ => Channel.CreateUnbounded<LeafItem>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = true })).ToArray();
            _expected = leaf ? plan.Shares.Sum(s => s.Count) : plan.BlocksReceivedBy(position);
            _fromMember = new int[leaf ? route.Members.Count : 0];
            _silentMember = leaf && peers is IRingRepair watched ? watched : null;
            _silence = peerSilence ?? PeerSilence;
            _limit = stallTimeout ?? TimeSpan.FromMinutes(2);
            var repair = _repair = !leaf && plan.Ranks > 1 && link.SendWindow == 1 ? link as IRingRepair : null;
            var ring = _ring = repair is null ? null : new Repair(plan, route, position, _expected, peerSilence ?? PeerSilence);
            if (repair is not null) _sendRight = (m, t) => repair.SendToAsync(ring!.RightRank, m, t);
        }

        private async Task FetchOwn()
        {
            if (_leaf) return;
            await FetchShare();
            _shareSeconds = _clock.Elapsed.TotalSeconds;
        }

        private async Task FetchShare()
        {
            var blocks = _plan.Shares[_position];
            // Taken in any order, a block a leaf is sent again is found by its first segment.
            var byFirst = _ownInAnyOrder is not null && _leaves.Count > 0 ? blocks.ToDictionary(b => b.First) : null;
            var next = -1;
            try
            {
                await Task.WhenAll(Enumerable.Range(0, FetchConcurrency).Select(_ => Task.Run(async () =>
                {
                    for (int i; (i = Interlocked.Increment(ref next)) < blocks.Count;)
                    {
                        await _fetchSlots.WaitAsync(_token);
                        // Kept for the leaves while few are waiting; otherwise their senders fetch it again in turn.
                        var keep = false;
                        if (_leaves.Count > 0)
                        {
                            var blocksKept = Interlocked.Increment(ref _retained);
                            var bytesKept = Interlocked.Add(ref _retainedBytes, _size);
                            keep = blocksKept <= LeafRetainBlocks || bytesKept <= _leafRetainBytes;
                            if (!keep) { Interlocked.Decrement(ref _retained); Interlocked.Add(ref _retainedBytes, -_size); }
                        }
                        var m = Message.Rent(_size, holders: (_plan.Ranks > 1 ? 2 : 1) + (keep ? _leaves.Count : 0));
                        m.LeafHolders = keep ? _leaves.Count : 0;
                        m.Length = _ownInAnyOrder is null ? await _fetch(blocks[i], m.Buffer, _token) : await _ownInAnyOrder(m.Buffer, _token);
                        // The block is whichever the message holds: taken in any order, it need not be the i-th.
                        var first = _ownInAnyOrder is null ? blocks[i].First : BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], _plan).First;
                        (m.Share, m.First) = (_position, first);
                        Interlocked.Increment(ref _fetched);
                        Interlocked.Increment(ref _progress);
                        Interlocked.Add(ref _fetchedBytes, m.Length);
                        m.Own = true;
                        await _toNode.Writer.WriteAsync(m, _token);
                        var own = byFirst is null ? blocks[i] : byFirst[first];
                        foreach (var queue in _toLeaves) await queue.Writer.WriteAsync(new LeafItem(keep ? m : null, own), _token);
                        if (_plan.Ranks > 1) _outgoing.Add(m, own: true);
                        else _fetchSlots.Release();
                    }
                }, _token)));
            }
            finally
            {
                foreach (var queue in _toLeaves) queue.Writer.TryComplete();
            }
        }

        // Several receives stay posted, so a neighbour's next block never waits for this rank to ask for it (with
        // a rendezvous protocol a large send cannot start before its receive is posted). They match in the order
        // posted, so they are taken in that order. A member forwards what it receives; a leaf receives only each
        // member's own share.
        private async Task ReceiveFrom(Func<Memory<byte>, CancellationToken, Task<int>> receive, int total, int from, int? onlyShare)
        {
            var posted = new Queue<(Message Message, Task<int> Length)>();
            var asked = 0;
            void Post()
            {
                var m = Message.Rent(_size, holders: 2);
                posted.Enqueue((m, receive(m.Buffer, _token)));
                asked++;
            }
            while (asked < total && posted.Count < ReceiveWindow) Post();
            while (posted.Count > 0)
            {
                var (m, pending) = posted.Dequeue();
                m.Length = await pending;
                if (asked < total) Post();
                var (share, _, _, length) = BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], _plan);
                if (length != m.Length) throw new InvalidDataException($"block message of {m.Length} bytes says {length}");
                if (onlyShare is { } own && share != own) throw new InvalidDataException($"rank {from} sent a block of share {share}; a leaf gets only share {own} from it");
                if (onlyShare is { } mine) Interlocked.Increment(ref _fromMember[mine]);
                Interlocked.Increment(ref _received);
                Interlocked.Add(ref _receivedBytes, m.Length);
                Interlocked.Increment(ref _progress);
                await _toNode.Writer.WriteAsync(m, _token);
                if (onlyShare is null && share != _right) _outgoing.Add(m, own: false);
                else m.Release();
            }
        }

        private Task ReceiveAll() => _leaf
            ? Task.WhenAll(_route.Members.Select((member, k) => ReceiveFrom((b, t) => _peers!.ReceiveFromAsync(member, b, t), _plan.Shares[k].Count, member, k)))
            : _repair is not null ? ReceiveRepairable()
            : _plan.Ranks > 1 ? ReceiveFrom(_receiveLeft, _expected, _leftRank, null) : Task.CompletedTask;

        // The ring that can be repaired: blocks are counted by what this rank still lacks, not by what one neighbour
        // sends, for when the left neighbour dies, the member before it connects past it and sends what is missing.
        private async Task ReceiveRepairable()
        {
            _repair!.AcceptBypasses(_ring!.AnswerBypassAsync(_repair));
            var from = _leftRank;
            while (true)
            {
                Exception failure;
                try
                {
                    await ReceiveLink(from);
                    return;
                }
                catch (Exception e) when (!_token.IsCancellationRequested && e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException or OperationCanceledException)
                {
                    failure = e;
                }
                _ring.LeftFailed = true;
                Repair.Swap swap;
                try { swap = await _ring.Swaps.Reader.ReadAsync(_token).AsTask().WaitAsync(_limit, _token); }
                catch (TimeoutException) { throw new IOException($"rank {from} stopped sending and no member connected past it within {_limit.TotalSeconds:0} s", failure); }
                from = swap.Rank;
                // The new left neighbour first, then the map: a report made meanwhile goes to it, after the answer.
                _ring.LeftRank = from;
                _ring.LeftFailed = false;
                swap.Have.TrySetResult(_ring.HaveMap());
                Interlocked.Increment(ref _progress);
            }
        }

        private async Task ReceiveLink(int from)
        {
            using var stopLink = CancellationTokenSource.CreateLinkedTokenSource(_token);
            var posted = new Queue<(Message Message, Task<int> Length)>();
            try
            {
                while (!_ring!.AllIn.Task.IsCompleted)
                {
                    while (posted.Count < Math.Min(ReceiveWindow, _ring.Remaining))
                    {
                        var fresh = Message.Rent(_size, holders: 2);
                        posted.Enqueue((fresh, _peers!.ReceiveFromAsync(from, fresh.Buffer, stopLink.Token)));
                    }
                    var (m, pending) = posted.Peek();
                    if (await Task.WhenAny(pending, _ring.AllIn.Task) != pending) break;
                    posted.Dequeue();
                    try { m.Length = await pending; }
                    catch
                    {
                        m.Release();
                        m.Release();
                        throw;
                    }
                    var (share, first, _, length) = BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], _plan);
                    if (length != m.Length) throw new InvalidDataException($"block message of {m.Length} bytes says {length}");
                    (m.Share, m.First) = (share, first);
                    if (!_ring.Take(first))
                    {
                        m.Release();
                        m.Release();
                        continue;
                    }
                    Interlocked.Increment(ref _received);
                    Interlocked.Add(ref _receivedBytes, m.Length);
                    Interlocked.Increment(ref _progress);
                    await _toNode.Writer.WriteAsync(m, _token);
                    if (_ring.Forwards(share)) _outgoing.Add(m, own: false);
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

        // Connects past the right neighbour that died or hung to the next member that answers, and sends it from the
        // tier what it lacks and no one else will send: the dead member's blocks it never had, and those this rank had
        // sent into the dead one. False: the next member still hears the neighbour, which is only slow.
        private async Task Resend(Block block, bool dead)
        {
            // Marked had only once it is on its way to the node: the last block marked ends the receiving, and with it
            // the node's queue.
            var lacks = _ring!.Lacks(block.First);
            var m = Message.Rent(_size, holders: lacks ? 2 : 1);
            // A dead member's block enters the ring here as this rank's: the member before this one stops it, as it
            // stops this rank's own.
            m.Length = await _fetch(dead ? block with { Share = _position } : block, m.Buffer, _token);
            (m.Share, m.First, m.Inject) = (block.Share, block.First, true);
            Interlocked.Increment(ref _fetched);
            Interlocked.Add(ref _fetchedBytes, m.Length);
            Interlocked.Add(ref _repairBytes, m.Length);
            Interlocked.Increment(ref _progress);
            if (lacks)
            {
                await _toNode.Writer.WriteAsync(m, _token);
                _ring.Take(block.First);
            }
            _outgoing.Add(m, own: true);
        }

        private async Task<bool> BypassAsync(int gone, bool failed)
        {
            await _ring!.Bypassing.WaitAsync(_token);
            try { return await BypassOnce(gone, failed); }
            finally { _ring.Bypassing.Release(); }
        }

        private async Task<bool> BypassOnce(int gone, bool failed)
        {
            var asking = Stopwatch.StartNew();
            var wait = FirstBypassRetry;
            while (true)
            {
                // The sender and the report watcher may both find the neighbour gone: the second finds it passed.
                if (_ring!.RightRank != gone) return true;
                var (next, have, skipped) = await _ring.ConnectPastAsync(_repair!, gone, _token);
                if (have is not null)
                {
                    Interlocked.Increment(ref _bypassed);
                    foreach (var k in skipped) _routedAround.Enqueue(_route!.Members[k]);
                    if (failed) Volatile.Write(ref _neighbourDied, true);
                    Interlocked.Increment(ref _progress);
                    // The new right neighbour may have everything already: its map says so, and the left neighbour
                    // must hear it from this rank as it would have from the report.
                    if (_ring.RightHasAll) await _repair!.ReportAsync(_ring.LeftRank, Repair.ReportRightHasAll);
                    var again = _ring.Resend(have, next);
                    // Fetched beside the ring's flow, a few at once: the new neighbour takes the blocks already queued
                    // meanwhile, and the tier's connections, not one block's round trip, set the repair's pace.
                    _outgoing.Hold();
                    _repairs.Add(Guard(Task.Run(async () =>
                    {
                        try
                        {
                            using var slots = new SemaphoreSlim(RepairFetches);
                            await Task.WhenAll(again.Select(async item =>
                            {
                                await slots.WaitAsync(_token);
                                try { await Resend(item.Block, item.Dead); }
                                finally { slots.Release(); }
                            }));
                        }
                        finally { _outgoing.Unhold(); }
                    }, _token)));
                    return true;
                }
                if (!failed) return false;
                // The neighbour's link failed, yet the next member still hears it: it has just died and its last
                // bytes are still arriving there, or this rank was the one routed around. A few looks tell which.
                // Asked again soon, since the usual case is a death the next member has not yet read to the end; given up
                // on only after twice the silence that marks a peer gone, as before, since a rank that was itself routed
                // around stops being heard within that.
                if (asking.Elapsed >= 2 * _ring.Silence) throw new IOException($"rank {gone} closed the ring's link and the next member still hears it: this rank was routed around");
                await Task.Delay(wait, _token);
                wait = TimeSpan.FromTicks(Math.Min(wait.Ticks * 2, (_ring.Silence / 2).Ticks));
            }
        }

        private async Task SendAll(Task producers)
        {
            _ = producers.ContinueWith(_ => _outgoing.Complete(), TaskScheduler.Default);
            // More than one send in flight hides the round trip with which a large message starts (its receiver's
            // go-ahead waits behind the data queued on the receiver's own uplink). Each send is accounted for as soon
            // as it completes, not when the next message comes: an own block's fetch slot must come back even when
            // nothing else is queued, or the fetch that would queue the next block waits for ever.
            using var window = new SemaphoreSlim(Math.Max(1, _link.SendWindow));
            var inFlight = new List<Task>();
            // The slot first, then the block: a block taken while every slot is busy would be chosen before an own
            // block fetched meanwhile, and go ahead of it.
            while (true)
            {
                await window.WaitAsync(_token);
                if (await _outgoing.TakeAsync(_token) is not { } m) break;
                // After a bypass, what was queued for the dead neighbour may be what its successor began with.
                if (_ring is not null && !m.Inject && !_ring.Forwards(m.Share))
                {
                    if (m.Own) _fetchSlots.Release();
                    m.Release();
                    window.Release();
                    continue;
                }
                inFlight.RemoveAll(t => t.IsCompletedSuccessfully);
                inFlight.Add(_ring is null ? SendOne(m) : SendWatched(m));
            }
            await Task.WhenAll(inFlight);
            await Task.WhenAll(_repairs);

            async Task SendOne(Message m)
            {
                try
                {
                    await _sendRight(m.Buffer[..m.Length], _token);
                    Interlocked.Increment(ref _sent);
                    Interlocked.Add(ref _sentBytes, m.Length);
                    Interlocked.Increment(ref _progress);
                    if (m.Own) _fetchSlots.Release();
                    m.Release();
                }
                finally { window.Release(); }
            }

            // One send at a time (the socket's buffer is the window), watched: a right neighbour that fails or takes
            // nothing for the silence is routed around, and this block is among those its successor is sent again.
            async Task SendWatched(Message m)
            {
                try
                {
                    var to = _ring!.RightRank;
                    _ring.Sent(m.First);
                    var sending = _sendRight(m.Buffer[..m.Length], _token);
                    while (true)
                    {
                        if (await Task.WhenAny(sending, Task.Delay(_ring.Silence / 4, _token)) == sending)
                        {
                            if (sending.IsCompletedSuccessfully)
                            {
                                Interlocked.Increment(ref _sent);
                                Interlocked.Add(ref _sentBytes, m.Length);
                                Interlocked.Increment(ref _progress);
                                break;
                            }
                            if (_token.IsCancellationRequested) await sending;
                            await BypassAsync(to, failed: true);
                            break;
                        }
                        if (_repair!.SilenceTo(to) >= _ring.Silence && await BypassAsync(to, failed: false))
                        {
                            _ = sending.ContinueWith(t => t.Exception, TaskScheduler.Default);
                            break;
                        }
                    }
                }
                finally
                {
                    if (m.Own) _fetchSlots.Release();
                    m.Release();
                    window.Release();
                }
            }
        }

        // One block at a time to each leaf: its own link is the limit, so more in flight would only queue there.
        // A leaf that fails, or takes nothing for the peer silence, is its own loss: its node fetches what it lacks, and
        // this member's exchange goes on (its blocks kept for that leaf are let go as they come).
        private async Task SendToLeaf(int leafRank, ChannelReader<LeafItem> items)
        {
            byte[]? again = null;
            var gone = false;
            using var watching = new CancellationTokenSource();
            var watch = _peers is IRingRepair links ? WatchLeaf(links, leafRank, watching.Token) : Task.CompletedTask;
            try
            {
                await foreach (var (m, block) in items.ReadAllAsync(_token))
                {
                    var length = 0;
                    try
                    {
                        if (gone) continue;
                        if (m is not null)
                        {
                            await _peers!.SendToAsync(leafRank, m.Buffer[..m.Length], _token);
                            length = m.Length;
                        }
                        else
                        {
                            again ??= ArrayPool<byte>.Shared.Rent(_size);
                            var fetchedAgain = await _fetch(block, again, _token);
                            Interlocked.Increment(ref _refetched);
                            await _peers!.SendToAsync(leafRank, again.AsMemory(0, fetchedAgain), _token);
                            length = fetchedAgain;
                        }
                    }
                    catch (Exception) when (!_token.IsCancellationRequested)
                    {
                        gone = true;
                        continue;
                    }
                    finally
                    {
                        if (m is not null)
                        {
                            if (Interlocked.Decrement(ref m.LeafHolders) == 0) { Interlocked.Decrement(ref _retained); Interlocked.Add(ref _retainedBytes, -_size); }
                            m.Release();
                        }
                    }
                    Interlocked.Increment(ref _sent);
                    Interlocked.Add(ref _sentBytes, length);
                    Interlocked.Add(ref _leafBytes, length);
                    Interlocked.Increment(ref _progress);
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
                    await Task.Delay(_silence / 4, stop);
                    if (links.SilenceTo(leafRank) < _silence) continue;
                    links.Drop(leafRank);
                    return;
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested) { }
        }

        private async Task DeliverAll(Task producers)
        {
            _ = producers.ContinueWith(_ => _toNode.Writer.TryComplete(), TaskScheduler.Default);
            await foreach (var m in _toNode.Reader.ReadAllAsync(_token))
            {
                await _deliver(m.Buffer[..m.Length], _token);
                Interlocked.Increment(ref _progress);
                m.Release();
            }
        }

        // Reports against the flow: "I have everything" to the left neighbour, and "my right neighbour has everything"
        // when it says so. A member leaves only once its right neighbour and the one after it have everything, so
        // one that dies after the last block reached it, before it forwarded it, is still routed around.
        private async Task WatchRight()
        {
            _ = _ring!.AllIn.Task.ContinueWith(_ => _repair!.ReportAsync(_ring.LeftRank, Repair.ReportHasAll), TaskScheduler.Default);
            Task<int>? reading = null;
            var readingFrom = -1;
            while (true)
            {
                if (_ring.RightHasAll && _ring.NextHasAll) return;
                var right = _ring.RightRank;
                if (reading is null || readingFrom != right)
                {
                    // A read left on a link a bypass dropped fails there; nothing waits for it.
                    if (reading is not null) _ = reading.ContinueWith(t => t.Exception, TaskScheduler.Default);
                    (reading, readingFrom) = (_repair!.ReadReportAsync(right, _token), right);
                }
                if (await Task.WhenAny(reading, Task.Delay(_ring.Silence, _token)) != reading)
                {
                    _token.ThrowIfCancellationRequested();
                    // Not even a heartbeat for the whole silence: the right neighbour is stopped or its node is gone with
                    // the link still open. Its left neighbour may have nothing left to send it, so no send would tell.
                    if (_ring.RightRank == right) await BypassAsync(right, failed: false);
                    continue;
                }
                int code;
                try { code = await reading; }
                catch (Exception e) when (!_token.IsCancellationRequested && e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException)
                {
                    reading = null;
                    if (_ring.RightRank != right) continue;
                    await BypassAsync(right, failed: true);
                    continue;
                }
                reading = null;
                if (_ring.RightRank != right || code == Repair.ReportAlive) continue;
                if (code == Repair.ReportHasAll && !_ring.RightHasAll)
                {
                    _ring.RightHasAll = true;
                    await _repair!.ReportAsync(_ring.LeftRank, Repair.ReportRightHasAll);
                }
                else if (code == Repair.ReportRightHasAll) _ring.NextHasAll = true;
                else if (code != Repair.ReportHasAll) throw new InvalidDataException($"rank {right} sent report {code}");
                if (_ring.RightHasAll && _ring.NextHasAll) return;
            }
        }

        // To the left neighbour, against the flow, while this member is in the exchange: what tells it this member is
        // alive when it has nothing left to send here.
        private async Task Heartbeat(CancellationToken stop)
        {
            try
            {
                while (true)
                {
                    await Task.Delay(_ring!.Silence / 4, stop);
                    await _repair!.ReportAsync(_ring.LeftRank, Repair.ReportAlive);
                }
            }
            catch (OperationCanceledException) { }
        }


        public async Task<RingResult> RunAsync()
        {
            var fetching = Guard(FetchOwn());
            var receiving = Guard(ReceiveAll());
            var producers = Task.WhenAll(fetching, receiving);
            // A bypass may come after this rank's own blocks and forwarding are done (its right neighbour hangs once it
            // holds everything): the sender stays until this member leaves, so what the bypass resends goes out.
            var watchEnded = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            var sending = Guard(SendAll(_ring is null ? producers : Task.WhenAll(producers, watchEnded.Task)));
            var delivering = Guard(DeliverAll(producers));
            var leafSending = Guard(Task.WhenAll(_leaves.Select((l, i) => SendToLeaf(l, _toLeaves[i].Reader))));
            var watching = _ring is null ? Task.CompletedTask : Guard(WatchRight());
            _ = watching.ContinueWith(_ => watchEnded.TrySetResult(), TaskScheduler.Default);
            var all = _awaitLeaves ? Task.WhenAll(fetching, receiving, sending, delivering, watching, leafSending) : Task.WhenAll(fetching, receiving, sending, delivering, watching);
            // The token source lives until the leaves are served, which may be after this method returns.
            _ = leafSending.ContinueWith(_ => all.ContinueWith(_ => _failed.Dispose(), TaskScheduler.Default), TaskScheduler.Default);
            using var beating = CancellationTokenSource.CreateLinkedTokenSource(_token);
            var heartbeat = _ring is null ? Task.CompletedTask : Heartbeat(beating.Token);
            try
            {
                // A leaf looks for a silent member a few times per peer silence; the stall is still no progress for the limit.
                var tick = _silentMember is null ? _limit : TimeSpan.FromTicks(Math.Min(_limit.Ticks, _silence.Ticks / 4));
                var moved = _clock.Elapsed;
                for (var seen = -1L; ;)
                {
                    if (await Task.WhenAny(all, Task.Delay(tick, _token).ContinueWith(_ => { }, TaskScheduler.Default)) == all) break;
                    if (_token.IsCancellationRequested) break;
                    if (_silentMember is not null)
                        for (var k = 0; k < _fromMember.Length; k++)
                            if (Volatile.Read(ref _fromMember[k]) < _plan.Shares[k].Count && _silentMember.SilenceFrom(_route.Members[k]) >= _silence)
                            {
                                // The member hangs or is gone: its share will not come over this ring. The leaf's node fetches
                                // what it lacks, as a node whose exchange failed; the others do not wait for it.
                                _failed.Cancel();
                                throw new TimeoutException($"rank {_route.Members[k]} sent this leaf (rank {_rank}) nothing for {_silence.TotalSeconds:0.#} s " +
                                                           $"with {_plan.Shares[k].Count - Volatile.Read(ref _fromMember[k])} of its blocks still to come");
                            }
                    var now = Interlocked.Read(ref _progress);
                    if (now != seen)
                    {
                        (seen, moved) = (now, _clock.Elapsed);
                        continue;
                    }
                    if (_clock.Elapsed - moved >= _limit)
                    {
                        _failed.Cancel();
                        var from = _leaf ? $"ranks {string.Join(",", _route.Members)}" : $"rank {_leftRank}";
                        throw new TimeoutException($"the fan-out ring stalled on rank {_rank}: nothing moved for {_limit.TotalSeconds:0} s " +
                                                   $"(received {Volatile.Read(ref _received)} of {_expected} blocks from {from})");
                    }
                }
                await all;
            }
            finally
            {
                beating.Cancel();
                await heartbeat;
            }
            return new RingResult(_fetched, _received, _sent, _fetchedBytes, _receivedBytes, _sentBytes, _clock.Elapsed.TotalSeconds, _leafBytes, _refetched,
                _awaitLeaves ? Task.CompletedTask : leafSending, _shareSeconds, _bypassed, _repairBytes,
                RoutedAround: _routedAround.IsEmpty ? null : [.. _routedAround], NeighbourDied: Volatile.Read(ref _neighbourDied));
        }

        // The first failure cancels the others, so the exchange ends at once and the caller can fall back.
        private async Task Guard(Task task)
        {
            try { await task; }
            catch
            {
                _failed.Cancel();
                throw;
            }
        }
    }
}
