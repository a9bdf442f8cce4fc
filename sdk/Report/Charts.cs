using System.Globalization;
using System.Text;
using System.Xml;
using System.Xml.Linq;

namespace Hpc.CommonData.Report;

/// <summary>
/// The report's line charts, written as SVG: a title, labelled axes, a legend, node counts on a log2 axis (they double
/// from point to point, so each gets the same width) and reference lines for the limits measurements are compared with.
/// A chart answers one question and carries at most <see cref="MaxSeries"/> series, each with a colour and a marker of
/// its own, so none is told from another by the legend's order alone.
/// </summary>
/// <remarks>
/// SVG rather than a raster: the text is drawn by whatever shows the chart (browser, Markdown viewer), so the report
/// needs no renderer, no native library and no fonts on the machine it runs on — it runs wherever hpcdata does,
/// compiled to native code included, and what nodes install carries no graphics stack.
/// </remarks>
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
    private static readonly string[] Markers = ["circle", "square", "triangle-up", "diamond", "triangle-down", "open-circle"];
    /// <summary>Families most machines have, sans-serif last: the viewer picks the first it knows.</summary>
    private const string FontFamily = "DejaVu Sans, Liberation Sans, Arial, Helvetica, sans-serif";
    private const string Dotted = "2 3", Dashed = "8 4";
    private static readonly XNamespace Svg = "http://www.w3.org/2000/svg";

    public static string ColourOf(int series) => Palette[series % Palette.Length];
    /// <summary>Series i's colour and marker: both differ from every other series' of the same chart.</summary>
    public static (string Colour, string Marker) StyleOf(int series) => (Palette[series % Palette.Length], Markers[series % Markers.Length]);

    /// <summary>The chart as an SVG document of <paramref name="width"/> × <paramref name="height"/> pixels.</summary>
    public XDocument Build(int width = 1100, int height = 620)
    {
        if (Lines.Count > MaxSeries)
            throw new InvalidOperationException($"chart '{Title}' has {Lines.Count} series; at most {MaxSeries} are read at a glance (split it)");
        double FX(double x) => LogX ? Math.Log2(x) : x;
        bool Usable((double X, double Y) p) => double.IsFinite(p.X) && double.IsFinite(p.Y) && (!LogX || p.X > 0);

        var legend = Lines.Where(l => l.Name.Length > 0).Select(l => l.Name)
            .Concat(Limits.Count > 0 ? [LimitsLabel] : []).Concat(ReferenceLines.Where(r => r.Name.Length > 0).Select(r => r.Name)).ToList();
        // Text is measured by the viewer, not here: about 0.6 em per character of a 13 px sans-serif is wide enough.
        var legendWidth = legend.Count == 0 ? 0 : Math.Min(width / 3, 48 + legend.Max(s => s.Length) * 7.2);
        double left = 72, top = Title.Length > 0 ? 44 : 16, right = width - legendWidth - (legend.Count == 0 ? 16 : 28), bottom = height - 52;

        var xs = Lines.Concat(Limits).SelectMany(l => l.Points).Where(Usable).Select(p => p.X).Distinct().Order().ToArray();
        if (xs.Length == 0) xs = [1];
        double xMin = FX(xs[0]), xMax = FX(xs[^1]);
        if (xMax - xMin < 1e-9) { xMin -= 1; xMax += 1; }
        var pad = (xMax - xMin) * 0.05;
        (xMin, xMax) = (xMin - pad, xMax + pad);
        var ys = Lines.Concat(Limits).SelectMany(l => l.Points).Where(Usable).Select(p => p.Y).Concat(ReferenceLines.Select(r => r.Y)).ToArray();
        var yMax = YMax ?? (ys.Length == 0 ? 1 : ys.Max() * 1.1);
        if (yMax <= YMin) yMax = YMin + 1;
        double PX(double x) => left + (FX(x) - xMin) / (xMax - xMin) * (right - left);
        double PY(double y) => bottom - (y - YMin) / (yMax - YMin) * (bottom - top);

        var svg = new XElement(Svg + "svg", new XAttribute("width", width), new XAttribute("height", height),
            new XAttribute("viewBox", $"0 0 {width} {height}"), new XAttribute("font-family", FontFamily), new XAttribute("font-size", 13),
            // A viewer's dark theme would otherwise put black text on a dark page.
            new XElement(Svg + "rect", new XAttribute("width", width), new XAttribute("height", height), new XAttribute("fill", "white")),
            new XElement(Svg + "defs", new XElement(Svg + "clipPath", new XAttribute("id", "plot-area"),
                new XElement(Svg + "rect", new XAttribute("x", N(left)), new XAttribute("y", N(top)), new XAttribute("width", N(right - left)), new XAttribute("height", N(bottom - top))))));
        if (Title.Length > 0)
            svg.Add(Text(Title, (left + right) / 2, 26, "title", anchor: "middle", size: 16, bold: true));

        var yTicks = NiceTicks(YMin, yMax);
        foreach (var y in yTicks)
        {
            svg.Add(Line(left, PY(y), right, PY(y), "#E6E6E6", 1));
            svg.Add(Text(YPercent ? (y * 100).ToString("0", CultureInfo.InvariantCulture) + "%" : y.ToString("0.###", CultureInfo.InvariantCulture),
                left - 6, PY(y) + 4, "y-tick", anchor: "end"));
        }
        var xTicks = LogX ? xs : NiceTicks(xMin, xMax);
        foreach (var x in xTicks)
        {
            svg.Add(Line(PX(x), top, PX(x), bottom, "#E6E6E6", 1));
            svg.Add(Text(x.ToString("0.##", CultureInfo.InvariantCulture), PX(x), bottom + 18, "x-tick", anchor: "middle"));
        }
        svg.Add(new XElement(Svg + "rect", new XAttribute("x", N(left)), new XAttribute("y", N(top)), new XAttribute("width", N(right - left)),
            new XAttribute("height", N(bottom - top)), new XAttribute("fill", "none"), new XAttribute("stroke", "black")));
        svg.Add(Text(XLabel, (left + right) / 2, height - 14, "x-label", anchor: "middle"));
        var yLabel = Text(YLabel, 0, 0, "y-label", anchor: "middle");
        yLabel.Add(new XAttribute("transform", $"translate(18 {N((top + bottom) / 2)}) rotate(-90)"));
        svg.Add(yLabel);

        var plot = new XElement(Svg + "g", new XAttribute("clip-path", "url(#plot-area)"));
        for (var i = 0; i < ReferenceLines.Count; i++)
        {
            // The first is the limit itself; further ones (a tolerance band) are lighter.
            var (name, y) = ReferenceLines[i];
            var reference = Line(left, PY(y), right, PY(y), i == 0 ? "black" : "gray", 1.5, i == 0 ? Dashed : Dotted);
            reference.Add(new XAttribute("class", "reference"), new XAttribute("data-name", name));
            plot.Add(reference);
        }
        void AddSeries(Series s, int index, bool limit)
        {
            var pts = s.Points.Where(Usable).OrderBy(p => p.X).ToArray();
            if (pts.Length == 0) return;
            var (colour, marker) = StyleOf(index);
            var group = new XElement(Svg + "g", new XAttribute("class", limit ? "limit" : "series"), new XAttribute("data-name", s.Name));
            group.Add(new XElement(Svg + "polyline", new XAttribute("points", string.Join(' ', pts.Select(p => $"{N(PX(p.X))},{N(PY(p.Y))}"))),
                new XAttribute("fill", "none"), new XAttribute("stroke", colour), new XAttribute("stroke-width", limit ? 1.5 : 2),
                limit ? new XAttribute("stroke-dasharray", Dotted) : s.Dashed ? new XAttribute("stroke-dasharray", Dashed) : null));
            if (!limit)
                foreach (var p in pts) group.Add(Marker(marker, colour, PX(p.X), PY(p.Y)));
            plot.Add(group);
        }
        for (var i = 0; i < Lines.Count; i++) AddSeries(Lines[i], i, limit: false);
        for (var i = 0; i < Limits.Count; i++) AddSeries(Limits[i], i, limit: true);
        svg.Add(plot);

        if (legend.Count > 0)
        {
            double lx = right + 14, ly = top;
            var box = new XElement(Svg + "g", new XAttribute("class", "legend"),
                new XElement(Svg + "rect", new XAttribute("x", N(lx)), new XAttribute("y", N(ly)), new XAttribute("width", N(legendWidth)),
                    new XAttribute("height", legend.Count * 20 + 10), new XAttribute("fill", "white"), new XAttribute("stroke", "#BBBBBB")));
            var row = 0;
            void Entry(string text, string colour, double strokeWidth, string? dash, string? marker)
            {
                var y = ly + 15 + row++ * 20;
                box.Add(Line(lx + 8, y, lx + 36, y, colour, strokeWidth, dash));
                if (marker is not null) box.Add(Marker(marker, colour, lx + 22, y));
                box.Add(Text(text, lx + 44, y + 4, "legend-entry"));
            }
            for (var i = 0; i < Lines.Count; i++)
                if (Lines[i].Name.Length > 0) Entry(Lines[i].Name, StyleOf(i).Colour, 2, Lines[i].Dashed ? Dashed : null, StyleOf(i).Marker);
            if (Limits.Count > 0) Entry(LimitsLabel, "gray", 1.5, Dotted, null);
            for (var i = 0; i < ReferenceLines.Count; i++)
                if (ReferenceLines[i].Name.Length > 0) Entry(ReferenceLines[i].Name, i == 0 ? "black" : "gray", 1.5, i == 0 ? Dashed : Dotted, null);
            svg.Add(box);
        }
        return new XDocument(svg);
    }

    public void Save(string path, int width = 1100, int height = 620)
    {
        // No byte-order mark: some SVG viewers and Markdown renderers refuse a file that starts with one.
        using var writer = XmlWriter.Create(path, new XmlWriterSettings { Encoding = new UTF8Encoding(false), Indent = true });
        Build(width, height).Save(writer);
    }

    /// <summary>About six ticks at 1, 2, 2.5 or 5 times a power of ten, within [min, max].</summary>
    private static double[] NiceTicks(double min, double max)
    {
        var raw = (max - min) / 6;
        var magnitude = Math.Pow(10, Math.Floor(Math.Log10(raw)));
        var step = new[] { 1, 2, 2.5, 5, 10 }.Select(m => m * magnitude).First(s => s >= raw);
        var ticks = new List<double>();
        for (var t = Math.Ceiling(min / step) * step; t <= max + step * 1e-9; t += step)
            ticks.Add(Math.Round(t / step) * step);
        return [.. ticks];
    }

    private static string N(double v) => v.ToString("0.##", CultureInfo.InvariantCulture);

    private static XElement Text(string text, double x, double y, string kind, string anchor = "start", int? size = null, bool bold = false) =>
        new(Svg + "text", new XAttribute("class", kind), new XAttribute("x", N(x)), new XAttribute("y", N(y)), new XAttribute("text-anchor", anchor),
            size is { } s ? new XAttribute("font-size", s) : null, bold ? new XAttribute("font-weight", "bold") : null, text);

    private static XElement Line(double x1, double y1, double x2, double y2, string colour, double width, string? dash = null) =>
        new(Svg + "line", new XAttribute("x1", N(x1)), new XAttribute("y1", N(y1)), new XAttribute("x2", N(x2)), new XAttribute("y2", N(y2)),
            new XAttribute("stroke", colour), new XAttribute("stroke-width", width), dash is null ? null : new XAttribute("stroke-dasharray", dash));

    private static XElement Marker(string shape, string colour, double x, double y)
    {
        const double r = 4;
        string Points(params (double X, double Y)[] p) => string.Join(' ', p.Select(q => $"{N(x + q.X)},{N(y + q.Y)}"));
        var element = shape switch
        {
            "circle" or "open-circle" => new XElement(Svg + "circle", new XAttribute("cx", N(x)), new XAttribute("cy", N(y)), new XAttribute("r", r)),
            "square" => new XElement(Svg + "rect", new XAttribute("x", N(x - r)), new XAttribute("y", N(y - r)), new XAttribute("width", 2 * r), new XAttribute("height", 2 * r)),
            "triangle-up" => new XElement(Svg + "polygon", new XAttribute("points", Points((0, -r - 1), (r + 1, r), (-r - 1, r)))),
            "triangle-down" => new XElement(Svg + "polygon", new XAttribute("points", Points((0, r + 1), (r + 1, -r), (-r - 1, -r)))),
            "diamond" => new XElement(Svg + "polygon", new XAttribute("points", Points((0, -r - 1), (r + 1, 0), (0, r + 1), (-r - 1, 0)))),
            _ => throw new ArgumentOutOfRangeException(nameof(shape), shape, null),
        };
        element.Add(new XAttribute("class", "marker"), new XAttribute("fill", shape == "open-circle" ? "white" : colour),
            new XAttribute("stroke", colour), new XAttribute("stroke-width", 1.5));
        return element;
    }
}
