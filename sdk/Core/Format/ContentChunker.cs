using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace Hpc.CommonData.Format;

/// <summary>
/// Content-defined segment boundaries: a gear hash over the bytes (each byte shifts the hash left and adds a fixed
/// random value for it, so the top bits depend on the last 64 bytes only) cuts where its top bits are all zero. An
/// insertion or deletion moves the boundaries only around the edit; after it they fall where they fell before, so the
/// segments after an edit keep their content ids and are not stored or fetched again.
/// </summary>
/// <remarks>
/// FastCDC's ideas, our code: no cut in the first <see cref="MinSize"/> bytes (skipped without hashing, which is most of
/// the speed), a stricter condition before <see cref="NormalSize"/> and a looser one after it ("normalised chunking",
/// which narrows the size spread), a forced cut at <see cref="MaxSize"/>. <see cref="NormalSize"/> is set so that
/// segments average <see cref="AverageSize"/>: a re-stage moves about one segment per edited place, the one the edit
/// falls in. A narrower spread (a larger minimum, stricter masks) would shave a little more off small edits but lets
/// the boundaries take several segments to fall back in step after an insert or delete of a few KB, so it is not used.
/// The gear table comes from a fixed seed, so boundaries are the same on every machine and in every version of this
/// code; changing the seed, the sizes or the masks would change every boundary and must come with a new chunking name.
/// </remarks>
public sealed class ContentChunker
{
    /// <summary>
    /// The name manifests record: gear hash, no cut before 16 KB, 18 bits of zeros wanted before 53 KB and 14 after,
    /// at most 256 KB; segments average 64 KB. The first scheme, <c>gear-64k</c>, switched masks at 64 KB and its
    /// segments averaged 73 KB.
    /// </summary>
    public const string Name = "gear-64k-2";

    public const int MinSize = 16 * 1024;
    /// <summary>Where the strict condition gives way to the loose one.</summary>
    public const int NormalSize = 53 * 1024;
    /// <summary>What segments average, on random data and on market history alike.</summary>
    public const int AverageSize = 64 * 1024;
    public const int MaxSize = 256 * 1024;

    // 16 bits of zeros would average 64 KB; two more before NormalSize and two fewer after it.
    public const int StrictBits = 18;
    public const int LooseBits = 14;
    private const ulong StrictMask = ~0UL << (64 - StrictBits);
    private const ulong LooseMask = ~0UL << (64 - LooseBits);

    private static readonly ulong[] Gear = CreateGear();

    public static ContentChunker Default { get; } = new();

    /// <summary>
    /// The length of the segment that starts at <paramref name="data"/>[0]: the first cut point, or
    /// <see cref="MaxSize"/>. When <paramref name="data"/> holds fewer than <see cref="MaxSize"/> bytes and no cut is
    /// found, returns <paramref name="data"/>'s length if <paramref name="final"/> (the end of the dataset) and 0
    /// otherwise (the caller must supply more bytes).
    /// </summary>
    public int NextCut(ReadOnlySpan<byte> data, bool final)
    {
        if (data.Length <= MinSize)
            return final ? data.Length : 0;
        var limit = Math.Min(data.Length, MaxSize);
        var cut = Scan(ref MemoryMarshal.GetReference(data), limit);
        if (cut > 0) return cut;
        return limit == MaxSize || final ? limit : 0;
    }

    /// <summary>Scans from <see cref="MinSize"/> to <paramref name="limit"/>; the cut length or 0.</summary>
    /// <remarks>Normalised chunking: a cut is harder to find before <see cref="NormalSize"/> (more mask bits) than after.</remarks>
    [MethodImpl(MethodImplOptions.AggressiveOptimization)]
    private static int Scan(ref byte start, int limit)
    {
        ref var gear = ref MemoryMarshal.GetArrayDataReference(Gear);
        ulong hash = 0;
        var i = MinSize;
        var cut = Scan(ref start, ref gear, ref hash, ref i, Math.Min(NormalSize, limit), StrictMask);
        return cut > 0 ? cut : Scan(ref start, ref gear, ref hash, ref i, limit, LooseMask);
    }

    /// <summary>Hashes bytes <paramref name="i"/> to <paramref name="end"/> until the top bits under <paramref name="mask"/> are zero.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private static int Scan(ref byte start, ref ulong gear, ref ulong hash, ref int i, int end, ulong mask)
    {
        // Four bytes per loop turn: the loop's own counting and branching is a fifth of the work per byte otherwise.
        for (; i + 4 <= end; i += 4)
        {
            ref var p = ref Unsafe.Add(ref start, i);
            hash = (hash << 1) + Unsafe.Add(ref gear, p);
            if ((hash & mask) == 0) return i + 1;
            hash = (hash << 1) + Unsafe.Add(ref gear, Unsafe.Add(ref p, 1));
            if ((hash & mask) == 0) return i + 2;
            hash = (hash << 1) + Unsafe.Add(ref gear, Unsafe.Add(ref p, 2));
            if ((hash & mask) == 0) return i + 3;
            hash = (hash << 1) + Unsafe.Add(ref gear, Unsafe.Add(ref p, 3));
            if ((hash & mask) == 0) return i + 4;
        }
        for (; i < end; i++)
        {
            hash = (hash << 1) + Unsafe.Add(ref gear, Unsafe.Add(ref start, i));
            if ((hash & mask) == 0) return i + 1;
        }
        return 0;
    }

    /// <summary>SplitMix64 from a fixed seed: 256 well-mixed 64-bit values, identical everywhere.</summary>
    private static ulong[] CreateGear()
    {
        var table = new ulong[256];
        ulong state = 0x6863642d67656172; // "hcd-gear"
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
