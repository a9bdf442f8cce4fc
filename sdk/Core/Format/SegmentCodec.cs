using System.Buffers.Binary;

namespace Hpc.CommonData.Format;

public enum SegmentCodecKind : byte { Raw = 0, Lz4 = 1, Zstd = 2 }

/// <summary>
/// The stored form of a segment: a 24-byte header then the payload.
/// <code>
///  0  'H' 'C' 'S'  format version (2: the segment is named by the BLAKE3-256 of its raw bytes)
///  4  codec (0 raw, 1 lz4, 2 zstd: one Zstandard frame), 3 reserved bytes (zero)
///  8  raw length   (int32 LE)
/// 12  payload length (int32 LE)
/// 16  XXH3-64 of the payload (uint64 LE)
/// </code>
/// The payload checksum is a cheap check against damage, made before decompression and by nodes that only forward a
/// segment; it proves nothing against a writer, who can make any XXH3 value. The content id (BLAKE3-256 of the raw
/// bytes) is checked after it, so a segment is only accepted when it is exactly the bytes that were staged. Readers skip
/// the checksum of a raw payload (the content id covers the same bytes); cache hosts and forwarding nodes check it always.
/// Format 1 segments were named by XXH3-128 and are refused: a forged one could satisfy its id.
/// </summary>
public static class SegmentCodec
{
    public const int HeaderLength = 24;
    public const byte FormatVersion = 2;
    /// <summary>The format of segments named by XXH3-128, written before content ids became BLAKE3-256.</summary>
    public const byte LegacyFormatVersion = 1;
    public const int DefaultSegmentSize = 64 * 1024;
    /// <summary>Upper bound for one stored object (a segment or a manifest): every frame on the wire stays bounded.</summary>
    public const int MaxRawLength = 48 * 1024 * 1024;

    public static int MaxEncodedLength(int rawLength) => HeaderLength + Math.Max(rawLength, Lz4.MaximumOutputLength(rawLength));

    private const int HeadSlack = 64;

    /// <summary>Room <see cref="EncodeHead(ReadOnlySpan{byte}, Span{byte}, SegmentCompression, out bool)"/> needs for a segment of <paramref name="rawLength"/> bytes.</summary>
    public static int MaxHeadLength(int rawLength) => HeaderLength + rawLength + HeadSlack;

    /// <summary>Encodes <paramref name="raw"/> into <paramref name="destination"/>; stored raw when LZ4 does not make it smaller.</summary>
    public static int Encode(ReadOnlySpan<byte> raw, Span<byte> destination, bool compress = true) =>
        Encode(raw, destination, compress ? SegmentCompression.Lz4 : SegmentCompression.None);

    /// <summary>Encodes <paramref name="raw"/> with <paramref name="compression"/>; stored raw when that does not make it smaller.</summary>
    public static int Encode(ReadOnlySpan<byte> raw, Span<byte> destination, SegmentCompression compression)
    {
        var probe = true;
        return EncodeInOrder(raw, destination, compression, ref probe);
    }

    /// <summary>As <see cref="Encode(ReadOnlySpan{byte}, Span{byte}, SegmentCompression)"/>, probing as <see cref="EncodeHeadInOrder"/> does.</summary>
    public static int EncodeInOrder(ReadOnlySpan<byte> raw, Span<byte> destination, SegmentCompression compression, ref bool probe)
    {
        var n = EncodeHeadInOrder(raw, destination, compression, ref probe, out var storedRaw);
        if (!storedRaw) return n;
        raw.CopyTo(destination[HeaderLength..]);
        return HeaderLength + raw.Length;
    }

    /// <summary>
    /// Encodes like <see cref="Encode(ReadOnlySpan{byte}, Span{byte}, SegmentCompression)"/> but leaves a raw-stored payload where it is: writes the header, and the LZ4
    /// payload when LZ4 shrinks the segment, into <paramref name="destination"/> and returns how many bytes it wrote.
    /// With <paramref name="storedRaw"/> the stored form is those 24 header bytes followed by <paramref name="raw"/>
    /// itself, so a sender can write both without copying the segment once more. <paramref name="destination"/> needs
    /// <see cref="MaxHeadLength"/> bytes: a compressed payload that would not be smaller than the raw bytes is not kept
    /// anyway, so LZ4 gets only a little more room than that and gives up once it would clearly exceed it.
    /// </summary>
    public static int EncodeHead(ReadOnlySpan<byte> raw, Span<byte> destination, bool compress, out bool storedRaw) =>
        EncodeHead(raw, destination, compress ? SegmentCompression.Lz4 : SegmentCompression.None, out storedRaw);

