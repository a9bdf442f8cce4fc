using System.Globalization;

namespace Hpc.Bench.Report;

/// <summary>A line chart with markers, axes, grid, tick labels and a legend, drawn on a <see cref="Canvas"/>.</summary>
public sealed class LineChart
{
    public sealed record Series(string Name, IReadOnlyList<(double X, double Y)> Points, bool Dashed = false);

    public string Title { get; init; } = "";
    public string XLabel { get; init; } = "";
    public string YLabel { get; init; } = "";
    /// <summary>Node counts double from point to point; a log2 axis spaces them evenly, as the reference's figures do.</summary>
    public bool LogX { get; init; } = true;
    public double? YMax { get; init; }
    public bool YPercent { get; init; }
    public List<Series> Lines { get; } = [];

    private static readonly uint[] Palette = [0x1F77B4, 0xD62728, 0x2CA02C, 0xFF7F0E, 0x9467BD, 0x8C564B, 0xE377C2, 0x17BECF, 0x7F7F7F, 0xBCBD22];
    private const uint Ink = 0x202020, Grid = 0xE0E0E0;

    public Canvas Draw(int width = 960, int height = 560)
    {
        var c = new Canvas(width, height);
        const int left = 80, top = 50, legendWidth = 230;
        int right = width - legendWidth - 20, bottom = height - 60;
        c.Text(left, 16, Title, Ink, 2);

        var points = Lines.SelectMany(l => l.Points).Where(p => double.IsFinite(p.X) && double.IsFinite(p.Y) && (!LogX || p.X > 0)).ToList();
        var xs = points.Select(p => p.X).Distinct().Order().ToList();
        if (xs.Count == 0) xs = [1];
        double FX(double x) => LogX ? Math.Log2(x) : x;
        double xMin = FX(xs[0]), xMax = FX(xs[^1]);
        if (xMax - xMin < 1e-9) { xMin -= 1; xMax += 1; }
        var pad = (xMax - xMin) * 0.04;
        xMin -= pad; xMax += pad;
        var yTop = NiceCeiling(YMax ?? Math.Max(points.Count == 0 ? 1 : points.Max(p => p.Y) * 1.08, 1e-9));
        int PX(double x) => left + (int)Math.Round((FX(x) - xMin) / (xMax - xMin) * (right - left));
        int PY(double y) => bottom - (int)Math.Round(Math.Clamp(y / yTop, -0.02, 1.02) * (bottom - top));

        // grid and y ticks
        var step = TickStep(yTop);
        for (var y = 0.0; y <= yTop + step * 1e-6; y += step)
        {
            var py = PY(y);
            c.Line(left, py, right, py, Grid);
            var label = YPercent ? (y * 100).ToString("0", CultureInfo.InvariantCulture) + "%" : Format(y);
            c.Text(left - 8 - BitmapFont.MeasureWidth(label, 1), py - 3, label, Ink);
        }
        foreach (var x in xs)
        {
            var px = PX(x);
            c.Line(px, top, px, bottom, Grid);
            var label = Format(x);
            c.Text(px - BitmapFont.MeasureWidth(label, 1) / 2, bottom + 8, label, Ink);
        }
        c.Line(left, bottom, right, bottom, Ink, 2);
        c.Line(left, top, left, bottom, Ink, 2);
        c.Text((left + right - BitmapFont.MeasureWidth(XLabel, 2)) / 2, bottom + 28, XLabel, Ink, 2);
        c.TextUp(14, (top + bottom + BitmapFont.MeasureWidth(YLabel, 2)) / 2, YLabel, Ink, 2);

        for (var i = 0; i < Lines.Count; i++)
        {
            var colour = Palette[i % Palette.Length];
            var pts = Lines[i].Points.Where(p => double.IsFinite(p.Y) && (!LogX || p.X > 0)).OrderBy(p => p.X).ToList();
            for (var k = 1; k < pts.Count; k++)
                c.Line(PX(pts[k - 1].X), PY(pts[k - 1].Y), PX(pts[k].X), PY(pts[k].Y), colour, 2, Lines[i].Dashed ? 6 : 0);
            foreach (var p in pts) c.Marker(PX(p.X), PY(p.Y), i, colour);

            var ly = top + 10 + i * 22;
            c.Line(right + 20, ly + 3, right + 50, ly + 3, colour, 2, Lines[i].Dashed ? 6 : 0);
            c.Marker(right + 35, ly + 3, i, colour);
            c.Text(right + 58, ly, Lines[i].Name.Length > 27 ? Lines[i].Name[..27] : Lines[i].Name, Ink);
        }
        return c;
    }

    private static string Format(double v) =>
        v >= 100 || v == Math.Floor(v) ? v.ToString("0", CultureInfo.InvariantCulture) : v.ToString(v >= 10 ? "0.#" : "0.##", CultureInfo.InvariantCulture);

    private static double TickStep(double top)
    {
        var raw = top / 5;
        var mag = Math.Pow(10, Math.Floor(Math.Log10(raw)));
        var n = raw / mag;
        return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * mag;
    }

    private static double NiceCeiling(double v)
    {
        var step = TickStep(v);
        return Math.Ceiling(v / step - 1e-9) * step;
    }
}
