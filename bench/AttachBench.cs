using Hpc.CommonData.Hosting;
using System.Diagnostics;
using System.Globalization;
using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Local;
using Hpc.CommonData.Cli;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.Bench;

/// <summary>
/// <c>hpcdata bench attach</c>: the reference's core-allocation table on one machine. One cache host and one node agent
/// on loopback; every size is staged and prefetched (pinned) before any clock starts, because the table is about
/// sharing a node's copy, not getting it. Then, per cell, K fresh <c>hpcdata worker</c> processes are released at one
/// moment, and each worker's time runs from that moment until it has the whole dataset open and verified.
/// </summary>
public static class AttachBench
{
    /// <param name="Fresh">Time from launching the workers (their start-up included), not from a common go once started.</param>
    public sealed record Options(IReadOnlyList<long> Sizes, IReadOnlyList<int> Workers, IReadOnlyList<string> Modes, int Repeat, string Out, string WorkDir,
        TimeSpan TimeLimit, bool Fresh = false, string Touch = "first", bool Verify = false, string Worker = "hpcdata");

    /// <summary>Microsoft 2011, core allocation: seconds for each of K service hosts on a node to get its copy from the node's service.</summary>
    public static readonly IReadOnlyDictionary<(int K, long Size), double> Reference = new Dictionary<(int, long), double>
    {
        [(2, 16L << 20)] = 1.35, [(2, 64L << 20)] = 4.60, [(2, 256L << 20)] = 19.96, [(2, 1L << 30)] = 75.03,
        [(4, 16L << 20)] = 1.42, [(4, 64L << 20)] = 5.08, [(4, 256L << 20)] = 21.00, [(4, 1L << 30)] = 80.66,
        [(8, 16L << 20)] = 1.64, [(8, 64L << 20)] = 5.71, [(8, 256L << 20)] = 23.81, [(8, 1L << 30)] = 93.33,
    };

    private const string Pin = "bench-attach";
    private static readonly TimeSpan CellTimeout = TimeSpan.FromMinutes(15);

    public sealed record Outcome(List<BenchRecord> Records, int Failures);

