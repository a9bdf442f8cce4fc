using System.Buffers;
using System.Diagnostics;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// One rank's side of the grid exchange (<see cref="RingGrid"/>): its column's ring and its group's ring, run at once.
/// What the column ring brings this node is kept until the group ring takes it as this member's own blocks, so the
/// group ring starts on the first block the column delivers; everything else reaches the node over the group ring.
/// Each ring is a <see cref="RingAllGather"/> of its own, and is repaired as one: a member that dies is routed around
/// in both, and what only it held is fetched from the tier by its neighbours there.
/// </summary>
public static class GridAllGather
{
    /// <param name="columnLink">This rank's link in its column's ring; null for a member beyond the grid's positions.</param>
    /// <param name="fetch">Fills a message with a block of the given plan from the cache tier (see <see cref="BlockFetcher"/>).</param>
    /// <param name="deliver">Hands one block message of the given plan to this node; called one at a time.</param>
    /// <param name="groupRoute">The group's ring with the leaves it serves (<see cref="GridRoute.GroupRoute"/>); null:
    /// no leaves. This member then returns once its node has everything, and its
    /// <see cref="RingResult.LeavesServed"/> completes when the leaves have its share: the group's link must stay open
    /// until then.</param>
    /// <param name="groupRanks">The caller's rank of each rank of the group's ring, for <see cref="RingResult.RoutedAround"/>;
    /// null: the same.</param>
    /// <param name="columnRanks">The same for the column's ring.</param>
    public static async Task<RingResult> RunAsync(RingGrid grid, int rank, FanoutPlan groupPlan, IReadOnlyList<FanoutPlan> columnPlans,
        IRingLink groupLink, IRingLink? columnLink, Func<FanoutPlan, Block, Memory<byte>, CancellationToken, Task<int>> fetch,
        Func<ReadOnlyMemory<byte>, FanoutPlan, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout = null,
        TimeSpan? peerSilence = null, RingRoute? groupRoute = null, long leafRetainBytes = RingAllGather.LeafRetainBytes,
        IReadOnlyList<int>? groupRanks = null, IReadOnlyList<int>? columnRanks = null)
    {
        var clock = Stopwatch.StartNew();
        var (_, position) = grid.PlaceOf(rank);
        var columnPlan = position < grid.Positions ? columnPlans[position] : null;
        if ((columnPlan is null) != (columnLink is null)) throw new ArgumentException("a rank at a grid position needs its column's link, and only such a rank", nameof(columnLink));
        using var failed = CancellationTokenSource.CreateLinkedTokenSource(ct);
        using var column = new ColumnBlocks(columnPlan is null ? null : groupPlan.Shares[position]);
        using var writes = new SemaphoreSlim(1);
        long tierBytes = 0;
        var tierBlocks = 0;
        // A member lost in either ring is word for the other: the grid's survivors outside its group and column hear it too.
        var lost = new MemberLostWord();

        async Task<int> FromTier(FanoutPlan plan, Block block, Memory<byte> message, CancellationToken token)
        {
            var length = await fetch(plan, block, message, token);
            Interlocked.Add(ref tierBytes, length);
            Interlocked.Increment(ref tierBlocks);
            return length;
        }

        // Both rings deliver, each in its own order; the node takes one message at a time.
        async ValueTask Deliver(ReadOnlyMemory<byte> message, FanoutPlan plan, CancellationToken token)
        {
            await writes.WaitAsync(token);
            try { await deliver(message, plan, token); }
            finally { writes.Release(); }
        }

        async Task<RingResult> Run(Func<Task<RingResult>> ring)
        {
            try { return await ring(); }
            catch
            {
                // One ring failing fails the other: the group ring would wait for the column's blocks, the column's
                // neighbours for a member that no longer takes part.
                column.Fail();
                await failed.CancelAsync();
                throw;
            }
        }

        // The column ring fetches its share from the tier only while few of its blocks wait for the group ring: it
        // moves a G-th of what the group ring moves and would otherwise run ahead of it, keeping the whole column's
        // part in memory.
        var columnRing = columnPlan is null
            ? Task.FromResult(new RingResult(0, 0, 0, 0, 0, 0))
            : Run(() => RingAllGather.RunAsync(columnPlan, columnLink!, async (block, message, token) =>
                {
                    await column.WaitForRoomAsync(token);
                    return await FromTier(columnPlan, block, message, token);
                },
                async (message, token) =>
                {
                    column.Keep(message);
                    await Deliver(message, columnPlan, token);
                }, failed.Token, stallTimeout, peerSilence: peerSilence, memberLost: lost));
        // The group ring puts in the column's blocks as they arrive, in any order; a block it resends past a dead
        // member, its own or another's, comes from the tier.
        var groupRing = Run(() => RingAllGather.RunAsync(groupPlan, groupLink, (block, message, token) => FromTier(groupPlan, block, message, token),
            // This member's own blocks reached the node over the column.
            (message, token) => column.Holds(message) ? ValueTask.CompletedTask : Deliver(message, groupPlan, token),
            failed.Token, stallTimeout, groupRoute, awaitLeaves: false, peerSilence: peerSilence, ownInAnyOrder: columnPlan is null ? null : column.NextAsync,
            leafRetainBytes: leafRetainBytes, memberLost: lost));
        var results = await Task.WhenAll(columnRing, groupRing);
        var (c, g) = (results[0], results[1]);
        return new RingResult(tierBlocks, c.BlocksReceived + g.BlocksReceived, c.BlocksSent + g.BlocksSent, Interlocked.Read(ref tierBytes),
            c.BytesReceived + g.BytesReceived, c.BytesSent + g.BytesSent, clock.Elapsed.TotalSeconds,
            g.LeafBytesSent, g.BlocksRefetched, g.LeavesServed,
            ShareSeconds: columnPlan is null ? 0 : c.ShareSeconds, Bypassed: c.Bypassed + g.Bypassed, RepairBytesFetched: c.RepairBytesFetched + g.RepairBytesFetched,
            HeldBytesAtMost: column.HeldBytesAtMost,
            RoutedAround: c.RoutedAround is null && g.RoutedAround is null ? null
                : [.. (c.RoutedAround ?? []).Select(r => columnRanks?[r] ?? r), .. (g.RoutedAround ?? []).Select(r => groupRanks?[r] ?? r)],
            NeighbourDied: c.NeighbourDied || g.NeighbourDied, MemberLost: c.MemberLost || g.MemberLost,
            RepairBytesResent: c.RepairBytesResent + g.RepairBytesResent, RoutedAroundAt: Math.Max(c.RoutedAroundAt, g.RoutedAroundAt));
    }

