using System.Buffers;
using System.Diagnostics;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// One rank's link in the ring: messages go to the right neighbour and come from the left one, in order. Sends
/// complete when the buffer may be reused; a receive fills a buffer of <see cref="FanoutPlan.MaxMessageBytes"/>. Up to
/// <see cref="SendWindow"/> sends and <see cref="RingAllGather.ReceiveWindow"/> receives may be outstanding at once;
/// messages are sent and receives matched in the order of the calls.
/// </summary>
public interface IRingLink
{
    int Rank { get; }
    int Size { get; }
    /// <summary>Sends this link may have in flight at once (1 or more); receives are always posted <see cref="RingAllGather.ReceiveWindow"/> deep.</summary>
    int SendWindow { get; }
    Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct);
    Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct);
}

/// <summary>
/// Links to any rank of the group, beside the ring's own: what routing around a slow member needs (its ring
/// neighbours change, and every member sends to the leaves). Messages to one rank keep their order, as on the ring.
/// </summary>
public interface IPeerLinks : IRingLink
{
    /// <summary>
    /// Opens what the route needs beyond the ring's links: a collective, called by every rank with its own lists.
    /// A link to the old right or left neighbour is the ring's link, reused.
    /// </summary>
    Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct);
    Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct);
    Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct);
}

/// <summary>A member asks to become this rank's left neighbour in place of <c>skipped</c>: answer this rank's
/// have-map to take it, or null to refuse (this rank still hears from its left neighbour).</summary>
public delegate Task<byte[]?> BypassHandler(int rank, IReadOnlyList<int> skipped, CancellationToken ct);

/// <summary>
/// Links that can close the ring around a member that died or hung: the member before it connects to the one after it,
/// which answers with the blocks it already has, and the ring goes on without the dead one.
/// </summary>
public interface IRingRepair : IPeerLinks
{
    /// <summary>From now on, bypasses are answered by <paramref name="handler"/>.</summary>
    void AcceptBypasses(BypassHandler handler);
    /// <summary>Connects to <paramref name="rank"/> as its new left neighbour in place of <paramref name="skipped"/>;
    /// its have-map, or null when it refused. On success the link to it replaces those to the skipped ranks.</summary>
    Task<byte[]?> BypassAsync(int rank, IReadOnlyList<int> skipped, TimeSpan timeout, CancellationToken ct);
    /// <summary>Closes the links to and from <paramref name="rank"/>: what is pending on them fails.</summary>
    void Drop(int rank);
    /// <summary>How long the link to <paramref name="rank"/> has taken nothing while a send waited; zero when idle.</summary>
    TimeSpan SilenceTo(int rank);
    /// <summary>How long nothing has come from <paramref name="rank"/>.</summary>
    TimeSpan SilenceFrom(int rank);
    /// <summary>Sends a one-byte report back to the left neighbour <paramref name="rank"/>, against the blocks' flow;
    /// nothing when that link is gone.</summary>
    Task ReportAsync(int rank, byte code);
    /// <summary>The next report from the right neighbour <paramref name="rank"/>; fails when its link does.</summary>
    Task<int> ReadReportAsync(int rank, CancellationToken ct);
}

/// <summary>What the exchange did on one rank.</summary>
/// <param name="LeafBytesSent">Of <paramref name="BytesSent"/>, what went to leaves.</param>
/// <param name="BlocksRefetched">Own blocks fetched a second time for the leaves, because more than
/// <see cref="RingAllGather.LeafRetainBlocks"/> and the bytes allowed were already waiting for them.</param>
/// <param name="LeavesServed">With <c>awaitLeaves: false</c>: completes when this member has sent the leaves its share;
/// otherwise already complete. The counts are as of the return: with leaves still being served, what they are sent
/// after it is not in them.</param>
/// <param name="ShareSeconds">When this rank held the last block of its own share, from the exchange's start: against
/// <paramref name="Seconds"/>, whether the tier or the ring set the pace.</param>
/// <param name="Bypassed">Members this rank routed around (its right neighbour died or hung).</param>
/// <param name="RepairBytesFetched">Of <paramref name="BytesFetched"/>, what it fetched for the member after the dead
/// one: the dead member's blocks no one had, and those lost with it.</param>
/// <param name="HeldBytesAtMost">The grid's: the most bytes of its column's blocks this rank kept at once for its group's ring.</param>
/// <param name="RoutedAround">The ranks of the members this rank routed around, in the order it passed them.</param>
/// <param name="NeighbourDied">Whether a route around began with the neighbour's link failing (its process or node
/// died), rather than with its silence: a launcher has then seen a rank of the job end.</param>
public sealed record RingResult(int BlocksFetched, int BlocksReceived, int BlocksSent, long BytesFetched, long BytesReceived, long BytesSent, double Seconds = 0,
    long LeafBytesSent = 0, int BlocksRefetched = 0, Task? LeavesServed = null, double ShareSeconds = 0, int Bypassed = 0, long RepairBytesFetched = 0,
    long HeldBytesAtMost = 0, IReadOnlyList<int>? RoutedAround = null, bool NeighbourDied = false);

/// <summary>
/// A pipelined ring all-gather of blocks of stored segments. Rank r fetches its own share from the cache tier and
/// sends each block to r+1 as soon as it is fetched; every block it receives from r−1 it hands to its node and, unless
/// the block belongs to r+1 (whose ring it has then completed), forwards it. Every link carries (N−1)/N of the data,
/// all links at once, so the exchange takes about S/B whatever N is, while the cache tier sends each byte once.
/// <para>
/// Fetching, sending, receiving and writing run concurrently. Forwarded blocks are never held back (a receive that
/// waited for room to forward could close a cycle of waits around the ring); only fetching runs ahead by at most a few
/// blocks.
/// </para>
/// </summary>
public static class RingAllGather
{
    /// <summary>Own blocks fetched but not yet sent, at most; the fetch waits beyond that.</summary>
    private const int FetchAhead = 4;

