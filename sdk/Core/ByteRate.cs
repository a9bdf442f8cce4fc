using System.ComponentModel;
using System.Globalization;

namespace Hpc.CommonData;

/// <summary>
/// A transfer rate as people write it: a size per second in the units of <see cref="ByteSize"/> (<c>100MB</c>,
/// <c>100MB/s</c>, powers of 1024) or a link rate in bits (<c>800mbit</c>, <c>1gbit</c>, <c>500kbit/s</c>, powers of
/// 1000, as links are sold). 0 means unlimited. One type for every rate option, so <c>--max-rate</c> reads the same in
/// every program and in appsettings.json.
/// </summary>
[TypeConverter(typeof(ByteRateConverter))]
public readonly record struct ByteRate(long BytesPerSecond)
{
    public static readonly ByteRate Unlimited = new(0);

    private static readonly (string Suffix, double BitsFactor)[] BitUnits =
        [("GBIT", 1e9), ("MBIT", 1e6), ("KBIT", 1e3), ("BIT", 1)];

    public bool IsUnlimited => BytesPerSecond <= 0;

    public static ByteRate Parse(string text) =>
        TryParse(text, out var rate) ? rate : throw new FormatException($"'{text}' is not a rate (examples: 100MB, 100MB/s, 800mbit, 1gbit; 0: unlimited)");

    public static bool TryParse(string? text, out ByteRate rate)
    {
        rate = default;
        if (text is null) return false;
        var t = text.Trim().ToUpperInvariant();
        if (t.EndsWith("/S", StringComparison.Ordinal)) t = t[..^2].TrimEnd();
        else if (t.EndsWith("PS", StringComparison.Ordinal) && t.Length > 2 && t[^3] == 'T') t = t[..^2].TrimEnd(); // 100mbitps
        foreach (var (suffix, factor) in BitUnits)
        {
            if (!t.EndsWith(suffix, StringComparison.Ordinal)) continue;
            var number = t[..^suffix.Length].Trim();
            if (!double.TryParse(number, NumberStyles.Float, CultureInfo.InvariantCulture, out var v) || v < 0 || double.IsNaN(v) || v * factor / 8 >= long.MaxValue)
                return false;
            rate = new ByteRate((long)(v * factor / 8));
            return true;
        }
        if (!ByteSize.TryParse(t, out var size)) return false;
        rate = new ByteRate(size.Bytes);
        return true;
    }

    /// <summary>The form <see cref="Parse"/> reads back to the same rate (for command lines); "0" when unlimited.</summary>
    public string ToExactString() => IsUnlimited ? "0" : new ByteSize(BytesPerSecond).ToExactString() + "/s";

    public override string ToString() => IsUnlimited ? "unlimited" : $"{Format(BytesPerSecond)} ({BytesPerSecond * 8 / 1e6:0.#} Mbit/s)";

    /// <summary>A rate as every program prints it for people: a size per second in <see cref="ByteSize.Format"/>'s units, e.g. 120 MiB/s.</summary>
    public static string Format(double bytesPerSecond) =>
        ByteSize.Format(double.IsFinite(bytesPerSecond) && bytesPerSecond > 0 ? (long)Math.Min(bytesPerSecond, long.MaxValue) : 0) + "/s";

    private sealed class ByteRateConverter : TypeConverter
    {
        public override bool CanConvertFrom(ITypeDescriptorContext? context, Type sourceType) =>
            sourceType == typeof(string) || base.CanConvertFrom(context, sourceType);

        public override object? ConvertFrom(ITypeDescriptorContext? context, CultureInfo? culture, object value) =>
            value is string s ? Parse(s) : base.ConvertFrom(context, culture, value);

        public override object? ConvertTo(ITypeDescriptorContext? context, CultureInfo? culture, object? value, Type destinationType) =>
            destinationType == typeof(string) && value is ByteRate r ? r.ToExactString() : base.ConvertTo(context, culture, value, destinationType);
    }
}
