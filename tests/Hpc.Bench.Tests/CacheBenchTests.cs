using System.Text.Json;
using Hpc.CommonData.Hosting;
using Hpc.Bench;

namespace Hpc.Bench.Tests;

/// <summary><c>hpcdata bench cache</c>: our cache host against redis-server, measured by redis-benchmark and by the SDK's client.</summary>
public class CacheBenchTests
{
    private sealed record Run(int Code, string Stdout, string Stderr, List<JsonElement> Lines);

    /// <summary>Runs the verb as users do, with tiny counts, and reads back the JSON lines it appended.</summary>
    private static async Task<Run> BenchCacheAsync(IDictionary<string, string?>? environment, params string[] options)
    {
        var dir = Directory.CreateTempSubdirectory("hcd-cache-").FullName;
        try
        {
            string[] args = ["bench", "cache", "--requests", "200", "--clients", "4", "--keys", "50", "--rounds", "1", "--out", dir, .. options];
            await using var p = ComponentProcess.Start("hpcdata", args, environment, name: "hpcdata bench cache");
            var code = await p.WaitForExitAsync(TimeSpan.FromMinutes(3));
            var results = Path.Combine(dir, "results.jsonl");
            var lines = File.Exists(results) ? File.ReadAllLines(results).Select(l => JsonDocument.Parse(l).RootElement).ToList() : [];
            return new Run(code, string.Join('\n', p.StandardOutput), p.StandardErrorTail, lines);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    private static string S(JsonElement e, string name) => e.GetProperty(name).GetString()!;

    [Fact]
    public async Task Measures_both_stores_with_both_clients_and_writes_one_line_per_store_client_and_command()
    {
        var r = await BenchCacheAsync(null, "--servers", "cachehost,redis");
        Assert.True(r.Code == 0, $"bench cache exited {r.Code}: {r.Stderr}");

        Assert.Equal(8, r.Lines.Count);                                      // 2 stores × 2 clients × 2 commands × 1 round
        Assert.Equal(new[] { "cachehost", "redis-server" }, r.Lines.Select(x => S(x, "server")).Distinct().Order());
        Assert.Equal(new[] { "hpcdata-sdk", "redis-benchmark" }, r.Lines.Select(x => S(x, "client")).Distinct().Order());
        Assert.Equal(new[] { "GET", "MGET" }, r.Lines.Select(x => S(x, "op")).Distinct().Order());
        Assert.All(r.Lines, x =>
        {
            Assert.Equal("cache", S(x, "kind"));
            var rps = x.GetProperty("rps").GetDouble();
            var p50 = x.GetProperty("p50Ms").GetDouble();
            var p99 = x.GetProperty("p99Ms").GetDouble();
            Assert.True(rps > 0, $"{x}: rps must be positive");
            Assert.True(p50 > 0 && p50 <= p99, $"{x}: need 0 < p50 <= p99");
            var config = x.GetProperty("config");
            Assert.Equal(65536, config.GetProperty("valueBytes").GetInt32());
            Assert.Equal(S(x, "op") == "GET" ? 1 : 16, config.GetProperty("keysPerCommand").GetInt32());
            // MB/s counts the values moved: commands per second × keys per command × 64 KB.
            Assert.Equal(rps * config.GetProperty("keysPerCommand").GetInt32() * 65536 / 1e6, x.GetProperty("megabytesPerSecond").GetDouble(), 6);
        });

        // One table row per store × client × command; redis-server is the yardstick of its own client.
        Assert.Contains("| cachehost | hpcdata-sdk | GET |", r.Stdout);
        Assert.Contains("| cachehost | redis-benchmark | MGET (16 keys) |", r.Stdout);
        Assert.Matches(@"\| redis-server [0-9.]+ \| redis-benchmark \| GET \|[^\n]*\| 1\.00× \|", r.Stdout);
    }

    [Fact]
    public async Task A_missing_redis_benchmark_or_garnet_is_named_and_the_rest_still_runs()
    {
        // A PATH holding redis-server but not redis-benchmark, and a garnet location that does not exist.
        var bin = Directory.CreateTempSubdirectory("hcd-cache-path-").FullName;
        try
        {
            File.CreateSymbolicLink(Path.Combine(bin, "redis-server"), CacheBenchTools.RedisServer().Path ?? throw new InvalidOperationException("redis-server is needed for this test"));
            var env = new Dictionary<string, string?> { ["PATH"] = bin, [CacheBenchTools.GarnetVariable] = "/nonexistent/garnet-server" };
            var r = await BenchCacheAsync(env, "--servers", "cachehost,redis,garnet");
            Assert.True(r.Code == 0, $"bench cache exited {r.Code}: {r.Stderr}");

            Assert.Contains("Not measured: redis-benchmark not found: not on PATH (install redis-tools", r.Stdout);
            Assert.Contains("Not measured: garnet-server not found: HPCDATA_GARNET=/nonexistent/garnet-server is not a file", r.Stdout);
            Assert.Contains("hpcdata bench cache: redis-benchmark not found", r.Stderr);
            Assert.Contains("hpcdata bench cache: garnet-server not found", r.Stderr);

            Assert.Equal(4, r.Lines.Count);                                  // 2 stores × the SDK client × 2 commands
            Assert.All(r.Lines, x => Assert.Equal("hpcdata-sdk", S(x, "client")));
            Assert.Equal(new[] { "cachehost", "redis-server" }, r.Lines.Select(x => S(x, "server")).Distinct().Order());
        }
        finally { Directory.Delete(bin, recursive: true); }
    }

    [Theory]
    [InlineData("--servers", "memcached", "--servers: 'memcached'")]
    [InlineData("--pipeline", "0", "--pipeline")]
    [InlineData("--keys", "100000", "--keys")]
    [InlineData("--rounds", "0", "--rounds")]
    public async Task Bad_options_are_named_and_nothing_runs(string option, string value, string message)
    {
        var r = await BenchCacheAsync(null, option, value);
        Assert.Equal(2, r.Code);
        Assert.Contains(message, r.Stderr);
        Assert.Empty(r.Lines);
    }

    [Fact]
    public void Reads_redis_benchmark_csv_by_its_header_and_matches_a_custom_mget_by_its_first_word()
    {
        string[] csv =
        [
            "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"",
            "\"MGET key:__rand_int__ key:__rand_int__\",\"1250.00\",\"12.500\",\"1.000\",\"11.000\",\"20.000\",\"30.500\",\"40.000\"",
        ];
        var r = RedisBenchmark.Parse(csv, "MGET", 2500)!;
        Assert.Equal(1250, r.Rps);
        Assert.Equal(2.0, r.Seconds, 9);
        Assert.Equal(12.5, r.AvgMs);
        Assert.Equal(11.0, r.P50Ms);
        Assert.Equal(30.5, r.P99Ms);
        Assert.Null(RedisBenchmark.Parse(csv, "GET", 2500));              // "GET" is not the first word of "MGET …"
    }

    [Fact]
    public void Percentiles_are_nearest_rank()
    {
        long[] sorted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        Assert.Equal(5, SdkLoad.Percentile(sorted, 0.50));
        Assert.Equal(10, SdkLoad.Percentile(sorted, 0.99));
        Assert.Equal(1, SdkLoad.Percentile(sorted, 0.0));
    }
}
