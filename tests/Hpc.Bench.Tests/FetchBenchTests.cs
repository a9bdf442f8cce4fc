using System.Text.Json;

namespace Hpc.Bench.Tests;

/// <summary><c>hpcdata bench fetch</c>: the node agent as nodes run it, measured against the raw decode path on the same data.</summary>
public class FetchBenchTests
{
    [Fact]
    public async Task Measures_the_agents_fetch_and_the_raw_decode_on_compressible_and_random_data_in_one_run()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-fetch-").FullName;
        try
        {
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(3), "bench", "fetch", "--size", "4MB", "--repeat", "2", "--out", dir);
            Assert.True(r.Code == 0, $"bench fetch exited {r.Code}: {r.Stderr}");

            var runs = File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Select(l => JsonDocument.Parse(l).RootElement).ToList();
            Assert.Equal(4, runs.Count);                                    // 2 kinds of data × 2 runs
            Assert.All(runs, x =>
            {
                Assert.Equal("fetch", x.GetProperty("kind").GetString());
                Assert.True(x.GetProperty("decodeSeconds").GetDouble() > 0);
                Assert.True(x.GetProperty("fetchSeconds").GetDouble() > 0);
                Assert.True(x.GetProperty("agentUserSeconds").GetDouble() + x.GetProperty("agentSystemSeconds").GetDouble() >= 0);
            });
            Assert.Contains("| csv | lz4 | 4 MiB |", r.Stdout);
            Assert.Contains("| random | lz4 | 4 MiB |", r.Stdout);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Theory]
    [InlineData("--data", "xml", "--data 'xml'")]
    [InlineData("--repeat", "0", "--repeat")]
    [InlineData("--agent-cores", "999", "--agent-cores")]
    public async Task Bad_options_are_named_and_nothing_runs(string option, string value, string message)
    {
        var r = await HpcdataProcess.RunAsync(TimeSpan.FromSeconds(30), "bench", "fetch", option, value);
        Assert.Equal(2, r.Code);
        Assert.Contains(message, r.Stderr);
    }
}
