using Hpc.CommonData.Report;

namespace Hpc.Bench.Tests;

/// <summary>bench cluster --scheduler slurm: how its steps are reported beside the calibration of the pattern each follows.</summary>
public class SlurmReportTests
{
    private const string Mpi =
        """{"kind":"cluster","schema":1,"run":"s-1","config":{"nodes":4,"hosts":2,"sizeBytes":67108890,"rateMbit":100,"compress":true,"fanout":"slurm:mpi"},"dataset":{"version":"v","rawBytes":67108890,"storedBytes":27985101,"segments":900,"stageSeconds":1.2},"limitSeconds":2.2388,"measuredSeconds":4.91,"efficiency":0.456,"nodes":[{"node":"n1","wallSeconds":4.91,"fetchSeconds":3.9,"bytes":67108890,"linkTxBytes":21000000,"rankCpuSeconds":1.1},{"node":"n2","wallSeconds":4.91,"fetchSeconds":4.1,"bytes":67108890,"linkTxBytes":20000000,"rankCpuSeconds":1.2},{"node":"n3","wallSeconds":4.91,"fetchSeconds":4.0,"bytes":67108890,"linkTxBytes":20000000,"rankCpuSeconds":1.2},{"node":"n4","wallSeconds":4.91,"fetchSeconds":4.0,"bytes":67108890,"linkTxBytes":20000000,"rankCpuSeconds":1.3}],"cacheTierBytes":27985101}""";

    private const string Sbcast =
        """{"kind":"cluster","schema":1,"run":"s-2","config":{"nodes":4,"hosts":2,"sizeBytes":67108890,"rateMbit":100,"compress":true,"fanout":"slurm:sbcast"},"dataset":{"version":"v","rawBytes":67108890,"storedBytes":27985101,"segments":900,"stageSeconds":1.2},"limitSeconds":2.2388,"measuredSeconds":7.28,"efficiency":0.31,"nodes":[{"node":"n1","wallSeconds":7.28,"fetchSeconds":7.28,"bytes":67108890,"source":"sbcast","linkTxBytes":83955303},{"node":"n2","wallSeconds":7.28,"fetchSeconds":7.28,"bytes":67108890,"source":"sbcast","linkTxBytes":100000}],"cacheTierBytes":0}""";

    private const string Neighbour =
        """{"kind":"calibration","schema":1,"run":"s-3","pattern":"neighbour-iperf3","config":{"nodes":4,"hosts":2,"sizeBytes":67108864,"rateMbit":100,"compress":true},"limitSeconds":5.37,"measuredSeconds":5.967,"efficiency":0.9,"nodes":[{"node":"n1","wallSeconds":5.9,"fetchSeconds":5.9,"bytes":67108864}]}""";

    private const string GaveUp =
        """{"kind":"skipped","schema":1,"run":"s-4","note":"slurm:sbcast failed: exit 233 after 15.9 s","config":{"nodes":16,"hosts":2,"sizeBytes":67108890,"rateMbit":100,"compress":true,"fanout":"slurm:sbcast"}}""";

    [Fact]
    public void Each_step_is_given_against_S_over_B_its_own_limit_and_the_calibration_of_its_pattern()
    {
        var data = ResultReader.ReadLines([Mpi, Sbcast, Neighbour, GaveUp]);
        var report = ReportMain.Build(data);
        Assert.Empty(report.Cells); // kept out of the direct-fetch tables
        Assert.Equal(["mpi", "sbcast"], report.Slurm!.Select(c => c.Mode));
        var md = ReportMain.Markdown(data, report, []);
        Assert.Contains("## On a Slurm cluster: our node prep beside sbcast and srun --bcast", md);
        // 4.91 s over S/B = 2.2388 s; the neighbour pattern ran at 90%, so its time was 2.49 s; median node CPU 1.2 s.
        Assert.Contains("| 4 | mpi | 1 | 4.91 | 4.10 | 2.19 | 2.19 | 1.97 | 1.00 | 0.75 | 1.20 |", md);
        Assert.Contains("| 4 | sbcast | 1 | 7.28 | – | 3.25 | 3.25 | 2.93 | 0.00 | 3.00 | – |", md);
        Assert.Contains("slurm:sbcast failed: exit 233", md);
        Assert.Contains("slurm-time-vs-nodes.svg", ChartFiles.Write(report));
    }

