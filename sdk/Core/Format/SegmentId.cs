using System.Buffers.Binary;
using System.Globalization;

namespace Hpc.CommonData.Format;

/// <summary>
/// Content id of a segment: BLAKE3-256 of its raw bytes. Equal content, equal id, stored once. Segments of different
/// owners are shared by id, so the id must be one no writer can forge: a cryptographic hash, at full width, since a
/// 128-bit truncation would leave collisions within reach of 2^64 work. Ids of the XXH3-128 era are 32 hex digits and
/// never parse as one of these (see <see cref="IsLegacy"/>).
/// </summary>
public readonly record struct SegmentId
{
    public const int ByteLength = 32;
    public const int HexLength = 2 * ByteLength;
    /// <summary>Length of the XXH3-128 ids that versions staged before BLAKE3 carry.</summary>
    public const int LegacyHexLength = 32;

    // Big-endian words, so the hex form and the byte form read in the same order as the hash's output.
    private readonly ulong _w0, _w1, _w2, _w3;

    private SegmentId(ulong w0, ulong w1, ulong w2, ulong w3) { _w0 = w0; _w1 = w1; _w2 = w2; _w3 = w3; }

    public static SegmentId Of(ReadOnlySpan<byte> raw)
    {
        Span<byte> hash = stackalloc byte[ByteLength];
        if (Blake3Lanes.Takes(raw.Length)) Blake3Lanes.Hash(raw, hash);
        else Blake3.Hasher.Hash(raw, hash);
        return FromBytes(hash);
    }

    /// <summary>The id whose bytes (<see cref="WriteBytes"/>) are <paramref name="bytes"/>, 32 of them.</summary>
    public static SegmentId FromBytes(ReadOnlySpan<byte> bytes) => new(
        BinaryPrimitives.ReadUInt64BigEndian(bytes), BinaryPrimitives.ReadUInt64BigEndian(bytes[8..]),
        BinaryPrimitives.ReadUInt64BigEndian(bytes[16..]), BinaryPrimitives.ReadUInt64BigEndian(bytes[24..ByteLength]));

    public void WriteBytes(Span<byte> destination)
    {
        BinaryPrimitives.WriteUInt64BigEndian(destination[..ByteLength], _w0);
        BinaryPrimitives.WriteUInt64BigEndian(destination[8..], _w1);
        BinaryPrimitives.WriteUInt64BigEndian(destination[16..], _w2);
        BinaryPrimitives.WriteUInt64BigEndian(destination[24..], _w3);
    }

    /// <summary>Writes the 64 lower-case hex digits as ASCII (the form used in cache keys).</summary>
    public void WriteHex(Span<byte> destination)
    {
        Span<byte> raw = stackalloc byte[ByteLength];
        WriteBytes(raw);
        for (var i = 0; i < ByteLength; i++)
        {
            destination[2 * i] = (byte)"0123456789abcdef"[raw[i] >> 4];
            destination[2 * i + 1] = (byte)"0123456789abcdef"[raw[i] & 15];
        }
    }

    public bool Equals(SegmentId other) => _w0 == other._w0 && _w1 == other._w1 && _w2 == other._w2 && _w3 == other._w3;

    // The bits are a cryptographic hash already: any of them spreads a dictionary as well as all of them.
    public override int GetHashCode() => (int)_w3;

    public override string ToString() => string.Create(HexLength, this, static (chars, id) =>
    {
        Span<byte> raw = stackalloc byte[ByteLength];
        id.WriteBytes(raw);
        for (var i = 0; i < ByteLength; i++)
        {
            chars[2 * i] = "0123456789abcdef"[raw[i] >> 4];
            chars[2 * i + 1] = "0123456789abcdef"[raw[i] & 15];
        }
    });

    public static SegmentId Parse(string hex) =>
        TryParse(hex, out var id) ? id
        : IsLegacy(hex) ? throw new FormatException($"'{hex}' is an XXH3-128 content id of a version staged before content ids became BLAKE3-256; re-stage that dataset")
        : throw new FormatException($"'{hex}' is not a {HexLength}-digit hex content id");

    public static bool TryParse(string? hex, out SegmentId id) => TryParse(hex.AsSpan(), out id) && hex is not null;

    public static bool TryParse(ReadOnlySpan<char> hex, out SegmentId id)
    {
        id = default;
        if (hex.Length != HexLength) return false;
        Span<ulong> words = stackalloc ulong[4];
        for (var w = 0; w < 4; w++)
            if (!ulong.TryParse(hex.Slice(16 * w, 16), NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out words[w])) return false;
        id = new SegmentId(words[0], words[1], words[2], words[3]);
        return true;
    }

    /// <summary>
    /// Whether <paramref name="hex"/> has the form of an XXH3-128 id (a segment or version id of a version staged before
    /// BLAKE3): what lets a reader say "re-stage" instead of "malformed" when it meets one.
    /// </summary>
    public static bool IsLegacy(string? hex) =>
        hex is { Length: LegacyHexLength } && UInt128.TryParse(hex, NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out _);
}
