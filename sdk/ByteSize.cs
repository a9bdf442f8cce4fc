using System.Globalization;

namespace Hpc.CommonData;

/// <summary>Byte counts as people write them: 65536, 64KB, 256MB, 1.5GB (powers of 1024).</summary>
public static class ByteSize
{
    public static long Parse(string text)
    {
        var t = text.Trim().ToUpperInvariant();
        long unit = 1;
        foreach (var (suffix, factor) in new[] { ("TB", 1L << 40), ("GB", 1L << 30), ("MB", 1L << 20), ("KB", 1L << 10), ("T", 1L << 40), ("G", 1L << 30), ("M", 1L << 20), ("K", 1L << 10), ("B", 1L) })
        {
            if (t.EndsWith(suffix, StringComparison.Ordinal)) { unit = factor; t = t[..^suffix.Length].Trim(); break; }
        }
        if (!double.TryParse(t, NumberStyles.Float, CultureInfo.InvariantCulture, out var v) || v < 0 || double.IsInfinity(v * unit))
            throw new FormatException($"'{text}' is not a size (examples: 65536, 64KB, 256MB, 1GB)");
        return (long)(v * unit);
    }

    public static string Format(long bytes) => bytes switch
    {
        >= 1L << 30 => $"{bytes / (double)(1L << 30):0.##} GB",
        >= 1L << 20 => $"{bytes / (double)(1L << 20):0.##} MB",
        >= 1L << 10 => $"{bytes / 1024.0:0.##} KB",
        _ => $"{bytes} B",
    };
}
