using Hpc.CommonData.Report;

namespace Hpc.Bench.Tests;

/// <summary>--agent-max-rate / --stager-max-rate runs: how their steady rate is measured and how the report shows them.</summary>
public class RateLimitReportTests
{
    private const string Limited =
        """{"kind":"cluster","schema":1,"run":"r9","config":{"nodes":2,"hosts":1,"sizeBytes":67108864,"rateMbit":1000,"compress":true},"dataset":{"version":"v","rawBytes":67108864,"storedBytes":67133440,"segments":1024,"stageSeconds":6.9},"limitSeconds":1.07,"measuredSeconds":5.6,"efficiency":0.19,"nodes":[{"node":"node1","wallSeconds":5.6,"fetchSeconds":5.5,"bytes":67108864},{"node":"node2","wallSeconds":5.6,"fetchSeconds":5.5,"bytes":67108864}],"rateLimit":{"agentMaxRateBytes":12500000,"agentMedianBytesPerSecond":12200000,"agentMinBytesPerSecond":12100000,"agentMaxBytesPerSecond":12200000,"stagerMaxRateBytes":10000000,"stagerBytesPerSecond":9700000,"agentSteadyBytesPerSecond":12490000,"stagerSteadyBytesPerSecond":10010000}}""";

    [Fact]
    public void The_steady_rate_is_the_slope_between_10_and_90_percent_whatever_happens_before_and_after()
    {
        // 1 s idle, then 8 MB at once (socket buffers filling), then 10 MB/s for 8 s, then idle: the bursts and the
        // idle ends are outside 10-90%, so the slope is the paced rate.
        var samples = new List<(double, long)> { (0, 0), (1, 0), (1.05, 8_000_000) };
        for (var t = 1.1; t <= 9.05; t += 0.1) samples.Add((t, 8_000_000 + (long)((t - 1.05) * 10_000_000)));
        samples.Add((10, samples[^1].Item2));
        Assert.InRange(TrafficSampler.SteadyRate(samples)!.Value, 9.9e6, 10.1e6);
        Assert.Null(TrafficSampler.SteadyRate([(0, 0), (1, 0), (2, 0), (3, 0)]));
    }

    [Fact]
    public void A_rate_limited_run_is_reported_as_configured_against_achieved_and_kept_out_of_the_efficiency_tables()
    {
        var data = ResultReader.ReadLines([Limited]);
        var report = ReportMain.Build(data);
        Assert.Empty(report.Cells);
        Assert.Equal([("agents", 12_500_000L), ("stager", 10_000_000L)], report.Rates!.Select(r => (r.Who, r.ConfiguredBytes)));
        var md = ReportMain.Markdown(data, report, []);
        Assert.Contains("## Rate limits (--max-rate)", md);
        Assert.Contains("| agents | 2 | 1000 Mbit/s | 64 MiB | 100.0 Mbit/s | 97.6 Mbit/s | 99.9 Mbit/s | 97.6% | 99.9% |", md);
        Assert.Contains("| stager | 2 | 1000 Mbit/s | 64 MiB | 80.0 Mbit/s | 77.6 Mbit/s | 80.1 Mbit/s | 97.0% | 100.1% |", md);
        Assert.Equal(["rate-limit.svg"], ChartFiles.Write(report));
    }
}
