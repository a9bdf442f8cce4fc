using System.Globalization;

namespace Hpc.CommonData;

/// <summary>
/// Durations as people write them, one grammar for every timeout of every program: 90s, 15m, 12h, 7d, combined as
/// <see cref="Format"/> writes them (1h30m), a bare number of seconds, or HH:MM:SS (what .NET's settings files and
/// Slurm's time limits write).
/// </summary>
public static partial class Durations
{
    public static bool TryParse(string? text, out TimeSpan duration)
    {
        duration = default;
        if (text is null) return false;
        try { duration = Parse(text); return true; }
        catch (FormatException) { return false; }
    }

    /// <summary>A duration of more than zero (<see cref="Durations"/>), or a <see cref="FormatException"/> saying what is taken.</summary>
    public static TimeSpan Parse(string text)
    {
        var t = text.Trim().ToLowerInvariant();
        if (t.Contains(':'))
        {
            if (TimeSpan.TryParse(t, CultureInfo.InvariantCulture, out var clock) && clock > TimeSpan.Zero) return clock;
            throw new FormatException($"'{text}' is not a duration (examples: 90s, 15m, 1h30m, 12h, 7d, 00:10:00)");
        }
        t = t.Replace(" ", "", StringComparison.Ordinal);
        if (double.TryParse(t, NumberStyles.Float, CultureInfo.InvariantCulture, out var seconds) && seconds > 0) return TimeSpan.FromSeconds(seconds);
        var parts = Part().Matches(t);
        if (parts.Count == 0 || parts.Sum(m => m.Length) != t.Length)
        {
            if (t.Length > 1 && char.IsLetter(t[^1]) && "smhd".IndexOf(t[^1]) < 0 && double.TryParse(t[..^1], NumberStyles.Float, CultureInfo.InvariantCulture, out _))
                throw new FormatException($"'{text}': unknown unit '{t[^1]}' (use s, m, h or d)");
            throw new FormatException($"'{text}' is not a duration (examples: 90s, 15m, 1h30m, 12h, 7d, 00:10:00)");
        }
        var total = TimeSpan.Zero;
        foreach (System.Text.RegularExpressions.Match m in parts)
        {
            var v = double.Parse(m.Groups[1].Value, NumberStyles.Float, CultureInfo.InvariantCulture);
            total += m.Groups[2].Value switch
            {
                "s" => TimeSpan.FromSeconds(v),
                "m" => TimeSpan.FromMinutes(v),
                "h" => TimeSpan.FromHours(v),
                _ => TimeSpan.FromDays(v),
            };
        }
        if (total <= TimeSpan.Zero) throw new FormatException($"'{text}' is not a duration (examples: 90s, 15m, 1h30m, 12h, 7d, 00:10:00)");
        return total;
    }

    [System.Text.RegularExpressions.GeneratedRegex(@"(\d*\.?\d+)([smhd])")]
    private static partial System.Text.RegularExpressions.Regex Part();

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