    /// <inheritdoc cref="EncodeHead(ReadOnlySpan{byte}, Span{byte}, bool, out bool)"/>
    public static int EncodeHead(ReadOnlySpan<byte> raw, Span<byte> destination, SegmentCompression compression, out bool storedRaw)
    {
        var probe = true;
        return EncodeHeadInOrder(raw, destination, compression, ref probe, out storedRaw);
    }

    /// <summary>
    /// As <see cref="EncodeHead(ReadOnlySpan{byte}, Span{byte}, SegmentCompression, out bool)"/>, for one encoder going
    /// through segments in order: <paramref name="probe"/> says whether to try <see cref="LooksIncompressible"/> first,
    /// and comes back saying whether the next segment should (this one was stored raw). On compressible data the probe
    /// would be a tenth more LZ4 work for nothing, so it runs only once the data has stopped compressing.
    /// </summary>
    public static int EncodeHeadInOrder(ReadOnlySpan<byte> raw, Span<byte> destination, SegmentCompression compression, ref bool probe, out bool storedRaw)
    {
        if (raw.Length > MaxRawLength) throw new ArgumentOutOfRangeException(nameof(raw), $"segment of {raw.Length} bytes exceeds {MaxRawLength}");
        var tryProbe = probe;
        probe = true;
        if (compression.Codec != SegmentCodecKind.Raw && raw.Length > 1
            && !(tryProbe && compression.Codec == SegmentCodecKind.Lz4 && LooksIncompressible(raw)))
        {
            // With less room than its worst case a codec writes the same output or gives up (0); LZ4 reserves a few bytes
            // of room ahead while it works, so the slack keeps every block shorter than the raw bytes from being refused.
            var payload = destination.Slice(HeaderLength, Math.Min(destination.Length - HeaderLength, raw.Length + HeadSlack));
            var stored = compression.Codec == SegmentCodecKind.Zstd ? Zstd.Encode(raw, payload, compression.Level) : Lz4.Encode(raw, payload);
            if (stored > 0 && stored < raw.Length)
            {
                storedRaw = false;
                probe = false;
                WriteHeader(destination, compression.Codec, raw.Length, stored, XxHash.Hash64Of(payload[..stored]));
                return HeaderLength + stored;
            }
        }
        storedRaw = true;
        WriteHeader(destination, SegmentCodecKind.Raw, raw.Length, raw.Length, XxHash.Hash64Of(raw));
        return HeaderLength;
    }

    /// <summary>Segments shorter than this are always given to the codec: the probe would cost about as much.</summary>
    public const int ProbeMinLength = 16 * 1024;
    private const int ProbeWindow = 2048;
    private const int ProbeWindows = 3;

    /// <summary>
    /// True when three 2 KB pieces of the segment (its start, middle and end), compressed together with LZ4, shrink by
    /// less than 2%: such a segment is stored raw without a full compression attempt. On random or already compressed
    /// bytes the attempt was the largest cost after the content id (LZ4 walks the whole segment to find nothing); the
    /// probe costs a tenth of it. A segment compressible anywhere near a probed piece still compresses, and whatever the
    /// probe misses (compressible bytes only between the pieces) costs stored bytes, never correctness: raw is a valid
    /// stored form, and the content id does not depend on it. Only for LZ4: zstd's entropy stage shrinks bytes LZ4
    /// finds no repeats in (base64 text by about a quarter).
    /// </summary>
    public static bool LooksIncompressible(ReadOnlySpan<byte> raw)
    {
        if (raw.Length < ProbeMinLength) return false;
        Span<byte> sample = stackalloc byte[ProbeWindow * ProbeWindows];
        raw[..ProbeWindow].CopyTo(sample);
        raw.Slice(raw.Length / 2 - ProbeWindow / 2, ProbeWindow).CopyTo(sample[ProbeWindow..]);
        raw[^ProbeWindow..].CopyTo(sample[(2 * ProbeWindow)..]);
        // Output room of 98% of the sample: LZ4 gives up (0) as soon as it cannot do at least that well.
        Span<byte> output = stackalloc byte[sample.Length * 98 / 100];
        return Lz4.Encode(sample, output) == 0;
    }

    private static void WriteHeader(Span<byte> d, SegmentCodecKind codec, int rawLength, int payloadLength, ulong checksum)
    {
        d[0] = (byte)'H'; d[1] = (byte)'C'; d[2] = (byte)'S'; d[3] = FormatVersion;
        d[4] = (byte)codec; d[5] = 0; d[6] = 0; d[7] = 0;
        BinaryPrimitives.WriteInt32LittleEndian(d[8..], rawLength);
        BinaryPrimitives.WriteInt32LittleEndian(d[12..], payloadLength);
        BinaryPrimitives.WriteUInt64LittleEndian(d[16..], checksum);
    }

