using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// The programs and the sample worker behave the same whether they run on the runtime (the build) or compiled to native
/// code: .ci/run publishes them with <c>-p:PublishAot=true</c> and runs this whole project again with HPCDATA_BIN
/// pointing at them, so every test here and in the other classes then talks to native processes.
/// </summary>
public class NativeProgramsTests
{
    private static readonly string? Installed = Environment.GetEnvironmentVariable(ComponentLocator.BinVariable);

    [Fact]
    public async Task The_sample_worker_opens_the_nodes_copy_with_hpcdata_workers_command_line_and_result()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var data = Cluster.Csvish(3 << 20);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", data), "risk/native");
        var (_, pipe, _) = await c.StartAgentAsync();
        var env = new Dictionary<string, string?> { [AgentClient.PipeVariable] = pipe };
        if (Installed is { } bin && File.Exists(Path.Combine(bin, OperatingSystem.IsWindows() ? "Hpc.Samples.Native.exe" : "Hpc.Samples.Native")))
            Assert.True(ComponentLocator.IsNative(ComponentLocator.Find("Hpc.Samples.Native")), "a native build in HPCDATA_BIN is the one started");

        string[] map = ["worker", "risk/native", "--mode", "map", "--verify", "--touch", "all", "--reopens", "2"];
        string[] stream = ["worker", "risk/native", "--mode", "stream", "--reopens", "0"];
        var runs = await Task.WhenAll([.. Enumerable.Range(0, 4).Select(_ => c.RunAsync("Hpc.Samples.Native", map, env)), c.RunAsync("Hpc.Samples.Native", stream, env)]);
        foreach (var (code, stdout, stderr) in runs)
        {
            Assert.True(code == 0, stderr);
            var r = JsonDocument.Parse(stdout.Last()).RootElement;
            Assert.Equal(staged.Version, r.GetProperty("version").GetString());
            Assert.Equal(data.Length, r.GetProperty("bytes").GetInt64());
            Assert.True(r.GetProperty("verified").GetBoolean());
            Assert.True(r.GetProperty("mainUnixMs").GetDouble() > 0);
        }
        Assert.Equal(["map", "map", "map", "map", "stream"], runs.Select(r => JsonDocument.Parse(r.Stdout.Last()).RootElement.GetProperty("mode").GetString()));
        // The re-hash of a mapped copy ran (--verify) and matched.
        Assert.All(runs.Take(4), r => Assert.True(JsonDocument.Parse(r.Stdout.Last()).RootElement.GetProperty("verifyMs").GetDouble() > 0));
    }

    [Fact]
    public async Task The_sample_worker_names_a_missing_dataset_and_refuses_an_unknown_switch()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var (_, pipe, _) = await c.StartAgentAsync();
        var env = new Dictionary<string, string?> { [AgentClient.PipeVariable] = pipe };

        var missing = await c.RunAsync("Hpc.Samples.Native", ["worker", "risk/nowhere", "--reopens", "0"], env);
        Assert.Equal(ExitCodes.NotFound, missing.Code);
        Assert.Contains("risk/nowhere", missing.Stderr);

        var unknown = await c.RunAsync("Hpc.Samples.Native", ["worker", "risk/x", "--colour", "blue"], env);
        Assert.Equal(2, unknown.Code);
        Assert.Contains("unknown option '--colour'", unknown.Stderr);
    }

    [Fact]
    public async Task Each_program_prints_the_help_its_options_type_describes_and_refuses_a_bad_value()
    {
        await using var c = new Cluster();
        // The help lists every switch with its default, read from the options type by reflection: in a native build
        // that is only right if the type survived compilation whole.
        await ExpectHelp<CacheHostOptions>(c);
        await ExpectHelp<NodeAgentOptions>(c);
        await ExpectHelp<StagerOptions>(c);

        var port = await c.RunAsync(CacheHostOptions.Assembly, ["--port", "banana"]);
        Assert.Equal(2, port.Code);
        Assert.Contains("'banana' is not a whole number", port.Stderr);
        var budget = await c.RunAsync(NodeAgentOptions.Assembly, ["--pipe", "p", "--data-dir", c.Root, "--budget", "lots"]);
        Assert.Equal(2, budget.Code);
        Assert.Contains("'lots' is not a size", budget.Stderr);
        var chunking = await c.RunAsync(StagerOptions.Assembly, [c.Root, "--name", "a/b", "--chunking", "sideways"]);
        Assert.Equal(2, chunking.Code);
        Assert.Contains("sideways", chunking.Stderr);
    }

    private static async Task ExpectHelp<T>(Cluster c) where T : class, IProgramOptions, new()
    {
        var (code, stdout, stderr) = await c.RunAsync(T.Assembly, ["--help"]);
        Assert.True(code == 0, stderr);
        var expected = ProgramContract<T>.Help().ReplaceLineEndings("\n").TrimEnd('\n').Split('\n');
        Assert.Equal(expected, stdout);
    }
}
