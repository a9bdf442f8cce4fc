using System.Diagnostics;
using System.Text.Json;
using System.Text.Json.Serialization;
using Hpc.CommonData;

namespace Hpc.CommonData.Cli;

/// <summary>
/// A worker's view of a dataset on its node, timed: open it through the SDK as a service would, touch it, optionally
/// re-hash it, re-open it, print one JSON line. <c>hpcdata worker</c> runs it, and so does the sample worker compiled to
/// native code (samples/native), through this same class: no reflection and no command-line library, so it compiles ahead of time.
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

    /// <summary>One line for a program's list of commands.</summary>
    public const string Summary = "Check a worker's view of a dataset on this node: open it through the SDK as a service would, verify it, time it, print one JSON line.";

    /// <summary>
    /// One switch of <c>hpcdata worker</c>: the only declaration of it. The parser, <c>--help</c>, the sample workers
    /// and the native sample all read this list; a switch takes a value when <see cref="Set"/> is given, else it is a flag.
    /// </summary>
    public sealed record Switch(string Name, string? Short, string? Value, string Help, Func<Settings, string, Settings>? Set = null, Func<Settings, Settings>? Flag = null);

    public static readonly IReadOnlyList<Switch> Switches =
    [
        new("--mode", null, "auto|map|stream|direct", "map: the agent's verified copy, zero copy; stream: a private copy over the pipe; direct: from the cache tier, no agent; " +
                                                      "auto (the default): map, else stream, else direct.",
            Set: (s, v) => v is "auto" or "map" or "stream" or "direct" ? s with { Mode = v } : throw new FormatException($"--mode '{v}' is not one of auto, map, stream, direct")),
        new("--wait-go", null, null, "Print READY and wait for a line on stdin before opening (so many workers start together).", Flag: s => s with { WaitGo = true }),
        new("--verify", null, null, "Also re-hash a mapped copy in this worker. Not needed: the agent verified every segment and the whole copy before it " +
                                    "published it read-only; this checks the node's memory and disk since (stream and direct copies are always hashed on open).",
            Flag: s => s with { Verify = true }),
        new("--touch", null, "first|all", "Map mode, timed as TouchMs: first (read the first byte: the mapping is usable) or all (a byte of every page: " +
                                          "the page-table cost a first full pass over the data pays). Default: first.",
            Set: (s, v) => v is "first" or "all" ? s with { Touch = v } : throw new FormatException($"--touch '{v}' is not first or all")),
        new("--reopens", null, "N", "Opens after the first, in the same process, for the re-open time (0: none; in stream mode each one copies the " +
                                    "whole dataset again). Default: 5, at most 1000.",
            Set: (s, v) => !int.TryParse(v, out var n) ? throw new FormatException($"option '--reopens': '{v}' is not a whole number")
                : n is < 0 or > 1000 ? throw new FormatException("--reopens must be between 0 and 1000") : s with { Reopens = n }),
    ];

    public static string Usage => "worker [NAME[@VERSION]] " + string.Join(' ', Switches.Select(o => o.Value is null ? $"[{o.Name}]" : $"[{o.Name} {o.Value}]"));

    /// <summary>What <c>--help</c> prints: usage, the summary, then each switch once with its help.</summary>
    public static string Help(string me, string summary = Summary, IEnumerable<(string Switch, string Help)>? more = null)
    {
        var rows = new[] { (Switch: "    NAME[@VERSION]", Help: "The dataset, optionally @ a version id (" + DatasetArgument.JobDefault + ", else the latest).") }.Concat(Switches.Select(o => (Switch: (o.Short is null ? "    " : o.Short + ", ") + o.Name + (o.Value is null ? "" : " " + o.Value), o.Help)))
            .Concat(more ?? []).Append((Switch: "    --help", Help: "This help.")).ToList();
        var width = rows.Max(r => r.Switch.Length) + 2;
        return $"usage: {me} [NAME[@VERSION]] [options]\n{Wrap(summary, 0)}\n" + string.Concat(rows.Select(r => $"  {r.Switch.PadRight(width)}{Wrap(r.Help, width + 2)}"));
    }

    /// <summary>Text that fits 100 columns from <paramref name="indent"/> on: its later lines indented as much.</summary>
    private static string Wrap(string text, int indent)
    {
        var lines = new System.Text.StringBuilder();
        var column = indent;
        foreach (var word in text.Split(' ', StringSplitOptions.RemoveEmptyEntries))
        {
            if (column > indent && column + 1 + word.Length > 100) { lines.Append('\n').Append(' ', indent); column = indent; }
            else if (column > indent) { lines.Append(' '); column++; }
            lines.Append(word);
            column += word.Length;
        }
        return lines.Append('\n').ToString();
    }

    /// <summary>Reads <c>worker [switches]</c> (also <c>--name=value</c>); null and the reason for a command line it refuses,
    /// and for <c>--help</c> (reason null).</summary>
    public static Settings? Parse(IReadOnlyList<string> args, out string? error)
    {
        string? problem = null;
        var s = new Settings(null);
        var i = args.Count > 0 && args[0] == "worker" ? 1 : 0;
        for (; i < args.Count && problem is null; i++)
        {
            var (option, inline) = args[i].IndexOf('=') is var eq and > 2 && args[i].StartsWith("--", StringComparison.Ordinal)
                ? (args[i][..eq], args[i][(eq + 1)..]) : (args[i], (string?)null);
            if (option is "--help" or "-h")
            {
                error = null;
                return null;
            }
            if (!option.StartsWith('-') || option == "-")
            {
                if (s.Dataset is null) s = s with { Dataset = option };
                else problem = $"unexpected argument '{option}' ({Usage})";
                continue;
            }
            var known = Switches.FirstOrDefault(o => o.Name == option || o.Short == option);
            if (known is null) problem = $"unknown option '{option}' ({Usage})";
            else if (known.Flag is { } flag) s = flag(s);
            else if ((inline ?? (i + 1 < args.Count && !args[i + 1].StartsWith("--", StringComparison.Ordinal) ? args[++i] : null)) is not { } value)
                problem = $"option '{option}' needs a value";
            else
            {
                try { s = known.Set!(s, value); }
                catch (FormatException e) { problem = e.Message; }
            }
        }
        error = problem;
        return problem is null ? s : null;
    }

    /// <summary>
    /// A worker program's whole life: parse, <c>--help</c>, run with SIGINT/SIGTERM cancelling, exit code (<see cref="ExitCodes"/>).
    /// <c>hpcdata worker</c>, the sample worker and the native sample are this call.
    /// </summary>
    public static async Task<int> MainAsync(string me, IReadOnlyList<string> args, Func<Dataset, string>? compute,
        string summary = Summary, IEnumerable<(string Switch, string Help)>? more = null)
    {
        var main = UnixMs();
        if (Parse(args, out var error) is not { } settings)
        {
            if (error is not null)
            {
                Console.Error.WriteLine($"{me}: {error}");
                return ExitCodes.Usage;
            }
            Console.Out.Write(Help(me, summary, more));
            return ExitCodes.Ok;
        }
        using var stop = new CancellationTokenSource();
        using var signals = Signals.CancelOn(stop);
        try
        {
            return await RunAsync(settings, compute, stop.Token, main, me);
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            return ExitCodes.Cancelled;
        }
    }

    /// <param name="compute">A pass over the open data, as a service would make (timed as ComputeMs); null for a plain check.</param>
    public static async Task<int> RunAsync(Settings o, Func<Dataset, string>? compute, CancellationToken ct, double mainUnixMs = 0, string me = "hpcdata worker")
    {
        if (mainUnixMs == 0) mainUnixMs = UnixMs();
        DatasetArgument? selected;
        try { selected = DatasetArgument.OrJob(o.Dataset); }
        catch (CommandException e) { Console.Error.WriteLine($"{me}: {e.Message}"); return e.ExitCode; }
        if (selected is not { } chosen) { Console.Error.WriteLine($"{me}: no dataset (NAME[@VERSION] or HPCDATA_DATASET)"); return ExitCodes.Usage; }
        var (name, version) = chosen;
        try
        {
            var options = new DatasetOptions { Mode = DatasetOptions.ParseMode(o.Mode), Version = version, Logger = new StderrLogger(me) };
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
            return ExitCodes.Ok;
        }
        catch (Exception e) when (ExitCodes.IsExpected(e))
        {
            Console.Error.WriteLine($"{me}: {e.Message}");
            return ExitCodes.Failed;
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
