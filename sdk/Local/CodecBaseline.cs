using System.Buffers;
using System.Diagnostics;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Local;

/// <summary>
/// The ceiling for staging on this machine: the raw codec (LZ4 or the codec asked for + BLAKE3 content id + segment checksum) over the same
/// 64 KB segments on every core, from memory, with no I/O or network.
/// </summary>
public static class CodecBaseline
{
    public sealed record Result(double MegabytesPerSecond, double Ratio, long Bytes);
    public readonly record struct Pass(double Seconds, long StoredBytes);

    /// <summary>Best of three passes over the file's bytes.</summary>
    public static Result Measure(string path, int segmentSize = SegmentCodec.DefaultSegmentSize)
    {
        using var data = new MappedFile(path);
        var passes = Enumerable.Range(0, 3).Select(_ => Run(data, segmentSize)).ToList();
        var best = passes.Min(p => p.Seconds);
        return new Result(data.Length / 1e6 / best, data.Length == 0 ? 1 : (double)passes[^1].StoredBytes / data.Length, data.Length);
    }

    /// <summary>One pass: every segment hashed and encoded on <paramref name="threads"/> cores (default all), the encoded
    /// bytes discarded. The file's pages are read in place, any size.</summary>
    public static Pass Run(MappedFile data, int segmentSize = SegmentCodec.DefaultSegmentSize, int threads = 0, SegmentCompression? compression = null)
    {
        var segments = (data.Length + segmentSize - 1) / segmentSize;
        long total = 0;
        var clock = Stopwatch.StartNew();
        Parallel.For(0L, segments, new ParallelOptions { MaxDegreeOfParallelism = threads > 0 ? threads : Environment.ProcessorCount },
            () => new Encoder(ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxEncodedLength(segmentSize))),
            (i, _, encoder) =>
            {
                var at = i * segmentSize;
                var raw = data.Slice(at, (int)Math.Min(segmentSize, data.Length - at));
                SegmentId.Of(raw);
                Interlocked.Add(ref total, SegmentCodec.EncodeInOrder(raw, encoder.Buffer, compression ?? SegmentCompression.Lz4, ref encoder.Probe));
                return encoder;
            },
            encoder => ArrayPool<byte>.Shared.Return(encoder.Buffer));
        return new Pass(clock.Elapsed.TotalSeconds, total);
    }

    /// <summary>One thread's buffer, and whether its next segment is probed first, as the stager's encoders keep it.</summary>
    private sealed class Encoder(byte[] buffer)
    {
        public readonly byte[] Buffer = buffer;
        public bool Probe = true;
    }
}
