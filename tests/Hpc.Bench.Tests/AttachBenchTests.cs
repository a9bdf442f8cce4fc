using System.Text.Json;

namespace Hpc.Bench.Tests;

/// <summary><c>hpcdata bench attach</c>: K workers on one node get the agent's copy, mapped or streamed, timed from a common start.</summary>
public class AttachBenchTests
{
    [Fact]
    public async Task Every_size_worker_count_and_mode_is_a_verified_timed_run_and_the_table_sets_the_reference_beside_it()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-attach-").FullName;
        try
        {
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(5),
                "bench", "attach", "--sizes", "2MB,16MB", "--workers", "1,2", "--modes", "map,stream", "--repeat", "1", "--out", dir);
            Assert.True(r.Code == 0, $"bench attach exited {r.Code}: {r.Stderr}");

            var runs = File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Select(l => JsonDocument.Parse(l).RootElement).ToList();
            Assert.Equal(8, runs.Count);                                          // 2 sizes × 2 worker counts × 2 modes
            Assert.All(runs, x =>
            {
                var config = x.GetProperty("config");
                var workers = x.GetProperty("workers").EnumerateArray().ToList();
                Assert.Equal(config.GetProperty("workers").GetInt32(), workers.Count);
                Assert.All(workers, w =>
                {
                    Assert.True(w.GetProperty("verified").GetBoolean());
                    Assert.Equal(config.GetProperty("workerMode").GetString(), w.GetProperty("mode").GetString());
                    Assert.True(w.GetProperty("wallMs").GetDouble() > 0, "each worker is timed from the common start");
                });
                // The run's time is its slowest worker's.
                Assert.Equal(workers.Max(w => w.GetProperty("wallMs").GetDouble()) / 1000, x.GetProperty("measuredSeconds").GetDouble(), 6);
                Assert.Equal(config.GetProperty("sizeBytes").GetInt64(), x.GetProperty("dataset").GetProperty("rawBytes").GetInt64(), (double)(1 << 20));
            });

            Assert.Contains("| 16 MiB map | 16 MiB stream | 16 MiB reference |", r.Stdout);
            Assert.Matches(@"\| 2 \|[^\n]*\| 1\.35 \|", r.Stdout);               // the reference's 2 workers × 16 MB

            var report = await HpcdataProcess.RunAsync(TimeSpan.FromSeconds(60), "report", dir);
            Assert.True(report.Code == 0, $"report exited {report.Code}: {report.Stderr}");
            Assert.Contains("| loopback | 16 MiB | stream | 2 | 1 |", File.ReadAllText(Path.Combine(dir, "report.md")));
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Theory]
    [InlineData("--sizes", "12parsecs", "--sizes: '12parsecs' is not a size")]
    [InlineData("--workers", "0", "--workers: '0' is not a worker count")]
    [InlineData("--modes", "copy", "--modes: 'copy' is not map or stream")]
    [InlineData("--repeat", "0", "--repeat 0")]
    public async Task Bad_options_are_refused_by_name_before_anything_starts(string option, string value, string message)
    {
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-attach-bad-{Guid.NewGuid():N}");
        var r = await HpcdataProcess.RunAsync(TimeSpan.FromSeconds(60), "bench", "attach", option, value, "--out", dir);
        Assert.Equal(2, r.Code);
        Assert.Contains(message, r.Stderr);
        Assert.False(Directory.Exists(dir), "a refused run writes nothing");
    }
}
