using Hpc.CommonData.Report;

namespace Hpc.Bench.Tests;

public class ResultReaderTests
{
    private const string Cluster =
        """{"kind":"cluster","schema":1,"run":"r1","config":{"nodes":2,"hosts":1,"sizeBytes":16777216,"rateMbit":100,"compress":true},"dataset":{"version":"v","rawBytes":16777216,"storedBytes":6000000,"segments":256,"stageSeconds":1.2},"limitSeconds":0.96,"measuredSeconds":1.2,"efficiency":0.8,"nodes":[{"node":"node1","wallSeconds":1.1,"fetchSeconds":1.0,"bytes":16777216},{"node":"node2","wallSeconds":1.2,"fetchSeconds":1.1,"bytes":16777216}],"cacheHosts":[{"host":"198.18.1.1:6380","netOutputBytes":12000000,"usedMemoryBytes":6000000}],"futureField":{"x":[1,2,3]}}""";

    [Fact]
    public void Skips_a_truncated_last_line_and_unknown_kinds_and_keeps_the_rest()
    {
        var data = ResultReader.ReadLines([Cluster, "", """{"kind":"something-new","a":1}""", Cluster[..80]]);
        Assert.Equal(3, data.Lines);
        Assert.Equal(1, data.Unreadable);
        Assert.Equal(1, data.UnknownKinds);
        var run = Assert.Single(data.Records);
        Assert.Equal(2, run.Nodes.Count);
        Assert.Equal(0.8, run.Efficiency);
        Assert.Equal(12000000, Assert.Single(run.CacheHosts!).NetOutputBytes);
    }

    [Fact]
    public void Lines_that_are_json_but_not_objects_or_wrong_types_are_unreadable_not_fatal()
    {
        var data = ResultReader.ReadLines(["[1,2]", "42", """{"kind":"cluster","config":"oops"}""", "{\"kind\":\"cluster\"", Cluster]);
        Assert.Single(data.Records);
        Assert.Equal(4, data.Unreadable + data.UnknownKinds);
    }

    [Fact]
    public void Report_aggregates_cells_with_spread_efficiency_and_compression_savings()
    {
        var raw = Cluster.Replace("\"compress\":true", "\"compress\":false").Replace("\"measuredSeconds\":1.2", "\"measuredSeconds\":2.4").Replace("\"efficiency\":0.8", "\"efficiency\":0.7");
        var data = ResultReader.ReadLines([Cluster, raw, """{"kind":"skipped","note":"time bound reached","config":{"nodes":32,"hosts":2,"sizeBytes":268435456,"compress":true}}"""]);
        var report = ReportMain.Build(data);
        Assert.Equal(2, report.Cells.Count);
        var lz4 = report.Cells.Single(c => c.Compress);
        Assert.Equal(1.1, lz4.NodeMin);
        Assert.Equal(1.2, lz4.NodeMax);
        Assert.Single(report.Skipped);
        var md = ReportMain.Markdown(data, report, []);
        Assert.Contains("| 16 MiB | 1.20 (80%) |", md);
        Assert.Contains("## Compression savings", md);
        Assert.Contains("| 2 | 1 | 16 MiB | lz4 | 36% | 2.40 | 1.20 | 50% |", md);
        Assert.Contains("time bound reached", md);
    }

    [Fact]
    public void Runs_stored_with_another_codec_are_cells_of_their_own_with_the_codec_named()
    {
        var zstd = Cluster.Replace("\"compress\":true", "\"compress\":true,\"codec\":\"zstd\"").Replace("\"storedBytes\":6000000", "\"storedBytes\":4000000")
            .Replace("\"measuredSeconds\":1.2", "\"measuredSeconds\":0.8");
        var raw = Cluster.Replace("\"compress\":true", "\"compress\":false").Replace("\"measuredSeconds\":1.2", "\"measuredSeconds\":2.4");
        var namedLz4 = Cluster.Replace("\"compress\":true", "\"compress\":true,\"codec\":\"lz4\"").Replace("\"measuredSeconds\":1.2", "\"measuredSeconds\":1.4");
        var data = ResultReader.ReadLines([Cluster, zstd, raw, namedLz4]);
        var report = ReportMain.Build(data);

        Assert.Equal(["lz4", "zstd", "raw"], report.Cells.Select(c => c.CodecName));
        Assert.Equal(2, report.Cells.Single(c => c.CodecName == "lz4").Runs); // naming lz4 does not split its runs
        Assert.Equal(0.8, report.Cells.Single(c => c.CodecName == "zstd").MeasuredSeconds);
        var md = ReportMain.Markdown(data, report, []);
        Assert.Contains("## Data access time (s): 1 cache host, zstd, 100 Mbit/s links", md);
        Assert.Contains("| 2 | 1 | 16 MiB | zstd | 24% | 1 | 0.80 |", md);
        Assert.Contains("| 2 | 1 | 16 MiB | zstd | 24% | 2.40 | 0.80 | 67% |", md);
        Assert.Contains("16 MiB H=1 zstd", ChartLegends(report));
    }

