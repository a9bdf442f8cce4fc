using System.Threading.Channels;
using Hpc.CommonData.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary>
/// N ranks in one process, a channel that holds one message between every two of them (a send completes only when
/// the receiver has room, as a large MPI send completes only when matched): the exchange's ranks without MPI or sockets.
/// </summary>
public static class InProcessRing
{
    /// <param name="bytesPerSecond">Ranks whose link is slowed, and its rate: a message to or from one takes its
    /// length over the slower end's rate to pass (one at a time between two ranks), so the probe and the exchange see it.</param>
    public static IReadOnlyList<IRingLink> Create(int size, IReadOnlyDictionary<int, double>? bytesPerSecond = null)
    {
        var wires = new Wire[size, size];
        for (var from = 0; from < size; from++)
            for (var to = 0; to < size; to++)
            {
                var rate = Math.Min(bytesPerSecond?.GetValueOrDefault(from, double.PositiveInfinity) ?? double.PositiveInfinity,
                    bytesPerSecond?.GetValueOrDefault(to, double.PositiveInfinity) ?? double.PositiveInfinity);
                wires[from, to] = new Wire(rate);
            }
        return Enumerable.Range(0, size).Select(r => (IRingLink)new Link(r, size, wires)).ToArray();
    }

    private sealed class Wire(double bytesPerSecond)
    {
        public readonly Channel<byte[]> Messages = Channel.CreateBounded<byte[]>(1);
        private readonly Lock _order = new();
        private Task _last = Task.CompletedTask;

        public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct)
        {
            var copy = message.ToArray();
            lock (_order) return _last = SendAfter(_last, copy, ct);
        }

        private async Task SendAfter(Task previous, byte[] message, CancellationToken ct)
        {
            try { await previous; } catch { /* that send's caller saw it */ }
            if (double.IsFinite(bytesPerSecond)) await Task.Delay(TimeSpan.FromSeconds(message.Length / bytesPerSecond), ct);
            await Messages.Writer.WriteAsync(message, ct);
        }
    }

    private sealed class Link(int rank, int size, Wire[,] wires) : IPeerLinks
    {
        public int Rank => rank;
        public int Size => size;
        public int SendWindow => 4;

        public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) => SendToAsync((rank + 1) % size, message, ct);

        public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => ReceiveFromAsync((rank - 1 + size) % size, buffer, ct);

        public Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct) => Task.CompletedTask;

        public Task SendToAsync(int to, ReadOnlyMemory<byte> message, CancellationToken ct) => wires[rank, to].SendAsync(message, ct);

        public async Task<int> ReceiveFromAsync(int from, Memory<byte> buffer, CancellationToken ct)
        {
            var message = await wires[from, rank].Messages.Reader.ReadAsync(ct);
            message.CopyTo(buffer);
            return message.Length;
        }
    }
}

/// <summary>N ranks in one process, with the collectives the exchange needs.</summary>
public static class InProcessRanks
{
    /// <param name="bytesPerSecond">Ranks whose link is slowed (see <see cref="InProcessRing.Create"/>).</param>
    public static IReadOnlyList<IRankGroup> Create(int size, IReadOnlyDictionary<int, double>? bytesPerSecond = null)
    {
        var links = InProcessRing.Create(size, bytesPerSecond);
        var announcement = new TaskCompletionSource<byte[]>(TaskCreationOptions.RunContinuationsAsynchronously);
        var gathers = new System.Collections.Concurrent.ConcurrentDictionary<int, Gathered>();
        return links.Select(l => (IRankGroup)new Group(l, announcement, n => gathers.GetOrAdd(n, _ => new Gathered(size)))).ToArray();
    }

    /// <summary>One all-gather: each rank's part, complete when every rank has given its own.</summary>
    private sealed class Gathered(int size)
    {
        private readonly byte[][] _parts = new byte[size][];
        private int _given;
        private readonly TaskCompletionSource<byte[][]> _all = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public Task<byte[][]> GiveAsync(int rank, byte[] mine, CancellationToken ct)
        {
            _parts[rank] = mine.ToArray();
            if (Interlocked.Increment(ref _given) == _parts.Length) _all.TrySetResult(_parts);
            return _all.Task.WaitAsync(ct);
        }
    }

    /// <summary>The n-th all-gather of every rank meets the n-th of the others, as collectives do.</summary>
    private sealed class Group(IRingLink link, TaskCompletionSource<byte[]> announcement, Func<int, Gathered> gather) : IRankGroup
    {
        private int _gathers;

        public int Rank => link.Rank;
        public int Size => link.Size;
        public IRingLink Ring => link;

        public Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct) => gather(_gathers++).GiveAsync(Rank, mine, ct);

        public Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct)
        {
            if (Rank == 0) announcement.TrySetResult(fromRoot ?? throw new ArgumentNullException(nameof(fromRoot)));
            return announcement.Task.WaitAsync(ct);
        }
    }
}
