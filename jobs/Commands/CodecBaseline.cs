using System.Buffers;
using System.Diagnostics;
using Hpc.CommonData.Format;

namespace Hpc.Jobs.Commands;

/// <summary>
/// The ceiling for staging on this machine: the raw codec (LZ4 + XXH3 content id + segment checksum) over the same
/// 64 KB segments on every core, from memory, with no I/O or network. Best of three runs.
/// </summary>
public static class CodecBaseline
{
    public sealed record Result(double MegabytesPerSecond, double Ratio, long Bytes);

    public static Result Measure(string path, int segmentSize = SegmentCodec.DefaultSegmentSize)
    {
        var data = File.ReadAllBytes(path);
        var segments = (data.Length + segmentSize - 1) / segmentSize;
        double best = double.MaxValue;
        long stored = 0;
        for (var run = 0; run < 3; run++)
        {
            long total = 0;
            var clock = Stopwatch.StartNew();
            Parallel.For(0, segments, new ParallelOptions { MaxDegreeOfParallelism = Environment.ProcessorCount },
                () => ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxEncodedLength(segmentSize)),
                (i, _, buffer) =>
                {
                    var raw = data.AsSpan(i * segmentSize, Math.Min(segmentSize, data.Length - i * segmentSize));
                    SegmentId.Of(raw);
                    Interlocked.Add(ref total, SegmentCodec.Encode(raw, buffer));
                    return buffer;
                },
                buffer => ArrayPool<byte>.Shared.Return(buffer));
            best = Math.Min(best, clock.Elapsed.TotalSeconds);
            stored = total;
        }
        return new Result(data.Length / 1e6 / best, data.Length == 0 ? 1 : (double)stored / data.Length, data.Length);
    }
}