    public static async Task<Outcome> RunAsync(Options o, CancellationToken ct)
    {
        var clock = Stopwatch.StartNew();
        var total = o.Sizes.Sum();
        CheckSpace(o.WorkDir, total + o.Sizes.Max() + (64L << 20));
        await using var cluster = new LocalCluster();
        var host = await cluster.StartCacheHostAsync("cachehost", (long)(total * 1.5) + (64L << 20), ct);
        var pipe = $"ha{Environment.ProcessId}";
        await cluster.StartAgentAsync(pipe, Path.Combine(o.WorkDir, "agent"), host, "node1", total * 2 + (256L << 20), ct);

        var staged = new Dictionary<long, (string Name, StageResult Stage)>();
        foreach (var size in o.Sizes)
        {
            ct.ThrowIfCancellationRequested();
            var csv = Path.Combine(o.WorkDir, "market-history.csv");
            MarketHistory.Generate(csv, size);
            var name = $"bench/attach-{size}";
            var stage = await cluster.StageAsync(csv, name, host, ct);
            File.Delete(csv);   // the agent's copy is the one the workers read; the source would only take memory
            var (copy, seconds) = await LocalCluster.PrefetchAsync(pipe, name, stage.Version, Pin, ct);
            if (copy.Length != stage.RawBytes) throw new InvalidDataException($"the agent holds {copy.Length} bytes of {name}, the stager sent {stage.RawBytes}");
            staged[size] = (name, stage);
            Log($"[{clock.Elapsed:mm\\:ss}] {ByteSize.Format(size)}: staged {ByteSize.Format(stage.RawBytes)} → {ByteSize.Format(stage.StoredBytes)}, " +
                $"agent fetched and verified it in {seconds:0.00} s (not timed below)");
        }

        var records = new List<BenchRecord>();
        var failures = 0;
        // Repetitions go round the whole list, so a slow spell of the shared machine does not land on every run of one cell.
        var cells = from rep in Enumerable.Range(1, o.Repeat) from size in o.Sizes from k in o.Workers from mode in o.Modes select (rep, size, k, mode);
        foreach (var (rep, size, k, mode) in cells)
        {
            ct.ThrowIfCancellationRequested();
            var config = new RunConfig { Nodes = 1, Hosts = 1, SizeBytes = size, Compress = true, Workers = k, Data = "csv", WorkerMode = mode };
            var what = $"{ByteSize.Format(size)} K={k} {mode}";
            if (clock.Elapsed > o.TimeLimit)
            {
                Skip(o.Out, config, $"attach K={k} {mode} run {rep}: time bound ({o.TimeLimit.TotalMinutes:0.#} min) reached");
                Log($"  {what,-20} run {rep}: skipped, time bound reached");
                continue;
            }
            // Stream workers each hold a private copy; a cell that cannot fit would only measure swapping or the OOM killer.
            var need = mode == "stream" ? k * size + (256L << 20) : 256L << 20;
            if (MemAvailable() is { } free && need > free)
            {
                Skip(o.Out, config, $"attach K={k} {mode} run {rep}: needs about {ByteSize.Format(need)} of memory, {ByteSize.Format(free)} available");
                Log($"  {what,-20} run {rep}: skipped, needs {ByteSize.Format(need)} of memory, {ByteSize.Format(free)} available");
                continue;
            }
            try
            {
                var (name, stage) = staged[size];
                var time = DateTimeOffset.UtcNow;
                // Re-opens in stream mode would each copy the whole dataset again while the other workers are still copying.
                string[] args = mode == "map" ? [] : ["--reopens", "0"];
                if (o.Fresh) args = ["--reopens", "0"];
                if (mode == "map") args = [.. args, "--touch", o.Touch, .. o.Verify ? new[] { "--verify" } : []];
                var batch = await cluster.RunWorkersAsync([pipe], k, name, mode, args, CellTimeout, ct, program: o.Worker, fresh: o.Fresh);
                var workers = batch.Results.Select(r => new WorkerTime("node1", r.Mode, r.AttachMs, mode == "map" && !o.Fresh ? r.WarmAttachMs : double.NaN, r.Verified,
                    r.VerifyMs, r.VerifiedUnixMs - batch.StartUnixMs, o.Fresh ? r.MainUnixMs - batch.StartUnixMs : null, r.TouchMs)).ToList();
                var wrong = batch.Results.FirstOrDefault(r => r.Mode != mode || r.Version != stage.Version || r.Bytes != stage.RawBytes || !r.Verified);
                if (wrong is not null)
                    throw new InvalidDataException($"worker {wrong.Pid} reported mode {wrong.Mode}, {wrong.Bytes} bytes of version {wrong.Version}, verified={wrong.Verified}; " +
                                                   $"expected {mode}, {stage.RawBytes} bytes of {stage.Version}");
                if (workers.Any(w => w.WallMs is not > 0))
                    throw new InvalidDataException($"a worker reported its copy ready before the common start ({string.Join(", ", workers.Select(w => F(w.WallMs ?? double.NaN, "0.0")))} ms)");
                var record = new BenchRecord
                {
                    Kind = "cluster", Run = $"attach-{Environment.ProcessId}-{rep}-{size}-{k}-{mode}", Time = time,
                    Note = "bench attach: one node agent and its workers on loopback",
                    Config = config, Dataset = new DatasetInfo(stage.Version, stage.RawBytes, stage.StoredBytes, stage.Segments, stage.Seconds),
                    MeasuredSeconds = workers.Max(w => w.WallMs!.Value) / 1000, Workers = workers, Machine = BenchJson.Machine(),
                };
                BenchJson.Append(o.Out, record);
                records.Add(record);
                var walls = workers.Select(w => w.WallMs!.Value / 1000).Order().ToList();
                Log($"  {what,-20} run {rep}: slowest {walls[^1]:0.000} s (workers {walls[0]:0.000}…{walls[^1]:0.000} s), " +
                    (o.Fresh ? $"start-up max {workers.Max(w => w.StartupMs ?? 0):0} ms (median {Median(workers.Select(w => w.StartupMs ?? 0)):0}), " : "") +
                    $"first open max {workers.Max(w => w.AttachMs):0} ms (median {Median(workers.Select(w => w.AttachMs)):0})" +
                    (mode == "map" ? $", first touch max {workers.Max(w => w.TouchMs ?? 0):0} ms (median {Median(workers.Select(w => w.TouchMs ?? 0)):0})" : "") +
                    (o.Verify ? $", re-hash max {workers.Max(w => w.VerifyMs ?? 0):0} ms" : "") +
                    (mode == "map" && !o.Fresh ? $", re-open median {Median(workers.Select(w => w.WarmAttachMs)):0.0} ms" : ""));
            }
            catch (Exception e) when (e is InvalidOperationException or IOException or TimeoutException or InvalidDataException or CommonDataException)
            {
                failures++;
                Log($"  {what,-20} run {rep}: failed: {e.Message}");
                Skip(o.Out, config, $"attach K={k} {mode} run {rep}: failed: {e.Message.Split('\n')[0]}");
            }
        }
        Log($"[{clock.Elapsed:mm\\:ss}] done: {records.Count} runs, {failures} failed");
        return new Outcome(records, failures);
    }

