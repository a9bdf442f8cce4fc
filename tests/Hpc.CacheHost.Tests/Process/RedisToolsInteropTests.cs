using System.Diagnostics;
using System.Text.RegularExpressions;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// The stock Redis command-line tools (Debian's redis-tools) against the real host: proof that existing clients
/// work unchanged. Missing tools fail these tests on purpose; skipping would hide a broken interop claim.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed partial class RedisToolsInteropTests : IDisposable
{
    private static readonly TimeSpan ToolTimeout = TimeSpan.FromSeconds(120);

    private readonly CacheHostProcess _host = CacheHostProcess.Start();

    [Fact]
    public void Redis_cli_can_ping_set_get_and_read_info()
    {
        Assert.Equal("PONG", RedisCli("PING").Trim());
        Assert.Equal("OK", RedisCli("SET", "greeting", "hello world").Trim());
        Assert.Equal("hello world", RedisCli("GET", "greeting").Trim());
        Assert.Equal("1", RedisCli("EXISTS", "greeting").Trim());

        string info = RedisCli("INFO");
        Assert.Contains("# Keyspace", info);
        Assert.Contains("db0:keys=1,expires=0", info);
        Assert.Contains("redis_version:", info);
    }

    [Fact]
    public void Redis_benchmark_completes_64KB_set_and_get_with_nonzero_rates()
    {
        string output = Run("redis-benchmark",
            "-h", _host.Host, "-p", _host.Port.ToString(), "-t", "set,get", "-n", "2000", "-d", "65536", "-P", "16", "-q");

        Assert.DoesNotContain("Could not fetch server CONFIG", output);
        foreach (string test in (string[])["SET", "GET"])
        {
            var rate = Regex.Match(output, $@"(?m)^\s*{test}: ([0-9.]+) requests per second");
            Assert.True(rate.Success, $"no {test} rate in redis-benchmark output:\n{output}\n{_host.Log}");
            Assert.True(double.Parse(rate.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture) > 0, output);
        }
        Assert.Equal("1", RedisCli("DBSIZE").Trim());
    }

    private string RedisCli(params string[] args) => Run("redis-cli", ["-h", _host.Host, "-p", _host.Port.ToString(), .. args]);

    private string Run(string tool, params string[] args)
    {
        string path = FindOnPath(tool)
            ?? throw new InvalidOperationException(
                $"'{tool}' is not on PATH. Install the Redis command-line tools (Debian/Ubuntu: apt-get install -y redis-tools); CI installs them.");

        var start = new ProcessStartInfo(path)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
            UseShellExecute = false,
        };
        foreach (string arg in args)
            start.ArgumentList.Add(arg);

        using var process = System.Diagnostics.Process.Start(start)!;
        var stdout = process.StandardOutput.ReadToEndAsync();
        var stderr = process.StandardError.ReadToEndAsync();
        if (!process.WaitForExit(ToolTimeout))
        {
            process.Kill(entireProcessTree: true);
            throw new TimeoutException($"{tool} {string.Join(' ', args)} did not finish within {ToolTimeout}.\n{_host.Log}");
        }
        process.WaitForExit();
        // redis-benchmark redraws its progress line with CR; keep only what a terminal would finally show.
        string output = string.Join('\n', (stdout.Result + stderr.Result).Split('\n').Select(l => l.TrimEnd('\r').Split('\r').Last()));
        Assert.True(process.ExitCode == 0, $"{tool} exited with {process.ExitCode}:\n{output}\n{_host.Log}");
        return output;
    }

    private static string? FindOnPath(string tool) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "")
            .Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries)
            .Select(dir => Path.Combine(dir, tool))
            .FirstOrDefault(File.Exists);

    public void Dispose() => _host.Dispose();
}
