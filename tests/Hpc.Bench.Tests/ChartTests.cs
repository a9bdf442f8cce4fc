using System.Globalization;
using System.Xml.Linq;
using Hpc.CommonData.Report;

namespace Hpc.Bench.Tests;

/// <summary>The report's charts: SVG documents with the series, the limits and text, on a log2 node axis.</summary>
public class ChartTests
{
    private static readonly XNamespace Svg = "http://www.w3.org/2000/svg";

    [Fact]
    public void A_chart_is_an_svg_file_with_every_series_its_limit_and_text()
    {
        var chart = new LineChart { Title = "Data access time vs node count", XLabel = "nodes", YLabel = "seconds" };
        chart.Lines.Add(new LineChart.Series("256 MB H=4 lz4", [(1, 2.0), (2, 2.1), (4, 2.3), (64, 9.5)]));
        chart.Lines.Add(new LineChart.Series("256 MB H=4 raw", [(1, 3.0), (64, double.NaN)], Dashed: true));
        chart.Limits.Add(new LineChart.Series("limit", [(1, 1.5), (64, 8.0)]));
        chart.ReferenceLines.Add(("target", 5));
        var path = Path.Combine(Path.GetTempPath(), $"hcd-chart-{Guid.NewGuid():N}.svg");
        try
        {
            chart.Save(path, 800, 450);
            var svg = XDocument.Load(path).Root!;
            Assert.Equal(Svg + "svg", svg.Name);
            Assert.Equal(("800", "450"), ((string)svg.Attribute("width")!, (string)svg.Attribute("height")!));

            var series = svg.Descendants(Svg + "g").Where(g => (string?)g.Attribute("class") == "series").ToList();
            Assert.Equal(["256 MB H=4 lz4", "256 MB H=4 raw"], series.Select(g => (string)g.Attribute("data-name")!));
            Assert.Equal(4, series[0].Elements().Count(e => (string?)e.Attribute("class") == "marker"));
            Assert.Equal(1, series[1].Elements().Count(e => (string?)e.Attribute("class") == "marker")); // NaN is no point
            Assert.Equal("#1F77B4", (string)series[0].Element(Svg + "polyline")!.Attribute("stroke")!);
            Assert.NotNull(series[1].Element(Svg + "polyline")!.Attribute("stroke-dasharray"));
            var limit = Assert.Single(svg.Descendants(Svg + "g"), g => (string?)g.Attribute("class") == "limit");
            Assert.Equal("#1F77B4", (string)limit.Element(Svg + "polyline")!.Attribute("stroke")!); // its series' colour
            Assert.Single(svg.Descendants(Svg + "line"), l => (string?)l.Attribute("class") == "reference");

            var texts = svg.Descendants(Svg + "text").Select(t => t.Value).ToList();
            Assert.Contains("Data access time vs node count", texts);
            Assert.Contains("nodes", texts);
            Assert.Contains("seconds", texts);
            Assert.Contains("256 MB H=4 raw", texts);
            Assert.Contains(chart.LimitsLabel, texts);
            Assert.Contains("target", texts);
            Assert.DoesNotContain("NaN", File.ReadAllText(path));
            Assert.Equal((byte)'<', File.ReadAllBytes(path)[0]); // no byte-order mark before the XML declaration
        }
        finally { if (Environment.GetEnvironmentVariable("HPCDATA_KEEP_CHART") is { } keep) File.Copy(path, keep, true); File.Delete(path); }
    }

    [Fact]
    public void Node_counts_sit_on_a_log2_axis_with_a_tick_at_each_count()
    {
        var chart = new LineChart { XLabel = "nodes", YLabel = "s" };
        chart.Lines.Add(new LineChart.Series("a", [(1, 1), (2, 1), (4, 1), (8, 1), (64, 1)]));
        var ticks = chart.Build(600, 400).Descendants(Svg + "text").Where(t => (string?)t.Attribute("class") == "x-tick")
            .Select(t => (Label: t.Value, X: double.Parse((string)t.Attribute("x")!, CultureInfo.InvariantCulture))).ToList();
        Assert.Equal(["1", "2", "4", "8", "64"], ticks.Select(t => t.Label));
        // Each doubling is the same width: 1→2 is one step, 8→64 three.
        var step = ticks[1].X - ticks[0].X;
        Assert.True(step > 10);
        Assert.Equal([0.0, 1, 2, 3, 6], ticks.Select(t => Math.Round((t.X - ticks[0].X) / step, 1)));
    }