    [Fact]
    public void Charts_of_several_sizes_are_named_by_the_size_asked_for_not_the_bytes_a_generated_dataset_came_to()
    {
        // The generated CSVs end on a whole line: 64 MB came to 67,108,890 bytes and 256 MB to 268,435,476.
        var big = Mpi.Replace("67108890", "268435476").Replace("\"run\":\"s-1\"", "\"run\":\"s-5\"");
        var report = ReportMain.Build(ResultReader.ReadLines([Mpi, big]));
        Assert.Equal(["slurm-time-vs-nodes-100mbit-64mb.svg", "slurm-time-vs-nodes-100mbit-256mb.svg"], ChartFiles.Write(report));
    }

    [Theory]
    [InlineData("sbcast", null, null, "sbcast")]
    [InlineData("sbcast-f2", 2, null, "sbcast -F2")]
    [InlineData("sbcast-tree2", null, 2, "sbcast, TreeWidth=2")]
    [InlineData("sbcast-f4-tree2", 4, 2, "sbcast -F4, TreeWidth=2")]
    public void An_sbcast_mode_names_its_fanout_and_tree_width(string mode, int? fanout, int? width, string legend)
    {
        Assert.True(SlurmModes.TryParseSbcast(mode, out var f, out var w));
        Assert.Equal((fanout, width), (f, w));
        Assert.Equal(legend, SlurmModes.Describe(mode));
        Assert.True(SlurmModes.IsKnown(mode));
    }

    [Theory]
    [InlineData("sbcast-f9")]      // Slurm caps sbcast's fanout at 8
    [InlineData("sbcast-f0")]
    [InlineData("sbcast-tree1")]
    [InlineData("sbcast-tree2-f2")] // fanout first
    [InlineData("sbcast-fx")]
    [InlineData("sbcastf2")]
    [InlineData("scast")]
    public void A_mistyped_mode_is_refused(string mode) => Assert.False(SlurmModes.IsKnown(mode));

    [Fact]
    public void The_fan_out_is_compared_with_the_fastest_sbcast_setting_of_its_cell()
    {
        string Sbcast(string mode, double seconds) =>
            $$"""{"kind":"cluster","schema":1,"run":"s-2","config":{"nodes":4,"hosts":2,"sizeBytes":67108890,"rateMbit":100,"compress":true,"fanout":"slurm:{{mode}}"},"dataset":{"version":"v","rawBytes":67108890,"storedBytes":27985101,"segments":900,"stageSeconds":1.2},"limitSeconds":2.2388,"measuredSeconds":{{seconds.ToString(System.Globalization.CultureInfo.InvariantCulture)}},"nodes":[{"node":"n1","wallSeconds":{{seconds.ToString(System.Globalization.CultureInfo.InvariantCulture)}},"fetchSeconds":1,"bytes":67108890,"source":"sbcast","linkTxBytes":100000}],"cacheTierBytes":0}""";
        var data = ResultReader.ReadLines([Mpi, Sbcast("sbcast", 7.28), Sbcast("sbcast-f2-tree2", 6.5), Sbcast("sbcast-f2-tree2", 6.1), Sbcast("sbcast-f2-tree2", 6.3), Sbcast("sbcast-f4", 6.9)]);
        var report = ReportMain.Build(data);
        Assert.Equal(["mpi", "sbcast", "sbcast-f2-tree2", "sbcast-f4"], report.Slurm!.Select(c => c.Mode));
        var (mpi, best, defaults, tried) = Assert.Single(ReportMain.SlurmBeside(report.Slurm!));
        Assert.Equal("mpi", mpi.Mode);
        Assert.Equal(("sbcast-f2-tree2", 6.3), (best.Mode, best.MeasuredSeconds)); // the median of its three runs
        Assert.Equal(7.28, defaults!.MeasuredSeconds);
        Assert.Equal(3, tried);
        // 6.3 s over the fan-out's 4.91 s; S/B = 27985101 B at 100 Mbit/s = 2.2388 s.
        Assert.Contains("| 100 Mbit/s | 64 MiB | 4 | 4.91 | 2.19 | 6.30 | sbcast -F2, TreeWidth=2 | 2.81 | 1.28 | 7.28 | 3 |", ReportMain.Markdown(data, report, []));
    }
}
