namespace Hpc.CommonData.Cli;

/// <summary>Columns padded to their widest cell, numbers right-aligned: what status and list print for people.</summary>
public sealed partial class TextTable(params string[] headers)
{
    /// <summary>A number with an optional unit: 12, 3.5 GB, 99.1%, 100% (3/3); not an address like 10.0.0.1:6380.</summary>
    [System.Text.RegularExpressions.GeneratedRegex(@"^[0-9][0-9.,]*( ?[A-Za-z%]+)?( \([0-9/]+\))?$")]
    private static partial System.Text.RegularExpressions.Regex Quantity();

    private readonly List<string[]> _rows = [];

    /// <summary>The widest line a table should need with ordinary names: a standard terminal's width, less a margin.</summary>
    public const int Width = 100;

    /// <summary>
    /// A size in at most five characters, as <c>ls -h</c> and <c>df -h</c> write it (powers of 1024): 681B, 2.0K,
    /// 12K, 1.5G; tables of several sizes stay narrow where "1023.99 MB" would not.
    /// </summary>
    public static string Size(long bytes)
    {
        if (bytes < 1024) return $"{bytes}B";
        double v = bytes;
        var unit = 0;
        while (v >= 1024 && unit < 4) { v /= 1024; unit++; }
        // 1023.95K rounds to 1024K: show the next unit instead.
        if (Math.Round(v, v < 10 ? 1 : 0) >= 1024 && unit < 4) { v /= 1024; unit++; }
        var digits = v < 10 ? v.ToString("0.0", System.Globalization.CultureInfo.InvariantCulture) : v.ToString("0", System.Globalization.CultureInfo.InvariantCulture);
        return digits + "KMGT"[unit - 1];
    }

    /// <summary>A time as <c>ls -l</c> writes one: month, day and minute within this year, else the date.</summary>
    public static string When(DateTimeOffset time, DateTimeOffset now)
    {
        var local = time.ToLocalTime();
        return local.Year == now.ToLocalTime().Year
            ? local.ToString("MM-dd HH:mm", System.Globalization.CultureInfo.InvariantCulture)
            : local.ToString("yyyy-MM-dd", System.Globalization.CultureInfo.InvariantCulture);
    }

    public void Add(params string[] cells) => _rows.Add(cells);

    public void WriteTo(TextWriter output)
    {
        var widths = headers.Select((h, i) => _rows.Select(r => r[i].Length).Append(h.Length).Max()).ToArray();
        var numeric = headers.Select((_, i) => _rows.Count > 0 && _rows.All(r => r[i].Length == 0 || r[i] == "-" || Quantity().IsMatch(r[i]))).ToArray();
        string Line(string[] cells) => string.Join("  ", cells.Select((c, i) => numeric[i] ? c.PadLeft(widths[i]) : c.PadRight(widths[i]))).TrimEnd();
        output.WriteLine(Line(headers));
        foreach (var r in _rows) output.WriteLine(Line(r));
    }
}