    /// <summary>Every legend entry of every chart the report draws.</summary>
    private static IEnumerable<string> ChartLegends(ReportMain.Report report)
    {
        var dir = Directory.CreateTempSubdirectory("hcd-legends-").FullName;
        try
        {
            return ReportMain.WriteCharts(report, dir).SelectMany(f => System.Xml.Linq.XDocument.Load(Path.Combine(dir, f)).Descendants()
                .Where(e => (string?)e.Attribute("class") == "legend-entry").Select(e => e.Value)).ToList();
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Fact]
    public void Out_puts_the_summary_and_charts_in_the_directory_it_names_and_nothing_beside_the_results()
    {
        var results = Directory.CreateTempSubdirectory("hcd-report-in-").FullName;
        var parent = Directory.CreateTempSubdirectory("hcd-report-out-").FullName;
        var output = Path.Combine(parent, "new", "report");
        try
        {
            File.WriteAllText(Path.Combine(results, "results.jsonl"), Cluster + "\n");

            Assert.Equal(0, ReportMain.Run([results, "--out", output]));

            Assert.True(File.Exists(Path.Combine(output, "report.md")));
            Assert.Contains("time-vs-nodes.svg", Directory.GetFiles(output).Select(Path.GetFileName));
            Assert.Equal(["results.jsonl"], Directory.GetFiles(results).Select(Path.GetFileName));

            Assert.Equal(0, ReportMain.Run([Path.Combine(results, "results.jsonl")]));
            Assert.True(File.Exists(Path.Combine(results, "report.md")), "without --out the report is written beside its results");
            Assert.Equal(2, ReportMain.Run([results, "--out"]));
        }
        finally
        {
            Directory.Delete(results, recursive: true);
            Directory.Delete(parent, recursive: true);
        }
    }

    [Fact]
    public void A_run_is_also_read_against_plain_tcp_in_the_same_pattern_and_link_rate()
    {
        const string pull = """{"kind":"calibration","pattern":"pull","config":{"nodes":2,"hosts":1,"sizeBytes":16777216,"rateMbit":100,"data":"tcp"},"limitSeconds":2.68,"measuredSeconds":2.98,"efficiency":0.9,"nodes":[{"node":"node1","wallSeconds":2.9,"fetchSeconds":2.9,"bytes":16777216}]}""";
        var otherRate = pull.Replace("\"rateMbit\":100", "\"rateMbit\":10").Replace("\"efficiency\":0.9", "\"efficiency\":0.5");
        var data = ResultReader.ReadLines([Cluster, otherRate, pull]);
        var md = ReportMain.Markdown(data, ReportMain.Build(data), []);
        Assert.Contains("## Against plain TCP in the same namespaces", md);
        Assert.Contains("| 2 | 1 | 16 MiB | lz4 | 80% | 90% | 89% |", md);
    }

    [Fact]
    public void Fanout_runs_get_their_own_section_beside_direct_fetch_with_the_bytes_each_cache_host_sent()
    {
        // N = 2, H = 1, 6 MB stored at 100 Mbit/s: S/B = 0.48 s. Direct sent 2·S from the host, the fan-out 1·S.
        var fanout = Cluster.Replace("\"compress\":true", "\"compress\":true,\"fanout\":\"mpi\"").Replace("\"limitSeconds\":0.96", "\"limitSeconds\":0.48")
            .Replace("\"measuredSeconds\":1.2", "\"measuredSeconds\":0.6").Replace("\"netOutputBytes\":12000000", "\"netOutputBytes\":6000000")
            .Replace("\"bytes\":16777216}", "\"bytes\":16777216,\"linkRxBytes\":6000000,\"linkTxBytes\":3000000,\"launchSeconds\":0.2}");
        const string neighbour = """{"kind":"calibration","pattern":"neighbour","config":{"nodes":2,"hosts":1,"sizeBytes":4194304,"rateMbit":100,"data":"tcp"},"limitSeconds":0.34,"measuredSeconds":0.4,"efficiency":0.85,"nodes":[{"node":"node1","wallSeconds":0.4,"fetchSeconds":0.4,"bytes":4194304}]}""";
        var data = ResultReader.ReadLines([Cluster, fanout, neighbour]);
        var report = ReportMain.Build(data);

        var direct = Assert.Single(report.Cells);
        Assert.Equal(1.2, direct.MeasuredSeconds);
        var f = Assert.Single(report.Fanouts);
        Assert.Equal((0.6, 0.48, 1.0, 2.0), (f.MeasuredSeconds, f.LimitSeconds, f.HostShare, f.DirectHostShare));
        Assert.Equal((1.0, 0.5, 0.2, 0.85), (f.NodeRx, f.NodeTx, f.LaunchSeconds, f.NeighbourEfficiency));
        var md = ReportMain.Markdown(data, report, []);
        Assert.Contains("## Fan-out between nodes", md);
        Assert.True(md.Contains("| 100 Mbit/s | 16 MiB | 5.72 MiB | 1 | 2 | Open MPI | 1 | 0.60 | 1.25 | 0.20 | 1.20 | 1.25 | 0.50 | 1.00 → 2.00 | 1.00 / 0.50 | 85% | – |"), md);
    }

    [Fact]
    public void Repeated_runs_of_one_configuration_become_one_cell_with_their_median_and_range()
    {
        string Run(double seconds) => Cluster.Replace("\"measuredSeconds\":1.2", $"\"measuredSeconds\":{seconds}");
        var data = ResultReader.ReadLines([Run(1.5), Run(1.2), Run(3.0)]);
        var cell = Assert.Single(ReportMain.Build(data).Cells);
        Assert.Equal(3, cell.Runs);
        Assert.Equal(1.5, cell.MeasuredSeconds);
        Assert.Equal(1.2, cell.MeasuredMin);
        Assert.Equal(3.0, cell.MeasuredMax);
        var md = ReportMain.Markdown(data, ReportMain.Build(data), []);
        Assert.Contains("| 16 MiB | 1.50 (80%) |", md);
        Assert.Contains("| 3 | 1.50 (1.20–3.00) |", md);
    }

    [Fact]
    public void Fetch_telemetry_from_a_real_cluster_becomes_one_run_per_version()
    {
        var t0 = DateTimeOffset.Parse("2026-01-01T00:00:10Z");
        string Fetch(string node, double seconds, DateTimeOffset end) =>
            $$"""{"kind":"fetch","schema":1,"time":"{{end:O}}","node":"{{node}}","dataset":"risk/md","version":"abc","rawBytes":1000000,"storedBytes":500000,"seconds":{{seconds}},"source":"fetched","hosts":1,"rateMbit":8}""";
        var data = ResultReader.ReadLines([Fetch("n1", 1.0, t0), Fetch("n2", 3.0, t0.AddSeconds(1))]);
        var run = Assert.Single(data.Records);
        Assert.Equal("telemetry", run.Note);
        Assert.Equal(2, run.Config.Nodes);
        Assert.Equal(3.0, run.MeasuredSeconds, 6);     // first start 00:00:08, last end 00:00:11
        Assert.Equal(1.0, run.LimitSeconds, 6);        // 2 nodes × 0.5 MB / (1 host × 1 MB/s)
    }

    [Fact]
    public void Codec_and_cache_measurements_get_their_own_sections_and_cache_ratios_stay_within_one_pipeline_depth()
    {
        var machine = new MachineInfo("m", 2, "6.x", ".NET 10");
        string Json<T>(T record) => System.Text.Json.JsonSerializer.Serialize(record, BenchJson.Options);
        var codec = new CodecRecord("codec", 1, DateTimeOffset.UnixEpoch, "csv", 1_000_000_000, 400_000_000, 2, false, 1, 1,
            CodecSeconds: 1.0, CodecCpuSeconds: 2.0, StagerSeconds: 2.0, StagerProcessSeconds: 2.5, StagerCpuSeconds: 3.0, CacheHostCpuSeconds: 1.0, machine);
        CacheRecord Cache(string server, int pipeline, double rps) => new("cache", 1, "run", DateTimeOffset.UnixEpoch, server, null, "redis-benchmark", "GET", 1,
            new CacheConfig(1000, 1000, 16, pipeline, 100, 65536, 1), 1000 / rps, rps, rps * 65536 / 1e6, 1, 0.5, 2, 1, 1, 2, 1, null, machine);

        var data = ResultReader.ReadLines([Json(codec), Json(Cache("cachehost", 1, 2000)), Json(Cache("redis-server", 1, 1000)),
            Json(Cache("cachehost", 16, 3000)), Json(Cache("redis-server", 16, 4000))]);
        Assert.Equal(0, data.Unreadable + data.UnknownKinds);
        var markdown = ReportMain.Markdown(data, ReportMain.Build(data), []);

        Assert.Contains("## Stager vs the raw codec", markdown);
        Assert.Matches(@"\| csv \| lz4 \| [^|]+ \| fixed \| 40\.0% \| all 2 shared \| 1 \| 954 \(954–954\) \| 477 \(477–477\) \| 50% \|", markdown);   // 10^9 bytes in 1 s and 2 s, in MiB/s
        var pipeline1 = markdown[markdown.IndexOf("pipeline 1 (bench cache)", StringComparison.Ordinal)..markdown.IndexOf("pipeline 16 (bench cache)", StringComparison.Ordinal)];
        var pipeline16 = markdown[markdown.IndexOf("pipeline 16 (bench cache)", StringComparison.Ordinal)..];
        Assert.Matches(@"\| cachehost \| redis-benchmark \| GET \| 2000 \|[^\n]*\| 2\.00× \|", pipeline1);
        Assert.Matches(@"\| cachehost \| redis-benchmark \| GET \| 3000 \|[^\n]*\| 0\.75× \|", pipeline16);
    }
}
