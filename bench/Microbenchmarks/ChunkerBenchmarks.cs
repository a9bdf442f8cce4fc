using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Runtime.Intrinsics;
using System.Runtime.Intrinsics.X86;
using BenchmarkDotNet.Attributes;
using Hpc.CommonData.Format;

namespace Hpc.Benchmarks;

/// <summary>
/// The content-defined chunker alone over one 4 MB slab (what the stager's reader cuts at a time), on one core,
/// against the raw codec over the same slab (BLAKE3 content id + LZ4 + checksum per 64 KB segment, the baseline): the
/// chunker must keep up with the codec that follows it. MB/s is 4.19 MB over the mean.
/// </summary>
/// <remarks>
/// Also an AVX2 version that computes the same boundaries in eight lanes (two 4 x 64-bit vectors, each lane one
/// 1 KB block of the slab, gear values fetched with gathers): measured here so that the reason it is not what the
/// stager runs stays checkable. The gear hash's state is the last 64 bytes' values shifted into place, so a lane
/// started 64 bytes before its block has the exact hash of the serial scan from the block's first byte on.
/// </remarks>
[MemoryDiagnoser]
public class ChunkerBenchmarks
{
    private const int SlabBytes = 4 << 20;

    [Params("csv", "random")]
    public string Data { get; set; } = "csv";

    private byte[] _slab = [];
    private byte[] _output = [];

    [GlobalSetup]
    public void Setup()
    {
        _slab = new byte[SlabBytes];
        if (Data == "random") new Random(42).NextBytes(_slab);
        else SegmentBenchmarks.PriceRows(SlabBytes).CopyTo(_slab, 0);
        _output = new byte[SegmentCodec.MaxEncodedLength(ContentChunker.MaxSize)];
        if (Chunk(Scalar: true) != Chunk(Scalar: false)) throw new InvalidOperationException("the AVX2 lanes cut elsewhere than the chunker");
    }

    [Benchmark(Baseline = true, Description = "raw codec: id + LZ4 + checksum per 64 KB")]
    public long Codec()
    {
        long stored = 0;
        for (var at = 0; at < _slab.Length; at += SegmentCodec.DefaultSegmentSize)
        {
            var raw = _slab.AsSpan(at, Math.Min(SegmentCodec.DefaultSegmentSize, _slab.Length - at));
            SegmentId.Of(raw);
            stored += SegmentCodec.Encode(raw, _output);
        }
        return stored;
    }

    [Benchmark(Description = "content-defined chunker (" + ContentChunker.Name + ")")]
    public int Chunker() => Chunk(Scalar: true);

    [Benchmark(Description = "same boundaries, AVX2 gather lanes (not used)")]
    public int Avx2Lanes() => Avx2.IsSupported ? Chunk(Scalar: false) : 0;

    /// <summary>Cuts the whole slab; returns a digest of the segment lengths, so both versions can be compared.</summary>
    private int Chunk(bool Scalar)
    {
        var sum = 0;
        ReadOnlySpan<byte> rest = _slab;
        while (!rest.IsEmpty)
        {
            var cut = Scalar ? ContentChunker.Default.NextCut(rest, final: true) : GatherLanes.NextCut(rest);
            sum = sum * 31 + cut;
            rest = rest[cut..];
        }
        return sum;
    }

    /// <summary>The chunker's boundaries computed eight lanes at a time with AVX2 gathers.</summary>
    private static unsafe class GatherLanes
    {
        private const int Block = 1024, Lanes = 8, Round = Block * Lanes;
        private const ulong StrictMask = ~0UL << (64 - ContentChunker.StrictBits), LooseMask = ~0UL << (64 - ContentChunker.LooseBits);
        private static readonly ulong[] Gear = CreateGear();

        public static int NextCut(ReadOnlySpan<byte> data)
        {
            if (data.Length <= ContentChunker.MinSize) return data.Length;
            var limit = Math.Min(data.Length, ContentChunker.MaxSize);
            var cut = Scan(ref MemoryMarshal.GetReference(data), limit);
            return cut > 0 ? cut : limit;
        }

        private static int Scan(ref byte start, int limit)
        {
            var r0 = ContentChunker.MinSize;
            fixed (ulong* gear = Gear)
            fixed (byte* s = &start)
            {
                var laneA = Vector256.Create(0L, Block, 2 * Block, 3 * Block);
                var laneB = Vector256.Create(4L * Block, 5 * Block, 6 * Block, 7 * Block);
                var low = Vector256.Create(255UL);
                // A round may straddle the normal size; it is a whole number of blocks, so each lane has one mask.
                for (; r0 + Round <= limit; r0 += Round)
                {
                    static ulong M(int at) => at < ContentChunker.NormalSize ? StrictMask : LooseMask;
                    var maskA = Vector256.Create(M(r0), M(r0 + Block), M(r0 + 2 * Block), M(r0 + 3 * Block));
                    var maskB = Vector256.Create(M(r0 + 4 * Block), M(r0 + 5 * Block), M(r0 + 6 * Block), M(r0 + 7 * Block));
                    var oa = laneA + Vector256.Create((long)r0 - 64);
                    var ob = laneB + Vector256.Create((long)r0 - 64);
                    Vector256<ulong> ha = default, hb = default, hit = default;
                    for (var j = 0; j < 64 + Block; j += 8)
                    {
                        var wa = Avx2.GatherVector256((long*)(s + j), oa, 1).AsUInt64();
                        var wb = Avx2.GatherVector256((long*)(s + j), ob, 1).AsUInt64();
                        for (var t = 0; t < 8; t++)
                        {
                            ha = (ha << 1) + Avx2.GatherVector256(gear, (wa & low).AsInt64(), 8);
                            hb = (hb << 1) + Avx2.GatherVector256(gear, (wb & low).AsInt64(), 8);
                            wa >>>= 8;
                            wb >>>= 8;
                            if (j >= 64) hit |= Vector256.Equals(ha & maskA, default) | Vector256.Equals(hb & maskB, default);
                        }
                        // The serial scan starts from zero at the minimum: the first lane of the first round must not carry the bytes before it.
                        if (j == 56 && r0 == ContentChunker.MinSize) ha = ha.WithElement(0, 0UL);
                    }
                    if (hit != Vector256<ulong>.Zero) return Serial(ref start, r0, r0 + Round, limit);
                }
            }
            return r0 < limit ? Serial(ref start, r0, limit, limit) : 0;
        }

        /// <summary>The first cut in [from, end), the hash warmed up over the 64 bytes before it.</summary>
        private static int Serial(ref byte start, int from, int end, int limit)
        {
            ulong hash = 0;
            for (var w = Math.Max(ContentChunker.MinSize, from - 64); w < from; w++) hash = (hash << 1) + Gear[Unsafe.Add(ref start, w)];
            for (var i = from; i < Math.Min(end, limit); i++)
            {
                hash = (hash << 1) + Gear[Unsafe.Add(ref start, i)];
                if ((hash & (i < ContentChunker.NormalSize ? StrictMask : LooseMask)) == 0) return i + 1;
            }
            return 0;
        }

        /// <summary>The chunker's table: SplitMix64 from its fixed seed.</summary>
        private static ulong[] CreateGear()
        {
            var table = new ulong[256];
            ulong state = 0x6863642d67656172;
            for (var i = 0; i < table.Length; i++)
            {
                var z = state += 0x9E3779B97F4A7C15;
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
                table[i] = z ^ (z >> 31);
            }
            return table;
        }
    }
}
