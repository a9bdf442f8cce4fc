using System.Buffers;
using System.Buffers.Binary;
using System.Diagnostics;
using static Hpc.CommonData.Fanout.LeafRule;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// A short measurement of the ring's links before the exchange, in rounds that every rank runs in lockstep: in a round
/// every rank sends <see cref="LeafRule.Chunks"/> messages to its right neighbour while it times what arrives from its left one,
/// all links at once (each uplink and downlink carries one probe, so none competes with another); then the ranks
/// all-gather what they measured. The first round sends <see cref="LeafRule.FirstRoundBytes"/> per link; while the median link
/// passed its round too quickly to judge (<see cref="LeafRule.LongEnoughToJudge"/>), the next round sends
/// <see cref="LeafRule.Growth"/> times as much, up to <see cref="LeafRule.LastRoundBytes"/>; a round that makes a node a leaf
/// is followed by one that confirms it (<see cref="LeafRule.After"/>). Bounded in time by <see cref="LeafRule.Limit"/>: a
/// round that would not fit in what is left of it is not started, and a link that has not delivered its round by then is
/// measured by what it did deliver.
/// </summary>
/// <remarks>
/// Why rounds: a fixed 256 KB would pass a 10 Gbit/s link in a fifth of a millisecond, far below what a rate can be told
/// from (MPI's progress thread polls each millisecond), so on fast fabrics no probe was long enough to make a slow node a
/// leaf. Growing by four keeps a healthy fast ring's probe to a few rounds (1 Gbit/s: four; 10 Gbit/s: five; 100 Gbit/s:
/// six, stopped by the cap), and stopping on the median link rather than
/// on the slowest keeps a slow node from stretching the probe: its links only need to be slower than the median's to
/// be measured for longer. Lockstep, because every rank's rate must come from the same round's bytes to be compared.
/// </remarks>
public static class LinkProbe
{
    private const uint Magic = 0x31504348; // "HCP1"

    /// <summary>
    /// Runs this rank's probe. Every rank of <paramref name="group"/> must call it at the same point (it all-gathers after
    /// each round). Returns every rank's measurement of the link from its left neighbour in the last round (the same on
    /// every rank), a task that completes once every probe message has been received (the ring's own messages on that
    /// link follow them, so the exchange must wait for it), and one that completes once every message was sent.
    /// </summary>
    /// <param name="link">The ring whose links are measured (may differ from the group's own, e.g. TCP beside MPI).</param>
    /// <param name="maxBytes">
    /// Most bytes each rank sends in all rounds together (the same on every rank): a probe is worth a small share of
    /// what the exchange itself moves, so a small dataset is judged from the first round or two, and a long probe on
    /// busy shared cores cannot take the scheduler's pace for a slow link when there is little data to route anyway.
    /// </param>
    public static async Task<LinkProbeRun> RunAsync(IRingLink link, IRankGroup group, CancellationToken ct, TimeSpan? limit = null, long maxBytes = long.MaxValue)
    {
        var bound = (limit ?? Limit).TotalSeconds;
        var clock = Stopwatch.StartNew();
        var sends = new List<Task>();
        long bytesSent = 0;
        ProbeResult[]? judged = null; // the round a confirming round repeats
        for (int round = 0, rounds = 1; ; rounds++)
        {
            var bytes = RoundBytes(round);
            var chunkBytes = (int)(bytes / Chunks);
            var (mine, receiving, send) = await RoundAsync(link, chunkBytes, clock, bound, ct);
            sends.Add(send);
            bytesSent += bytes;
            var gathered = (await group.AllGatherAsync(mine.ToBytes(), ct)).Select(b => RoundReading.FromBytes(b)).ToArray();
            var links = gathered.Select(g => g.Link).ToArray();
            // Decided from gathered values only, so every rank takes the same decision and the rounds stay in step.
            var next = RoundBytes(round + 1);
            var step = After(links, gathered.All(g => g.Complete), confirming: judged is not null, nextFits: next <= LastRoundBytes && bytesSent + next <= maxBytes,
                gathered.Max(g => g.ElapsedSeconds), gathered.Max(g => g.RoundSeconds), bound);
            if (step == ProbeStep.Grow) round++;
            else if (step == ProbeStep.Confirm) (judged, round) = (links, ConfirmingRound(links, round));
            else return new LinkProbeRun(judged is null ? links : Confirmed(judged, links), rounds, bytesSent, receiving, Task.WhenAll(sends));
        }
    }

