using System.Diagnostics;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Local;

namespace Hpc.Samples;

public sealed class DemoOptions : IVerbOptions
{
    public static string Verb => "demo";

    public static string Summary => "Run the whole system on this machine: cache hosts, node agents, staging, and sample workers.";

    [Switch("--size", "Dataset size: " + SizeOption.Rule + ".", Meta = "SIZE")]
    public string Size { get; set; } = "256MB";

    [Switch("--cache-host-count", "Cache hosts to start.")]
    public int Hosts { get; set; } = 2;

    [Switch("--nodes", "Node agents (each stands in for a compute node).")]
    public int Nodes { get; set; } = 2;

    [Switch("--workers", "Worker processes per node.")]
    public int Workers { get; set; } = 4;

    [Switch("--work-dir", "Scratch directory (default: under /dev/shm or the temp folder); removed afterwards.", Meta = "DIR")]
    public string? WorkDir { get; set; }

    [Switch("--data", "csv (market history, compressible) or random (incompressible; workers then only attach and verify).", Meta = "KIND")]
    public string Data { get; set; } = "csv";

    [Switch("--json", "Also write the measurements as JSON to this file.", Meta = "PATH")]
    public string? Json { get; set; }

    /// <summary>What is wrong with the options, one sentence naming the switch; null when the demo can run.</summary>
    public string? Problem()
    {
        try { SizeOption.Parse("--size", Size); }
        catch (ArgumentException e) { return e.Message; }
        if (Hosts < 1) return $"--cache-host-count must be at least 1 (got {Hosts})";
        if (Nodes < 1) return $"--nodes must be at least 1 (got {Nodes})";
        if (Workers < 1) return $"--workers must be at least 1 (got {Workers})";
        if (Data is not ("csv" or "random")) return $"--data '{Data}' is not one of csv, random";
        return null;
    }
}

public sealed class DemoCommand(DemoOptions o)
{
    private const string DatasetName = "demo/market-history";
    private readonly LocalCluster _cluster = new();

