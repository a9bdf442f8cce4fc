using System.ComponentModel;
using System.Globalization;

namespace Hpc.CommonData;

/// <summary>
/// A byte count as people write it: 65536, 64KB, 256MB, 1.5GB, 64 KiB (powers of 1024). One type for every size option of every
/// program, so <c>--budget 8GB</c>, <c>--max-memory 8GB</c>, <c>--size 8GB</c> and <c>"Budget": "8GB"</c> in
/// appsettings.json all read the same; a bad size is a <see cref="FormatException"/> naming the text, never a crash.
/// </summary>
[TypeConverter(typeof(ByteSizeConverter))]
public readonly record struct ByteSize(long Bytes) : IComparable<ByteSize>
{
    private static readonly (string Suffix, long Factor)[] Units =
        [("TIB", 1L << 40), ("GIB", 1L << 30), ("MIB", 1L << 20), ("KIB", 1L << 10),
         ("TB", 1L << 40), ("GB", 1L << 30), ("MB", 1L << 20), ("KB", 1L << 10), ("T", 1L << 40), ("G", 1L << 30), ("M", 1L << 20), ("K", 1L << 10), ("B", 1L)];

    public static ByteSize Parse(string text) =>
        TryParse(text, out var size) ? size : throw new FormatException($"'{text}' is not a size (examples: 65536, 64KB, 256MB, 1GB)");

    public static bool TryParse(string? text, out ByteSize size)
    {
        size = default;
        if (text is null) return false;
        var t = text.Trim().ToUpperInvariant();
        long unit = 1;
        foreach (var (suffix, factor) in Units)
        {
            if (t.EndsWith(suffix, StringComparison.Ordinal)) { unit = factor; t = t[..^suffix.Length].Trim(); break; }
        }
        if (!double.TryParse(t, NumberStyles.Float, CultureInfo.InvariantCulture, out var v) || v < 0 || double.IsNaN(v) || v * unit >= long.MaxValue)
            return false;
        size = new ByteSize((long)(v * unit));
        return true;
    }

    public static implicit operator long(ByteSize size) => size.Bytes;
    public static implicit operator ByteSize(long bytes) => new(bytes);

    public int CompareTo(ByteSize other) => Bytes.CompareTo(other.Bytes);

    /// <summary>As people read it (<see cref="Format(long)"/>).</summary>
    public override string ToString() => Format(Bytes);

    /// <summary>The form <see cref="Parse"/> reads back to the same number of bytes (for command lines).</summary>
    public string ToExactString() => Bytes switch
    {
        0 => "0",
        _ when Bytes % (1L << 30) == 0 => $"{Bytes >> 30}GB",
        _ when Bytes % (1L << 20) == 0 => $"{Bytes >> 20}MB",
        _ when Bytes % (1L << 10) == 0 => $"{Bytes >> 10}KB",
        _ => Bytes.ToString(CultureInfo.InvariantCulture),
    };

    private static readonly string[] Labels = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

    /// <summary>
    /// A size as every program prints it for people: powers of 1024, as sizes are parsed, labelled so (KiB, MiB, GiB),
    /// at most three significant digits so a table column stays narrow: 681 B, 13.3 MiB, 244 MiB, 1.21 GiB.
    /// <see cref="Parse"/> reads it back to within its rounding.
    /// </summary>
    public static string Format(long bytes)
    {
        if (bytes < 1024) return bytes.ToString(CultureInfo.InvariantCulture) + " B";
        double v = bytes;
        var unit = 0;
        while (v >= 1024 && unit < Labels.Length - 1) { v /= 1024; unit++; }
        // 1023.7 KiB would print as 1024 KiB: say 1 MiB.
        if (Math.Round(v) >= 1024 && unit < Labels.Length - 1) { v /= 1024; unit++; }
        var digits = v.ToString(v < 10 ? "0.##" : v < 100 ? "0.#" : "0", CultureInfo.InvariantCulture);
        return $"{digits} {Labels[unit]}";
    }

    /// <summary>Lets configuration binding read sizes from text.</summary>
    private sealed class ByteSizeConverter : TypeConverter
    {
        public override bool CanConvertFrom(ITypeDescriptorContext? context, Type sourceType) =>
            sourceType == typeof(string) || base.CanConvertFrom(context, sourceType);

        public override object? ConvertFrom(ITypeDescriptorContext? context, CultureInfo? culture, object value) =>
            value is string s ? Parse(s) : base.ConvertFrom(context, culture, value);

        public override object? ConvertTo(ITypeDescriptorContext? context, CultureInfo? culture, object? value, Type destinationType) =>
            destinationType == typeof(string) && value is ByteSize b ? b.ToExactString() : base.ConvertTo(context, culture, value, destinationType);
    }
}