    /// <summary>One round on this rank: its sends posted, its incoming link timed until all arrived or the bound.</summary>
    private static async Task<(RoundReading Mine, Task Drained, Task Sent)> RoundAsync(IRingLink link, int chunkBytes, Stopwatch clock, double bound, CancellationToken ct)
    {
        var start = clock.Elapsed.TotalSeconds;
        var chunk = ArrayPool<byte>.Shared.Rent(chunkBytes);
        // Zeroed: a pooled array holds whatever its last user left, and this one goes to another node.
        Array.Clear(chunk, 0, chunkBytes);
        // The length where a block message keeps it: the MPI link reads it there.
        BinaryPrimitives.WriteUInt32LittleEndian(chunk, Magic);
        BinaryPrimitives.WriteInt32LittleEndian(chunk.AsSpan(16), chunkBytes);
        // Every send is posted at once: the link keeps their order, and the exchange's sends queue behind them.
        var message = chunk.AsMemory(0, chunkBytes);
        var sends = new Task[Chunks];
        for (var i = 0; i < Chunks; i++) sends[i] = link.SendAsync(message, ct);
        var sent = Task.WhenAll(sends);
        _ = sent.ContinueWith(_ => ArrayPool<byte>.Shared.Return(chunk), CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);

        var arrivals = new double[Chunks];
        var received = 0;
        var receiving = Task.Run(async () =>
        {
            var buffer = ArrayPool<byte>.Shared.Rent(chunkBytes);
            try
            {
                for (var i = 0; i < Chunks; i++)
                {
                    var n = await link.ReceiveAsync(buffer.AsMemory(0, chunkBytes), ct);
                    if (n != chunkBytes || BinaryPrimitives.ReadUInt32LittleEndian(buffer) != Magic)
                        throw new InvalidDataException($"rank {link.Rank}: the link probe from the left neighbour is malformed ({n} bytes, {chunkBytes} expected)");
                    arrivals[i] = clock.Elapsed.TotalSeconds;
                    Volatile.Write(ref received, i + 1);
                }
            }
            finally { ArrayPool<byte>.Shared.Return(buffer); }
        }, ct);
        var left = Math.Max(0, bound - start);
        try { await receiving.WaitAsync(TimeSpan.FromSeconds(left), ct); }
        catch (TimeoutException) { }
        var got = Volatile.Read(ref received);
        var now = clock.Elapsed.TotalSeconds;
        ProbeResult result;
        if (got >= 2)
        {
            // From the first chunk's arrival on: the ranks do not start a round at the same instant, and the first
            // chunk's time includes that skew, not the link.
            var seconds = Math.Max(1e-6, arrivals[got - 1] - arrivals[0]);
            result = new ProbeResult((got - 1) * (double)chunkBytes / seconds, seconds);
        }
        else
        {
            var seconds = Math.Max(1e-6, now - start);
            result = new ProbeResult(got * (double)chunkBytes / seconds, seconds);
        }
        var complete = got == Chunks;
        var roundSeconds = (complete ? arrivals[Chunks - 1] : now) - start;
        return (new RoundReading(result, complete, roundSeconds, now), receiving, sent);
    }

    /// <summary>What a rank tells the others after a round: its link's reading, and what the next round's decision needs.</summary>
    private readonly record struct RoundReading(ProbeResult Link, bool Complete, double RoundSeconds, double ElapsedSeconds)
    {
        private const int Length = ProbeResult.Length + 1 + 16;

        public byte[] ToBytes()
        {
            var bytes = new byte[Length];
            Link.ToBytes().CopyTo(bytes, 0);
            bytes[ProbeResult.Length] = Complete ? (byte)1 : (byte)0;
            BitConverter.TryWriteBytes(bytes.AsSpan(ProbeResult.Length + 1, 8), RoundSeconds);
            BitConverter.TryWriteBytes(bytes.AsSpan(ProbeResult.Length + 9, 8), ElapsedSeconds);
            return bytes;
        }

        public static RoundReading FromBytes(ReadOnlySpan<byte> bytes) =>
            new(ProbeResult.FromBytes(bytes), bytes[ProbeResult.Length] != 0, BitConverter.ToDouble(bytes.Slice(ProbeResult.Length + 1, 8)),
                BitConverter.ToDouble(bytes.Slice(ProbeResult.Length + 9, 8)));
    }
}

/// <summary>A finished probe, as every rank holds it.</summary>
/// <param name="Links">Each rank's reading of the link from its left neighbour in the last round: [r] is r−1 into r.</param>
/// <param name="Rounds">How many rounds ran (the same on every rank).</param>
/// <param name="BytesSent">What this rank sent to its right neighbour over all rounds.</param>
/// <param name="Drained">Completes when the last round's messages from the left neighbour have all been received.</param>
/// <param name="Sent">Completes when every message this rank sent is on its way.</param>
public sealed record LinkProbeRun(IReadOnlyList<ProbeResult> Links, int Rounds, long BytesSent, Task Drained, Task Sent);
