using System.IO.Hashing;

namespace Hpc.CommonData.Format;

/// <summary>
/// xxHash3, 64- and 128-bit (managed: System.IO.Hashing), bit-identical to the reference XXH3_64bits_withSeed and
/// XXH3_128bits (seed 0): segment checksums, placement and dataset hashes are the values earlier builds wrote. Fast, and
/// only a check against damage: anyone can make bytes with a chosen XXH3 value, so nothing is named by it (content ids
/// are BLAKE3-256, <see cref="SegmentId"/>).
/// </summary>
public static class XxHash
{
    /// <summary>XXH3-128, seed 0 (whole-dataset hashes).</summary>
    public static UInt128 Hash128Of(ReadOnlySpan<byte> data) => XxHash128.HashToUInt128(data);

    /// <summary>XXH3-64 with <paramref name="seed"/> (segment checksums with seed 0, placement with per-host seeds).</summary>
    public static ulong Hash64Of(ReadOnlySpan<byte> data, ulong seed = 0) => XxHash3.HashToUInt64(data, unchecked((long)seed));

    /// <summary>Hashes memory that may be longer than a span can describe (a mapped multi-GB file).</summary>
    public static unsafe UInt128 Hash128Of(byte* data, long length)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(length);
        if (length <= int.MaxValue) return XxHash128.HashToUInt128(new ReadOnlySpan<byte>(data, (int)length));
        using var h = new Streaming128();
        h.Append(data, length);
        return h.Digest();
    }

    /// <summary>Incremental XXH3-128 (seed 0) for whole-dataset hashes: equal to the one-shot hash of the concatenation.</summary>
    public sealed class Streaming128 : IDisposable
    {
        /// <summary>Longest piece handed to the hasher at once: spans are int-sized, mapped datasets are not.</summary>
        private const int Step = 1 << 30;

        private XxHash128? _hash = new();

        public void Append(ReadOnlySpan<byte> data) => Live.Append(data);

        public unsafe void Append(byte* data, long length)
        {
            ArgumentOutOfRangeException.ThrowIfNegative(length);
            var hash = Live;
            for (long o = 0; o < length; o += Step) hash.Append(new ReadOnlySpan<byte>(data + o, (int)Math.Min(Step, length - o)));
        }

        /// <summary>The hash of everything appended so far (appending may go on).</summary>
        public UInt128 Digest() => Live.GetCurrentHashAsUInt128();

        private XxHash128 Live
        {
            get
            {
                var h = _hash;
                ObjectDisposedException.ThrowIf(h is null, this);
                return h;
            }
        }

        public void Dispose() => _hash = null;
    }
}
