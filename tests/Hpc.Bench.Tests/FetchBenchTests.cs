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
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(3), "bench", "fetch", "--size", "4MB", "--repeat", "2", "--load", "quiet", "--out", dir);
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

    [Fact]
    public async Task Measures_the_agent_quiet_and_again_beside_a_busy_nodes_other_work_which_it_starts_and_stops_itself()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-fetch-").FullName;
        try
        {
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(3), "bench", "fetch", "--size", "2MB", "--data", "csv", "--repeat", "1",
                "--load", "quiet,loaded", "--out", dir);
            Assert.True(r.Code == 0, $"bench fetch exited {r.Code}: {r.Stderr}");

            var loads = File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Select(l => JsonDocument.Parse(l).RootElement.GetProperty("load").GetString());
            Assert.Equal(["quiet", "loaded"], loads);
            Assert.Contains($"| all {Environment.ProcessorCount} shared | quiet | 1 |", r.Stdout);
            Assert.Contains("| fetch time, loaded ÷ quiet | ingest time, loaded ÷ quiet |", r.Stdout);
            // The load's processes went with the benchmark.
            Assert.Empty(LoadProcesses());
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Fact]
    public async Task A_load_process_stops_by_itself_at_its_time_limit_and_refuses_an_unknown_kind()
    {
        var r = await HpcdataProcess.RunAsync(TimeSpan.FromSeconds(60), "bench", "load", "--kind", "cpu", "--seconds", "1");
        Assert.True(r.Code == 0, $"bench load exited {r.Code}: {r.Stderr}");
        var bad = await HpcdataProcess.RunAsync(TimeSpan.FromSeconds(60), "bench", "load", "--kind", "disk", "--seconds", "1");
        Assert.Equal(2, bad.Code);
        Assert.Contains("--kind 'disk'", bad.Stderr);
    }

    private static IEnumerable<string> LoadProcesses() =>
        Directory.EnumerateDirectories("/proc").Select(d => Path.Combine(d, "cmdline")).Select(f =>
        {
            try { return File.ReadAllText(f).Replace('\0', ' '); }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return ""; }
        }).Where(c => c.Contains("bench load --kind", StringComparison.Ordinal));

    [Theory]
    [InlineData("--load", "busy", "--load 'busy'")]
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
