namespace Hpc.CommonData.Cli;

/// <summary>Columns padded to their widest cell, numbers right-aligned: what status and list print for people.</summary>
public sealed partial class TextTable(params string[] headers)
{
    /// <summary>A number with an optional unit: 12, 3.5 GiB, 99.1%, 100% (3/3); not an address like 10.0.0.1:6380.</summary>
    [System.Text.RegularExpressions.GeneratedRegex(@"^[0-9][0-9.,]*( ?[A-Za-z%]+)?( \([0-9/]+\))?$")]
    private static partial System.Text.RegularExpressions.Regex Quantity();

    private readonly List<string[]> _rows = [];

    /// <summary>The widest line a table should need with ordinary names: a standard terminal's width, less a margin.</summary>
    public const int Width = 100;

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
