using K4os.Compression.LZ4;

namespace Hpc.CommonData.Format;

/// <summary>
/// LZ4 block format (managed: K4os.Compression.LZ4). Compression is the reference fast mode, LZ4_compress_default
/// (acceleration 1), which is what segments have always been written with: for the same input it produces the same
/// block as liblz4, so stored lengths and manifests stay the same (FormatCompatibilityTests pin this).
/// </summary>
public static class Lz4
{
    /// <summary>The reference LZ4_COMPRESSBOUND: the largest block <paramref name="inputLength"/> bytes can encode to.</summary>
    public static int MaximumOutputLength(int inputLength) => LZ4Codec.MaximumOutputSize(inputLength);

    /// <summary>Compresses into <paramref name="destination"/>; returns 0 when it does not fit.</summary>
    public static int Encode(ReadOnlySpan<byte> source, Span<byte> destination)
    {
        if (source.IsEmpty) return 0;
        var n = LZ4Codec.Encode(source, destination, LZ4Level.L00_FAST);
        return n > 0 ? n : 0;
    }

    /// <summary>Decompresses; returns the decoded length, or -1 when the input is malformed or does not fit.</summary>
    public static int Decode(ReadOnlySpan<byte> source, Span<byte> destination)
    {
        if (source.IsEmpty) return destination.IsEmpty ? 0 : -1;
        var n = LZ4Codec.Decode(source, destination);
        return n < 0 ? -1 : n;
    }
}
