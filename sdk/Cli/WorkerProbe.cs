using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;

namespace Hpc.CommonData.Cli;

/// <summary>
/// A worker's view of a dataset on its node, timed: open it through the SDK as a service would, touch it, optionally
/// re-hash it, re-open it, print one JSON line. <c>hpcdata worker</c> runs it, and so does the sample worker compiled to
/// native code (samples/native), through this same class and the same command-line engine as every verb.
/// </summary>
public static class WorkerProbe
{
    public static double UnixMs() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalMilliseconds;

    /// <summary>One line for a program's list of commands.</summary>
    public const string Summary = "Check a worker's view of a dataset on this node: open it through the SDK as a service would, verify it, time it, print one JSON line.";

    /// <summary>
    /// A worker program's whole life: parse, <c>--help</c>, run with SIGINT/SIGTERM cancelling, exit code (<see cref="ExitCodes"/>).
    /// <c>hpcdata worker</c>, the sample worker and the native sample are this call.
    /// </summary>
    public static async Task<int> MainAsync(string me, IReadOnlyList<string> args, Func<Dataset, string>? compute,
        string summary = Summary, IEnumerable<(string Switch, string Help)>? more = null)
    {
        var main = UnixMs();
        var own = args.Count > 0 && args[0] == "worker" ? args.Skip(1).ToList() : args.ToList();
        if (own.Any(a => a is "--help" or "-h"))
        {
            Console.Out.Write(VerbContract<WorkerOptions>.Help(me, summary));
            foreach (var (name, help) in more ?? []) Console.Out.WriteLine($"  {name.Trim(),-28} {help}");
            return ExitCodes.Ok;
        }
        var (settings, problem) = VerbContract<WorkerOptions>.Parse(own);
        if ((problem ?? settings.Validate()) is { } error)
        {
            Console.Error.WriteLine($"{me}: {error} (see {me} --help)");
            return ExitCodes.Usage;
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
    public static async Task<int> RunAsync(WorkerOptions o, Func<Dataset, string>? compute, CancellationToken ct, double mainUnixMs = 0, string me = "hpcdata worker")
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
            if (!string.IsNullOrWhiteSpace(o.Pipe)) options.AgentPipe = o.Pipe.Trim();
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
            Console.WriteLine(JsonSerializer.Serialize(result, ContractJson.Default.WorkerResult));
            return ExitCodes.Ok;
        }
        catch (Exception e) when (ExitCodes.IsExpected(e))
        {
            return ExitCodes.Report(me, e);
        }
    }

    /// <summary>Reads a worker's result line, as a launcher does.</summary>
    public static WorkerResult? ReadResult(string? line) => line is null ? null : JsonSerializer.Deserialize(line, ContractJson.Default.WorkerResult);

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

/// <summary><c>hpcdata worker</c>'s command line (also the sample workers'): the dataset and how to open and check it.</summary>
public sealed class WorkerOptions : IVerbOptions
{
    public static string Verb => "worker";

    public static string Summary => WorkerProbe.Summary;

    [Switch("", "The dataset, optionally @ a version id (" + DatasetArgument.JobDefault + ", else the latest).", Meta = "NAME[@VERSION]")]
    public string? Dataset { get; set; }

    [Switch("--mode", "map: the agent's verified copy, zero copy; stream: a private copy over the pipe; direct: from the cache tier, no agent; " +
                      "auto: map, else stream, else direct.", Meta = "auto|map|stream|direct")]
    public string Mode { get; set; } = "auto";

    [Switch("--pipe", "The node agent's pipe (name, or on Linux an absolute socket path); default: " + AgentClient.PipeVariable + ", else the agent's default.", Meta = "NAME")]
    public string? Pipe { get; set; }

    [Switch("--wait-go", "Print READY and wait for a line on stdin before opening (so many workers start together).")]
    public bool WaitGo { get; set; }

    [Switch("--verify", "Also re-hash a mapped copy in this worker. Not needed: the agent verified every segment as it wrote it; this " +
                        "checks the node's memory and disk since (stream and direct copies are always hashed on open).")]
    public bool Verify { get; set; }

    [Switch("--touch", "Map mode, timed as TouchMs: first (read the first byte: the mapping is usable) or all (a byte of every page: " +
                       "the page-table cost a first full pass over the data pays).", Meta = "first|all")]
    public string Touch { get; set; } = "first";

    [Switch("--reopens", "Opens after the first, in the same process, for the re-open time (0: none; in stream mode each one copies the " +
                         "whole dataset again); at most 1000.")]
    public int Reopens { get; set; } = 5;

    /// <summary>The first value out of range, as a sentence naming its switch; null when all are usable.</summary>
    public string? Validate() =>
        Mode is not ("auto" or "map" or "stream" or "direct") ? $"--mode '{Mode}' is not one of auto, map, stream, direct"
        : Touch is not ("first" or "all") ? $"--touch '{Touch}' is not first or all"
        : Reopens is < 0 or > 1000 ? "--reopens must be between 0 and 1000"
        : null;
}