    /// <summary>
    /// Rows K, a column group per size: the median over the runs of each run's slowest worker, map and stream, and the
    /// reference beside them.
    /// </summary>
    public static string Table(IReadOnlyList<BenchRecord> records, int repeat)
    {
        var sizes = records.Select(r => r.Config.SizeBytes).Distinct().Order().ToList();
        var ks = records.Select(r => r.Config.Workers).Distinct().Order().ToList();
        var sb = new StringBuilder();
        sb.AppendLine("Seconds from the common start until a worker had the whole dataset open and verified: the slowest of the K workers, median over runs " +
                      $"(in brackets the number of runs when fewer than {repeat} were measured). Reference: Microsoft 2011, each service host's copy from the node's service over a named pipe.");
        sb.AppendLine();
        sb.Append("| K |");
        foreach (var s in sizes) sb.Append(CultureInfo.InvariantCulture, $" {ByteSize.Format(s)} map | {ByteSize.Format(s)} stream | {ByteSize.Format(s)} reference |");
        sb.AppendLine().Append("|---|").AppendLine(string.Concat(Enumerable.Repeat("---|---|---|", sizes.Count)));
        foreach (var k in ks)
        {
            sb.Append(CultureInfo.InvariantCulture, $"| {k} |");
            foreach (var s in sizes)
            {
                foreach (var mode in new[] { "map", "stream" })
                {
                    var cell = records.Where(r => r.Config.SizeBytes == s && r.Config.Workers == k && r.Config.WorkerMode == mode).Select(r => r.MeasuredSeconds).ToList();
                    sb.Append(cell.Count == 0 ? " – |" : $" {F(Median(cell), Median(cell) < 10 ? "0.000" : "0.00")}{(cell.Count < repeat ? $" ({cell.Count})" : "")} |");
                }
                sb.Append(Reference.TryGetValue((k, s), out var reference) ? $" {F(reference, "0.00")} |" : " – |");
            }
            sb.AppendLine();
        }

        var mapped = records.Where(r => r.Config.WorkerMode == "map" && r.Workers is { Count: > 0 }).ToList();
        if (mapped.Count > 0)
        {
            sb.AppendLine().AppendLine("Map mode, inside those times (ms): the slowest worker's first open in its fresh process (median over runs) / the median re-open in the same process.");
            sb.AppendLine();
            sb.Append("| K |").AppendJoin("", sizes.Select(s => $" {ByteSize.Format(s)} |")).AppendLine();
            sb.Append("|---|").AppendLine(string.Concat(Enumerable.Repeat("---|", sizes.Count)));
            foreach (var k in ks)
            {
                sb.Append(CultureInfo.InvariantCulture, $"| {k} |");
                foreach (var s in sizes)
                {
                    var cell = mapped.Where(r => r.Config.SizeBytes == s && r.Config.Workers == k).ToList();
                    sb.Append(cell.Count == 0 ? " – |"
                        : $" {F(Median(cell.Select(r => r.Workers!.Max(w => w.AttachMs))), "0")} / {F(Median(cell.SelectMany(r => r.Workers!).Select(w => w.WarmAttachMs)), "0.0")} |");
                }
                sb.AppendLine();
            }
        }
        return sb.ToString();
    }

    private static void Skip(string dir, RunConfig config, string why)
    {
        BenchJson.Append(dir, new BenchRecord { Kind = "skipped", Note = why, Config = config });
    }

    private static void CheckSpace(string dir, long need)
    {
        Directory.CreateDirectory(dir);
        var free = new DriveInfo(dir).AvailableFreeSpace;
        if (free < need)
            throw new InvalidOperationException($"{dir} has {ByteSize.Format(free)} free; the sizes need about {ByteSize.Format(need)} " +
                                                "(the agent keeps a copy of each, plus the largest source file while it is staged)");
    }

    /// <summary>MemAvailable from /proc/meminfo, or null where there is none.</summary>
    private static long? MemAvailable()
    {
        try
        {
            foreach (var line in File.ReadLines("/proc/meminfo"))
                if (line.StartsWith("MemAvailable:", StringComparison.Ordinal))
                    return long.Parse(line["MemAvailable:".Length..].Trim().Split(' ')[0], CultureInfo.InvariantCulture) * 1024;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException) { }
        return null;
    }


    private static string F(double v, string format) => double.IsFinite(v) ? v.ToString(format, CultureInfo.InvariantCulture) : "–";

    private static void Log(string line) => Console.Error.WriteLine(line);
}