    /// <summary>
    /// Encodes and decodes one segment of compressible and one of random bytes and checks the result, and checks the
    /// compressible one against the id, stored length and checksum that every earlier build wrote for it, so a program
    /// refuses to start when its codec would not round-trip or would not read and name segments as the cache holds them,
    /// instead of failing its first fetch. Returns what went wrong, or null.
    /// </summary>
    public static string? SelfCheck()
    {
        try
        {
            var raw = new byte[DefaultSegmentSize];
            var stored = new byte[MaxEncodedLength(raw.Length)];
            var back = new byte[raw.Length];
            for (var pass = 0; pass < 2; pass++)
            {
                if (pass == 0) for (var i = 0; i < raw.Length; i++) raw[i] = (byte)('0' + i % 10);
                else new Random(20111).NextBytes(raw);
                var n = Encode(raw, stored);
                if (TryDecode(stored.AsSpan(0, n), SegmentId.Of(raw), back) is { } problem) return problem;
                if (!back.AsSpan().SequenceEqual(raw)) return "segment round trip returned different bytes";
                if (pass == 0 && KnownVector(stored.AsSpan(0, n)) is { } mismatch) return mismatch;
            }
            return null;
        }
        catch (Exception e)
        {
            return $"{e.GetType().Name}: {e.Message}";
        }
    }

    /// <summary>The digits segment of <see cref="SelfCheck"/>: its BLAKE3-256 as the reference b3sum computes it, its payload as liblz4 and libxxhash wrote it.</summary>
    private static string? KnownVector(ReadOnlySpan<byte> stored)
    {
        const string id = "1d8774f3a635b1f1501ceee4ec67367a3b99d3dfba524ae3803019e5107100d1";
        const int storedLength = 300;
        const ulong checksum = 0x3EA54B0D421C26B6;
        var raw = new byte[DefaultSegmentSize];
        for (var i = 0; i < raw.Length; i++) raw[i] = (byte)('0' + i % 10);
        if (SegmentId.Of(raw).ToString() != id) return $"content id of the known segment is {SegmentId.Of(raw)}, expected {id}";
        if (stored.Length != storedLength || stored[4] != (byte)SegmentCodecKind.Lz4)
            return $"known segment encoded to {stored.Length} bytes with codec {stored[4]}, expected {storedLength} with LZ4";
        var actual = BinaryPrimitives.ReadUInt64LittleEndian(stored[16..]);
        return actual == checksum ? null : $"known segment has payload checksum {actual:x16}, expected {checksum:x16}";
    }

    /// <summary>
    /// Checks a stored segment's header and payload checksum without decoding it: what a node that only forwards a
    /// segment can check cheaply, so damage is not passed on. The receiver still runs the full <see cref="TryDecode"/>.
    /// </summary>
    public static string? CheckStored(ReadOnlySpan<byte> stored, int expectedRawLength)
    {
        if (stored.Length < HeaderLength || stored[0] != 'H' || stored[1] != 'C' || stored[2] != 'S' || stored[3] != FormatVersion)
            return "not a stored segment";
        if (BinaryPrimitives.ReadInt32LittleEndian(stored[8..]) != expectedRawLength) return "raw length differs from the manifest";
        if (BinaryPrimitives.ReadInt32LittleEndian(stored[12..]) != stored.Length - HeaderLength) return "payload length differs from the bytes present";
        return XxHash.Hash64Of(stored[HeaderLength..]) == BinaryPrimitives.ReadUInt64LittleEndian(stored[16..]) ? null : "payload checksum mismatch";
    }

    /// <summary>Reads the raw length from a header without validating the rest.</summary>
    public static bool TryReadRawLength(ReadOnlySpan<byte> stored, out int rawLength)
    {
        rawLength = 0;
        if (stored.Length < HeaderLength || stored[0] != 'H' || stored[1] != 'C' || stored[2] != 'S') return false;
        rawLength = BinaryPrimitives.ReadInt32LittleEndian(stored[8..]);
        return rawLength is >= 0 and <= MaxRawLength;
    }

    /// <summary>
    /// Verifies and decodes a stored segment into <paramref name="destination"/> (exactly the raw length).
    /// Returns null on success, otherwise why the segment was rejected.
    /// </summary>
    public static string? TryDecode(ReadOnlySpan<byte> stored, SegmentId expected, Span<byte> destination) =>
        Decode(stored, expected, destination, everyChecksum: false, copyRaw: true, out _);

