using System.Diagnostics;
using System.Text.Json;
using CommandLine;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Microsoft.Extensions.Logging;

using Hpc.Jobs.Cli;

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

    [Option("verify", HelpText = "Also re-hash a mapped copy in this worker. Not needed: the agent verified every segment and the whole copy before it " +
                                 "published it read-only; this checks the node's memory and disk since (stream and direct copies are always hashed on open).")]
    public bool Verify { get; set; }

    [Option("touch", Default = "first", HelpText = "Map mode, timed as TouchMs: first (read the first byte: the mapping is usable) or all (a byte of every " +
                                                  "page: the page-table cost a first full pass over the data pays).")]
    public string Touch { get; set; } = "first";

    [Option("reopens", Default = 5, HelpText = "Opens after the first, in the same process, for the re-open time (0: none; in stream mode each one copies the whole dataset again).")]
    public int Reopens { get; set; } = 5;
}

public static class WorkerCommand
{
    /// <summary>
    /// What a worker prints (one JSON line). AttachMs is the first open in a fresh process (includes JIT); WarmAttachMs the median of the re-opens in the same
    /// process (0 with --reopens 0). VerifyMs is the worker's own hash of a mapped copy; 0 in stream and direct mode, whose
    /// open already hashed the private copy before returning it. VerifiedUnixMs is the wall-clock moment the whole dataset
    /// was open, touched and (with --verify) re-hashed, so a launcher on the same machine can time workers from a common
    /// start. Computed is what a service's own pass over the data produced (the samples' value-at-risk), absent for a plain
    /// check. MainUnixMs is when the worker's own code began (the runtime and hpcdata's command line are up: a launcher
    /// subtracts its launch moment for the process start-up); TouchMs the first touch of the mapping (--touch first: its
    /// first byte; all: a byte per page, as a first full pass over the data pays it), 0 outside map mode.
    /// </summary>
    public sealed record WorkerResult(int Pid, string Mode, string Version, long Bytes, double AttachMs, double WarmAttachMs, double VerifyMs, double ComputeMs,
        bool Verified, double VerifiedUnixMs = 0, string? Computed = null, double MainUnixMs = 0, double TouchMs = 0);

    public static double UnixMs() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalMilliseconds;

    /// <param name="compute">A pass over the open data, as a service would make (timed as ComputeMs); null for a plain check.</param>
    public static async Task<int> RunAsync(WorkerOptions o, Func<Dataset, string>? compute, CancellationToken ct)
    {
        var mainUnixMs = UnixMs();
        var name = o.Dataset ?? Environment.GetEnvironmentVariable(DatasetOptions.DatasetVariable);
        if (string.IsNullOrEmpty(name)) { Console.Error.WriteLine("hpcdata worker: no dataset (--dataset or HPCDATA_DATASET)"); return 2; }
        if (o.Reopens is < 0 or > 1000) { Console.Error.WriteLine("hpcdata worker: --reopens must be between 0 and 1000"); return 2; }
        if (o.Touch is not ("first" or "all")) { Console.Error.WriteLine($"hpcdata worker: --touch '{o.Touch}' is not first or all"); return 2; }
        if (o.Mode is not ("auto" or "map" or "stream" or "direct")) { Console.Error.WriteLine($"hpcdata worker: --mode '{o.Mode}' is not one of auto, map, stream, direct"); return 2; }
        try
        {
            var options = new DatasetOptions { Mode = DatasetOptions.ParseMode(o.Mode), Logger = new StderrLogger("hpcdata worker") };
            if (o.WaitGo)
            {
                Console.WriteLine("READY");
                await Console.In.ReadLineAsync();
            }
            var clock = Stopwatch.StartNew();
            await using var data = await Dataset.OpenAsync(name, options, ct);
            var attach = clock.Elapsed.TotalMilliseconds;
            double verify = 0, touch = 0;
            if (data.Mode == DataAccessMode.Map)
            {
                clock.Restart();
                Touch(data, all: o.Touch == "all");
                touch = clock.Elapsed.TotalMilliseconds;
                if (o.Verify)
                {
                    clock.Restart();
                    if (!data.VerifyHash()) throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' does not match its hash in this worker");
                    verify = clock.Elapsed.TotalMilliseconds;
                }
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
                attach, warmAttach, verify, clock.Elapsed.TotalMilliseconds, Verified: true, verifiedAt, computed, mainUnixMs, touch);
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

    /// <summary>Reads the first byte, or one byte of every 4 KB page so the whole mapping is in this process's page tables.</summary>
    private static void Touch(Dataset data, bool all)
    {
        var sum = 0;
        foreach (var window in data.Windows())
        {
            var span = window.Span;
            for (var i = 0; i < span.Length; i += 4096)
            {
                sum += span[i];
                if (!all) break;
            }
            if (!all) break;
        }
        GC.KeepAlive(sum);
    }
}