    [Fact]
    public void A_value_above_the_axis_is_clipped_to_the_plot_area()
    {
        var chart = new LineChart { YMax = 1.2, YPercent = true };
        chart.Lines.Add(new LineChart.Series("a", [(1, 0.5), (2, 3.0)]));
        var svg = chart.Build(600, 400).Root!;
        var series = Assert.Single(svg.Descendants(Svg + "g"), g => (string?)g.Attribute("class") == "series");
        Assert.Equal("url(#plot-area)", (string)series.Parent!.Attribute("clip-path")!);
        Assert.Contains("120%", svg.Descendants(Svg + "text").Where(t => (string?)t.Attribute("class") == "y-tick").Select(t => t.Value));
    }

    [Fact]
    public void No_two_series_of_a_chart_share_their_colour_and_marker()
    {
        var styles = Enumerable.Range(0, LineChart.MaxSeries).Select(LineChart.StyleOf).ToList();
        Assert.Equal(styles.Count, styles.Select(s => s.Colour).Distinct().Count());
        Assert.Equal(styles.Count, styles.Select(s => s.Marker).Distinct().Count());
    }

    [Fact]
    public void A_chart_with_more_series_than_a_reader_can_follow_is_refused()
    {
        var chart = new LineChart { Title = "crowded" };
        for (var i = 0; i <= LineChart.MaxSeries; i++) chart.Lines.Add(new LineChart.Series($"s{i}", [(1, i), (2, i)]));
        Assert.Contains("crowded", Assert.Throws<InvalidOperationException>(() => chart.Build()).Message);
    }

    [Fact]
    public void The_report_draws_one_chart_per_link_rate_and_splits_series_beyond_six()
    {
        // Two rates; at 25 Mbit/s eight host counts (eight series), at 100 Mbit/s one.
        var cells = Enumerable.Range(1, 8).SelectMany(h => new[] { 2, 4 }.Select(n => Cell(n, h, 25)))
            .Concat([Cell(2, 1, 100), Cell(4, 1, 100)]).ToList();
        var report = new ReportMain.Report(cells, [], [], [], []);

        var charts = ChartFiles.Write(report);

        Assert.Equal(["time-vs-nodes-25mbit.svg", "time-vs-nodes-25mbit-2.svg", "efficiency-vs-nodes-25mbit.svg", "efficiency-vs-nodes-25mbit-2.svg",
                      "time-vs-nodes-100mbit.svg", "efficiency-vs-nodes-100mbit.svg"], charts);
    }

    private static ReportMain.Cell Cell(int nodes, int hosts, int rate) =>
        new(nodes, hosts, 64 << 20, true, rate, 1, 2.0 * nodes / hosts, 1.0 * nodes / hosts, 0.5, 1, 1, 1, 64 << 20, 30 << 20, [], 0, 0, 0, null, null);
}

/// <summary>The report's charts written into a directory of their own for a test.</summary>
public static class ChartFiles
{
    /// <summary>Writes a report's charts, checks each is a whole SVG document, and returns their names.</summary>
    public static List<string> Write(ReportMain.Report report)
    {
        var dir = Directory.CreateTempSubdirectory("hcd-charts-").FullName;
        try
        {
            var written = ReportMain.WriteCharts(report, dir);
            foreach (var name in written)
                Assert.Equal(XName.Get("svg", "http://www.w3.org/2000/svg"), XDocument.Load(Path.Combine(dir, name)).Root!.Name);
            return written;
        }
        finally { Directory.Delete(dir, recursive: true); }
    }
}
