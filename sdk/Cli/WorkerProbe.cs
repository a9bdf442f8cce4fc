using System.Diagnostics;
using System.Text.Json;
using System.Text.Json.Serialization;
using Hpc.CommonData;

namespace Hpc.CommonData.Cli;

/// <summary>
/// A worker's view of a dataset on its node, timed: open it through the SDK as a service would, touch it, optionally
/// re-hash it, re-open it, print one JSON line. <c>hpcdata worker</c> runs it, and so does the sample worker compiled to
/// native code (samples/native), which shares this file: no reflection and no command-line library, so it compiles ahead of time.
/// </summary>
public static class WorkerProbe
{
    /// <summary>What to do; <c>hpcdata worker</c>'s switches.</summary>
    public sealed record Settings(string? Dataset, string Mode = "auto", bool WaitGo = false, bool Verify = false, string Touch = "first", int Reopens = 5);

    /// <summary>
    /// What a worker prints (one JSON line). AttachMs is the first open in a fresh process (includes JIT); WarmAttachMs the median of the re-opens in the same
    /// process (0 with --reopens 0). VerifyMs is the worker's own hash of a mapped copy; 0 in stream and direct mode, whose
    /// open already hashed the private copy before returning it. VerifiedUnixMs is the wall-clock moment the whole dataset
    /// was open, touched and (with --verify) re-hashed, so a launcher on the same machine can time workers from a common
    /// start. Computed is what a service's own pass over the data produced (the samples' value-at-risk), absent for a plain
    /// check. MainUnixMs is when the worker's own code began (the runtime and the command line are up: a launcher
    /// subtracts its launch moment for the process start-up); TouchMs the first touch of the mapping (--touch first: its
    /// first byte; all: a byte per page, as a first full pass over the data pays it), 0 outside map mode.
    /// </summary>
    public sealed record WorkerResult(int Pid, string Mode, string Version, long Bytes, double AttachMs, double WarmAttachMs, double VerifyMs, double ComputeMs,
        bool Verified, double VerifiedUnixMs = 0, string? Computed = null, double MainUnixMs = 0, double TouchMs = 0);

    public static double UnixMs() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalMilliseconds;

    public const string Usage = "worker [--dataset NAME] [--mode auto|map|stream|direct] [--wait-go] [--verify] [--touch first|all] [--reopens N]";

    /// <summary>Reads <c>worker [--dataset NAME] [--mode M] [--wait-go] [--verify] [--touch first|all] [--reopens N]</c>
    /// (also <c>--name=value</c>); null and the reason for a command line it refuses, and for <c>--help</c> (reason null).</summary>
    public static Settings? Parse(IReadOnlyList<string> args, out string? error)
    {
        string? problem = null;
        var s = new Settings(null);
        var i = args.Count > 0 && args[0] == "worker" ? 1 : 0;
        for (; i < args.Count && problem is null; i++)
        {
            var (option, inline) = args[i].IndexOf('=') is var eq and > 2 && args[i].StartsWith("--", StringComparison.Ordinal)
                ? (args[i][..eq], args[i][(eq + 1)..]) : (args[i], (string?)null);
            string Value()
            {
                if (inline is not null) return inline;
                if (i + 1 < args.Count && !args[i + 1].StartsWith("--", StringComparison.Ordinal)) return args[++i];
                problem ??= $"option '{option}' needs a value";
                return "";
            }
            switch (option)
            {
                case "--help" or "-h":
                    error = null;
                    return null;
                case "--dataset" or "-d": s = s with { Dataset = Value() }; break;
                case "--mode": s = s with { Mode = Value() }; break;
                case "--touch": s = s with { Touch = Value() }; break;
                case "--reopens":
                    var text = Value();
                    if (int.TryParse(text, out var n)) s = s with { Reopens = n };
                    else problem ??= $"option '--reopens': '{text}' is not a whole number";
                    break;
                case "--wait-go": s = s with { WaitGo = true }; break;
                case "--verify": s = s with { Verify = true }; break;
                default: problem = $"unknown option '{option}' ({Usage})"; break;
            }
        }
        error = problem;
        return problem is null ? s : null;
    }

    /// <param name="compute">A pass over the open data, as a service would make (timed as ComputeMs); null for a plain check.</param>
    public static async Task<int> RunAsync(Settings o, Func<Dataset, string>? compute, CancellationToken ct, double mainUnixMs = 0, string me = "hpcdata worker")
    {
        if (mainUnixMs == 0) mainUnixMs = UnixMs();
        var name = o.Dataset ?? Environment.GetEnvironmentVariable(DatasetOptions.DatasetVariable);
        if (string.IsNullOrEmpty(name)) { Console.Error.WriteLine($"{me}: no dataset (--dataset or HPCDATA_DATASET)"); return 2; }
        if (o.Reopens is < 0 or > 1000) { Console.Error.WriteLine($"{me}: --reopens must be between 0 and 1000"); return 2; }
        if (o.Touch is not ("first" or "all")) { Console.Error.WriteLine($"{me}: --touch '{o.Touch}' is not first or all"); return 2; }
        if (o.Mode is not ("auto" or "map" or "stream" or "direct")) { Console.Error.WriteLine($"{me}: --mode '{o.Mode}' is not one of auto, map, stream, direct"); return 2; }
        try
        {
            var options = new DatasetOptions { Mode = DatasetOptions.ParseMode(o.Mode), Logger = new StderrLogger(me) };
            if (o.WaitGo)
            {
                Console.WriteLine("READY");
                await Console.In.ReadLineAsync(ct);
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
            Console.WriteLine(JsonSerializer.Serialize(result, WorkerJson.Default.WorkerResult));
            return 0;
        }
        catch (Exception e) when (e is CommonDataException or IOException or ArgumentException or InvalidDataException or TimeoutException
                                       or UnauthorizedAccessException or System.Net.Sockets.SocketException or InvalidOperationException
                                       or JsonException or FormatException)
        {
            Console.Error.WriteLine($"{me}: {e.Message}");
            return 1;
        }
    }

    /// <summary>Reads a worker's result line, as a launcher does.</summary>
    public static WorkerResult? ReadResult(string? line) => line is null ? null : JsonSerializer.Deserialize(line, WorkerJson.Default.WorkerResult);

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

[JsonSerializable(typeof(WorkerProbe.WorkerResult))]
internal sealed partial class WorkerJson : JsonSerializerContext;