    /// <summary>
    /// The blocks of this member's column, as the column ring brings them, until the group ring takes each once as one
    /// of this member's own blocks there (whichever arrived first).
    /// </summary>
    private sealed class ColumnBlocks : IDisposable
    {
        /// <summary>Bytes kept for the group ring at most before this member fetches more of its column's share from the
        /// tier: about what the ring's own buffers hold (a few blocks of up to 1 MB each way).</summary>
        public const long KeptBytes = 8 << 20;

        private readonly Dictionary<int, Block> _asGroupBlock = [];
        private readonly Channel<(int First, byte[] Buffer, int Length)> _ready =
            Channel.CreateUnbounded<(int, byte[], int)>(new UnboundedChannelOptions { SingleReader = true });
        private readonly HashSet<int> _kept = [];
        private readonly Lock _lock = new();
        private readonly SemaphoreSlim _room = new(0);
        private int _waiting, _roomWaiters;
        private long _held, _heldAtMost;

        public long HeldBytesAtMost => Interlocked.Read(ref _heldAtMost);
        private volatile bool _failed;

        /// <param name="share">This member's share of its group's ring: its column's blocks, as the group plan has them.</param>
        public ColumnBlocks(IReadOnlyList<Block>? share)
        {
            foreach (var block in share ?? []) _asGroupBlock[block.First] = block;
        }

        /// <summary>Whether a block message is one of this column's (its first segment starts one of the column's blocks).</summary>
        public bool Holds(ReadOnlyMemory<byte> message) => _asGroupBlock.ContainsKey(FirstOf(message.Span));

        private static int FirstOf(ReadOnlySpan<byte> message) => System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(message[8..]);

        public void Keep(ReadOnlyMemory<byte> message)
        {
            var first = FirstOf(message.Span);
            if (!_asGroupBlock.ContainsKey(first)) return;
            lock (_lock)
                if (!_kept.Add(first)) return;
            var copy = ArrayPool<byte>.Shared.Rent(message.Length);
            message.CopyTo(copy);
            Interlocked.Increment(ref _waiting);
            var held = Interlocked.Add(ref _held, message.Length);
            for (long most; held > (most = Interlocked.Read(ref _heldAtMost)) && Interlocked.CompareExchange(ref _heldAtMost, held, most) != most;) { }
            if (!_ready.Writer.TryWrite((first, copy, message.Length))) ArrayPool<byte>.Shared.Return(copy);
        }

        /// <summary>Writes the next column block that arrived into <paramref name="message"/>, as a block of the group ring.</summary>
        public async Task<int> NextAsync(Memory<byte> message, CancellationToken ct)
        {
            var (first, buffer, length) = await _ready.Reader.ReadAsync(ct);
            try
            {
                buffer.AsSpan(0, length).CopyTo(message.Span);
                BlockMessage.WriteHeader(message.Span, _asGroupBlock[first], length);
                return length;
            }
            finally
            {
                ArrayPool<byte>.Shared.Return(buffer);
                Interlocked.Add(ref _held, -length);
                Interlocked.Decrement(ref _waiting);
                if (Volatile.Read(ref _roomWaiters) > 0) _room.Release();
            }
        }

        /// <summary>Returns once less than <see cref="KeptBytes"/> wait for the group ring (or fewer than two blocks, whatever their size).</summary>
        public async Task WaitForRoomAsync(CancellationToken ct)
        {
            while (Interlocked.Read(ref _held) >= KeptBytes && Volatile.Read(ref _waiting) >= 2 && !_failed)
            {
                Interlocked.Increment(ref _roomWaiters);
                try
                {
                    // Re-checked after a short wait too: a release meant for no one is not lost, one missed is.
                    await _room.WaitAsync(TimeSpan.FromMilliseconds(50), ct);
                }
                finally { Interlocked.Decrement(ref _roomWaiters); }
            }
            if (_failed) throw new OperationCanceledException("the exchange failed", ct);
        }

        public void Fail()
        {
            _failed = true;
            _ready.Writer.TryComplete(new OperationCanceledException("the column's ring failed"));
        }

        public void Dispose()
        {
            _ready.Writer.TryComplete();
            while (_ready.Reader.TryRead(out var left)) ArrayPool<byte>.Shared.Return(left.Buffer);
            _room.Dispose();
        }
    }
}