    /// <summary>Own blocks being fetched from the cache tier at once.</summary>
    private const int FetchConcurrency = 1;

    /// <summary>The first wait before a member that refused a bypass is asked again; doubled each time up to half the
    /// peer timeout.</summary>
    private static readonly TimeSpan FirstBypassRetry = TimeSpan.FromMilliseconds(25);

    /// <summary>Receives kept posted on each link.</summary>
    public const int ReceiveWindow = 4;


    /// <summary>
    /// Own blocks kept in memory for the leaves however large they are; beyond this and
    /// <see cref="LeafRetainBytes"/> a block is fetched again when a leaf's turn comes, so a slow leaf holds neither the
    /// ring nor more than that much memory.
    /// </summary>
    public const int LeafRetainBlocks = 16;

    /// <summary>
    /// Bytes of own blocks kept for the leaves at most beyond <see cref="LeafRetainBlocks"/> blocks. A share of one
    /// ring is a few blocks; a share of a grid's group ring (a column's part, S/G) is many, and a leaf at a tenth of the
    /// rate takes it long after the member has it: without room to keep it the tier would send the leaf its copy
    /// again. 64 MB keeps a leaf's whole copy up to S = 64 MB × G (6.4 GB at 10,000 nodes).
    /// </summary>
    public const long LeafRetainBytes = 64L << 20;

    /// <summary>
    /// How long a right neighbour may take nothing while a block waits for it before it counts as dead or hung and is
    /// routed around. Its own right neighbour must agree (it has heard nothing from it for half as long), so a
    /// member that is only slow is not cut out.
    /// </summary>
    public static readonly TimeSpan PeerSilence = TimeSpan.FromSeconds(5);

    /// <summary>Blocks fetched from the tier at once for the member after a dead one.</summary>
    private const int RepairFetches = 4;