    /// <summary>
    /// As <see cref="TryDecode"/>, and the payload checksum must hold whatever the codec: what a cache host requires of
    /// a segment a writer stores, since nodes that only forward segments check that checksum (<see cref="CheckStored"/>)
    /// and a stored segment is never replaced.
    /// </summary>
    public static string? TryDecodeStrict(ReadOnlySpan<byte> stored, SegmentId expected, Span<byte> destination) =>
        Decode(stored, expected, destination, everyChecksum: true, copyRaw: true, out _);

    /// <summary>
    /// As <see cref="TryDecode"/>, without copying a raw segment: <paramref name="content"/> is the verified raw bytes —
    /// the stored payload itself when the segment was stored raw, else <paramref name="scratch"/> decoded. What a
    /// reader that only writes the content on uses, so incompressible data is not copied once more on its way.
    /// </summary>
    public static string? TryVerify(ReadOnlySpan<byte> stored, SegmentId expected, Span<byte> scratch, out ReadOnlySpan<byte> content) =>
        Decode(stored, expected, scratch, everyChecksum: false, copyRaw: false, out content);

    private static string? Decode(ReadOnlySpan<byte> stored, SegmentId expected, Span<byte> destination, bool everyChecksum, bool copyRaw,
        out ReadOnlySpan<byte> content)
    {
        content = default;
        if (stored.Length < HeaderLength) return $"segment {expected}: {stored.Length} bytes is shorter than a header";
        if (stored[0] != 'H' || stored[1] != 'C' || stored[2] != 'S') return $"segment {expected}: bad magic";
        if (stored[3] == LegacyFormatVersion) return $"segment {expected}: format {LegacyFormatVersion}, named by XXH3-128 (staged before content ids became BLAKE3-256); re-stage its dataset";
        if (stored[3] != FormatVersion) return $"segment {expected}: unsupported format version {stored[3]}";
        var codec = (SegmentCodecKind)stored[4];
        // The strict check a host applies before storing: one stored form per segment, so reserved bytes are zero.
        if (everyChecksum && (stored[5] | stored[6] | stored[7]) != 0) return $"segment {expected}: reserved header bytes are not zero";
        var rawLength = BinaryPrimitives.ReadInt32LittleEndian(stored[8..]);
        var payloadLength = BinaryPrimitives.ReadInt32LittleEndian(stored[12..]);
        if (rawLength != destination.Length) return $"segment {expected}: raw length {rawLength}, expected {destination.Length}";
        if (payloadLength != stored.Length - HeaderLength) return $"segment {expected}: payload length {payloadLength} but {stored.Length - HeaderLength} bytes present";
        var payload = stored[HeaderLength..];
        ReadOnlySpan<byte> raw;
        switch (codec)
        {
            // A raw payload is the content itself: the content id checked below covers the very bytes the payload
            // checksum would, so that second hash of every incompressible byte is skipped.
            case SegmentCodecKind.Raw when payloadLength == rawLength:
                if (everyChecksum && XxHash.Hash64Of(payload) != BinaryPrimitives.ReadUInt64LittleEndian(stored[16..])) return $"segment {expected}: payload checksum mismatch";
                raw = payload;
                break;
            case SegmentCodecKind.Lz4:
                // Checked before decoding, so damaged bytes are rejected without running the decoder on them.
                if (XxHash.Hash64Of(payload) != BinaryPrimitives.ReadUInt64LittleEndian(stored[16..])) return $"segment {expected}: payload checksum mismatch";
                if (Lz4.Decode(payload, destination) != rawLength) return $"segment {expected}: LZ4 payload does not decode to {rawLength} bytes";
                raw = destination;
                break;
            case SegmentCodecKind.Zstd:
                if (XxHash.Hash64Of(payload) != BinaryPrimitives.ReadUInt64LittleEndian(stored[16..])) return $"segment {expected}: payload checksum mismatch";
                if (Zstd.Decode(payload, destination) != rawLength) return $"segment {expected}: zstd payload does not decode to {rawLength} bytes";
                raw = destination;
                break;
            default:
                return $"segment {expected}: bad codec {(byte)codec} for lengths {rawLength}/{payloadLength}";
        }
        if (SegmentId.Of(raw) != expected) return $"segment {expected}: content hash mismatch";
        if (copyRaw && codec == SegmentCodecKind.Raw)
        {
            raw.CopyTo(destination);
            raw = destination;
        }
        content = raw;
        return null;
    }
}
