using System.Text;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using Hpc.CommonData.Format;
using K4os.Compression.LZ4;

namespace Hpc.Benchmarks;

/// <summary>
/// One 64 KB segment through the stager's and the agent's per-segment work, each against the bare LZ4 call it wraps
/// (the baseline of its category, K4os.Compression.LZ4 called directly in the fast mode segments are written with): what
/// the header, checksum and content id cost on top, and that none of it allocates.
/// </summary>
[MemoryDiagnoser]
[GroupBenchmarksBy(BenchmarkLogicalGroupRule.ByCategory)]
[CategoriesColumn]
public class SegmentBenchmarks
{
    [Params("csv", "random")]
    public string Data { get; set; } = "csv";

    private byte[] _raw = [];
    private byte[] _output = [];
    private byte[] _decoded = [];
    private byte[] _stored = [];
    private byte[] _lz4 = [];
    private SegmentId _id;

    [GlobalSetup]
    public void Setup()
    {
        _raw = Data == "random" ? RandomBytes(SegmentCodec.DefaultSegmentSize) : PriceRows(SegmentCodec.DefaultSegmentSize);
        _output = new byte[SegmentCodec.MaxEncodedLength(_raw.Length)];
        _decoded = new byte[_raw.Length];
        _id = SegmentId.Of(_raw);
        var stored = new byte[_output.Length];
        _stored = stored[..SegmentCodec.Encode(_raw, stored)];
        var lz4 = new byte[LZ4Codec.MaximumOutputSize(_raw.Length)];
        _lz4 = lz4[..LZ4Codec.Encode(_raw, lz4, LZ4Level.L00_FAST)];
    }

    [Benchmark(Baseline = true, Description = "LZ4 compress"), BenchmarkCategory("encode")]
    public int Lz4Compress() => LZ4Codec.Encode(_raw, _output, LZ4Level.L00_FAST);

    [Benchmark(Description = "content id + segment encode (stager)"), BenchmarkCategory("encode")]
    public int StagerSegment()
    {
        SegmentId.Of(_raw);
        return SegmentCodec.Encode(_raw, _output);
    }

    [Benchmark(Baseline = true, Description = "LZ4 decompress"), BenchmarkCategory("decode")]
    public int Lz4Decompress() => LZ4Codec.Decode(_lz4, _decoded);

    [Benchmark(Description = "verified segment decode (agent)"), BenchmarkCategory("decode")]
    public string? AgentSegment() => SegmentCodec.TryDecode(_stored, _id, _decoded);

    private static byte[] RandomBytes(int n)
    {
        var b = new byte[n];
        new Random(42).NextBytes(b);
        return b;
    }

    /// <summary>Rows like the sample market history (date, instrument, close): text that compresses to about 40%.</summary>
    internal static byte[] PriceRows(int n)
    {
        var rng = new Random(42);
        var sb = new StringBuilder(n + 64);
        var day = new DateOnly(2019, 1, 2);
        var price = 100.0;
        for (var i = 0; sb.Length < n; i++)
        {
            price *= 1 + (rng.NextDouble() - 0.5) * 0.02;
            sb.Append(day.AddDays(i / 500).ToString("yyyy-MM-dd")).Append(",INST").Append((i % 500).ToString("D4")).Append(',')
              .Append(price.ToString("0.0000", System.Globalization.CultureInfo.InvariantCulture)).Append('\n');
        }
        return Encoding.ASCII.GetBytes(sb.ToString())[..n];
    }
}
