using System.Buffers;
using System.Buffers.Binary;
using System.Diagnostics;

namespace Hpc.Jobs.Fanout;

/// <summary>
/// A short measurement of the ring's links before the exchange: every rank sends <see cref="Chunks"/> messages of
/// <see cref="ChunkBytes"/> to its right neighbour while it times what arrives from its left one, all links at once
/// (each uplink and downlink carries one probe, so none competes with another). Bounded in bytes (the chunks) and in
/// time (<see cref="Limit"/>: a link that has not delivered them by then is measured by what it did deliver).
/// </summary>
public static class LinkProbe
{
    public const int ChunkBytes = 32 << 10;
    public const int Chunks = 8;

    /// <summary>The longest a rank waits for its measurement; the rest of the probe is still drained before the exchange.</summary>
    public static readonly TimeSpan Limit = TimeSpan.FromSeconds(1);

    private const uint Magic = 0x31504348; // "HCP1"

    /// <summary>
    /// Runs this rank's probe. Returns the measured rate of the link from the left neighbour, a task that completes
    /// once every probe chunk has been received (the ring's own messages on that link follow them, so the exchange
    /// must wait for it), and one that completes once every chunk was sent.
    /// </summary>
    public static async Task<(ProbeResult Incoming, Task Drained, Task Sent)> RunAsync(IRingLink link, CancellationToken ct, TimeSpan? limit = null)
    {
        var chunk = new byte[ChunkBytes];
        // The length where a block message keeps it: the MPI link reads it there.
        BinaryPrimitives.WriteUInt32LittleEndian(chunk, Magic);
        BinaryPrimitives.WriteInt32LittleEndian(chunk.AsSpan(16), ChunkBytes);
        // Every send is posted at once: the link keeps their order, and the exchange's sends queue behind them.
        var sent = Task.WhenAll(Enumerable.Range(0, Chunks).Select(_ => link.SendAsync(chunk, ct)));
        var clock = Stopwatch.StartNew();
        var arrivals = new double[Chunks];
        var received = 0;
        var receiving = Task.Run(async () =>
        {
            var buffer = ArrayPool<byte>.Shared.Rent(ChunkBytes);
            try
            {
                for (var i = 0; i < Chunks; i++)
                {
                    var n = await link.ReceiveAsync(buffer.AsMemory(0, ChunkBytes), ct);
                    if (n != ChunkBytes || BinaryPrimitives.ReadUInt32LittleEndian(buffer) != Magic)
                        throw new InvalidDataException($"rank {link.Rank}: the link probe from the left neighbour is malformed ({n} bytes)");
                    arrivals[i] = clock.Elapsed.TotalSeconds;
                    Volatile.Write(ref received, i + 1);
                }
            }
            finally { ArrayPool<byte>.Shared.Return(buffer); }
        }, ct);
        var bound = limit ?? Limit;
        try { await receiving.WaitAsync(bound, ct); }
        catch (TimeoutException) { }
        var got = Volatile.Read(ref received);
        ProbeResult result;
        if (got >= 2)
        {
            // From the first chunk's arrival on: the ranks do not start at the same instant, and the first chunk's
            // time includes that skew, not the link.
            var seconds = Math.Max(1e-6, arrivals[got - 1] - arrivals[0]);
            result = new ProbeResult((got - 1) * (double)ChunkBytes / seconds, seconds);
        }
        else
        {
            var seconds = clock.Elapsed.TotalSeconds;
            result = new ProbeResult(got * (double)ChunkBytes / seconds, seconds);
        }
        return (result, receiving, sent);
    }
}
