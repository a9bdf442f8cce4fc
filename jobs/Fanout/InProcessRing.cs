using System.Threading.Channels;

namespace Hpc.Jobs.Fanout;

/// <summary>
/// N ranks in one process, each link a channel that holds one message (a send completes only when the neighbour has
/// room, as a large MPI send completes only when matched). For running the exchange without MPI, in tests and on a
/// single node.
/// </summary>
public static class InProcessRing
{
    public static IReadOnlyList<IRingLink> Create(int size)
    {
        var wires = Enumerable.Range(0, size).Select(_ => Channel.CreateBounded<byte[]>(1)).ToArray();
        // Rank r sends on wire r (read by r+1) and receives on wire r−1.
        return Enumerable.Range(0, size).Select(r => (IRingLink)new Link(r, size, wires[r], wires[(r - 1 + size) % size])).ToArray();
    }

    private sealed class Link(int rank, int size, Channel<byte[]> output, Channel<byte[]> input) : IRingLink
    {
        public int Rank => rank;
        public int Size => size;
        public int SendWindow => 4;

        public async Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) => await output.Writer.WriteAsync(message.ToArray(), ct);

        public async Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct)
        {
            var message = await input.Reader.ReadAsync(ct);
            message.CopyTo(buffer);
            return message.Length;
        }
    }
}

/// <summary>N ranks in one process (tests, and a single machine standing in for a cluster).</summary>
public static class InProcessRanks
{
    public static IReadOnlyList<IRankGroup> Create(int size)
    {
        var links = InProcessRing.Create(size);
        var announcement = new TaskCompletionSource<byte[]>(TaskCreationOptions.RunContinuationsAsynchronously);
        var gathered = new Gathered(size);
        return links.Select(l => (IRankGroup)new Group(l, announcement, gathered)).ToArray();
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

    private sealed class Group(IRingLink link, TaskCompletionSource<byte[]> announcement, Gathered gathered) : IRankGroup
    {
        public int Rank => link.Rank;
        public int Size => link.Size;
        public IRingLink Ring => link;

        public Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct) => gathered.GiveAsync(Rank, mine, ct);

        public Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct)
        {
            if (Rank == 0) announcement.TrySetResult(fromRoot ?? throw new ArgumentNullException(nameof(fromRoot)));
            return announcement.Task.WaitAsync(ct);
        }
    }
}
