using System.Security.Cryptography;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using Hpc.CommonData.Format;

namespace Hpc.Benchmarks;

/// <summary>
/// The content id hash alone over one segment, on one core: XXH3-128 (the ids of earlier builds, now only the
/// whole-dataset hash) as the baseline, against BLAKE3-256 as <see cref="SegmentId.Of"/> runs it (sixteen chunks at a
/// time in AVX-512 lanes where the CPU has them), BLAKE3-256 of the Blake3 package alone, and SHA-256
/// (System.Security.Cryptography, with the CPU's SHA extensions when it has them). 64 KB is a fixed segment; 71.3 KB
/// a typical content-defined one, whose chunks do not fill whole groups of sixteen. GB/s per core is the length over the mean.
/// </summary>
[MemoryDiagnoser]
public class IdHashBenchmarks
{
    private byte[] _segment = [];
    private readonly byte[] _digest = new byte[32];

    [Params(SegmentCodec.DefaultSegmentSize, 73_037)]
    public int Length { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _segment = new byte[Length];
        new Random(42).NextBytes(_segment);
    }

    [Benchmark(Baseline = true, Description = "XXH3-128")]
    public UInt128 Xxh3() => XxHash.Hash128Of(_segment);

    [Benchmark(Description = "BLAKE3-256 (content id)")]
    public SegmentId Blake3() => SegmentId.Of(_segment);

    [Benchmark(Description = "BLAKE3-256 (Blake3 package)")]
    public int Blake3Package()
    {
        global::Blake3.Hasher.Hash(_segment, _digest);
        return _digest[0];
    }

    [Benchmark(Description = "SHA-256")]
    public int Sha256() => SHA256.HashData(_segment, _digest);
}
