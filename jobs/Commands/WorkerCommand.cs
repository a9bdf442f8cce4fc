using System.Diagnostics;
using System.Text.Json;
using CommandLine;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.Jobs.Sample;
using Microsoft.Extensions.Logging;

namespace Hpc.Jobs.Commands;

[Verb("worker", HelpText = "Run one sample worker: open a dataset through the SDK, verify it, compute 1-day VaR, print a JSON result.")]
public sealed class WorkerOptions
{
    [Option('d', "dataset", HelpText = "Dataset name (default: $HPCDATA_DATASET).")]
    public string? Dataset { get; set; }

    [Option("mode", Default = "auto", HelpText = "auto, map, stream or direct (default: $HPCDATA_MODE or auto).")]
    public string Mode { get; set; } = "auto";

    [Option("wait-go", HelpText = "Print READY and wait for a line on stdin before opening (so many workers start together).")]
    public bool WaitGo { get; set; }

    [Option("no-compute", HelpText = "Only attach and verify.")]
    public bool NoCompute { get; set; }

    [Option("reopens", Default = 5, HelpText = "Opens after the first, in the same process, for the re-open time (0: none; in stream mode each one copies the whole dataset again).")]
    public int Reopens { get; set; } = 5;
}

public static class WorkerCommand
{
    /// <summary>
    /// AttachMs is the first open in a fresh process (includes JIT); WarmAttachMs the median of the re-opens in the same
    /// process (0 with --reopens 0). VerifyMs is the worker's own hash of a mapped copy; 0 in stream and direct mode, whose
    /// open already hashed the private copy before returning it. VerifiedUnixMs is the wall-clock moment the whole dataset
    /// was open and verified, so a launcher on the same machine can time workers from a common start.
    /// </summary>
    public sealed record WorkerResult(int Pid, string Mode, string Version, long Bytes, double AttachMs, double WarmAttachMs, double VerifyMs, double ComputeMs,
        bool Verified, double ValueAtRisk99, int Days, double VerifiedUnixMs = 0);

    public static double UnixMs() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalMilliseconds;

    public static async Task<int> RunAsync(WorkerOptions o)
    {
        using var loggerFactory = LoggerFactory.Create(b => b.SetMinimumLevel(LogLevel.Warning).AddConsole(c => c.LogToStandardErrorThreshold = LogLevel.Trace));
        var name = o.Dataset ?? Environment.GetEnvironmentVariable(DatasetOptions.DatasetVariable);
        if (string.IsNullOrEmpty(name)) { Console.Error.WriteLine("hpcdata worker: no dataset (--dataset or HPCDATA_DATASET)"); return 2; }
        if (o.Reopens is < 0 or > 1000) { Console.Error.WriteLine("hpcdata worker: --reopens must be between 0 and 1000"); return 2; }
        try
        {
            var options = new DatasetOptions { Mode = DatasetOptions.ParseMode(o.Mode), Logger = loggerFactory.CreateLogger("worker") };
            if (o.WaitGo)
            {
                Console.WriteLine("READY");
                await Console.In.ReadLineAsync();
            }
            var clock = Stopwatch.StartNew();
            await using var data = await Dataset.OpenAsync(name, options);
            var attach = clock.Elapsed.TotalMilliseconds;
            var verify = 0.0;
            if (data.Mode == DataAccessMode.Map)
            {
                clock.Restart();
                if (!data.VerifyHash()) throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' does not match its hash in this worker");
                verify = clock.Elapsed.TotalMilliseconds;
            }
            var verifiedAt = UnixMs();
            var warm = new List<double>();
            for (var i = 0; i < o.Reopens; i++)
            {
                clock.Restart();
                await using (await Dataset.OpenAsync(name, options)) { }
                warm.Add(clock.Elapsed.TotalMilliseconds);
            }
            var warmAttach = warm.Count == 0 ? 0 : warm.Order().ElementAt(warm.Count / 2);
            clock.Restart();
            var var99 = o.NoCompute ? null : MarketHistory.ValueAtRisk(data.Windows());
            var compute = clock.Elapsed.TotalMilliseconds;
            var result = new WorkerResult(Environment.ProcessId, data.Mode.ToString().ToLowerInvariant(), data.Version, data.Length,
                attach, warmAttach, verify, compute, Verified: true, var99?.ValueAtRisk99 ?? 0, var99?.Days ?? 0, verifiedAt);
            Console.WriteLine(JsonSerializer.Serialize(result));
            return 0;
        }
        catch (Exception e) when (e is CommonDataException or IOException or ArgumentException
                                       or CommonDataException or InvalidDataException or TimeoutException)
        {
            Console.Error.WriteLine($"hpcdata worker: {e.Message}");
            return 1;
        }
    }
}
