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
public static partial class RingAllGather
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
        // The run checks its arguments in its constructor: called inside this async method, bad ones fault the task rather than throw.
        return await new RingRun(plan, link, fetch, deliver, ct, stallTimeout, route, awaitLeaves, peerSilence, ownInAnyOrder, leafRetainBytes).RunAsync();
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
