using System.Text.Json;

namespace Hpc.Bench.Tests;

/// <summary><c>hpcdata bench codec</c>: the stager as users run it, measured against the raw codec on the same data.</summary>
public class CodecBenchTests
{
    [Fact]
    public async Task Measures_the_stager_and_the_raw_codec_on_compressible_and_random_data_in_one_run()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-codec-").FullName;
        try
        {
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(3), "bench", "codec", "--size", "4MB", "--repeat", "2", "--out", dir);
            Assert.True(r.Code == 0, $"bench codec exited {r.Code}: {r.Stderr}");

            var runs = File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Select(l => JsonDocument.Parse(l).RootElement).ToList();
            Assert.Equal(4, runs.Count);                                    // 2 kinds of data × 2 runs
            Assert.All(runs, x =>
            {
                Assert.Equal("codec", x.GetProperty("kind").GetString());
                Assert.True(x.GetProperty("codecSeconds").GetDouble() > 0);
                Assert.True(x.GetProperty("stagerSeconds").GetDouble() > 0);
                Assert.True(x.GetProperty("stagerCpuSeconds").GetDouble() > 0, "the stager's CPU time is measured, not assumed");
                Assert.True(x.GetProperty("stagerProcessSeconds").GetDouble() >= x.GetProperty("stagerSeconds").GetDouble());
            });
            double Stored(string data) => runs.Where(x => x.GetProperty("data").GetString() == data)
                .Average(x => (double)x.GetProperty("storedBytes").GetInt64() / x.GetProperty("rawBytes").GetInt64());
            Assert.InRange(Stored("csv"), 0.05, 0.7);                        // market history compresses
            Assert.InRange(Stored("random"), 1.0, 1.01);                     // random bytes are stored raw, plus headers

            // The chunker alone over the same data, once per run and kind of data: what it costs beside the codec.
            Assert.Equal(4, r.Stderr.Split('\n').Count(l => l.Contains("content-defined chunker alone") && l.Contains("MiB per CPU-s")));
            Assert.Contains("| csv | lz4 | 4 MiB |", r.Stdout);
            Assert.Contains("| random | lz4 | 4 MiB |", r.Stdout);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Fact]
    public async Task With_to_redis_the_same_stager_also_sends_every_run_to_redis_server_and_its_CPU_is_counted_as_the_receiving_side()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-codec-").FullName;
        try
        {
            // 64 MB: enough work that each receiver's CPU time spans several clock ticks (10 ms); at 4 MB redis-server's
            // share could round to none.
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(3), "bench", "codec", "--size", "64MB", "--data", "csv", "--repeat", "1",
                "--stager-cores", "1", "--to-redis", "--out", dir);
            Assert.True(r.Code == 0, $"bench codec exited {r.Code}: {r.Stderr}");

            var runs = File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Select(l => JsonDocument.Parse(l).RootElement).ToList();
            Assert.Equal(new string?[] { null, "to redis-server" }, runs.Select(x => x.TryGetProperty("stager", out var s) ? s.GetString() : null).Order());
            Assert.All(runs, x => Assert.True(x.GetProperty("cacheHostCpuSeconds").GetDouble() > 0, "the receiving store's CPU time is measured"));
            // The same segments reach either store: what was stored does not depend on who received it.
            Assert.Single(runs.Select(x => x.GetProperty("storedBytes").GetInt64()).Distinct());
            Assert.Contains("| csv (to redis-server) | lz4 | 64 MiB |", r.Stdout);
            Assert.Contains("| csv | lz4 | 64 MiB |", r.Stdout);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Theory]
    [InlineData("--data", "xml", "--data 'xml'")]
    [InlineData("--repeat", "0", "--repeat")]
    [InlineData("--size", "10KB", "--size")]
    [InlineData("--stager-cores", "999", "--stager-cores")]
    [InlineData("--baseline-stager", "/", "no native hpcdata there")]
    public async Task Bad_options_are_named_and_nothing_runs(string option, string value, string message)
    {
        var r = await HpcdataProcess.RunAsync(TimeSpan.FromSeconds(30), "bench", "codec", option, value);
        Assert.Equal(2, r.Code);
        Assert.Contains(message, r.Stderr);
    }
}
