using System.Globalization;

namespace Hpc.CommonData;

/// <summary>Durations as people write them: 90s, 15m, 12h, 7d (a bare number is seconds).</summary>
public static class Durations
{
    public static bool TryParse(string? text, out TimeSpan duration)
    {
        duration = default;
        if (text is null) return false;
        try { duration = Parse(text); return true; }
        catch (FormatException) { return false; }
    }

    public static TimeSpan Parse(string text)
    {
        var t = text.Trim().ToLowerInvariant();
        var unit = t.Length > 0 && char.IsLetter(t[^1]) ? t[^1] : 's';
        var number = char.IsLetter(t.LastOrDefault()) ? t[..^1] : t;
        if (!double.TryParse(number, NumberStyles.Float, CultureInfo.InvariantCulture, out var v) || v <= 0)
            throw new FormatException($"'{text}' is not a duration (examples: 90s, 15m, 12h, 7d)");
        return unit switch
        {
            's' => TimeSpan.FromSeconds(v),
            'm' => TimeSpan.FromMinutes(v),
            'h' => TimeSpan.FromHours(v),
            'd' => TimeSpan.FromDays(v),
            _ => throw new FormatException($"'{text}': unknown unit '{unit}' (use s, m, h or d)"),
        };
    }

    /// <summary>Seconds in the largest whole unit that <see cref="Parse"/> reads back: 7d, 12h, 90m, 45s (minutes and seconds below a day mixed as 1h30m).</summary>
    public static string Format(long seconds) => seconds switch
    {
        <= 0 => "0s",
        _ when seconds % 86400 == 0 => $"{seconds / 86400}d",
        _ when seconds >= 86400 => $"{seconds / 86400}d{seconds % 86400 / 3600}h",
        _ when seconds % 3600 == 0 => $"{seconds / 3600}h",
        _ when seconds >= 3600 => $"{seconds / 3600}h{seconds % 3600 / 60}m",
        _ when seconds % 60 == 0 => $"{seconds / 60}m",
        _ when seconds >= 60 => $"{seconds / 60}m{seconds % 60}s",
        _ => $"{seconds}s",
    };
}