    /// <param name="fetch">Fills a message with one of this rank's own blocks (header and records) and returns its length.</param>
    /// <param name="deliver">Hands one block message to this node (the agent); called in order of arrival, one at a time.</param>
    /// <param name="stallTimeout">How long nothing may move (no block fetched, sent, received or delivered) before the
    /// exchange counts as stuck — a neighbour that died leaves its peers waiting, not failing. Default two minutes.</param>
    /// <param name="route">Who is in the ring and who is a leaf (the plan has one share per member); default: every rank
    /// in the ring, over the link's own neighbour calls. A route with leaves needs an <see cref="IPeerLinks"/>.</param>
    /// <param name="awaitLeaves">False: return once this node has everything and the ring is done, and leave the
    /// sends to the leaves running (<see cref="RingResult.LeavesServed"/>): a leaf takes as long as its link does, and
    /// this node need not wait for it to be ready.</param>
    /// <param name="ownInAnyOrder">Fills a message with the next of this rank's own blocks, whichever is ready (each
    /// once); the ring then takes its own share in that order instead of asking <paramref name="fetch"/> for each in
    /// turn, which it still does for blocks it resends (and for a leaf, those it no longer keeps).</param>
    /// <param name="leafRetainBytes">Bytes of own blocks kept for the leaves beyond <see cref="LeafRetainBlocks"/>
    /// blocks; default <see cref="LeafRetainBytes"/>.</param>
    public static async Task<RingResult> RunAsync(FanoutPlan plan, IRingLink link, Func<Block, Memory<byte>, CancellationToken, Task<int>> fetch,
        Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout = null, FanoutRoute? route = null,
        bool awaitLeaves = true, TimeSpan? peerSilence = null, Func<Memory<byte>, CancellationToken, Task<int>>? ownInAnyOrder = null,
        long leafRetainBytes = LeafRetainBytes)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        route ??= FanoutRoute.Ring(link.Size);
        if (route.Members.Count != plan.Ranks) throw new ArgumentException($"the plan has {plan.Ranks} shares for {route.Members.Count} ring members", nameof(route));
        var peers = link as IPeerLinks;
        if (route.HasLeaves && peers is null) throw new ArgumentException("routing around slow members needs links to every rank", nameof(link));
        var rank = link.Rank;
        var leaf = route.IsLeaf(rank);
        var position = route.PositionOf(rank);
        var right = leaf ? -1 : (position + 1) % plan.Ranks;
        var rightRank = leaf ? -1 : route.RightOf(rank);
        var leftRank = leaf ? -1 : route.LeftOf(rank);
        // Without leaves the neighbours are the link's own: exactly the ring as it always ran.
        Func<ReadOnlyMemory<byte>, CancellationToken, Task> sendRight = route.HasLeaves ? (m, t) => peers!.SendToAsync(rightRank, m, t) : link.SendAsync;
        Func<Memory<byte>, CancellationToken, Task<int>> receiveLeft = route.HasLeaves ? (b, t) => peers!.ReceiveFromAsync(leftRank, b, t) : link.ReceiveAsync;
        var leaves = leaf ? [] : route.Leaves;
        var size = plan.MaxMessageBytes;
        var failed = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var token = failed.Token;
        var outgoing = new Outbox();
        var toNode = Channel.CreateUnbounded<Message>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = false });
        var toLeaves = leaves.Select(_ => Channel.CreateUnbounded<LeafItem>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = true })).ToArray();
        var fetchSlots = new SemaphoreSlim(FetchAhead);
        long fetchedBytes = 0, receivedBytes = 0, sentBytes = 0, leafBytes = 0;
        int fetched = 0, received = 0, sent = 0, refetched = 0, retained = 0;
        long retainedBytes = 0;
        long progress = 0;
        double shareSeconds = 0;
        var expected = leaf ? plan.Shares.Sum(s => s.Count) : plan.BlocksReceivedBy(position);
        // A leaf counts what each member has sent it, so a member that owes it blocks and has gone silent is found.
        var fromMember = new int[leaf ? route.Members.Count : 0];
        var silentMember = leaf && peers is IRingRepair watched ? watched : null;
        var silence = peerSilence ?? PeerSilence;
        var limit = stallTimeout ?? TimeSpan.FromMinutes(2);
        var repair = !leaf && plan.Ranks > 1 && link.SendWindow == 1 ? link as IRingRepair : null;
        var ring = repair is null ? null : new Repair(plan, route, position, expected, peerSilence ?? PeerSilence);
        if (repair is not null) sendRight = (m, t) => repair.SendToAsync(ring!.RightRank, m, t);
        int bypassed = 0;
        var routedAround = new System.Collections.Concurrent.ConcurrentQueue<int>();
        var neighbourDied = false;
        long repairBytes = 0;
        var repairs = new System.Collections.Concurrent.ConcurrentBag<Task>();

        async Task FetchOwn()
        {
            if (leaf) return;
            await FetchShare();
            shareSeconds = clock.Elapsed.TotalSeconds;
        }

        async Task FetchShare()
        {
            var blocks = plan.Shares[position];
            // Taken in any order, a block a leaf is sent again is found by its first segment.
            var byFirst = ownInAnyOrder is not null && leaves.Count > 0 ? blocks.ToDictionary(b => b.First) : null;
            var next = -1;
            try
            {
                await Task.WhenAll(Enumerable.Range(0, FetchConcurrency).Select(_ => Task.Run(async () =>
                {
                    for (int i; (i = Interlocked.Increment(ref next)) < blocks.Count;)
                    {
                        await fetchSlots.WaitAsync(token);
                        // Kept for the leaves while few are waiting; otherwise their senders fetch it again in turn.
                        var keep = false;
                        if (leaves.Count > 0)
                        {
                            var blocksKept = Interlocked.Increment(ref retained);
                            var bytesKept = Interlocked.Add(ref retainedBytes, size);
                            keep = blocksKept <= LeafRetainBlocks || bytesKept <= leafRetainBytes;
                            if (!keep) { Interlocked.Decrement(ref retained); Interlocked.Add(ref retainedBytes, -size); }
                        }
                        var m = Message.Rent(size, holders: (plan.Ranks > 1 ? 2 : 1) + (keep ? leaves.Count : 0));
                        m.LeafHolders = keep ? leaves.Count : 0;
                        m.Length = ownInAnyOrder is null ? await fetch(blocks[i], m.Buffer, token) : await ownInAnyOrder(m.Buffer, token);
                        // The block is whichever the message holds: taken in any order, it need not be the i-th.
                        var first = ownInAnyOrder is null ? blocks[i].First : BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], plan).First;
                        (m.Share, m.First) = (position, first);
                        Interlocked.Increment(ref fetched);
                        Interlocked.Increment(ref progress);
                        Interlocked.Add(ref fetchedBytes, m.Length);
                        m.Own = true;
                        await toNode.Writer.WriteAsync(m, token);
                        var own = byFirst is null ? blocks[i] : byFirst[first];
                        foreach (var queue in toLeaves) await queue.Writer.WriteAsync(new LeafItem(keep ? m : null, own), token);
                        if (plan.Ranks > 1) outgoing.Add(m, own: true);
                        else fetchSlots.Release();
                    }
                }, token)));
            }
            finally
            {
                foreach (var queue in toLeaves) queue.Writer.TryComplete();
            }
        }

        // Several receives stay posted, so a neighbour's next block never waits for this rank to ask for it (with
        // a rendezvous protocol a large send cannot start before its receive is posted). They match in the order
        // posted, so they are taken in that order. A member forwards what it receives; a leaf receives only each
        // member's own share.
        async Task ReceiveFrom(Func<Memory<byte>, CancellationToken, Task<int>> receive, int total, int from, int? onlyShare)
        {
            var posted = new Queue<(Message Message, Task<int> Length)>();
            var asked = 0;
            void Post()
            {
                var m = Message.Rent(size, holders: 2);
                posted.Enqueue((m, receive(m.Buffer, token)));
                asked++;
            }
            while (asked < total && posted.Count < ReceiveWindow) Post();
            while (posted.Count > 0)
            {
                var (m, pending) = posted.Dequeue();
                m.Length = await pending;
                if (asked < total) Post();
                var (share, _, _, length) = BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], plan);
                if (length != m.Length) throw new InvalidDataException($"block message of {m.Length} bytes says {length}");
                if (onlyShare is { } own && share != own) throw new InvalidDataException($"rank {from} sent a block of share {share}; a leaf gets only share {own} from it");
                if (onlyShare is { } mine) Interlocked.Increment(ref fromMember[mine]);
                Interlocked.Increment(ref received);
                Interlocked.Add(ref receivedBytes, m.Length);
                Interlocked.Increment(ref progress);
                await toNode.Writer.WriteAsync(m, token);
                if (onlyShare is null && share != right) outgoing.Add(m, own: false);
                else m.Release();
            }
        }

        Task ReceiveAll() => leaf
            ? Task.WhenAll(route.Members.Select((member, k) => ReceiveFrom((b, t) => peers!.ReceiveFromAsync(member, b, t), plan.Shares[k].Count, member, k)))
            : repair is not null ? ReceiveRepairable()
            : plan.Ranks > 1 ? ReceiveFrom(receiveLeft, expected, leftRank, null) : Task.CompletedTask;

        // The ring that can be repaired: blocks are counted by what this rank still lacks, not by what one neighbour
        // sends, for when the left neighbour dies, the member before it connects past it and sends what is missing.
        async Task ReceiveRepairable()
        {
            repair.AcceptBypasses(ring!.AnswerBypassAsync(repair));
            var from = leftRank;
            while (true)
            {
                Exception failure;
                try
                {
                    await ReceiveLink(from);
                    return;
                }
                catch (Exception e) when (!token.IsCancellationRequested && e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException or OperationCanceledException)
                {
                    failure = e;
                }
                ring.LeftFailed = true;
                Repair.Swap swap;
                try { swap = await ring.Swaps.Reader.ReadAsync(token).AsTask().WaitAsync(limit, token); }
                catch (TimeoutException) { throw new IOException($"rank {from} stopped sending and no member connected past it within {limit.TotalSeconds:0} s", failure); }
                from = swap.Rank;
                // The new left neighbour first, then the map: a report made meanwhile goes to it, after the answer.
                ring.LeftRank = from;
                ring.LeftFailed = false;
                swap.Have.TrySetResult(ring.HaveMap());
                Interlocked.Increment(ref progress);
            }
        }

        async Task ReceiveLink(int from)
        {
            using var stopLink = CancellationTokenSource.CreateLinkedTokenSource(token);
            var posted = new Queue<(Message Message, Task<int> Length)>();
            try
            {
                while (!ring!.AllIn.Task.IsCompleted)
                {
                    while (posted.Count < Math.Min(ReceiveWindow, ring.Remaining))
                    {
                        var fresh = Message.Rent(size, holders: 2);
                        posted.Enqueue((fresh, peers!.ReceiveFromAsync(from, fresh.Buffer, stopLink.Token)));
                    }
                    var (m, pending) = posted.Peek();
                    if (await Task.WhenAny(pending, ring.AllIn.Task) != pending) break;
                    posted.Dequeue();
                    try { m.Length = await pending; }
                    catch
                    {
                        m.Release();
                        m.Release();
                        throw;
                    }
                    var (share, first, _, length) = BlockMessage.ReadHeader(m.Buffer.Span[..m.Length], plan);
                    if (length != m.Length) throw new InvalidDataException($"block message of {m.Length} bytes says {length}");
                    (m.Share, m.First) = (share, first);
                    if (!ring.Take(first))
                    {
                        m.Release();
                        m.Release();
                        continue;
                    }
                    Interlocked.Increment(ref received);
                    Interlocked.Add(ref receivedBytes, m.Length);
                    Interlocked.Increment(ref progress);
                    await toNode.Writer.WriteAsync(m, token);
                    if (ring.Forwards(share)) outgoing.Add(m, own: false);
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
        async Task Resend(Block block, bool dead)
        {
            // Marked had only once it is on its way to the node: the last block marked ends the receiving, and with it
            // the node's queue.
            var lacks = ring!.Lacks(block.First);
            var m = Message.Rent(size, holders: lacks ? 2 : 1);
            // A dead member's block enters the ring here as this rank's: the member before this one stops it, as it
            // stops this rank's own.
            m.Length = await fetch(dead ? block with { Share = position } : block, m.Buffer, token);
            (m.Share, m.First, m.Inject) = (block.Share, block.First, true);
            Interlocked.Increment(ref fetched);
            Interlocked.Add(ref fetchedBytes, m.Length);
            Interlocked.Add(ref repairBytes, m.Length);
            Interlocked.Increment(ref progress);
            if (lacks)
            {
                await toNode.Writer.WriteAsync(m, token);
                ring.Take(block.First);
            }
            outgoing.Add(m, own: true);
        }

        async Task<bool> BypassAsync(int gone, bool failed)
        {
            await ring!.Bypassing.WaitAsync(token);
            try { return await BypassOnce(gone, failed); }
            finally { ring.Bypassing.Release(); }
        }

        async Task<bool> BypassOnce(int gone, bool failed)
        {
            var asking = Stopwatch.StartNew();
            var wait = FirstBypassRetry;
            while (true)
            {
                // The sender and the report watcher may both find the neighbour gone: the second finds it passed.
                if (ring!.RightRank != gone) return true;
                var (next, have, skipped) = await ring.ConnectPastAsync(repair!, gone, token);
                if (have is not null)
                {
                    Interlocked.Increment(ref bypassed);
                    foreach (var k in skipped) routedAround.Enqueue(route!.Members[k]);
                    if (failed) Volatile.Write(ref neighbourDied, true);
                    Interlocked.Increment(ref progress);
                    // The new right neighbour may have everything already: its map says so, and the left neighbour
                    // must hear it from this rank as it would have from the report.
                    if (ring.RightHasAll) await repair!.ReportAsync(ring.LeftRank, Repair.ReportRightHasAll);
                    var again = ring.Resend(have, next);
                    // Fetched beside the ring's flow, a few at once: the new neighbour takes the blocks already queued
                    // meanwhile, and the tier's connections, not one block's round trip, set the repair's pace.
                    outgoing.Hold();
                    repairs.Add(Guard(Task.Run(async () =>
                    {
                        try
                        {
                            using var slots = new SemaphoreSlim(RepairFetches);
                            await Task.WhenAll(again.Select(async item =>
                            {
                                await slots.WaitAsync(token);
                                try { await Resend(item.Block, item.Dead); }
                                finally { slots.Release(); }
                            }));
                        }
                        finally { outgoing.Unhold(); }
                    }, token)));
                    return true;
                }
                if (!failed) return false;
                // The neighbour's link failed, yet the next member still hears it: it has just died and its last
                // bytes are still arriving there, or this rank was the one routed around. A few looks tell which.
                // Asked again soon, since the usual case is a death the next member has not yet read to the end; given up
                // on only after twice the silence that marks a peer gone, as before, since a rank that was itself routed
                // around stops being heard within that.
                if (asking.Elapsed >= 2 * ring.Silence) throw new IOException($"rank {gone} closed the ring's link and the next member still hears it: this rank was routed around");
                await Task.Delay(wait, token);
                wait = TimeSpan.FromTicks(Math.Min(wait.Ticks * 2, (ring.Silence / 2).Ticks));
            }
        }

        async Task SendAll(Task producers)
        {
            _ = producers.ContinueWith(_ => outgoing.Complete(), TaskScheduler.Default);
            // More than one send in flight hides the round trip with which a large message starts (its receiver's
            // go-ahead waits behind the data queued on the receiver's own uplink). Each send is accounted for as soon
            // as it completes, not when the next message comes: an own block's fetch slot must come back even when
            // nothing else is queued, or the fetch that would queue the next block waits for ever.
            using var window = new SemaphoreSlim(Math.Max(1, link.SendWindow));
            var inFlight = new List<Task>();
            // The slot first, then the block: a block taken while every slot is busy would be chosen before an own
            // block fetched meanwhile, and go ahead of it.
            while (true)
            {
                await window.WaitAsync(token);
                if (await outgoing.TakeAsync(token) is not { } m) break;
                // After a bypass, what was queued for the dead neighbour may be what its successor began with.
                if (ring is not null && !m.Inject && !ring.Forwards(m.Share))
                {
                    if (m.Own) fetchSlots.Release();
                    m.Release();
                    window.Release();
                    continue;
                }
                inFlight.RemoveAll(t => t.IsCompletedSuccessfully);
                inFlight.Add(ring is null ? SendOne(m) : SendWatched(m));
            }
            await Task.WhenAll(inFlight);
            await Task.WhenAll(repairs);

            async Task SendOne(Message m)
            {
                try
                {
                    await sendRight(m.Buffer[..m.Length], token);
                    Interlocked.Increment(ref sent);
                    Interlocked.Add(ref sentBytes, m.Length);
                    Interlocked.Increment(ref progress);
                    if (m.Own) fetchSlots.Release();
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
                    var to = ring!.RightRank;
                    ring.Sent(m.First);
                    var sending = sendRight(m.Buffer[..m.Length], token);
                    while (true)
                    {
                        if (await Task.WhenAny(sending, Task.Delay(ring.Silence / 4, token)) == sending)
                        {
                            if (sending.IsCompletedSuccessfully)
                            {
                                Interlocked.Increment(ref sent);
                                Interlocked.Add(ref sentBytes, m.Length);
                                Interlocked.Increment(ref progress);
                                break;
                            }
                            if (token.IsCancellationRequested) await sending;
                            await BypassAsync(to, failed: true);
                            break;
                        }
                        if (repair!.SilenceTo(to) >= ring.Silence && await BypassAsync(to, failed: false))
                        {
                            _ = sending.ContinueWith(t => t.Exception, TaskScheduler.Default);
                            break;
                        }
                    }
                }
                finally
                {
                    if (m.Own) fetchSlots.Release();
                    m.Release();
                    window.Release();
                }
            }
        }

        // One block at a time to each leaf: its own link is the limit, so more in flight would only queue there.
        // A leaf that fails, or takes nothing for the peer silence, is its own loss: its node fetches what it lacks, and
        // this member's exchange goes on (its blocks kept for that leaf are let go as they come).
        async Task SendToLeaf(int leafRank, ChannelReader<LeafItem> items)
        {
            byte[]? again = null;
            var gone = false;
            using var watching = new CancellationTokenSource();
            var watch = peers is IRingRepair links ? WatchLeaf(links, leafRank, watching.Token) : Task.CompletedTask;
            try
            {
                await foreach (var (m, block) in items.ReadAllAsync(token))
                {
                    var length = 0;
                    try
                    {
                        if (gone) continue;
                        if (m is not null)
                        {
                            await peers!.SendToAsync(leafRank, m.Buffer[..m.Length], token);
                            length = m.Length;
                        }
                        else
                        {
                            again ??= ArrayPool<byte>.Shared.Rent(size);
                            var fetchedAgain = await fetch(block, again, token);
                            Interlocked.Increment(ref refetched);
                            await peers!.SendToAsync(leafRank, again.AsMemory(0, fetchedAgain), token);
                            length = fetchedAgain;
                        }
                    }
                    catch (Exception) when (!token.IsCancellationRequested)
                    {
                        gone = true;
                        continue;
                    }
                    finally
                    {
                        if (m is not null)
                        {
                            if (Interlocked.Decrement(ref m.LeafHolders) == 0) { Interlocked.Decrement(ref retained); Interlocked.Add(ref retainedBytes, -size); }
                            m.Release();
                        }
                    }
                    Interlocked.Increment(ref sent);
                    Interlocked.Add(ref sentBytes, length);
                    Interlocked.Add(ref leafBytes, length);
                    Interlocked.Increment(ref progress);
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
        async Task WatchLeaf(IRingRepair links, int leafRank, CancellationToken stop)
        {
            try
            {
                while (true)
                {
                    await Task.Delay(silence / 4, stop);
                    if (links.SilenceTo(leafRank) < silence) continue;
                    links.Drop(leafRank);
                    return;
                }
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested) { }
        }

        async Task DeliverAll(Task producers)
        {
            _ = producers.ContinueWith(_ => toNode.Writer.TryComplete(), TaskScheduler.Default);
            await foreach (var m in toNode.Reader.ReadAllAsync(token))
            {
                await deliver(m.Buffer[..m.Length], token);
                Interlocked.Increment(ref progress);
                m.Release();
            }
        }

        // Reports against the flow: "I have everything" to the left neighbour, and "my right neighbour has everything"
        // when it says so. A member leaves only once its right neighbour and the one after it have everything, so
        // one that dies after the last block reached it, before it forwarded it, is still routed around.
        async Task WatchRight()
        {
            _ = ring!.AllIn.Task.ContinueWith(_ => repair!.ReportAsync(ring.LeftRank, Repair.ReportHasAll), TaskScheduler.Default);
            Task<int>? reading = null;
            var readingFrom = -1;
            while (true)
            {
                if (ring.RightHasAll && ring.NextHasAll) return;
                var right = ring.RightRank;
                if (reading is null || readingFrom != right)
                {
                    // A read left on a link a bypass dropped fails there; nothing waits for it.
                    if (reading is not null) _ = reading.ContinueWith(t => t.Exception, TaskScheduler.Default);
                    (reading, readingFrom) = (repair!.ReadReportAsync(right, token), right);
                }
                if (await Task.WhenAny(reading, Task.Delay(ring.Silence, token)) != reading)
                {
                    token.ThrowIfCancellationRequested();
                    // Not even a heartbeat for the whole silence: the right neighbour is stopped or its node is gone with
                    // the link still open. Its left neighbour may have nothing left to send it, so no send would tell.
                    if (ring.RightRank == right) await BypassAsync(right, failed: false);
                    continue;
                }
                int code;
                try { code = await reading; }
                catch (Exception e) when (!token.IsCancellationRequested && e is IOException or System.Net.Sockets.SocketException or ObjectDisposedException)
                {
                    reading = null;
                    if (ring.RightRank != right) continue;
                    await BypassAsync(right, failed: true);
                    continue;
                }
                reading = null;
                if (ring.RightRank != right || code == Repair.ReportAlive) continue;
                if (code == Repair.ReportHasAll && !ring.RightHasAll)
                {
                    ring.RightHasAll = true;
                    await repair!.ReportAsync(ring.LeftRank, Repair.ReportRightHasAll);
                }
                else if (code == Repair.ReportRightHasAll) ring.NextHasAll = true;
                else if (code != Repair.ReportHasAll) throw new InvalidDataException($"rank {right} sent report {code}");
                if (ring.RightHasAll && ring.NextHasAll) return;
            }
        }

        // To the left neighbour, against the flow, while this member is in the exchange: what tells it this member is
        // alive when it has nothing left to send here.
        async Task Heartbeat(CancellationToken stop)
        {
            try
            {
                while (true)
                {
                    await Task.Delay(ring!.Silence / 4, stop);
                    await repair!.ReportAsync(ring.LeftRank, Repair.ReportAlive);
                }
            }
            catch (OperationCanceledException) { }
        }

        var fetching = Guard(FetchOwn());
        var receiving = Guard(ReceiveAll());
        var producers = Task.WhenAll(fetching, receiving);
        // A bypass may come after this rank's own blocks and forwarding are done (its right neighbour hangs once it
        // holds everything): the sender stays until this member leaves, so what the bypass resends goes out.
        var watchEnded = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var sending = Guard(SendAll(ring is null ? producers : Task.WhenAll(producers, watchEnded.Task)));
        var delivering = Guard(DeliverAll(producers));
        var leafSending = Guard(Task.WhenAll(leaves.Select((l, i) => SendToLeaf(l, toLeaves[i].Reader))));
        var watching = ring is null ? Task.CompletedTask : Guard(WatchRight());
        _ = watching.ContinueWith(_ => watchEnded.TrySetResult(), TaskScheduler.Default);
        var all = awaitLeaves ? Task.WhenAll(fetching, receiving, sending, delivering, watching, leafSending) : Task.WhenAll(fetching, receiving, sending, delivering, watching);
        // The token source lives until the leaves are served, which may be after this method returns.
        _ = leafSending.ContinueWith(_ => all.ContinueWith(_ => failed.Dispose(), TaskScheduler.Default), TaskScheduler.Default);
        using var beating = CancellationTokenSource.CreateLinkedTokenSource(token);
        var heartbeat = ring is null ? Task.CompletedTask : Heartbeat(beating.Token);
        try
        {
            // A leaf looks for a silent member a few times per peer silence; the stall is still no progress for the limit.
            var tick = silentMember is null ? limit : TimeSpan.FromTicks(Math.Min(limit.Ticks, silence.Ticks / 4));
            var moved = clock.Elapsed;
            for (var seen = -1L; ;)
            {
                if (await Task.WhenAny(all, Task.Delay(tick, token).ContinueWith(_ => { }, TaskScheduler.Default)) == all) break;
                if (token.IsCancellationRequested) break;
                if (silentMember is not null)
                    for (var k = 0; k < fromMember.Length; k++)
                        if (Volatile.Read(ref fromMember[k]) < plan.Shares[k].Count && silentMember.SilenceFrom(route.Members[k]) >= silence)
                        {
                            // The member hangs or is gone: its share will not come over this ring. The leaf's node fetches
                            // what it lacks, as a node whose exchange failed; the others do not wait for it.
                            failed.Cancel();
                            throw new TimeoutException($"rank {route.Members[k]} sent this leaf (rank {rank}) nothing for {silence.TotalSeconds:0.#} s " +
                                                       $"with {plan.Shares[k].Count - Volatile.Read(ref fromMember[k])} of its blocks still to come");
                        }
                var now = Interlocked.Read(ref progress);
                if (now != seen)
                {
                    (seen, moved) = (now, clock.Elapsed);
                    continue;
                }
                if (clock.Elapsed - moved >= limit)
                {
                    failed.Cancel();
                    var from = leaf ? $"ranks {string.Join(",", route.Members)}" : $"rank {leftRank}";
                    throw new TimeoutException($"the fan-out ring stalled on rank {rank}: nothing moved for {limit.TotalSeconds:0} s " +
                                               $"(received {Volatile.Read(ref received)} of {expected} blocks from {from})");
                }
            }
            await all;
        }
        finally
        {
            beating.Cancel();
            await heartbeat;
        }
        return new RingResult(fetched, received, sent, fetchedBytes, receivedBytes, sentBytes, clock.Elapsed.TotalSeconds, leafBytes, refetched,
            awaitLeaves ? Task.CompletedTask : leafSending, shareSeconds, bypassed, repairBytes,
            RoutedAround: routedAround.IsEmpty ? null : [.. routedAround], NeighbourDied: Volatile.Read(ref neighbourDied));

        // The first failure cancels the others, so the exchange ends at once and the caller can fall back.
        async Task Guard(Task task)
        {
            try { await task; }
            catch
            {
                failed.Cancel();
                throw;
            }
        }
    }

    /// <summary>
    /// Blocks waiting for the right neighbour: this rank's own blocks before the forwarded ones, each kind in arrival
    /// order. An own block is data entering the ring, with every link still ahead of it. Queued behind forwarded blocks,
    /// the shares entered late: in the lab (4 nodes, 25 Mbit/s, 256 MB) the downlinks ran at 19–22 Mbit/s and then for
    /// the last 20 s one node received while the others idled. Forwarded blocks keep arrival order: sending those with
    /// fewest hops behind them first too left the blocks on their last hop waiting on every link until the end, and at
    /// 8 and 16 nodes one node then received alone for seconds (docs/benchmarks.md, "The ring's order").
    /// </summary>
    internal sealed class Outbox
    {
        private readonly Queue<Message> _own = new(), _forwarded = new();
        private readonly SemaphoreSlim _ready = new(0);
        private bool _completed;
        private int _holds;

        /// <summary>Blocks are still coming though the producers are done (a bypass fetching): the end waits.</summary>
        public void Hold()
        {
            lock (_own) _holds++;
        }

        public void Unhold()
        {
            lock (_own) _holds--;
            _ready.Release();
        }

        public void Add(Message m, bool own)
        {
            lock (_own) (own ? _own : _forwarded).Enqueue(m);
            _ready.Release();
        }

        /// <summary>No more blocks: <see cref="TakeAsync"/> answers null once the queued ones are taken.</summary>
        public void Complete()
        {
            lock (_own) _completed = true;
            _ready.Release();
        }

        /// <summary>Each Add, Unhold and the Complete release the semaphore once; a wake that finds neither a block nor
        /// the end (an Unhold while others still hold) waits again.</summary>
        public async ValueTask<Message?> TakeAsync(CancellationToken ct)
        {
            while (true)
            {
                await _ready.WaitAsync(ct);
                lock (_own)
                {
                    if (_own.TryDequeue(out var m) || _forwarded.TryDequeue(out m)) return m;
                    if (_completed && _holds == 0) return null;
                }
            }
        }
    }

    /// <summary>
    /// One member's view of a ring that routes around dead members: what it has (by block), what it sent to its right
    /// neighbour, which shares it does not forward (its right neighbour's, and those of the dead members before it).
    /// </summary>
    private sealed class Repair
    {
        private readonly FanoutPlan _plan;
        private readonly FanoutRoute _route;
        private readonly int _position;
        private readonly bool[] _have;
        private readonly Dictionary<int, Block> _blocks = [];
        private readonly HashSet<int> _sent = [];
        private readonly bool[] _stop;
        private readonly HashSet<int> _dead = [];
        private int _rightPosition, _remaining, _leftRank;
        private readonly Lock _lock = new();

        public Repair(FanoutPlan plan, FanoutRoute route, int position, int expected, TimeSpan silence)
        {
            (_plan, _route, _position, Silence) = (plan, route, position, silence);
            _have = new bool[plan.Manifest.Segments.Count];
            foreach (var block in plan.Shares.SelectMany(b => b)) _blocks[block.First] = block;
            // This rank's own share is never sent to it: to a member that connects past its neighbour, it is had.
            foreach (var block in plan.Shares[position]) _have[block.First] = true;
            _stop = new bool[plan.Ranks];
            _rightPosition = (position + 1) % plan.Ranks;
            _stop[_rightPosition] = true;
            _leftRank = route.LeftOf(route.Members[position]);
            _remaining = expected;
            if (expected == 0) AllIn.TrySetResult();
        }

        public const byte ReportHasAll = 1, ReportRightHasAll = 2, ReportAlive = 3;
        /// <summary>One bypass at a time.</summary>
        public SemaphoreSlim Bypassing { get; } = new(1);
        /// <summary>What the right neighbour reported: it has everything; and so does the member after it.</summary>
        public volatile bool RightHasAll, NextHasAll;

        public TimeSpan Silence { get; }
        /// <summary>Completes when this rank has every block but its own share.</summary>
        public TaskCompletionSource AllIn { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
        /// <summary>Members that connected past the left neighbour, waiting for this rank's have-map.</summary>
        public Channel<Swap> Swaps { get; } = Channel.CreateUnbounded<Swap>();
        public volatile bool LeftFailed;
        public int LeftRank { get => Volatile.Read(ref _leftRank); set => Volatile.Write(ref _leftRank, value); }
        public int RightRank { get { lock (_lock) return _route.Members[_rightPosition]; } }
        public int Remaining => Volatile.Read(ref _remaining);

        /// <summary>Marks a block had; false when it already was (or is this rank's own). Throws for a block not in the
        /// plan. A message's share is the member that put it into the ring: after a bypass, not always the block's.</summary>
        public bool Take(int first)
        {
            lock (_lock)
            {
                if (!_blocks.ContainsKey(first)) throw new InvalidDataException($"block message at segment {first} is not a block of the plan");
                if (_have[first]) return false;
                _have[first] = true;
                if (--_remaining == 0) AllIn.TrySetResult();
                return true;
            }
        }

        public bool Lacks(int first)
        {
            lock (_lock) return !_have[first];
        }

        public bool Forwards(int share)
        {
            lock (_lock) return !_stop[share];
        }

        public void Sent(int first)
        {
            lock (_lock) _sent.Add(first);
        }

        /// <summary>One bit per segment, set at the first segment of every block this rank has or needs not; then a byte
        /// of the reports this rank has sent its left neighbour so far (a new one learns them here).</summary>
        public byte[] HaveMap()
        {
            var map = new byte[(_have.Length + 7) / 8 + 1];
            lock (_lock)
            {
                for (var i = 0; i < _have.Length; i++)
                    if (_have[i]) map[i >> 3] |= (byte)(1 << (i & 7));
                map[^1] = (byte)((AllIn.Task.IsCompleted ? ReportHasAll : 0) | (RightHasAll ? ReportRightHasAll : 0));
            }
            return map;
        }

        /// <summary>
        /// Connects to the members after <paramref name="gone"/> in ring order, each that does not answer counted dead
        /// too. Returns the member that answered, its have-map (null: it refused), and the positions passed over.
        /// </summary>
        public async Task<(int Next, byte[]? Have, List<int> Skipped)> ConnectPastAsync(IRingRepair links, int gone, CancellationToken ct)
        {
            List<int> skipped;
            lock (_lock) skipped = [_rightPosition];
            if (_route.Members[skipped[0]] != gone) throw new InvalidOperationException($"rank {gone} is not this rank's right neighbour");
            for (var next = (skipped[0] + 1) % _plan.Ranks; next != _position; next = (next + 1) % _plan.Ranks)
            {
                byte[]? have;
                try { have = await links.BypassAsync(_route.Members[next], [.. skipped.Select(k => _route.Members[k])], TimeSpan.FromSeconds(5), ct); }
                catch (Exception e) when (e is System.Net.Sockets.SocketException or IOException or TimeoutException)
                {
                    skipped.Add(next);
                    continue;
                }
                if (have is null) return (next, null, skipped);
                if (have.Length != (_have.Length + 7) / 8 + 1) throw new InvalidDataException($"rank {_route.Members[next]} answered a have-map of {have.Length} bytes");
                lock (_lock)
                {
                    RightHasAll = (have[^1] & ReportHasAll) != 0;
                    NextHasAll = (have[^1] & ReportRightHasAll) != 0;
                    _rightPosition = next;
                    foreach (var k in skipped) _dead.Add(k);
                    foreach (var k in skipped) _stop[k] = true;
                    _stop[next] = true;
                }
                return (next, have, skipped);
            }
            throw new IOException($"rank {gone} and every member after it are gone: no ring is left to route through");
        }

        /// <summary>
        /// What the new right neighbour lacks that no one else will send it: blocks this rank sent into the dead member,
        /// and the dead members' own blocks that never came round. Everything else reaches it in the ring's flow.
        /// </summary>
        public List<(Block Block, bool Dead)> Resend(byte[] have, int next)
        {
            var again = new List<(Block, bool)>();
            lock (_lock)
                for (var k = 0; k < _plan.Ranks; k++)
                {
                    if (k == next) continue;
                    foreach (var block in _plan.Shares[k])
                        if ((have[block.First >> 3] & (1 << (block.First & 7))) == 0 && (_sent.Contains(block.First) || _dead.Contains(k)))
                            again.Add((block, _dead.Contains(k)));
                }
            return again;
        }

        /// <summary>Answers a member that connects past this rank's left neighbour: refused while that neighbour is heard.</summary>
        public BypassHandler AnswerBypassAsync(IRingRepair links) => async (rank, skipped, ct) =>
        {
            var left = LeftRank;
            if (!skipped.Contains(left)) return null;
            if (!LeftFailed && !AllIn.Task.IsCompleted && links.SilenceFrom(left) < Silence / 2) return null;
            var swap = new Swap(rank);
            Swaps.Writer.TryWrite(swap);
            links.Drop(left);
            // A rank that already has everything answers at once: its receiving is over.
            await Task.WhenAny(swap.Have.Task, AllIn.Task).WaitAsync(ct);
            if (!swap.Have.Task.IsCompleted)
            {
                LeftRank = rank;
                return HaveMap();
            }
            return await swap.Have.Task;
        };

        public sealed record Swap(int Rank)
        {
            public TaskCompletionSource<byte[]> Have { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
        }
    }

    /// <summary>An own block for a leaf: the message while it is kept, else null and the block is fetched again.</summary>
    private readonly record struct LeafItem(Message? Message, Block Block);

    /// <summary>A pooled message buffer shared by the node writer and the sender; returned when both are done.</summary>
    internal sealed class Message
    {
        private int _holders;
        public byte[] Array = [];
        public Memory<byte> Buffer => Array;
        public int Length;
        public bool Own;
        /// <summary>The block's share and first segment (its identity in the plan).</summary>
        public int Share, First;
        /// <summary>Sent to a new right neighbour after a bypass, whatever its share.</summary>
        public bool Inject;
        /// <summary>Leaves this message still has to reach.</summary>
        public int LeafHolders;

        public static Message Rent(int size, int holders) => new() { Array = ArrayPool<byte>.Shared.Rent(size), _holders = holders };

        public void Release()
        {
            if (Interlocked.Decrement(ref _holders) == 0) ArrayPool<byte>.Shared.Return(Array);
        }
    }
}
