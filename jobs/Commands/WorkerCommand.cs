using System.Diagnostics;
using System.Text.Json;
using CommandLine;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Microsoft.Extensions.Logging;

namespace Hpc.Jobs.Commands;

[Verb("worker", HelpText = "Check a worker's view of a dataset on this node: open it through the SDK as a service would, verify it, time it, print one JSON line.")]
public class WorkerOptions
{
    [Option('d', "dataset", HelpText = "Dataset name (default: $HPCDATA_DATASET).")]
    public string? Dataset { get; set; }

    [Option("mode", Default = "auto", HelpText = "auto, map, stream or direct (default: $HPCDATA_MODE or auto).")]
    public string Mode { get; set; } = "auto";

    [Option("wait-go", HelpText = "Print READY and wait for a line on stdin before opening (so many workers start together).")]
    public bool WaitGo { get; set; }

    [Option("reopens", Default = 5, HelpText = "Opens after the first, in the same process, for the re-open time (0: none; in stream mode each one copies the whole dataset again).")]
    public int Reopens { get; set; } = 5;
}

public static class WorkerCommand
{
    /// <summary>
    /// What a worker prints (one JSON line). AttachMs is the first open in a fresh process (includes JIT); WarmAttachMs the median of the re-opens in the same
    /// process (0 with --reopens 0). VerifyMs is the worker's own hash of a mapped copy; 0 in stream and direct mode, whose
    /// open already hashed the private copy before returning it. VerifiedUnixMs is the wall-clock moment the whole dataset
    /// was open and verified, so a launcher on the same machine can time workers from a common start. Computed is what a
    /// service's own pass over the data produced (the samples' value-at-risk), absent for a plain check.
    /// </summary>
    public sealed record WorkerResult(int Pid, string Mode, string Version, long Bytes, double AttachMs, double WarmAttachMs, double VerifyMs, double ComputeMs,
        bool Verified, double VerifiedUnixMs = 0, string? Computed = null);

    public static double UnixMs() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalMilliseconds;

    /// <param name="compute">A pass over the open data, as a service would make (timed as ComputeMs); null for a plain check.</param>
    public static async Task<int> RunAsync(WorkerOptions o, Func<Dataset, string>? compute, CancellationToken ct)
    {
        using var loggerFactory = LoggerFactory.Create(b => b.SetMinimumLevel(LogLevel.Warning).AddConsole(c => c.LogToStandardErrorThreshold = LogLevel.Trace));
        var name = o.Dataset ?? Environment.GetEnvironmentVariable(DatasetOptions.DatasetVariable);
        if (string.IsNullOrEmpty(name)) { Console.Error.WriteLine("hpcdata worker: no dataset (--dataset or HPCDATA_DATASET)"); return 2; }
        if (o.Reopens is < 0 or > 1000) { Console.Error.WriteLine("hpcdata worker: --reopens must be between 0 and 1000"); return 2; }
        if (o.Mode is not ("auto" or "map" or "stream" or "direct")) { Console.Error.WriteLine($"hpcdata worker: --mode '{o.Mode}' is not one of auto, map, stream, direct"); return 2; }
        try
        {
            var options = new DatasetOptions { Mode = DatasetOptions.ParseMode(o.Mode), Logger = loggerFactory.CreateLogger("worker") };
            if (o.WaitGo)
            {
                Console.WriteLine("READY");
                await Console.In.ReadLineAsync();
            }
            var clock = Stopwatch.StartNew();
            await using var data = await Dataset.OpenAsync(name, options, ct);
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
                await using (await Dataset.OpenAsync(name, options, ct)) { }
                warm.Add(clock.Elapsed.TotalMilliseconds);
            }
            var warmAttach = warm.Count == 0 ? 0 : warm.Order().ElementAt(warm.Count / 2);
            clock.Restart();
            var computed = compute?.Invoke(data);
            var result = new WorkerResult(Environment.ProcessId, data.Mode.ToString().ToLowerInvariant(), data.Version, data.Length,
                attach, warmAttach, verify, clock.Elapsed.TotalMilliseconds, Verified: true, verifiedAt, computed);
            Console.WriteLine(JsonSerializer.Serialize(result));
            return 0;
        }
        catch (Exception e) when (e is CommonDataException or IOException or ArgumentException or InvalidDataException or TimeoutException
                                       or UnauthorizedAccessException or System.Net.Sockets.SocketException)
        {
            Console.Error.WriteLine($"hpcdata worker: {e.Message}");
            return 1;
        }
    }
}