    public async Task<int> RunAsync(CancellationToken ct)
    {
        // Refused before anything starts: a bad value found later costs the user the cache hosts' and agents' start-up.
        if (o.Problem() is { } problem)
        {
            Console.Error.WriteLine($"hpcdata demo: {problem} (see hpcdata demo --help)");
            return ExitCodes.Usage;
        }
        var size = ByteSize.Parse(o.Size);
        var root = o.WorkDir ?? Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"hpcdata-demo-{Environment.ProcessId}");
        Directory.CreateDirectory(root);
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var orphaned = false;
        using var watch = ParentWatch.Start(() => { orphaned = true; stop.Cancel(); });
        try
        {
            return await RunCoreAsync(size, root, stop.Token);
        }
        catch (OperationCanceledException)
        {
            throw CommandException.Cancelled(orphaned ? "the program that started the demo is gone; everything the demo started was stopped"
                : "interrupted; everything it started was stopped");
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or CommonDataException)
        {
            throw CommandException.Failed(e.Message);
        }
        finally
        {
            await _cluster.DisposeAsync();
            try { Directory.Delete(root, recursive: true); } catch (IOException) { } catch (UnauthorizedAccessException) { }
        }
    }

    private async Task<int> RunCoreAsync(long size, string root, CancellationToken ct)
    {
        Console.WriteLine($"HPC Common Data demo: {ByteSize.Format(size)} dataset, {o.Hosts} cache hosts, {o.Nodes} nodes × {o.Workers} workers");
        Console.WriteLine($"  programs   {ProgramBuilds()}");

        var clock = Stopwatch.StartNew();
        var random = o.Data == "random";
        var csv = Path.Combine(root, random ? "random.bin" : "market-history.csv");
        if (random)
        {
            SampleData.GenerateRandom(csv, size);
            Console.WriteLine($"  generated  {ByteSize.Format(size)} of random bytes in {clock.Elapsed.TotalSeconds:0.0} s");
        }
        else
        {
            var (days, instruments) = MarketHistory.Generate(csv, size);
            Console.WriteLine($"  generated  {instruments} instruments × {days} days of closing prices in {clock.Elapsed.TotalSeconds:0.0} s");
        }
        var codec = CodecBaseline.Measure(csv);
        Console.WriteLine($"  baseline   raw LZ4 codec + BLAKE3 ids on the same 64 KB segments, {Environment.ProcessorCount} cores, in memory: " +
                          $"{ByteRate.Format(codec.MegabytesPerSecond * 1e6)} (ratio {codec.Ratio:P1})");

        var budget = (long)(size * 1.5) + (64L << 20);
        var hosts = new List<string>();
        for (var h = 0; h < o.Hosts; h++) hosts.Add(await _cluster.StartCacheHostAsync($"cachehost{h + 1}", budget, ct));
        var hostList = string.Join(",", hosts);

        var stage = await _cluster.StageAsync(csv, DatasetName, hostList, ct);
        Console.WriteLine($"  staged     {ByteSize.Format(stage.RawBytes)} → {ByteSize.Format(stage.StoredBytes)} stored ({100.0 * stage.StoredBytes / Math.Max(1, stage.RawBytes):0.0}%), " +
                          $"{stage.Segments} segments in {stage.Seconds:0.00} s = {ByteRate.Format(stage.RawBytes / stage.Seconds)} " +
                          $"({stage.RawBytes / 1e6 / stage.Seconds / codec.MegabytesPerSecond:P0} of the raw codec), version {stage.Version[..12]}…");

        var pipes = new List<string>();
        for (var n = 0; n < o.Nodes; n++)
        {
            var pipe = $"hd{Environment.ProcessId}n{n + 1}";
            await _cluster.StartAgentAsync(pipe, Path.Combine(root, $"node{n + 1}"), hostList, $"node{n + 1}", budget, ct);
            pipes.Add(pipe);
        }

        // Node preparation on every node at once, as a scheduler would start it.
        var fetches = await Task.WhenAll(pipes.Select(pipe => LocalCluster.PrefetchAsync(pipe, DatasetName, stage.Version, pin: "demo", ct)));
        for (var n = 0; n < fetches.Length; n++)
            Console.WriteLine($"  node{n + 1}      fetched and verified in {fetches[n].Seconds:0.00} s ({ByteRate.Format(fetches[n].Copy.Length / fetches[n].Seconds)})");

        var mapped = await RunWorkersAsync(pipes, "map", compute: !random, ct);
        var streamed = await RunWorkersAsync(pipes, "stream", compute: false, ct);
        Report("attach", "map: memory-mapped shared copy", mapped);
        Report("copy", "stream: private copy over the pipe", streamed);
        var vars = mapped.Select(r => r.Computed).Distinct().ToList();
        if (!random) Console.WriteLine($"  result     {mapped[0].Computed}" +
                          (vars.Count == 1 ? $" (all {mapped.Count} computing workers agree)" : " (WORKERS DISAGREE)"));
        if (o.Json is not null)
            await File.WriteAllTextAsync(o.Json, JsonSerializer.Serialize(new { codec, stage, fetchSeconds = fetches.Select(f => f.Seconds), mapped, streamed }, JsonSerializerOptions.Web), ct);
        Console.WriteLine($"  done in {clock.Elapsed.TotalSeconds:0.0} s; shutting down");
        return vars.Count == 1 ? 0 : 1;
    }

    /// <summary>Every worker of every node released together, so their opens overlap.</summary>
    private async Task<List<WorkerResult>> RunWorkersAsync(List<string> pipes, string mode, bool compute, CancellationToken ct) =>
        (await _cluster.RunWorkersAsync(pipes, o.Workers, DatasetName, mode, compute ? [] : ["--no-compute"], TimeSpan.FromMinutes(10), ct,
            program: "Hpc.Samples")).Results;

    private static void Report(string label, string what, List<WorkerResult> r)
    {
        var attach = r.Select(x => x.AttachMs).Order().ToList();
        var compute = r.Select(x => x.ComputeMs).Order().ElementAt(r.Count / 2);
        var warm = r.Select(x => x.WarmAttachMs).Order().ToList();
        var verify = r.Select(x => x.VerifyMs).Order().ElementAt(r.Count / 2);
        Console.WriteLine($"  {label,-10} {what}: {r.Count} workers started together; open min/median/max {attach[0]:0.0} / {attach[attach.Count / 2]:0.0} / {attach[^1]:0.0} ms " +
                          $"(warm re-open median {warm[warm.Count / 2]:0.00} ms); " +
                          (verify > 0 ? $"hash check median {verify:0} ms"
                              : r[0].Mode == "map" ? "verified by the agent before it was published (no re-hash)" : "hash checked within the open") +
                          (compute > 0 ? $", VaR pass median {compute:0} ms" : ""));
    }

    /// <summary>Which build of each daemon runs: native code, ReadyToRun or an assembly the JIT compiles (and where it was found).</summary>
    private static string ProgramBuilds() => string.Join(", ", new[] { "hpcdata", CacheHostOptions.Assembly, NodeAgentOptions.Assembly, StagerOptions.Assembly }.Select(a =>
        $"{a} {ComponentLocator.BuildKind(ComponentLocator.Find(a))}")) + $" (from {Path.GetDirectoryName(ComponentLocator.Find(NodeAgentOptions.Assembly))})";
}

/// <summary>
/// Notices that the process which started this one has gone (killed, crashed: nothing passed a signal on), as a changed
/// parent pid: the demo then stops the cache hosts, agents and workers it started instead of leaving them running.
/// A parent-death signal (prctl PR_SET_PDEATHSIG) would not do: it fires when the parent's forking thread ends, and
/// .NET starts processes from pool threads that end while the parent lives on.
/// </summary>
internal sealed class ParentWatch : IDisposable
{
    private readonly Timer? _timer;

    private ParentWatch(Action gone)
    {
        if (OperatingSystem.IsWindows()) return;
        var parent = getppid();
        _timer = new Timer(_ =>
        {
            if (getppid() == parent) return;
            _timer!.Change(Timeout.Infinite, Timeout.Infinite);
            gone();
        }, null, TimeSpan.FromMilliseconds(250), TimeSpan.FromMilliseconds(250));
    }

    public static ParentWatch Start(Action gone) => new(gone);

    public void Dispose() => _timer?.Dispose();

    [System.Runtime.InteropServices.DllImport("libc")]
    private static extern int getppid();
}
