using System.Globalization;
using ScottPlot;

namespace Hpc.CommonData.Report;

/// <summary>
/// The report's line charts, drawn with ScottPlot: a title, labelled axes, a legend, node counts on a log2 axis (they
/// double from point to point, so each gets the same width) and reference lines for the limits measurements are
/// compared with. A chart answers one question and carries at most <see cref="MaxSeries"/> series, each with a colour
/// and a marker of its own, so none is told from another by the legend's order alone.
/// </summary>
public sealed class LineChart
{
    public sealed record Series(string Name, IReadOnlyList<(double X, double Y)> Points, bool Dashed = false);

    /// <summary>More lines than this and a reader stops matching lines to the legend at a glance; the report splits them.</summary>
    public const int MaxSeries = 6;

    public string Title { get; init; } = "";
    public string XLabel { get; init; } = "";
    public string YLabel { get; init; } = "";
    /// <summary>Node counts double from point to point; a log2 axis spaces them evenly. Ticks are at the data's x values.</summary>
    public bool LogX { get; init; } = true;
    public double? YMax { get; init; }
    /// <summary>Bottom of the y axis; 0 unless a chart of ratios needs to show small differences.</summary>
    public double YMin { get; init; }
    public bool YPercent { get; init; }
    public List<Series> Lines { get; } = [];
    /// <summary>A limit per series, drawn dotted in that series' colour without markers (e.g. the direct-fetch time bound).</summary>
    public List<Series> Limits { get; } = [];
    /// <summary>The legend's one entry for all of <see cref="Limits"/>.</summary>
    public string LimitsLabel { get; init; } = "limit (dotted, same colour as its series)";
    /// <summary>Horizontal reference lines across the chart (e.g. 100% efficiency, or a configured rate).</summary>
    public List<(string Name, double Y)> ReferenceLines { get; } = [];

    /// <summary>Matplotlib's tab10, the palette readers of such figures expect.</summary>
    private static readonly string[] Palette = ["#1F77B4", "#D62728", "#2CA02C", "#FF7F0E", "#9467BD", "#8C564B", "#E377C2", "#17BECF", "#7F7F7F", "#BCBD22"];
    /// <summary>A sans-serif family the machine has; Skia's own default on a Linux box without fontconfig rules is a serif.</summary>
    private static readonly string SansFont =
        new[] { "DejaVu Sans", "Liberation Sans", "Arial", "Helvetica" }.FirstOrDefault(f => SkiaSharp.SKFontManager.Default.GetFontFamilies().Contains(f)) ?? Fonts.Sans;

    private static readonly MarkerShape[] Markers =
        [MarkerShape.FilledCircle, MarkerShape.FilledSquare, MarkerShape.FilledTriangleUp, MarkerShape.FilledDiamond, MarkerShape.FilledTriangleDown, MarkerShape.OpenCircle];
    public static Color ColourOf(int series) => Color.FromHex(Palette[series % Palette.Length]);
    /// <summary>Series i's colour and marker: both differ from every other series' of the same chart.</summary>
    public static (string Colour, MarkerShape Marker) StyleOf(int series) => (Palette[series % Palette.Length], Markers[series % Markers.Length]);

    public Plot Build()
    {
        if (Lines.Count > MaxSeries)
            throw new InvalidOperationException($"chart '{Title}' has {Lines.Count} series; at most {MaxSeries} are read at a glance (split it)");
        var plot = new Plot();
        plot.Font.Set(SansFont);
        plot.Axes.Title.Label.Bold = true;
        plot.Title(Title);
        plot.XLabel(XLabel);
        plot.YLabel(YLabel);
        double FX(double x) => LogX ? Math.Log2(x) : x;
        bool Usable((double X, double Y) p) => double.IsFinite(p.X) && double.IsFinite(p.Y) && (!LogX || p.X > 0);

        void AddSeries(Series s, Color colour, bool limit)
        {
            var pts = s.Points.Where(Usable).OrderBy(p => p.X).ToArray();
            if (pts.Length == 0) return;
            var line = plot.Add.Scatter(pts.Select(p => FX(p.X)).ToArray(), pts.Select(p => p.Y).ToArray(), colour);
            // Limits share one legend entry (added below): one per series would double a legend that is long already.
            line.LegendText = limit ? "" : s.Name;
            line.LineWidth = limit ? 1.5f : 2;
            line.LinePattern = limit ? LinePattern.Dotted : s.Dashed ? LinePattern.Dashed : LinePattern.Solid;
            line.MarkerSize = limit ? 0 : 7;
            line.MarkerShape = limit ? MarkerShape.None : StyleOf(Lines.IndexOf(s)).Marker;
        }
        for (var i = 0; i < Lines.Count; i++) AddSeries(Lines[i], ColourOf(i), limit: false);
        for (var i = 0; i < Limits.Count; i++) AddSeries(Limits[i], ColourOf(i), limit: true);
        if (Limits.Count > 0)
            plot.Legend.ManualItems.Add(new LegendItem
            {
                LabelText = LimitsLabel, LineColor = Colors.Gray, LinePattern = LinePattern.Dotted, LineWidth = 1.5f,
            });
        foreach (var (name, y) in ReferenceLines)
        {
            // The first is the limit itself; further ones (a tolerance band) are lighter.
            var first = ReferenceLines[0].Y == y && ReferenceLines[0].Name == name;
            var reference = plot.Add.HorizontalLine(y, 1.5f, first ? Colors.Black : Colors.Gray, first ? LinePattern.Dashed : LinePattern.Dotted);
            reference.LegendText = name;
        }

        var xs = Lines.Concat(Limits).SelectMany(l => l.Points).Where(Usable).Select(p => p.X).Distinct().Order().ToArray();
        if (xs.Length == 0) xs = [1];
        if (LogX)
            plot.Axes.Bottom.TickGenerator = new ScottPlot.TickGenerators.NumericManual(xs.Select(FX).ToArray(),
                xs.Select(x => x.ToString("0.##", CultureInfo.InvariantCulture)).ToArray());
        double xMin = FX(xs[0]), xMax = FX(xs[^1]);
        if (xMax - xMin < 1e-9) { xMin -= 1; xMax += 1; }
        var pad = (xMax - xMin) * 0.05;
        plot.Axes.SetLimitsX(xMin - pad, xMax + pad);

        var ys = Lines.Concat(Limits).SelectMany(l => l.Points).Where(Usable).Select(p => p.Y).Concat(ReferenceLines.Select(r => r.Y)).ToArray();
        var top = YMax ?? (ys.Length == 0 ? 1 : ys.Max() * 1.1);
        plot.Axes.SetLimitsY(YMin, top <= YMin ? YMin + 1 : top);
        if (YPercent)
            plot.Axes.Left.TickGenerator = new ScottPlot.TickGenerators.NumericAutomatic
            {
                LabelFormatter = v => (v * 100).ToString("0", CultureInfo.InvariantCulture) + "%",
            };
        plot.ShowLegend(Edge.Right);
        return plot;
    }

    public void Save(string path, int width = 1100, int height = 620) => Build().SavePng(path, width, height);
}
