using System.Buffers.Binary;
using System.Runtime.CompilerServices;
using System.Runtime.Intrinsics;
using System.Runtime.Intrinsics.X86;

namespace Hpc.CommonData.Format;

/// <summary>
/// BLAKE3-256 of one segment with sixteen of its 1 KB chunks compressed at once in AVX-512 lanes, the segment's last
/// (partial) chunk and its tree of parents included. The <c>Blake3</c> package is as fast on a whole number of 16-chunk
/// groups, but hashes the chunks left over one at a time, and content-defined segments almost always leave some: a
/// 71.3-chunk segment hashed at about half the speed of a 64-chunk one. Here a partial group only leaves lanes idle.
/// The output is BLAKE3's, checked against the package and the published test vectors.
/// </summary>
internal static unsafe class Blake3Lanes
{
    private const int ChunkLength = 1024;
    private const int BlockLength = 64;
    /// <summary>Longest input hashed here: the largest content-defined segment. Longer ones go to the package.</summary>
    public const int MaxLength = 256 * ChunkLength;
    private const uint ChunkStart = 1, ChunkEnd = 2, Parent = 4, Root = 8;

    private static ReadOnlySpan<uint> IV => [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19];

    public static bool IsSupported => Avx512F.IsSupported;

    /// <summary>Whether <see cref="Hash"/> takes an input this long: more than one chunk, at most <see cref="MaxLength"/>.</summary>
    public static bool Takes(int length) => IsSupported && length is > ChunkLength and <= MaxLength;

