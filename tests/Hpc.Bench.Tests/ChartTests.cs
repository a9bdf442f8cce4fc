using System.Buffers.Binary;
using System.IO.Hashing;
using System.Text;
using Hpc.CommonData.Report;
using SkiaSharp;

namespace Hpc.Bench.Tests;

/// <summary>The report's charts: real PNGs with the series, the limits and text, on a log2 node axis.</summary>
public class ChartTests
{
    [Fact]
    public void A_chart_is_a_valid_png_with_every_series_its_limit_and_text()
    {
        var chart = new LineChart { Title = "Data access time vs node count", XLabel = "nodes", YLabel = "seconds" };
        chart.Lines.Add(new LineChart.Series("256 MB H=4 lz4", [(1, 2.0), (2, 2.1), (4, 2.3), (64, 9.5)]));
        chart.Lines.Add(new LineChart.Series("256 MB H=4 raw", [(1, 3.0), (64, double.NaN)], Dashed: true));
        chart.Limits.Add(new LineChart.Series("limit", [(1, 1.5), (64, 8.0)]));
        chart.ReferenceLines.Add(("target", 5));
        var path = Path.Combine(Path.GetTempPath(), $"hcd-chart-{Guid.NewGuid():N}.png");
        try
        {
            chart.Save(path, 800, 450);
            var png = File.ReadAllBytes(path);
            var chunks = PngFile.Chunks(png);
            Assert.Equal((800, 450), (BinaryPrimitives.ReadInt32BigEndian(chunks[0].Data), BinaryPrimitives.ReadInt32BigEndian(chunks[0].Data.AsSpan(4))));

            using var bitmap = SKBitmap.Decode(png);
            int Count(string hex)
            {
                var want = SKColor.Parse(hex);
                var n = 0;
                for (var y = 0; y < bitmap.Height; y++)
                    for (var x = 0; x < bitmap.Width; x++)
                        if (Near(bitmap.GetPixel(x, y), want)) n++;
                return n;
            }
            Assert.True(Count("#1F77B4") > 400, "the first series and its limit");
            Assert.True(Count("#D62728") > 20, "the second series' one finite point and its legend entry");
            Assert.True(Count("#000000") > 300, "text, axes and the reference line");
        }
        finally { if (Environment.GetEnvironmentVariable("HPCDATA_KEEP_CHART") is { } keep) File.Copy(path, keep, true); File.Delete(path); }
    }

    [Fact]
    public void Node_counts_sit_on_a_log2_axis_with_a_tick_at_each_count()
    {
        var chart = new LineChart { XLabel = "nodes", YLabel = "s" };
        chart.Lines.Add(new LineChart.Series("a", [(1, 1), (2, 1), (4, 1), (8, 1), (64, 1)]));
        var plot = chart.Build();
        plot.GetImage(600, 400).Dispose(); // ticks are laid out when drawn
        var ticks = plot.Axes.Bottom.TickGenerator.Ticks.Where(t => t.IsMajor).ToArray();
        Assert.Equal(["1", "2", "4", "8", "64"], ticks.Select(t => t.Label));
        Assert.Equal([0.0, 1, 2, 3, 6], ticks.Select(t => t.Position));
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

        var charts = PngFile.WriteCharts(report);

        Assert.Equal(["time-vs-nodes-25mbit.png", "time-vs-nodes-25mbit-2.png", "efficiency-vs-nodes-25mbit.png", "efficiency-vs-nodes-25mbit-2.png",
                      "time-vs-nodes-100mbit.png", "efficiency-vs-nodes-100mbit.png"], charts);
    }

    private static ReportMain.Cell Cell(int nodes, int hosts, int rate) =>
        new(nodes, hosts, 64 << 20, true, rate, 1, 2.0 * nodes / hosts, 1.0 * nodes / hosts, 0.5, 1, 1, 1, 64 << 20, 30 << 20, [], 0, 0, 0, null, null);

    private static bool Near(SKColor a, SKColor b) =>
        Math.Abs(a.Red - b.Red) < 12 && Math.Abs(a.Green - b.Green) < 12 && Math.Abs(a.Blue - b.Blue) < 12;
}

/// <summary>A strict PNG chunk reader for the tests: checks the signature, every length and every CRC.</summary>
public static class PngFile
{
    private static readonly byte[] Signature = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A];

    public sealed record Chunk(string Type, byte[] Data);

    /// <summary>Writes a report's charts into a directory of their own, checks each is a whole PNG, and returns their names.</summary>
    public static List<string> WriteCharts(Hpc.CommonData.Report.ReportMain.Report report)
    {
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-charts-{Guid.NewGuid():N}");
        Directory.CreateDirectory(dir);
        try
        {
            var written = Hpc.CommonData.Report.ReportMain.WriteCharts(report, dir);
            foreach (var name in written) Chunks(File.ReadAllBytes(Path.Combine(dir, name)));
            return written;
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    public static List<Chunk> Chunks(byte[] png)
    {
        Assert.True(png.AsSpan(0, 8).SequenceEqual(Signature), "PNG signature");
        var list = new List<Chunk>();
        var pos = 8;
        while (pos < png.Length)
        {
            var length = BinaryPrimitives.ReadInt32BigEndian(png.AsSpan(pos));
            var type = Encoding.ASCII.GetString(png, pos + 4, 4);
            var data = png[(pos + 8)..(pos + 8 + length)];
            var crc = BinaryPrimitives.ReadUInt32BigEndian(png.AsSpan(pos + 8 + length));
            Assert.Equal(Crc32.HashToUInt32(png.AsSpan(pos + 4, 4 + length)), crc);
            list.Add(new Chunk(type, data));
            pos += 12 + length;
        }
        Assert.Equal(png.Length, pos);
        Assert.Equal("IHDR", list[0].Type);
        Assert.Equal("IEND", list[^1].Type);
        return list;
    }
}
