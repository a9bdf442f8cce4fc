using System.Buffers;
using System.Threading.Channels;

namespace Hpc.Jobs.Fanout;

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

/// <summary>What the exchange did on one rank.</summary>
/// <param name="LeafBytesSent">Of <paramref name="BytesSent"/>, what went to leaves.</param>
/// <param name="BlocksRefetched">Own blocks fetched a second time for the leaves, because more than
/// <see cref="RingAllGather.LeafRetainBlocks"/> were already waiting for them.</param>
/// <param name="LeavesServed">With <c>awaitLeaves: false</c>: completes when this member has sent the leaves its share
/// (the counts above are final then); otherwise already complete.</param>
/// <param name="ShareSeconds">When this rank held the last block of its own share, from the exchange's start: against
/// <paramref name="Seconds"/>, whether the tier or the ring set the pace.</param>
public sealed record RingResult(int BlocksFetched, int BlocksReceived, int BlocksSent, long BytesFetched, long BytesReceived, long BytesSent, double Seconds = 0,
    long LeafBytesSent = 0, int BlocksRefetched = 0, Task? LeavesServed = null, double ShareSeconds = 0);

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

    /// <summary>Receives kept posted on each link.</summary>
    public const int ReceiveWindow = 4;


    /// <summary>
    /// Own blocks kept in memory for the leaves at most; beyond that a block is fetched again when a leaf's turn comes,
    /// so a slow leaf holds neither the ring nor more than this much memory.
    /// </summary>
    public const int LeafRetainBlocks = 16;

    /// <param name="fetch">Fills a message with one of this rank's own blocks (header and records) and returns its length.</param>
    /// <param name="deliver">Hands one block message to this node (the agent); called in order of arrival, one at a time.</param>
    /// <param name="stallTimeout">How long nothing may move (no block fetched, sent, received or delivered) before the
    /// exchange counts as stuck — a neighbour that died leaves its peers waiting, not failing. Default two minutes.</param>
    /// <param name="route">Who is in the ring and who is a leaf (the plan has one share per member); default: every rank
    /// in the ring, over the link's own neighbour calls. A route with leaves needs an <see cref="IPeerLinks"/>.</param>
    /// <param name="awaitLeaves">False: return once this node has everything and the ring is done, and leave the
    /// sends to the leaves running (<see cref="RingResult.LeavesServed"/>): a leaf takes as long as its link does, and
    /// this node need not wait for it to be ready.</param>
    public static async Task<RingResult> RunAsync(FanoutPlan plan, IRingLink link, Func<Block, Memory<byte>, CancellationToken, Task<int>> fetch,
        Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout = null, FanoutRoute? route = null,
        bool awaitLeaves = true)
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
        long progress = 0;
        double shareSeconds = 0;
        var expected = leaf ? plan.Shares.Sum(s => s.Count) : plan.BlocksReceivedBy(position);

        async Task FetchOwn()
        {
            if (leaf) return;
            await FetchShare();
            shareSeconds = clock.Elapsed.TotalSeconds;
        }

        async Task FetchShare()
        {
            var blocks = plan.Shares[position];
            var next = -1;
            try
            {
                await Task.WhenAll(Enumerable.Range(0, FetchConcurrency).Select(_ => Task.Run(async () =>
                {
                    for (int i; (i = Interlocked.Increment(ref next)) < blocks.Count;)
                    {
                        await fetchSlots.WaitAsync(token);
                        // Kept for the leaves while few are waiting; otherwise their senders fetch it again in turn.
                        var keep = leaves.Count > 0 && Interlocked.Increment(ref retained) <= LeafRetainBlocks;
                        if (leaves.Count > 0 && !keep) Interlocked.Decrement(ref retained);
                        var m = Message.Rent(size, holders: (plan.Ranks > 1 ? 2 : 1) + (keep ? leaves.Count : 0));
                        m.LeafHolders = keep ? leaves.Count : 0;
                        m.Length = await fetch(blocks[i], m.Buffer, token);
                        Interlocked.Increment(ref fetched);
                        Interlocked.Increment(ref progress);
                        Interlocked.Add(ref fetchedBytes, m.Length);
                        m.Own = true;
                        await toNode.Writer.WriteAsync(m, token);
                        foreach (var queue in toLeaves) await queue.Writer.WriteAsync(new LeafItem(keep ? m : null, blocks[i]), token);
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
            : plan.Ranks > 1 ? ReceiveFrom(receiveLeft, expected, leftRank, null) : Task.CompletedTask;

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
                inFlight.RemoveAll(t => t.IsCompletedSuccessfully);
                inFlight.Add(SendOne(m));
            }
            await Task.WhenAll(inFlight);

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
        }

        // One block at a time to each leaf: its own link is the limit, so more in flight would only queue there.
        async Task SendToLeaf(int leafRank, ChannelReader<LeafItem> items)
        {
            byte[]? again = null;
            try
            {
                await foreach (var (m, block) in items.ReadAllAsync(token))
                {
                    int length;
                    if (m is not null)
                    {
                        length = m.Length;
                        await peers!.SendToAsync(leafRank, m.Buffer[..length], token);
                        if (Interlocked.Decrement(ref m.LeafHolders) == 0) Interlocked.Decrement(ref retained);
                        m.Release();
                    }
                    else
                    {
                        again ??= ArrayPool<byte>.Shared.Rent(size);
                        length = await fetch(block, again, token);
                        Interlocked.Increment(ref refetched);
                        await peers!.SendToAsync(leafRank, again.AsMemory(0, length), token);
                    }
                    Interlocked.Increment(ref sent);
                    Interlocked.Add(ref sentBytes, length);
                    Interlocked.Add(ref leafBytes, length);
                    Interlocked.Increment(ref progress);
                }
            }
            finally
            {
                if (again is not null) ArrayPool<byte>.Shared.Return(again);
            }
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

        var fetching = Guard(FetchOwn());
        var receiving = Guard(ReceiveAll());
        var producers = Task.WhenAll(fetching, receiving);
        var sending = Guard(SendAll(producers));
        var delivering = Guard(DeliverAll(producers));
        var leafSending = Guard(Task.WhenAll(leaves.Select((l, i) => SendToLeaf(l, toLeaves[i].Reader))));
        var all = awaitLeaves ? Task.WhenAll(fetching, receiving, sending, delivering, leafSending) : Task.WhenAll(fetching, receiving, sending, delivering);
        // The token source lives until the leaves are served, which may be after this method returns.
        _ = leafSending.ContinueWith(_ => all.ContinueWith(_ => failed.Dispose(), TaskScheduler.Default), TaskScheduler.Default);
        var limit = stallTimeout ?? TimeSpan.FromMinutes(2);
        for (var seen = -1L; ;)
        {
            if (await Task.WhenAny(all, Task.Delay(limit, token).ContinueWith(_ => { }, TaskScheduler.Default)) == all) break;
            if (token.IsCancellationRequested) break;
            var now = Interlocked.Read(ref progress);
            if (now == seen)
            {
                failed.Cancel();
                var from = leaf ? $"ranks {string.Join(",", route.Members)}" : $"rank {leftRank}";
                throw new TimeoutException($"the fan-out ring stalled on rank {rank}: nothing moved for {limit.TotalSeconds:0} s " +
                                           $"(received {Volatile.Read(ref received)} of {expected} blocks from {from})");
            }
            seen = now;
        }
        await all;
        return new RingResult(fetched, received, sent, fetchedBytes, receivedBytes, sentBytes, clock.Elapsed.TotalSeconds, leafBytes, refetched,
            awaitLeaves ? Task.CompletedTask : leafSending, shareSeconds);

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

        /// <summary>Each Add and the Complete release the semaphore once, so every wake finds a block or the end.</summary>
        public async ValueTask<Message?> TakeAsync(CancellationToken ct)
        {
            await _ready.WaitAsync(ct);
            lock (_own)
                return _own.TryDequeue(out var m) || _forwarded.TryDequeue(out m) ? m : _completed ? null
                    : throw new InvalidOperationException("woken without a block or the end");
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
        /// <summary>Leaves this message still has to reach.</summary>
        public int LeafHolders;

        public static Message Rent(int size, int holders) => new() { Array = ArrayPool<byte>.Shared.Rent(size), _holders = holders };

        public void Release()
        {
            if (Interlocked.Decrement(ref _holders) == 0) ArrayPool<byte>.Shared.Return(Array);
        }
    }
}
