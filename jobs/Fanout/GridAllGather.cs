using Hpc.CommonData.Fanout;
using System.Buffers;
using System.Diagnostics;

namespace Hpc.Jobs.Fanout;

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
    public static async Task<RingResult> RunAsync(RingGrid grid, int rank, FanoutPlan groupPlan, IReadOnlyList<FanoutPlan> columnPlans,
        IRingLink groupLink, IRingLink? columnLink, Func<FanoutPlan, Block, Memory<byte>, CancellationToken, Task<int>> fetch,
        Func<ReadOnlyMemory<byte>, FanoutPlan, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout = null,
        TimeSpan? peerSilence = null)
    {
        var clock = Stopwatch.StartNew();
        var (_, position) = grid.PlaceOf(rank);
        var columnPlan = position < grid.Positions ? columnPlans[position] : null;
        if ((columnPlan is null) != (columnLink is null)) throw new ArgumentException("a rank at a grid position needs its column's link, and only such a rank", nameof(columnLink));
        using var failed = CancellationTokenSource.CreateLinkedTokenSource(ct);
        using var column = new ColumnBlocks(columnPlan);
        using var writes = new SemaphoreSlim(1);
        long tierBytes = 0;
        var tierBlocks = 0;

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

        var columnRing = columnPlan is null
            ? Task.FromResult(new RingResult(0, 0, 0, 0, 0, 0))
            : Run(() => RingAllGather.RunAsync(columnPlan, columnLink!, (block, message, token) => FromTier(columnPlan, block, message, token),
                async (message, token) =>
                {
                    column.Keep(message);
                    await Deliver(message, columnPlan, token);
                }, failed.Token, stallTimeout, peerSilence: peerSilence));
        var groupRing = Run(() => RingAllGather.RunAsync(groupPlan, groupLink,
            async (block, message, token) => await column.TakeAsync(block, message, token) is var length and > 0 ? length : await FromTier(groupPlan, block, message, token),
            // This member's own blocks reached the node over the column; a resent one too.
            (message, token) => column.Holds(message) ? ValueTask.CompletedTask : Deliver(message, groupPlan, token),
            failed.Token, stallTimeout, peerSilence: peerSilence));
        var results = await Task.WhenAll(columnRing, groupRing);
        var (c, g) = (results[0], results[1]);
        return new RingResult(tierBlocks, c.BlocksReceived + g.BlocksReceived, c.BlocksSent + g.BlocksSent, Interlocked.Read(ref tierBytes),
            c.BytesReceived + g.BytesReceived, c.BytesSent + g.BytesSent, clock.Elapsed.TotalSeconds,
            ShareSeconds: columnPlan is null ? 0 : c.ShareSeconds, Bypassed: c.Bypassed + g.Bypassed, RepairBytesFetched: c.RepairBytesFetched + g.RepairBytesFetched);
    }

    /// <summary>
    /// The blocks of this member's column, as the column ring brings them, until the group ring takes each once (a
    /// block the group ring asks for again, to resend it past a dead member, comes from the tier).
    /// </summary>
    private sealed class ColumnBlocks : IDisposable
    {
        private readonly Dictionary<int, TaskCompletionSource<(byte[] Buffer, int Length)>> _byFirst = [];
        private readonly HashSet<int> _taken = [];
        private readonly Lock _lock = new();

        public ColumnBlocks(FanoutPlan? plan)
        {
            if (plan is null) return;
            foreach (var block in plan.Shares.SelectMany(s => s))
                _byFirst[block.First] = new TaskCompletionSource<(byte[], int)>(TaskCreationOptions.RunContinuationsAsynchronously);
        }

        /// <summary>Whether a block message is one of this column's (its first segment starts one of the column's blocks).</summary>
        public bool Holds(ReadOnlyMemory<byte> message) => _byFirst.ContainsKey(FirstOf(message.Span));

        private static int FirstOf(ReadOnlySpan<byte> message) => System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(message[8..]);

        public void Keep(ReadOnlyMemory<byte> message)
        {
            if (!_byFirst.TryGetValue(FirstOf(message.Span), out var slot)) return;
            var copy = ArrayPool<byte>.Shared.Rent(message.Length);
            message.CopyTo(copy);
            if (!slot.TrySetResult((copy, message.Length))) ArrayPool<byte>.Shared.Return(copy);
        }

        /// <summary>Writes the column's block into <paramref name="message"/> as a block of the group ring; 0 when it is
        /// not this column's, or was taken before.</summary>
        public async Task<int> TakeAsync(Block block, Memory<byte> message, CancellationToken ct)
        {
            if (!_byFirst.TryGetValue(block.First, out var slot)) return 0;
            lock (_lock)
                if (!_taken.Add(block.First)) return 0;
            var (buffer, length) = await slot.Task.WaitAsync(ct);
            try
            {
                buffer.AsSpan(0, length).CopyTo(message.Span);
                BlockMessage.WriteHeader(message.Span, block, length);
                return length;
            }
            finally
            {
                ArrayPool<byte>.Shared.Return(buffer);
            }
        }

        public void Fail()
        {
            foreach (var slot in _byFirst.Values) slot.TrySetCanceled();
        }

        public void Dispose()
        {
            lock (_lock)
                foreach (var (first, slot) in _byFirst)
                    if (slot.Task.IsCompletedSuccessfully && !_taken.Contains(first)) ArrayPool<byte>.Shared.Return(slot.Task.Result.Buffer);
        }
    }
}
