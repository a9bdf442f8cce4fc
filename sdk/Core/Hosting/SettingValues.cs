using System.Collections;
using System.ComponentModel;
using System.Diagnostics.CodeAnalysis;
using System.Globalization;
using System.Reflection;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The one reader of a setting's text — a switch's value, an environment variable, a settings-file key — for every
/// program: a verb, a daemon and a worker's SDK read <c>HPCDATA_CACHE_TLS=0</c>, <c>=yes</c> or <c>=True</c> alike, and
/// a value none of them can read is refused by all of them with the same words.
/// </summary>
public static class SettingValues
{
    /// <summary>
    /// <c>1</c>/<c>0</c>, <c>true</c>/<c>false</c>, <c>yes</c>/<c>no</c>, <c>on</c>/<c>off</c>, in any case: the spellings
    /// shells, systemd units and job scripts use for a switch that is on or off.
    /// </summary>
    public static bool TryParseBool(string? text, out bool value)
    {
        switch (text?.Trim().ToLowerInvariant())
        {
            case "1" or "true" or "yes" or "on": value = true; return true;
            case "0" or "false" or "no" or "off": value = false; return true;
            default: value = false; return false;
        }
    }

    /// <summary>Reads <paramref name="text"/> as a value of <paramref name="type"/>; a <see cref="FormatException"/> says what was expected.</summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "the setting types are this library's and the BCL's primitives")]
    [UnconditionalSuppressMessage("Trimming", "IL2067", Justification = "the setting types are this library's and the BCL's primitives")]
    public static object? Parse(Type type, string text)
    {
        var t = Nullable.GetUnderlyingType(type) ?? type;
        if (t == typeof(string)) return text;
        if (IsList(t)) return text.Split([',', ' ', ';'], StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList();
        if (t == typeof(bool)) return TryParseBool(text, out var b) ? b : throw Bad(t, text);
        try
        {
            if (t == typeof(int)) return int.Parse(text, NumberStyles.Integer, CultureInfo.InvariantCulture);
            if (t == typeof(long)) return long.Parse(text, NumberStyles.Integer, CultureInfo.InvariantCulture);
            if (t == typeof(double)) return double.Parse(text, NumberStyles.Float, CultureInfo.InvariantCulture);
            if (t == typeof(ByteSize)) return ByteSize.Parse(text);
            if (t == typeof(ByteRate)) return ByteRate.Parse(text);
            if (t == typeof(TimeSpan)) return ParseDuration(text);
            if (t.IsEnum)
                return Enum.TryParse(t, text, ignoreCase: true, out var e) && Enum.IsDefined(t, e!) ? e
                    : throw new FormatException($"'{text}' is not one of {string.Join(", ", Enum.GetNames(t)).ToLowerInvariant()}");
            return TypeDescriptor.GetConverter(t).ConvertFromInvariantString(text);
        }
        catch (Exception e) when (e is FormatException or ArgumentException or NotSupportedException or OverflowException)
        {
            // The size and rate readers already say what they expected, quoting the value.
            throw e is FormatException && e.Message.StartsWith('\'') ? e : Bad(t, text);
        }
    }

    /// <summary>What is wrong with <paramref name="text"/> as a value of <paramref name="type"/>, or null when it reads.</summary>
    public static string? Check(Type type, string text)
    {
        try { Parse(type, text); return null; }
        catch (FormatException e) { return e.Message; }
    }

    /// <summary>A value as a command line, a variable and help spell it (sizes and rates exactly, lists comma-separated).</summary>
    public static string? Format(object? value) => value switch
    {
        null => null,
        string s => s,
        bool b => b ? "true" : "false",
        ByteSize b => b.ToExactString(),
        ByteRate r => r.ToExactString(),
        TimeSpan t => FormatDuration(t),
        Enum e => e.ToString().ToLowerInvariant(),
        IFormattable f => f.ToString(null, CultureInfo.InvariantCulture),
        IEnumerable list => string.Join(",", list.Cast<object?>().Select(Format)),
        _ => value.ToString(),
    };

    /// <summary>
    /// A duration in the grammar every timeout of every program takes: <c>10s</c>, <c>15m</c>, <c>12h</c>, <c>7d</c>, a
    /// bare number of seconds, or <c>HH:MM:SS</c> (what .NET's settings files write).
    /// </summary>
    public static TimeSpan ParseDuration(string text) => IsZero(text) ? TimeSpan.Zero : Durations.Parse(text);

    // A zero reads (0, 0s, 0m…), so a switch where it means "never" can take it and one where it does not says so in its
    // own check, naming itself, rather than failing here as "not a duration".
    private static bool IsZero(string text)
    {
        var t = text.Trim();
        if (t.Contains(':')) return TimeSpan.TryParse(t, CultureInfo.InvariantCulture, out var clock) && clock == TimeSpan.Zero;
        if (t.Length > 1 && char.IsAsciiLetter(t[^1])) t = t[..^1];
        return double.TryParse(t, NumberStyles.Float, CultureInfo.InvariantCulture, out var v) && v == 0;
    }

    /// <summary>A duration as <see cref="ParseDuration"/> reads it back: in the largest unit that holds it whole (7d, 12h, 15m, 90s), else in seconds with their fraction (2.5s).</summary>
    public static string FormatDuration(TimeSpan t)
    {
        foreach (var (unit, ticks) in new[] { ('d', TimeSpan.TicksPerDay), ('h', TimeSpan.TicksPerHour), ('m', TimeSpan.TicksPerMinute) })
            if (t.Ticks > 0 && t.Ticks % ticks == 0) return $"{t.Ticks / ticks}{unit}";
        return t.TotalSeconds.ToString("0.#######", CultureInfo.InvariantCulture) + "s";
    }

    public static bool IsList(Type t) => t != typeof(string) && typeof(IEnumerable).IsAssignableFrom(t);

    /// <summary>The value's placeholder in help.</summary>
    public static string MetaOf(Type t) => (Nullable.GetUnderlyingType(t) ?? t) switch
    {
        var x when x == typeof(ByteSize) => "SIZE",
        var x when x == typeof(ByteRate) => "RATE",
        var x when x == typeof(TimeSpan) => "DURATION",
        var x when x == typeof(int) || x == typeof(long) => "N",
        var x when IsList(x) => "A,B,…",
        _ => "VALUE",
    };

    private static FormatException Bad(Type t, string text) => new($"'{text}' is not {Describe(t)}");

    private static string Describe(Type t) => t switch
    {
        _ when t == typeof(int) || t == typeof(long) || t == typeof(short) => "a whole number",
        _ when t == typeof(double) || t == typeof(float) || t == typeof(decimal) => "a number",
        _ when t == typeof(bool) => "on or off (1/0, true/false, yes/no, on/off)",
        _ when t == typeof(TimeSpan) => "a duration (examples: 10s, 2.5s, 15m, 12h, 7d, 00:01:30; a bare number is seconds)",
        _ when t == typeof(ByteSize) => "a size (examples: 65536, 64KB, 256MB, 1GB)",
        _ when t == typeof(ByteRate) => "a rate (examples: 100MB, 100MB/s, 800mbit; 0: unlimited)",
        _ => $"a valid {t.Name}",
    };
}
