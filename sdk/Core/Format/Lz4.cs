using System.Runtime.InteropServices;
using Hpc.CommonData.Native;

namespace Hpc.CommonData.Format;

/// <summary>LZ4 block format over the reference C implementation (liblz4).</summary>
public static unsafe partial class Lz4
{
    static Lz4() => NativeLibraries.EnsureRegistered();

    [LibraryImport(NativeLibraries.Lz4, EntryPoint = "LZ4_compressBound")]
    private static partial int CompressBoundNative(int inputSize);

    [LibraryImport(NativeLibraries.Lz4, EntryPoint = "LZ4_compress_fast")]
    private static partial int CompressFast(byte* src, byte* dst, int srcSize, int dstCapacity, int acceleration);

    [LibraryImport(NativeLibraries.Lz4, EntryPoint = "LZ4_decompress_safe")]
    private static partial int DecompressSafe(byte* src, byte* dst, int compressedSize, int dstCapacity);

    public static int MaximumOutputLength(int inputLength) => CompressBoundNative(inputLength);

    /// <summary>Compresses into <paramref name="destination"/>; returns 0 when it does not fit.</summary>
    public static int Encode(ReadOnlySpan<byte> source, Span<byte> destination, int acceleration = 1)
    {
        if (source.IsEmpty) return 0;
        fixed (byte* s = source)
        fixed (byte* d = destination)
            return CompressFast(s, d, source.Length, destination.Length, acceleration);
    }

    /// <summary>Decompresses; returns the decoded length, or -1 when the input is malformed or does not fit.</summary>
    public static int Decode(ReadOnlySpan<byte> source, Span<byte> destination)
    {
        if (source.IsEmpty) return destination.IsEmpty ? 0 : -1;
        fixed (byte* s = source)
        fixed (byte* d = destination)
        {
            var n = DecompressSafe(s, d, source.Length, destination.Length);
            return n < 0 ? -1 : n;
        }
    }
}
