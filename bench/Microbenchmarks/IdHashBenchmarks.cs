using System.Security.Cryptography;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using Hpc.CommonData.Format;

namespace Hpc.Benchmarks;

/// <summary>
/// The content id hash alone over one 64 KB segment, on one core: XXH3-128 (the ids of earlier builds, now only the
/// whole-dataset hash) as the baseline, against the two cryptographic candidates, BLAKE3-256 (the Blake3 package, what
/// <see cref="SegmentId.Of"/> runs) and SHA-256 (System.Security.Cryptography, with the CPU's SHA extensions when it
/// has them). GB/s per core is 65536 bytes over the mean.
/// </summary>
[MemoryDiagnoser]
public class IdHashBenchmarks
{
    private readonly byte[] _segment = new byte[SegmentCodec.DefaultSegmentSize];
    private readonly byte[] _digest = new byte[32];

    [GlobalSetup]
    public void Setup() => new Random(42).NextBytes(_segment);

    [Benchmark(Baseline = true, Description = "XXH3-128")]
    public UInt128 Xxh3() => XxHash.Hash128Of(_segment);

    [Benchmark(Description = "BLAKE3-256 (content id)")]
    public SegmentId Blake3() => SegmentId.Of(_segment);

    [Benchmark(Description = "SHA-256")]
    public int Sha256() => SHA256.HashData(_segment, _digest);
}
