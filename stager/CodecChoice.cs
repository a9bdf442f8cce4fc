using System.Diagnostics;
using System.Globalization;
using Hpc.CommonData.Format;

namespace Hpc.Stager;

/// <summary>
/// <c>--codec auto</c>: LZ4 or Zstandard for this dataset, from a sample of its segments. Zstandard is worth its slower
/// encoding and decoding only where it stores clearly less and the bytes, not the codec, set the time: the stager
/// encoding on its cores, the link carrying the stored bytes, the node decoding on one core — whichever is slowest.
/// </summary>
public sealed record CodecChoice(SegmentCompression Compression, string Reason)
{
    /// <summary>Segments encoded both ways (spread over the source, as the space check's sample is).</summary>
    public const int Samples = 16;

    /// <summary>Zstandard must store at most this share of LZ4's bytes to be chosen at all.</summary>
    public const double MaxShareOfLz4 = 0.85;

    /// <param name="linkRate">
    /// The nodes' link rate; null when not known: then LZ4, which decodes faster than a node's link brings the bytes on
    /// any network, so it is never the wrong choice by much, while zstd on a fast link makes each node wait on its decoder.
    /// </param>
    public static CodecChoice Choose(IReadOnlyList<byte[]> sample, ByteRate? linkRate, int stagerCores)
    {
        if (sample.Count == 0) return new(SegmentCompression.Lz4, "lz4: no sample (length unknown)");
        if (linkRate is not { IsUnlimited: false } rate)
            return new(SegmentCompression.Lz4, $"lz4: the nodes' link rate is not known (--link-rate, or {Hpc.CommonData.Hosting.StagerOptions.LinkRateVariable} " +
                                               "for the site), and lz4 is never slower than the link by much");
        var lz4 = Measure(sample, SegmentCompression.Lz4);
        var zstd = Measure(sample, SegmentCompression.Zstd);
        var inv = CultureInfo.InvariantCulture;
        var facts = string.Create(inv, $"a sample of {sample.Count} segments stores {lz4.Ratio:P1} with lz4, {zstd.Ratio:P1} with zstd");
        if (zstd.Ratio > MaxShareOfLz4 * lz4.Ratio)
            return new(SegmentCompression.Lz4, $"lz4: {facts}; zstd would save too little");
        // Seconds per raw byte of each stage; the slowest sets the pace of a staging followed by the fetch.
        double Pace(Codec c) => Math.Max(Math.Max(1 / (c.EncodePerCore * stagerCores), c.Ratio / rate.BytesPerSecond), 1 / c.DecodePerCore);
        var (pl, pz) = (Pace(lz4), Pace(zstd));
        var detail = string.Create(inv, $"{facts}; at {rate} zstd moves raw data at {ByteRate.Format(1 / pz)} against lz4's {ByteRate.Format(1 / pl)}");
        return pz < pl ? new(SegmentCompression.Zstd, $"zstd: {detail}") : new(SegmentCompression.Lz4, $"lz4: {detail}");
    }

    private readonly record struct Codec(double Ratio, double EncodePerCore, double DecodePerCore);

    /// <summary>Stored share and one core's encode and decode rates (raw bytes per second) on the sample: the best of three
    /// passes, since a pass over a megabyte or so takes milliseconds and one preemption would halve a rate.</summary>
    private static Codec Measure(IReadOnlyList<byte[]> sample, SegmentCompression compression)
    {
        var passes = Enumerable.Range(0, 3).Select(_ => MeasureOnce(sample, compression)).ToList();
        return new Codec(passes[0].Ratio, passes.Max(p => p.EncodePerCore), passes.Max(p => p.DecodePerCore));
    }

    private static Codec MeasureOnce(IReadOnlyList<byte[]> sample, SegmentCompression compression)
    {
        long raw = 0, stored = 0;
        var encoded = new byte[sample.Count][];
        // Once untimed: a first call pays for compiling the codec (in a JIT-compiled stager) and for its context.
        var warm = new byte[SegmentCodec.MaxEncodedLength(sample[0].Length)];
        SegmentCodec.TryDecode(warm.AsSpan(0, SegmentCodec.Encode(sample[0], warm, compression)), SegmentId.Of(sample[0]), new byte[sample[0].Length]);
        var clock = Stopwatch.StartNew();
        for (var i = 0; i < sample.Count; i++)
        {
            var buffer = new byte[SegmentCodec.MaxEncodedLength(sample[i].Length)];
            var n = SegmentCodec.Encode(sample[i], buffer, compression);
            encoded[i] = buffer[..n];
            raw += sample[i].Length;
            stored += n;
        }
        var encode = clock.Elapsed.TotalSeconds;
        clock.Restart();
        for (var i = 0; i < sample.Count; i++)
            if (SegmentCodec.TryDecode(encoded[i], SegmentId.Of(sample[i]), new byte[sample[i].Length]) is { } problem)
                throw new InvalidOperationException($"codec self-check on the sample failed: {problem}");
        var decode = clock.Elapsed.TotalSeconds;
        return new Codec((double)stored / raw, raw / Math.Max(encode, 1e-6), raw / Math.Max(decode, 1e-6));
    }
}
