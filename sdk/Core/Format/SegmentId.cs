using System.Buffers.Binary;
using System.Globalization;

namespace Hpc.CommonData.Format;

/// <summary>Content id of a segment: XXH3-128 of its raw bytes. Equal content, equal id, stored once.</summary>
public readonly record struct SegmentId(UInt128 Value)
{
    public const int HexLength = 32;

    public static SegmentId Of(ReadOnlySpan<byte> raw) => new(XxHash.Hash128Of(raw));

    public void WriteBytes(Span<byte> destination) => BinaryPrimitives.WriteUInt128BigEndian(destination, Value);

    /// <summary>Writes the 32 lower-case hex digits as ASCII (the form used in cache keys).</summary>
    public void WriteHex(Span<byte> destination)
    {
        Span<byte> raw = stackalloc byte[16];
        WriteBytes(raw);
        for (var i = 0; i < 16; i++)
        {
            destination[2 * i] = (byte)"0123456789abcdef"[raw[i] >> 4];
            destination[2 * i + 1] = (byte)"0123456789abcdef"[raw[i] & 15];
        }
    }

    public override string ToString() => Value.ToString("x32", CultureInfo.InvariantCulture);

    public static SegmentId Parse(string hex) =>
        TryParse(hex, out var id) ? id : throw new FormatException($"'{hex}' is not a 32-digit hex content id");

    public static bool TryParse(string? hex, out SegmentId id)
    {
        id = default;
        if (hex is null || hex.Length != HexLength) return false;
        if (!UInt128.TryParse(hex, NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out var v)) return false;
        id = new SegmentId(v);
        return true;
    }
}