    /// <summary>The 32-byte BLAKE3 hash of <paramref name="input"/>; only for lengths <see cref="Takes"/> accepts.</summary>
    public static void Hash(ReadOnlySpan<byte> input, Span<byte> output)
    {
        if (!Takes(input.Length)) throw new ArgumentOutOfRangeException(nameof(input), "input must be 1 KB to 256 KB long, on a CPU with AVX-512");
        ArgumentOutOfRangeException.ThrowIfLessThan(output.Length, 32);
        var n = (input.Length + ChunkLength - 1) / ChunkLength;
        var cvs = stackalloc uint[8 * n];
        // The last chunk, zero-padded to a whole chunk: lanes read whole blocks, and BLAKE3 pads a short block with zeros.
        var tail = stackalloc byte[ChunkLength];
        var cv = stackalloc Vector512<uint>[8];
        var rows = stackalloc nint[16];
        var lanes = stackalloc uint[16 * 8];
        var blockCount = stackalloc uint[16];
        var lastBlockLength = stackalloc uint[16];
        var tailLength = input.Length - (n - 1) * ChunkLength;
        var tailBlocks = (tailLength + BlockLength - 1) / BlockLength;
        new Span<byte>(tail, ChunkLength).Clear();
        input[((n - 1) * ChunkLength)..].CopyTo(new Span<byte>(tail, ChunkLength));
        var laneIndex = Vector512.Create(0u, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        fixed (byte* data = input)
        {
            for (var first = 0; first < n; first += 16)
            {
                var used = Math.Min(16, n - first);
                for (var l = 0; l < 16; l++)
                {
                    var c = first + l;
                    // Idle lanes hash the first chunk again; their output is dropped.
                    rows[l] = c < n - 1 ? (nint)(data + (long)c * ChunkLength) : c == n - 1 ? (nint)tail : (nint)data;
                    blockCount[l] = c == n - 1 ? (uint)tailBlocks : 16;
                    lastBlockLength[l] = c == n - 1 ? (uint)(tailLength - BlockLength * (tailBlocks - 1)) : BlockLength;
                }
                var lastBlock = Vector512.Load(blockCount) - Vector512<uint>.One;
                var lastLength = Vector512.Load(lastBlockLength);
                var counter = Vector512.Create((uint)first) + laneIndex;
                for (var w = 0; w < 8; w++) cv[w] = Vector512.Create(IV[w]);
                var blocks = used == 1 && first == n - 1 ? tailBlocks : 16;
                for (var j = 0; j < blocks; j++)
                {
                    var jv = Vector512.Create((uint)j);
                    var isLast = Vector512.Equals(jv, lastBlock);
                    var flags = (j == 0 ? Vector512.Create(ChunkStart) : Vector512<uint>.Zero) | (isLast & Vector512.Create(ChunkEnd));
                    var length = Vector512.ConditionalSelect(isLast, lastLength, Vector512.Create((uint)BlockLength));
                    // The short last chunk's lane keeps the value of its last block while the others go on.
                    Compress(cv, rows, j * BlockLength, counter, length, flags, Vector512.LessThanOrEqual(jv, lastBlock));
                }
                StoreLanes(cv, lanes, cvs + 8 * first, used);
            }
            // The parents, a level at a time, pairing neighbours; a level's odd last node moves up as it is, which
            // gives BLAKE3's left-balanced tree. The level of two is the root.
            for (var m = n; m > 1;)
            {
                var pairs = m / 2;
                var flags = Vector512.Create(m == 2 ? Parent | Root : Parent);
                for (var first = 0; first < pairs; first += 16)
                {
                    var used = Math.Min(16, pairs - first);
                    // A pair's two chaining values lie side by side: one 64-byte block.
                    for (var l = 0; l < 16; l++) rows[l] = (nint)(cvs + 16 * (first + (l < used ? l : 0)));
                    for (var w = 0; w < 8; w++) cv[w] = Vector512.Create(IV[w]);
                    Compress(cv, rows, 0, Vector512<uint>.Zero, Vector512.Create((uint)BlockLength), flags, Vector512<uint>.AllBitsSet);
                    StoreLanes(cv, lanes, cvs + 8 * first, used);
                }
                if ((m & 1) == 1) new Span<uint>(cvs + 8 * (m - 1), 8).CopyTo(new Span<uint>(cvs + 8 * pairs, 8));
                m = pairs + (m & 1);
            }
        }
        for (var w = 0; w < 8; w++) BinaryPrimitives.WriteUInt32LittleEndian(output[(4 * w)..], cvs[w]);
    }

    /// <summary>Lane l's eight words to <paramref name="destination"/>[8 l ..], for the first <paramref name="used"/> lanes.</summary>
    private static void StoreLanes(Vector512<uint>* cv, uint* lanes, uint* destination, int used)
    {
        for (var w = 0; w < 8; w++) cv[w].Store(lanes + 16 * w);
        for (var l = 0; l < used; l++)
            for (var w = 0; w < 8; w++) destination[8 * l + w] = lanes[16 * w + l];
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static Vector512<uint> R(Vector512<uint> x, [System.Diagnostics.CodeAnalysis.ConstantExpected] byte n) => Avx512F.RotateRight(x, n);

    /// <summary>
    /// One compression in each of 16 lanes: lane l's block is the 64 bytes at <paramref name="rows"/>[l] +
    /// <paramref name="offset"/>; its chaining value in <paramref name="cv"/> is replaced only where <paramref name="active"/>.
    /// </summary>
    private static void Compress(Vector512<uint>* cv, nint* rows, int offset, Vector512<uint> counter, Vector512<uint> blockLength,
        Vector512<uint> flags, Vector512<uint> active)
    {
        var r0 = Vector512.Load((uint*)(rows[0] + offset)); var r1 = Vector512.Load((uint*)(rows[1] + offset));
        var r2 = Vector512.Load((uint*)(rows[2] + offset)); var r3 = Vector512.Load((uint*)(rows[3] + offset));
        var r4 = Vector512.Load((uint*)(rows[4] + offset)); var r5 = Vector512.Load((uint*)(rows[5] + offset));
        var r6 = Vector512.Load((uint*)(rows[6] + offset)); var r7 = Vector512.Load((uint*)(rows[7] + offset));
        var r8 = Vector512.Load((uint*)(rows[8] + offset)); var r9 = Vector512.Load((uint*)(rows[9] + offset));
        var r10 = Vector512.Load((uint*)(rows[10] + offset)); var r11 = Vector512.Load((uint*)(rows[11] + offset));
        var r12 = Vector512.Load((uint*)(rows[12] + offset)); var r13 = Vector512.Load((uint*)(rows[13] + offset));
        var r14 = Vector512.Load((uint*)(rows[14] + offset)); var r15 = Vector512.Load((uint*)(rows[15] + offset));
        // Transposed, so that mK holds word K of every lane's block: first within 128-bit lanes, then across them.
        Transpose4(r0, r1, r2, r3, out var a0, out var a1, out var a2, out var a3);
        Transpose4(r4, r5, r6, r7, out var a4, out var a5, out var a6, out var a7);
        Transpose4(r8, r9, r10, r11, out var a8, out var a9, out var a10, out var a11);
        Transpose4(r12, r13, r14, r15, out var a12, out var a13, out var a14, out var a15);
        Across4(a0, a4, a8, a12, out var m0, out var m4, out var m8, out var m12);
        Across4(a1, a5, a9, a13, out var m1, out var m5, out var m9, out var m13);
        Across4(a2, a6, a10, a14, out var m2, out var m6, out var m10, out var m14);
        Across4(a3, a7, a11, a15, out var m3, out var m7, out var m11, out var m15);

        Vector512<uint> v0 = cv[0], v1 = cv[1], v2 = cv[2], v3 = cv[3], v4 = cv[4], v5 = cv[5], v6 = cv[6], v7 = cv[7];
        var v8 = Vector512.Create(IV[0]); var v9 = Vector512.Create(IV[1]); var v10 = Vector512.Create(IV[2]); var v11 = Vector512.Create(IV[3]);
        // The counter's high word is zero: a segment has far fewer than 2^32 chunks.
        var v12 = counter; var v13 = Vector512<uint>.Zero; var v14 = blockLength; var v15 = flags;
        // Seven rounds, the message words in each round's order written out, so that all 32 vectors stay in registers.
            // round 1
            v0 += v4 + m0; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m1; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m2; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m3; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m4; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m5; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m6; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m7; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m8; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m9; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m10; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m11; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m12; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m13; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m14; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m15; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);
            // round 2
            v0 += v4 + m2; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m6; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m3; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m10; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m7; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m0; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m4; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m13; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m1; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m11; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m12; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m5; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m9; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m14; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m15; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m8; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);
            // round 3
            v0 += v4 + m3; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m4; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m10; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m12; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m13; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m2; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m7; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m14; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m6; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m5; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m9; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m0; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m11; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m15; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m8; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m1; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);
            // round 4
            v0 += v4 + m10; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m7; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m12; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m9; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m14; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m3; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m13; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m15; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m4; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m0; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m11; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m2; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m5; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m8; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m1; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m6; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);
            // round 5
            v0 += v4 + m12; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m13; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m9; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m11; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m15; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m10; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m14; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m8; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m7; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m2; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m5; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m3; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m0; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m1; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m6; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m4; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);
            // round 6
            v0 += v4 + m9; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m14; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m11; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m5; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m8; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m12; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m15; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m1; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m13; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m3; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m0; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m10; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m2; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m6; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m4; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m7; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);
            // round 7
            v0 += v4 + m11; v12 = R(v12 ^ v0, 16); v8 += v12; v4 = R(v4 ^ v8, 12); v0 += v4 + m15; v12 = R(v12 ^ v0, 8); v8 += v12; v4 = R(v4 ^ v8, 7);
            v1 += v5 + m5; v13 = R(v13 ^ v1, 16); v9 += v13; v5 = R(v5 ^ v9, 12); v1 += v5 + m0; v13 = R(v13 ^ v1, 8); v9 += v13; v5 = R(v5 ^ v9, 7);
            v2 += v6 + m1; v14 = R(v14 ^ v2, 16); v10 += v14; v6 = R(v6 ^ v10, 12); v2 += v6 + m9; v14 = R(v14 ^ v2, 8); v10 += v14; v6 = R(v6 ^ v10, 7);
            v3 += v7 + m8; v15 = R(v15 ^ v3, 16); v11 += v15; v7 = R(v7 ^ v11, 12); v3 += v7 + m6; v15 = R(v15 ^ v3, 8); v11 += v15; v7 = R(v7 ^ v11, 7);
            v0 += v5 + m14; v15 = R(v15 ^ v0, 16); v10 += v15; v5 = R(v5 ^ v10, 12); v0 += v5 + m10; v15 = R(v15 ^ v0, 8); v10 += v15; v5 = R(v5 ^ v10, 7);
            v1 += v6 + m2; v12 = R(v12 ^ v1, 16); v11 += v12; v6 = R(v6 ^ v11, 12); v1 += v6 + m12; v12 = R(v12 ^ v1, 8); v11 += v12; v6 = R(v6 ^ v11, 7);
            v2 += v7 + m3; v13 = R(v13 ^ v2, 16); v8 += v13; v7 = R(v7 ^ v8, 12); v2 += v7 + m4; v13 = R(v13 ^ v2, 8); v8 += v13; v7 = R(v7 ^ v8, 7);
            v3 += v4 + m7; v14 = R(v14 ^ v3, 16); v9 += v14; v4 = R(v4 ^ v9, 12); v3 += v4 + m13; v14 = R(v14 ^ v3, 8); v9 += v14; v4 = R(v4 ^ v9, 7);

        cv[0] = Vector512.ConditionalSelect(active, v0 ^ v8, cv[0]);
        cv[1] = Vector512.ConditionalSelect(active, v1 ^ v9, cv[1]);
        cv[2] = Vector512.ConditionalSelect(active, v2 ^ v10, cv[2]);
        cv[3] = Vector512.ConditionalSelect(active, v3 ^ v11, cv[3]);
        cv[4] = Vector512.ConditionalSelect(active, v4 ^ v12, cv[4]);
        cv[5] = Vector512.ConditionalSelect(active, v5 ^ v13, cv[5]);
        cv[6] = Vector512.ConditionalSelect(active, v6 ^ v14, cv[6]);
        cv[7] = Vector512.ConditionalSelect(active, v7 ^ v15, cv[7]);
    }

    /// <summary>Within each 128-bit lane, rows r0..r3 become words: jK's 128-bit lane k holds word 4k + K of r0..r3.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static void Transpose4(Vector512<uint> r0, Vector512<uint> r1, Vector512<uint> r2, Vector512<uint> r3,
        out Vector512<uint> j0, out Vector512<uint> j1, out Vector512<uint> j2, out Vector512<uint> j3)
    {
        var t0 = Avx512F.UnpackLow(r0, r1).AsUInt64(); var t1 = Avx512F.UnpackHigh(r0, r1).AsUInt64();
        var t2 = Avx512F.UnpackLow(r2, r3).AsUInt64(); var t3 = Avx512F.UnpackHigh(r2, r3).AsUInt64();
        j0 = Avx512F.UnpackLow(t0, t2).AsUInt32(); j1 = Avx512F.UnpackHigh(t0, t2).AsUInt32();
        j2 = Avx512F.UnpackLow(t1, t3).AsUInt32(); j3 = Avx512F.UnpackHigh(t1, t3).AsUInt32();
    }

    /// <summary>A 4×4 transpose of 128-bit lanes: yK's lane q is xq's lane K.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static void Across4(Vector512<uint> x0, Vector512<uint> x1, Vector512<uint> x2, Vector512<uint> x3,
        out Vector512<uint> y0, out Vector512<uint> y1, out Vector512<uint> y2, out Vector512<uint> y3)
    {
        var s0 = Avx512F.Shuffle4x128(x0, x1, 0x88); var s1 = Avx512F.Shuffle4x128(x0, x1, 0xDD);
        var s2 = Avx512F.Shuffle4x128(x2, x3, 0x88); var s3 = Avx512F.Shuffle4x128(x2, x3, 0xDD);
        y0 = Avx512F.Shuffle4x128(s0, s2, 0x88); y2 = Avx512F.Shuffle4x128(s0, s2, 0xDD);
        y1 = Avx512F.Shuffle4x128(s1, s3, 0x88); y3 = Avx512F.Shuffle4x128(s1, s3, 0xDD);
    }
}
