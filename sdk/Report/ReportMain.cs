using System.Globalization;
using System.Text;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.CommonData.Report;

/// <summary><c>hpcdata report</c>'s command line, read by the engine every verb uses (<see cref="VerbContract{T}"/>).</summary>
public sealed class ReportOptions : IVerbOptions
{
    public static string Verb => "report";

    public static string Summary => "Tables, charts and a Markdown summary of bench results or agents' fetch telemetry.";

    [Switch("", "The results: a directory holding results.jsonl (bench) or *.jsonl (agents' telemetry), or one .jsonl file.", Meta = "DIR|FILE.jsonl", Required = true)]
    public string Results { get; set; } = "";

    [Switch("--out", "Where report.md and the SVG charts are written (created if missing); default: beside the results.", Meta = "DIR")]
    public string? Out { get; set; }

    [Switch("--json", "Print the report's tables as one JSON document on stdout instead of the Markdown.")]
    public bool Json { get; set; }
}

/// <summary><c>hpcdata report DIR|FILE.jsonl [--out DIR] [--json]</c>: tables, charts and a Markdown summary of bench results or cluster telemetry.</summary>
public static class ReportMain
{
    /// <summary>The verb as a command line runs it: <c>--help</c>, usage errors (exit 2) and the report (0; 1 when nothing in it could be reported).</summary>
    public static int Run(string[] args) => VerbContract<ReportOptions>.RunAsync("hpcdata report", args, (o, _) => Task.FromResult(Run(o))).GetAwaiter().GetResult();

    public static int Run(ReportOptions o)
    {
        if (o.Out is { Length: 0 }) throw CommandException.Usage("--out needs a directory");
        try
        {
            var data = ResultReader.Read(o.Results);
            var outDir = o.Out ?? (Directory.Exists(o.Results) ? o.Results : Path.GetDirectoryName(Path.GetFullPath(o.Results))!);
            Directory.CreateDirectory(outDir);
            var report = Build(data);
            var charts = WriteCharts(report, outDir);
            var markdown = Markdown(data, report, charts);
            File.WriteAllText(Path.Combine(outDir, "report.md"), markdown);
            Console.WriteLine(o.Json ? JsonSerializer.Serialize(new ReportDocument(report.Cells, report.Fanouts, report.Slurm, report.Calibrations, report.Attaches, report.Rates, report.Skipped, data.Codecs, data.Caches, data.Lines, data.Unreadable, data.UnknownKinds, charts), ReportJson.Default.ReportDocument) : markdown);
            return report.Cells.Count + (report.Rates?.Count ?? 0) + (report.Slurm?.Count ?? 0) + report.Fanouts.Count + report.Calibrations.Count + report.Attaches.Count + data.Codecs.Count + data.Caches.Count == 0 ? 1 : 0;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw CommandException.Failed(e.Message);
        }
    }

    /// <summary>What <c>hpcdata report --json</c> prints.</summary>
    public sealed record ReportDocument(List<Cell> Cells, List<FanoutCell> Fanouts, List<SlurmCell>? Slurm, List<Calibration> Calibrations, List<Attach> Attaches,
        List<RateCell>? Rates, List<string> Skipped, List<CodecRecord> Codecs, List<CacheRecord> Caches, int Lines, int Unreadable, int UnknownKinds, List<string> Charts);

    public sealed record Cell(int Nodes, int Hosts, long SizeBytes, bool Compress, int RateMbit, int Runs, double MeasuredSeconds, double LimitSeconds,
        double Efficiency, double NodeMin, double NodeMedian, double NodeMax, long RawBytes, long StoredBytes, List<HostBytes> CacheHosts,
        double CpuSecondsHosts, double CpuSecondsAgents, long PeakRssAgentBytes, double? AttachMsMedian, string? Note, bool WarmAgents = false,
        double MeasuredMin = double.NaN, double MeasuredMax = double.NaN, string? HostQueue = null, string? Codec = null)
    {
        /// <summary>The codec the stager stored with: <see cref="Codec"/> when the run named one, else lz4 or raw.</summary>
        public string CodecName => Codec ?? ReportMain.Codec(Compress);
    }

    public sealed record Calibration(string Pattern, int Nodes, int Hosts, long Bytes, int RateMbit, double MeasuredSeconds, double LimitSeconds, double Efficiency,
        double NodeMin, double NodeMax);

    public sealed record Report(List<Cell> Cells, List<Calibration> Calibrations, List<string> Skipped, List<Attach> Attaches, List<FanoutCell> Fanouts,
        List<TlsCell>? Tls = null, List<RateCell>? Rates = null, List<SlurmCell>? Slurm = null);

    /// <summary>
    /// One way of putting the data on every node, run as a step of a Slurm allocation (bench cluster --scheduler slurm),
    /// medians over runs. SbSeconds: S_stored/B. LimitSeconds: the mode's own bound (direct: N·S_stored/(H·B); the
    /// others S_stored/B). Calibration: the iperf3 (or plain TCP) pattern the mode follows (direct: pull; the others:
    /// neighbour), its efficiency. CacheTierShare: bytes the cache tier sent over S_stored; BusiestSender: the most a
    /// node sent over its link, over S_stored; NodeCpu and AgentCpu: the median node's CPU seconds in node prep and in its agent
    /// (over the fetch; all of it for an agent node prep started), where the node reported them.
    /// </summary>
    public sealed record SlurmCell(string Mode, int Nodes, int Hosts, long SizeBytes, long StoredBytes, int RateMbit, int Runs, double MeasuredSeconds,
        double MeasuredMin, double MeasuredMax, double SbSeconds, double LimitSeconds, double? Calibration, double CacheTierShare, double BusiestSender, double NodeCpu,
        double NodePrepSeconds = double.NaN, double AgentCpu = double.NaN);

    /// <summary>One --max-rate measurement: who was limited (agents or stager), to what, and what it achieved end to end
    /// and steadily (bytes per second; see <see cref="RateLimitResult"/>).</summary>
    public sealed record RateCell(string Who, int Nodes, int LinkMbit, long SizeBytes, long ConfiguredBytes, double EndToEnd, double Steady);

    /// <summary>Direct fetch with the cache tier over TLS beside the same cell over plain TCP, run in the same cluster (medians over runs).</summary>
    public sealed record TlsCell(int Nodes, int Hosts, long SizeBytes, bool Compress, int RateMbit, int Runs, double TlsSeconds, double PlainSeconds,
        double TlsMachineBusy, double PlainMachineBusy);

    /// <summary>
    /// A fan-out configuration (nodeprep --fanout mpi) beside direct fetch with the same N, H, size and rate (medians over
    /// runs). LimitSeconds is S_stored/B; HostShare the bytes each cache host sent over S_stored/H (1 = each byte once);
    /// NodeRx/NodeTx the median node's eth0 bytes over S_stored.
    /// </summary>
    public sealed record FanoutCell(string Mpi, int Nodes, int Hosts, long SizeBytes, long StoredBytes, bool Compress, int RateMbit, int Runs, double MeasuredSeconds,
        double MeasuredMin, double MeasuredMax, double LimitSeconds, double LaunchSeconds, double HostShare, double NodeRx, double NodeTx,
        double? DirectSeconds, double? DirectLimitSeconds, double? DirectHostShare, double? NeighbourEfficiency, double MachineBusy = double.NaN);

    /// <summary>Workers attaching a node's copy, the shape of the reference's core-allocation table. SlowestSeconds: the
    /// median over runs of each run's slowest worker from the common start to a verified copy (NaN when not timed);
    /// RateMbit 0 is <c>bench attach</c> on loopback, otherwise a namespace cluster's link rate.</summary>
    public sealed record Attach(long SizeBytes, int PerNode, string Mode, int Workers, double MinMs, double MedianMs, double MaxMs, double WarmMedianMs, bool AllVerified,
        int Runs = 0, double SlowestSeconds = double.NaN, int RateMbit = 0);

    public static Report Build(ResultReader.Data data)
    {
        var cells = data.Records.Where(r => r.Kind == "cluster" && r.Config.Fanout is null && r.Config.Tls != true && r.RateLimit is null && r.Nodes.Count > 0 && r.MeasuredSeconds > 0)
            .GroupBy(r => (r.Config.Nodes, r.Config.Hosts, r.Config.SizeBytes, r.Config.Compress, r.Config.RateMbit, r.Config.WarmAgents, r.Config.Workers, r.Config.WorkerMode, r.Config.HostQueue,
                // lz4 is what runs without a codec of their own were stored with; naming it too must not split them.
                Codec: r.Config.Codec is null || r.Config.Codec.Equals("lz4", StringComparison.OrdinalIgnoreCase) ? null : r.Config.Codec))
            .Select(g =>
            {
                var runs = g.ToList();
                var walls = runs.SelectMany(r => r.Nodes.Select(n => n.WallSeconds)).Order().ToList();
                var last = runs[^1];
                var processes = last.Processes ?? [];
                var attach = runs.SelectMany(r => r.Workers ?? []).Select(w => w.AttachMs).Order().ToList();
                return new Cell(g.Key.Nodes, g.Key.Hosts, g.Key.SizeBytes, g.Key.Compress, g.Key.RateMbit, runs.Count,
                    Median(runs.Select(r => r.MeasuredSeconds)), Median(runs.Select(r => r.LimitSeconds)), Median(runs.Select(r => r.Efficiency)),
                    walls[0], Median(walls), walls[^1], last.Dataset?.RawBytes ?? g.Key.SizeBytes, last.Dataset?.StoredBytes ?? 0, last.CacheHosts ?? [],
                    processes.Where(p => p.Name.StartsWith("cachehost", StringComparison.Ordinal)).Sum(p => p.CpuSeconds),
                    processes.Where(p => p.Name.StartsWith("agent", StringComparison.Ordinal)).Sum(p => p.CpuSeconds),
                    processes.Where(p => p.Name.StartsWith("agent", StringComparison.Ordinal)).Select(p => p.PeakRssBytes).DefaultIfEmpty(0).Max(),
                    attach.Count == 0 ? null : Median(attach), last.Note, g.Key.WarmAgents,
                    runs.Min(r => r.MeasuredSeconds), runs.Max(r => r.MeasuredSeconds), g.Key.HostQueue, g.Key.Codec);
            })
            .OrderBy(c => c.Hosts).ThenBy(c => !c.Compress).ThenBy(c => c.SizeBytes).ThenBy(c => c.Nodes).ThenBy(c => c.Codec, StringComparer.Ordinal).ToList();
        var calibrations = data.Records.Where(r => r.Kind == "calibration" && r.Nodes.Count > 0 && r.MeasuredSeconds > 0)
            .Select(r => new Calibration(r.Pattern ?? "?", r.Config.Nodes, r.Config.Hosts, r.Config.SizeBytes, r.Config.RateMbit, r.MeasuredSeconds, r.LimitSeconds,
                r.Efficiency, r.Nodes.Min(n => n.FetchSeconds), r.Nodes.Max(n => n.FetchSeconds)))
            .OrderBy(c => c.Pattern).ThenBy(c => c.Hosts).ThenBy(c => c.Nodes).ToList();
        var skipped = data.Records.Where(r => r.Kind == "skipped")
            .Select(r => $"N={r.Config.Nodes} H={r.Config.Hosts} S={ByteSize.Format(r.Config.SizeBytes)} {(r.Config.Compress ? "lz4" : "raw")}: {r.Note}").ToList();
        var attaches = data.Records.Where(r => r.Kind == "cluster" && r.Workers is { Count: > 0 })
            .GroupBy(r => (r.Config.SizeBytes, r.Config.Workers, Mode: r.Config.WorkerMode ?? r.Workers![0].Mode, r.Config.RateMbit))
            .Select(g =>
            {
                var w = g.SelectMany(r => r.Workers!).ToList();
                var ms = w.Select(x => x.AttachMs).Order().ToList();
                var slowest = g.Where(r => r.Workers!.All(x => x.WallMs is not null)).Select(r => r.Workers!.Max(x => x.WallMs!.Value) / 1000);
                return new Attach(g.Key.SizeBytes, g.Key.Workers, g.Key.Mode, w.Count, ms[0], Median(ms), ms[^1], Median(w.Select(x => x.WarmAttachMs)), w.All(x => x.Verified),
                    g.Count(), Median(slowest), g.Key.RateMbit);
            })
            .OrderBy(a => a.RateMbit).ThenBy(a => a.SizeBytes).ThenBy(a => a.Mode).ThenBy(a => a.PerNode).ToList();
        return new Report(cells, calibrations, skipped, attaches, FanoutCells(data, cells, calibrations), TlsCells(data), RateCells(data), SlurmCells(data, calibrations));
    }

    private static List<SlurmCell> SlurmCells(ResultReader.Data data, List<Calibration> calibrations) =>
        data.Records.Where(r => r.Kind == "cluster" && r.Config.Fanout?.StartsWith("slurm:", StringComparison.Ordinal) == true && r.MeasuredSeconds > 0)
            .GroupBy(r => (Mode: r.Config.Fanout!["slurm:".Length..], r.Config.Nodes, r.Config.Hosts, r.Config.SizeBytes, r.Config.RateMbit))
            .Select(g =>
            {
                var runs = g.ToList();
                var stored = runs[^1].Dataset?.StoredBytes ?? g.Key.SizeBytes;
                var pattern = g.Key.Mode == "none" ? "pull" : "neighbour";
                var calibration = calibrations.Where(c => c.Pattern.StartsWith(pattern, StringComparison.Ordinal) && c.Nodes == g.Key.Nodes && c.RateMbit == g.Key.RateMbit
                                                          && (pattern == "neighbour" || c.Hosts == g.Key.Hosts)).Select(c => c.Efficiency).ToList();
                return new SlurmCell(g.Key.Mode, g.Key.Nodes, g.Key.Hosts, g.Key.SizeBytes, stored, g.Key.RateMbit, runs.Count,
                    Median(runs.Select(r => r.MeasuredSeconds)), runs.Min(r => r.MeasuredSeconds), runs.Max(r => r.MeasuredSeconds),
                    Limits.Fanout(stored, g.Key.RateMbit), Median(runs.Select(r => r.LimitSeconds)), calibration.Count == 0 ? null : Median(calibration),
                    Median(runs.Select(r => (r.CacheTierBytes ?? double.NaN) / stored)),
                    Median(runs.Select(r => r.Nodes.Max(n => (n.LinkTxBytes ?? double.NaN) / stored))),
                    Median(runs.SelectMany(r => r.Nodes).Select(n => n.RankCpuSeconds ?? double.NaN)),
                    g.Key.Mode is "none" or "mpi" ? Median(runs.Select(r => r.Nodes.Max(n => n.FetchSeconds))) : double.NaN,
                    Median(runs.SelectMany(r => r.Nodes).Select(n => n.AgentCpuSeconds ?? double.NaN)));
            })
            .OrderBy(c => c.RateMbit).ThenBy(c => c.SizeBytes).ThenBy(c => c.Nodes).ThenBy(c => SlurmModes.Order(c.Mode)).ToList();

    /// <summary>
    /// Each cell (rate, size, N, H) with an MPI fan-out and at least one sbcast setting: the fan-out, the fastest sbcast
    /// setting by median, sbcast at Slurm's defaults when it ran, and how many sbcast settings ran.
    /// </summary>
    public static List<(SlurmCell Mpi, SlurmCell BestSbcast, SlurmCell? DefaultSbcast, int Tried)> SlurmBeside(IReadOnlyList<SlurmCell> slurm) =>
        slurm.GroupBy(c => (c.RateMbit, c.SizeBytes, c.Nodes, c.Hosts))
            .Select(g => (Mpi: g.FirstOrDefault(c => c.Mode == "mpi"), Sbcast: g.Where(c => SlurmModes.IsSbcast(c.Mode)).OrderBy(c => c.MeasuredSeconds).ToList(),
                Defaults: g.FirstOrDefault(c => c.Mode == "sbcast")))
            .Where(x => x.Mpi is not null && x.Sbcast.Count > 0)
            .Select(x => (x.Mpi!, x.Sbcast[0], x.Defaults, x.Sbcast.Count))
            .ToList();

    private static List<RateCell> RateCells(ResultReader.Data data)
    {
        var cells = new List<RateCell>();
        foreach (var r in data.Records.Where(r => r.Kind == "cluster" && r.RateLimit is not null))
        {
            var l = r.RateLimit!;
            if (l.AgentMaxRateBytes is { } a)
                cells.Add(new RateCell("agents", r.Config.Nodes, r.Config.RateMbit, r.Config.SizeBytes, a, l.AgentMedianBytesPerSecond ?? double.NaN, l.AgentSteadyBytesPerSecond ?? double.NaN));
            if (l.StagerMaxRateBytes is { } st)
                cells.Add(new RateCell("stager", r.Config.Nodes, r.Config.RateMbit, r.Config.SizeBytes, st, l.StagerBytesPerSecond ?? double.NaN, l.StagerSteadyBytesPerSecond ?? double.NaN));
        }
        return cells.OrderBy(c => c.Who, StringComparer.Ordinal).ThenBy(c => c.ConfiguredBytes).ToList();
    }

    /// <summary>The cluster session a run belongs to: its run id without the per-run "-cHHmmssfff" suffix.</summary>
    private static string Session(BenchRecord r) => r.Run.LastIndexOf("-c", StringComparison.Ordinal) is var at and > 0 ? r.Run[..at] : r.Run;

    private static List<TlsCell> TlsCells(ResultReader.Data data)
    {
        var direct = data.Records.Where(r => r.Kind == "cluster" && r.Config.Fanout is null && r.Nodes.Count > 0 && r.MeasuredSeconds > 0 && r.Config.Workers == 0).ToList();
        return direct.Where(r => r.Config.Tls == true)
            .GroupBy(r => (r.Config.Nodes, r.Config.Hosts, r.Config.SizeBytes, r.Config.Compress, r.Config.RateMbit))
            .Select(g =>
            {
                var plain = direct.Where(r => r.Config.Tls != true && Session(r) == Session(g.First()) &&
                                              (r.Config.Nodes, r.Config.Hosts, r.Config.SizeBytes, r.Config.Compress, r.Config.RateMbit) == g.Key).ToList();
                return plain.Count == 0 ? null : new TlsCell(g.Key.Nodes, g.Key.Hosts, g.Key.SizeBytes, g.Key.Compress, g.Key.RateMbit, g.Count(),
                    Median(g.Select(r => r.MeasuredSeconds)), Median(plain.Select(r => r.MeasuredSeconds)),
                    Median(g.Select(r => r.MachineBusy ?? double.NaN)), Median(plain.Select(r => r.MachineBusy ?? double.NaN)));
            })
            .OfType<TlsCell>().OrderBy(c => c.RateMbit).ThenBy(c => c.SizeBytes).ThenBy(c => c.Nodes).ToList();
    }

    private static List<FanoutCell> FanoutCells(ResultReader.Data data, List<Cell> direct, List<Calibration> calibrations) =>
        data.Records.Where(r => r.Kind == "cluster" && r.Config.Fanout is ("mpi" or "mpich") && r.Nodes.Count > 0 && r.MeasuredSeconds > 0)
            .GroupBy(r => (r.Config.Nodes, r.Config.Hosts, r.Config.SizeBytes, r.Config.Compress, r.Config.RateMbit, r.Config.Fanout))
            .Select(g =>
            {
                var runs = g.ToList();
                var stored = runs[^1].Dataset?.StoredBytes ?? g.Key.SizeBytes;
                var perHost = (double)stored / g.Key.Hosts;
                var d = direct.FirstOrDefault(c => (c.Nodes, c.Hosts, c.SizeBytes, c.Compress, c.RateMbit) == (g.Key.Nodes, g.Key.Hosts, g.Key.SizeBytes, g.Key.Compress, g.Key.RateMbit)
                    && !c.WarmAgents && c.HostQueue is null && c.Codec is null);
                var neighbour = calibrations.Where(c => c.Pattern == "neighbour" && c.Nodes == g.Key.Nodes && c.RateMbit == g.Key.RateMbit).Select(c => c.Efficiency).ToList();
                double Share(IEnumerable<HostBytes> hosts) => Median(hosts.Select(h => h.NetOutputBytes / perHost));
                return new FanoutCell(g.Key.Fanout == "mpich" ? "MPICH" : "Open MPI", g.Key.Nodes, g.Key.Hosts, g.Key.SizeBytes, stored, g.Key.Compress, g.Key.RateMbit, runs.Count,
                    Median(runs.Select(r => r.MeasuredSeconds)), runs.Min(r => r.MeasuredSeconds), runs.Max(r => r.MeasuredSeconds), Median(runs.Select(r => r.LimitSeconds)),
                    Median(runs.SelectMany(r => r.Nodes).Select(n => n.LaunchSeconds ?? double.NaN)),
                    Share(runs.SelectMany(r => r.CacheHosts ?? [])),
                    Median(runs.SelectMany(r => r.Nodes).Select(n => (n.LinkRxBytes ?? double.NaN) / stored)),
                    Median(runs.SelectMany(r => r.Nodes).Select(n => (n.LinkTxBytes ?? double.NaN) / stored)),
                    d?.MeasuredSeconds, d?.LimitSeconds, d is null ? null : Share(d.CacheHosts), neighbour.Count == 0 ? null : Median(neighbour),
                    Median(runs.Select(r => r.MachineBusy ?? double.NaN)));
            })
            .OrderBy(c => c.RateMbit).ThenBy(c => c.SizeBytes).ThenBy(c => c.Hosts).ThenBy(c => c.Nodes).ThenByDescending(c => c.Mpi).ToList();


    private static string F(double v, string format = "0.00") => double.IsFinite(v) ? v.ToString(format, CultureInfo.InvariantCulture) : "–";
    private static string P(double v) => double.IsFinite(v) ? (v * 100).ToString("0", CultureInfo.InvariantCulture) + "%" : "–";
    internal static string Codec(bool compress) => compress ? "lz4" : "raw";

    public static string Markdown(ResultReader.Data data, Report r, List<string> charts)
    {
        var sb = new StringBuilder();
        var inv = CultureInfo.InvariantCulture;
        sb.AppendLine("# HPC Common Data — throughput report").AppendLine();
        sb.AppendLine($"{data.Lines} lines from {string.Join(", ", data.Files.Select(Path.GetFileName))}: {r.Cells.Sum(c => c.Runs)} cluster runs in {r.Cells.Count} configurations, " +
                           (r.Fanouts.Count > 0 ? $"{r.Fanouts.Sum(c => c.Runs)} fan-out runs in {r.Fanouts.Count}, " : "") +
                           $"{r.Calibrations.Count} calibrations, {r.Skipped.Count} skipped" +
                           (data.Unreadable > 0 ? $", {data.Unreadable} unreadable (truncated or malformed) lines ignored" : "") +
                           (data.UnknownKinds > 0 ? $", {data.UnknownKinds} lines of other kinds ignored" : "") + ".").AppendLine();

        foreach (var g in r.Cells.GroupBy(c => (c.Hosts, c.CodecName, c.RateMbit, c.WarmAgents, c.HostQueue)))
        {
            var nodeCounts = g.Select(c => c.Nodes).Distinct().Order().ToList();
            sb.AppendLine(inv, $"## Data access time (s): {g.Key.Hosts} cache host{(g.Key.Hosts == 1 ? "" : "s")}, {g.Key.CodecName}, {g.Key.RateMbit} Mbit/s links{(g.Key.WarmAgents ? ", warm agents" : "")}{(g.Key.HostQueue is { } q ? $", {q} host queues" : "")}").AppendLine();
            sb.AppendLine("Time from the common start until the last node's copy was complete and verified; in brackets the efficiency = physical limit / measured.").AppendLine();
            sb.AppendLine("| data size | " + string.Join(" | ", nodeCounts.Select(n => $"N={n}")) + " |");
            sb.AppendLine("|---|" + string.Concat(nodeCounts.Select(_ => "---|")));
            foreach (var s in g.GroupBy(c => c.SizeBytes).OrderBy(s => s.Key))
                sb.AppendLine($"| {ByteSize.Format(s.Key)} | " + string.Join(" | ", nodeCounts.Select(n => s.FirstOrDefault(c => c.Nodes == n) is { } c
                    ? $"{F(c.MeasuredSeconds)} ({P(c.Efficiency)})" : "")) + " |");
            sb.AppendLine();
        }

        if (r.Cells.Count > 0)
        {
            sb.AppendLine("## Every configuration").AppendLine();
            sb.AppendLine("Measured: the median over the configuration's runs, with their range when there was more than one.").AppendLine();
            sb.AppendLine("| N | H | size | codec | stored | runs | measured s | limit s | efficiency | node min / median / max s | bytes sent per cache host (MiB) | host CPU s | agents CPU s | agent peak RSS | attach ms |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
            foreach (var c in r.Cells.OrderBy(c => c.SizeBytes).ThenBy(c => c.Hosts).ThenBy(c => c.Nodes).ThenBy(c => !c.Compress).ThenBy(c => c.Codec, StringComparer.Ordinal))
                sb.AppendLine($"| {c.Nodes} | {c.Hosts} | {ByteSize.Format(c.SizeBytes)} | {c.CodecName}{(c.WarmAgents ? " warm" : "")}{(c.HostQueue is { } q ? " " + q : "")} | {P(c.RawBytes == 0 ? double.NaN : (double)c.StoredBytes / c.RawBytes)} | {c.Runs} | " +
                              $"{F(c.MeasuredSeconds)}{(c.Runs > 1 ? $" ({F(c.MeasuredMin)}–{F(c.MeasuredMax)})" : "")} | {F(c.LimitSeconds)} | {P(c.Efficiency)} | {F(c.NodeMin)} / {F(c.NodeMedian)} / {F(c.NodeMax)} | " +
                              $"{string.Join(", ", c.CacheHosts.Select(h => F(h.NetOutputBytes / Stats.MiB, "0.0")))} | {F(c.CpuSecondsHosts, "0.0")} | {F(c.CpuSecondsAgents, "0.0")} | " +
                              $"{(c.PeakRssAgentBytes > 0 ? ByteSize.Format(c.PeakRssAgentBytes) : "–")} | {(c.AttachMsMedian is { } a ? F(a, "0") : "–")} |");
            sb.AppendLine();
        }

        var pairs = r.Cells.Where(c => c.Compress).Select(c => (packed: c, raw: r.Cells.FirstOrDefault(x => !x.Compress && x.Nodes == c.Nodes && x.Hosts == c.Hosts && x.SizeBytes == c.SizeBytes && x.RateMbit == c.RateMbit && x.WarmAgents == c.WarmAgents && x.HostQueue == c.HostQueue)))
            .Where(p => p.raw is not null).ToList();
        if (pairs.Count > 0)
        {
            sb.AppendLine("## Compression savings").AppendLine();
            sb.AppendLine("| N | H | size | codec | stored | raw s | compressed s | time saved |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|");
            foreach (var (packed, raw) in pairs.OrderBy(p => p.packed.SizeBytes).ThenBy(p => p.packed.Hosts).ThenBy(p => p.packed.Nodes).ThenBy(p => p.packed.Codec, StringComparer.Ordinal))
                sb.AppendLine($"| {packed.Nodes} | {packed.Hosts} | {ByteSize.Format(packed.SizeBytes)} | {packed.CodecName} | {P((double)packed.StoredBytes / Math.Max(1, packed.RawBytes))} | " +
                              $"{F(raw!.MeasuredSeconds)} | {F(packed.MeasuredSeconds)} | {P(1 - packed.MeasuredSeconds / raw.MeasuredSeconds)} |");
            sb.AppendLine();
        }

        if (r.Fanouts.Count > 0)
        {
            sb.AppendLine("## Fan-out between nodes (nodeprep --fanout mpi) beside direct fetch").AppendLine();
            sb.AppendLine("Fan-out: from mpiexec starting (so with the MPI launch) until the last rank's copy was verified; its limit is S_stored/B, " +
                          "whatever N is. Direct: every agent fetching from the cache hosts, limit N·S_stored/(H·B). Bytes per cache host are given " +
                          "as multiples of S_stored/H (1 = the cache tier sent each byte once); node rx/tx are the median node's link bytes over S_stored. " +
                          "Neighbour: the plain-TCP calibration of every node sending to the next at once, what this machine's links carry in that pattern. " +
                          "Cores busy: the machine's CPU over the fan-out's timed part; near 100%, the emulator's 2 cores rather than the links set the time.").AppendLine();
            sb.AppendLine("| rate | size | stored | H | N | MPI | runs | fan-out s | × S/B | launch s | direct s | × its limit | fan-out / direct | bytes per cache host, fan-out → direct | node rx / tx | neighbour TCP efficiency | cores busy |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
            foreach (var c in r.Fanouts)
                sb.AppendLine($"| {c.RateMbit} Mbit/s | {ByteSize.Format(c.SizeBytes)} | {ByteSize.Format(c.StoredBytes)} | {c.Hosts} | {c.Nodes} | {c.Mpi} | {c.Runs} | " +
                              $"{F(c.MeasuredSeconds)}{(c.Runs > 1 ? $" ({F(c.MeasuredMin)}–{F(c.MeasuredMax)})" : "")} | {F(c.MeasuredSeconds / c.LimitSeconds)} | {F(c.LaunchSeconds)} | " +
                              $"{F(c.DirectSeconds ?? double.NaN)} | {F((c.DirectSeconds ?? double.NaN) / (c.DirectLimitSeconds ?? double.NaN))} | {F(c.MeasuredSeconds / (c.DirectSeconds ?? double.NaN))} | " +
                              $"{F(c.HostShare)} → {F(c.DirectHostShare ?? double.NaN)} | {F(c.NodeRx)} / {F(c.NodeTx)} | {P(c.NeighbourEfficiency ?? double.NaN)} | {P(c.MachineBusy)} |");
            sb.AppendLine();
        }

        if (r.Slurm is { Count: > 0 } slurm)
        {
            sb.AppendLine("## On a Slurm cluster: our node prep beside sbcast and srun --bcast").AppendLine();
            sb.AppendLine("Each mode is a step of one allocation of all N nodes (bench cluster --scheduler slurm), timed by the batch shell from the " +
                          "step's start to its end, the copy on every node. none / mpi: srun hpcdata nodeprep --fanout none|mpi, agents started cold by " +
                          "node prep, the data staged to the cache hosts beforehand. sbcast: sbcast --compress=lz4 from the batch node at Slurm's " +
                          "defaults (-f<F>: --fanout=F; -tree<W>: TreeWidth=W for the step); srun-bcast: srun --bcast --compress=lz4. × S/B: over S_stored/B; × its limit: direct N·S_stored/(H·B), the " +
                          "others S_stored/B; × calibration: over the time the links carried that pattern in iperf3's (or plain TCP's) calibration " +
                          "(direct: pull from the hosts; others: every node sending to the next). Cache tier and busiest sender: bytes over S_stored. " +
                          "Node prep: the slowest node's own time from its start to its verified copy, inside the step (the rest is srun's launch, " +
                          "the process start and the MPI shutdown).").AppendLine();
            sb.AppendLine("| rate | size | stored | H | N | mode | runs | step s | node prep s | × S/B | × its limit | × calibration | cache tier sent | busiest node sent | node prep CPU-s | agent CPU-s |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
            foreach (var c in slurm)
                sb.AppendLine($"| {c.RateMbit} Mbit/s | {ByteSize.Format(c.SizeBytes)} | {ByteSize.Format(c.StoredBytes)} | {c.Hosts} | {c.Nodes} | {c.Mode} | {c.Runs} | " +
                              $"{F(c.MeasuredSeconds)}{(c.Runs > 1 ? $" ({F(c.MeasuredMin)}–{F(c.MeasuredMax)})" : "")} | {F(c.NodePrepSeconds)} | {F(c.MeasuredSeconds / c.SbSeconds)} | " +
                              $"{F(c.MeasuredSeconds / c.LimitSeconds)} | {F(c.Calibration is { } e ? c.MeasuredSeconds / (c.LimitSeconds / e) : double.NaN)} | " +
                              $"{F(c.CacheTierShare)} | {F(c.BusiestSender)} | {F(c.NodeCpu)} | {F(c.AgentCpu)} |");
            sb.AppendLine();
            var beside = SlurmBeside(slurm);
            if (beside.Count > 0)
            {
                sb.AppendLine("### The MPI fan-out beside sbcast at its best").AppendLine();
                sb.AppendLine("For each cell, the fastest sbcast setting that ran (median step time over its runs) against the MPI fan-out's median, " +
                              "and sbcast at Slurm's defaults.").AppendLine();
                sb.AppendLine("| rate | size | N | MPI fan-out s | × S/B | best sbcast s | its setting | × S/B | best sbcast / fan-out | sbcast at defaults s | settings tried |");
                sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|");
                foreach (var (mpi, best, defaults, tried) in beside)
                    sb.AppendLine($"| {mpi.RateMbit} Mbit/s | {ByteSize.Format(mpi.SizeBytes)} | {mpi.Nodes} | {F(mpi.MeasuredSeconds)} | {F(mpi.MeasuredSeconds / mpi.SbSeconds)} | " +
                                  $"{F(best.MeasuredSeconds)} | {SlurmModes.Describe(best.Mode)} | {F(best.MeasuredSeconds / best.SbSeconds)} | {F(best.MeasuredSeconds / mpi.MeasuredSeconds)} | " +
                                  $"{F(defaults?.MeasuredSeconds ?? double.NaN)} | {tried} |");
                sb.AppendLine();
            }
        }

        if (r.Tls is { Count: > 0 } tls)
        {
            sb.AppendLine("## The cache tier over TLS beside plain TCP").AppendLine();
            sb.AppendLine("Direct fetch by every node, the cache hosts serving TLS (the stager and agents verifying the certificate), against the same cell " +
                          "over plain TCP in the same cluster session; medians over runs.").AppendLine();
            sb.AppendLine("| rate | size | H | N | runs | TLS s | plain s | TLS / plain time | cores busy TLS / plain |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|---|");
            foreach (var c in tls)
                sb.AppendLine($"| {c.RateMbit} Mbit/s | {ByteSize.Format(c.SizeBytes)}{(c.Compress ? " lz4" : " raw")} | {c.Hosts} | {c.Nodes} | {c.Runs} | {F(c.TlsSeconds)} | {F(c.PlainSeconds)} | " +
                              $"{F(c.TlsSeconds / c.PlainSeconds)} | {P(c.TlsMachineBusy)} / {P(c.PlainMachineBusy)} |");
            sb.AppendLine();
        }

        if (r.Calibrations.Count > 0)
        {
            sb.AppendLine("## Emulator calibration: plain TCP, no product code").AppendLine();
            sb.AppendLine("pull: every node pulls its share from each cache-host namespace at once (limit N·S/(H·B)); neighbour: every node sends S to the next at once (limit S/B).").AppendLine();
            sb.AppendLine("| pattern | N | H | bytes per node | measured s | limit s | efficiency | node min / max s |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|");
            foreach (var c in r.Calibrations)
                sb.AppendLine($"| {c.Pattern} | {c.Nodes} | {(c.Pattern == "neighbour" ? "–" : c.Hosts.ToString(inv))} | {ByteSize.Format(c.Bytes)} | {F(c.MeasuredSeconds)} | {F(c.LimitSeconds)} | {P(c.Efficiency)} | {F(c.NodeMin)} / {F(c.NodeMax)} |");
            sb.AppendLine();
        }

        // The same N, H and rate carrying plain TCP is what this machine can actually move in that pattern; a product run
        // is read against it as well as against the link limit.
        var againstTcp = r.Cells.Select(c => (Cell: c, Tcp: r.Calibrations.FirstOrDefault(k => k.Pattern == "pull" && k.Nodes == c.Nodes && k.Hosts == c.Hosts && k.RateMbit == c.RateMbit)))
            .Where(p => p.Tcp is not null).ToList();
        if (againstTcp.Count > 0)
        {
            sb.AppendLine("## Against plain TCP in the same namespaces").AppendLine();
            sb.AppendLine("Efficiency of the product run and of the plain-TCP pull calibration with the same N, H and link rate; the ratio is the share of what the emulator carries that the product achieved.").AppendLine();
            sb.AppendLine("| N | H | size | codec | product efficiency | plain TCP efficiency | product / TCP |");
            sb.AppendLine("|---|---|---|---|---|---|---|");
            foreach (var (c, tcp) in againstTcp.OrderBy(p => p.Cell.SizeBytes).ThenBy(p => p.Cell.Hosts).ThenBy(p => p.Cell.Nodes).ThenBy(p => !p.Cell.Compress))
                sb.AppendLine($"| {c.Nodes} | {c.Hosts} | {ByteSize.Format(c.SizeBytes)} | {c.CodecName}{(c.WarmAgents ? " warm" : "")}{(c.HostQueue is { } q ? " " + q : "")} | " +
                              $"{P(c.Efficiency)} | {P(tcp!.Efficiency)} | {P(c.Efficiency / tcp.Efficiency)} |");
            sb.AppendLine();
        }

        if (r.Attaches.Count > 0)
        {
            sb.AppendLine("## Workers attaching the node's copy").AppendLine();
            sb.AppendLine("K workers per node start together after the fetch; first open in a fresh process (ms), the median re-open in the same process, " +
                          "and, where the run timed it, the slowest worker from the common start until its copy was open and verified (median over runs).").AppendLine();
            sb.AppendLine("| where | size | mode | workers per node | runs | workers | first open min / median / max ms | warm re-open ms | slowest to a verified copy s | all verified |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|");
            foreach (var a in r.Attaches)
                sb.AppendLine($"| {(a.RateMbit == 0 ? "loopback" : $"{a.RateMbit} Mbit/s cluster")} | {ByteSize.Format(a.SizeBytes)} | {a.Mode} | {a.PerNode} | {a.Runs} | {a.Workers} | " +
                              $"{F(a.MinMs, "0")} / {F(a.MedianMs, "0")} / {F(a.MaxMs, "0")} | {F(a.WarmMedianMs, "0.0")} | {F(a.SlowestSeconds, "0.000")} | {(a.AllVerified ? "yes" : "NO")} |");
            sb.AppendLine();
        }

        if (data.Codecs.Count > 0)
        {
            sb.AppendLine("## Stager vs the raw codec (bench codec)").AppendLine();
            sb.AppendLine(CodecResults.Table(data.Codecs));
        }

        // Ratios to redis-server are taken within a round, so measurements made with other settings get tables of their own.
        foreach (var g in data.Caches.GroupBy(c => (c.Config.Pipeline, c.Config.Clients, c.Config.Keys)).OrderBy(g => g.Key.Pipeline))
        {
            sb.AppendLine(inv, $"## Cache stores, 64 KB values, pipeline {g.Key.Pipeline} (bench cache)").AppendLine();
            sb.AppendLine(CacheResults.Table(g.ToList(), []));
        }

        if (r.Rates is { Count: > 0 } rates)
        {
            sb.AppendLine("## Rate limits (--max-rate)").AppendLine();
            sb.AppendLine("Configured against achieved cache-tier payload rates. End to end: bytes over the whole fetch or staging (start-up, " +
                          "manifest, hash and publishing included); steady: the slope between 10% and 90% of the transfer, sampled every 100 ms " +
                          "(for agents each node's own progress, the median node; for the stager the cache hosts' input).").AppendLine();
            sb.AppendLine("| limited | N | link | data | configured | end to end | steady | end to end / configured | steady / configured |");
            sb.AppendLine("|---|---|---|---|---|---|---|---|---|");
            static string Ratio(double v) => double.IsFinite(v) ? (v * 100).ToString("0.0", CultureInfo.InvariantCulture) + "%" : "–";
            static string M(double bytesPerSecond) => double.IsFinite(bytesPerSecond) ? (bytesPerSecond * 8 / 1e6).ToString("0.0", CultureInfo.InvariantCulture) + " Mbit/s" : "–";
            foreach (var c in rates)
                sb.AppendLine(inv, $"| {c.Who} | {c.Nodes} | {c.LinkMbit} Mbit/s | {ByteSize.Format(c.SizeBytes)} | {M(c.ConfiguredBytes)} | {M(c.EndToEnd)} | {M(c.Steady)} | {Ratio(c.EndToEnd / c.ConfiguredBytes)} | {Ratio(c.Steady / c.ConfiguredBytes)} |");
            sb.AppendLine();
        }

        if (r.Skipped.Count > 0)
        {
            sb.AppendLine("## Not run").AppendLine();
            foreach (var s in r.Skipped) sb.AppendLine($"- {s}");
            sb.AppendLine();
        }
        if (charts.Count > 0)
        {
            sb.AppendLine("## Charts").AppendLine();
            foreach (var c in charts) sb.AppendLine($"![{Path.GetFileNameWithoutExtension(c)}]({c})").AppendLine();
        }
        return sb.ToString();
    }

    public static List<string> WriteCharts(Report r, string dir)
    {
        // Runs at another link rate than most are named with it; at the common rate the name stays short.
        var commonRate = r.Cells.Count == 0 ? 0 : r.Cells.GroupBy(c => c.RateMbit).MaxBy(g => g.Count())!.Key;
        string Label(long size, int hosts, string codec, bool warm, string? queue, int rate) =>
            $"{ByteSize.Format(size)} H={hosts} {codec}{(warm ? " warm" : "")}{(queue is { } q ? " " + q : "")}{(rate != commonRate ? $" {rate} Mbit/s" : "")}";
        var written = new List<string>();
        if (r.Rates is { Count: > 0 } rates)
        {
            static double M(double bytesPerSecond) => bytesPerSecond * 8 / 1e6;
            // Achieved over configured, so ±5% is visible at every rate; configured rates spread over decades, hence log2.
            var chart = new LineChart
            {
                Title = "Rate limit held: achieved / configured (--max-rate)", XLabel = "configured rate (Mbit/s)", YLabel = "achieved / configured",
                YMin = 0.9, YMax = 1.08, YPercent = true,
            };
            foreach (var g in rates.GroupBy(c => c.Who))
            {
                chart.Lines.Add(new LineChart.Series($"{g.Key}, steady", g.GroupBy(c => c.ConfiguredBytes).Select(c => (M(c.Key), Median(c.Select(x => x.Steady / x.ConfiguredBytes)))).ToList()));
                chart.Lines.Add(new LineChart.Series($"{g.Key}, end to end", g.GroupBy(c => c.ConfiguredBytes).Select(c => (M(c.Key), Median(c.Select(x => x.EndToEnd / x.ConfiguredBytes)))).ToList(), Dashed: true));
            }
            chart.ReferenceLines.AddRange([("limit: the configured rate", 1.0), ("±5%", 1.05), ("", 0.95)]);
            chart.Save(Path.Combine(dir, "rate-limit.svg"));
            written.Add("rate-limit.svg");
        }
        if (r.Slurm is { Count: > 0 } slurm)
        {
            // One chart per link rate and size: the modes side by side, each with its own limit.
            var panels = slurm.GroupBy(c => (c.RateMbit, c.SizeBytes)).OrderBy(g => g.Key.RateMbit).ThenBy(g => g.Key.SizeBytes).ToList();
            var sizes = panels.Select(p => p.Key.SizeBytes).Distinct().Count();
            foreach (var panel in panels)
            {
                var suffix = panels.Count == 1 ? "" : $"-{panel.Key.RateMbit}mbit{(sizes > 1 ? "-" + FileSize(panel.Key.SizeBytes) : "")}";
                Save(written, dir, $"slurm-time-vs-nodes{suffix}", () => new LineChart
                {
                    Title = $"On Slurm, {panel.Key.RateMbit} Mbit/s links, {ByteSize.Format(panel.Key.SizeBytes)}: time until every node holds the data",
                    XLabel = "nodes", YLabel = "seconds",
                    LimitsLabel = "limit (dotted): direct N·S/(H·B), others S/B",
                }, panel.GroupBy(c => c.Mode).OrderBy(g => SlurmModes.Order(g.Key)).Select(g =>
                    (new LineChart.Series(SlurmModes.Describe(g.Key), g.Select(c => ((double)c.Nodes, c.MeasuredSeconds)).ToList()),
                     (LineChart.Series?)new LineChart.Series(g.Key, g.Select(c => ((double)c.Nodes, c.LimitSeconds)).ToList()))).ToList());
            }
        }
        if (r.Cells.Count == 0) return written;
        // One chart per link rate (and per size when there are several): its series differ in hosts, codec and agents.
        var cellPanels = r.Cells.GroupBy(c => (c.RateMbit, c.SizeBytes)).OrderBy(g => g.Key.RateMbit).ThenBy(g => g.Key.SizeBytes).ToList();
        var cellSizes = cellPanels.Select(p => p.Key.SizeBytes).Distinct().Count();
        string Suffix(int rate, long size) => cellPanels.Count == 1 ? "" : $"-{rate}mbit{(cellSizes > 1 ? "-" + FileSize(size) : "")}";
        foreach (var panel in cellPanels)
        {
            var series = panel.GroupBy(c => (c.SizeBytes, c.Hosts, c.Compress, c.CodecName, c.WarmAgents, c.HostQueue, c.RateMbit)).OrderBy(g => g.Key.Hosts).ThenBy(g => !g.Key.Compress)
                .ThenBy(g => g.Key.CodecName, StringComparer.Ordinal).ToList();
            var about = $"{panel.Key.RateMbit} Mbit/s links, {ByteSize.Format(panel.Key.SizeBytes)}";
            Save(written, dir, "time-vs-nodes" + Suffix(panel.Key.RateMbit, panel.Key.SizeBytes), () => new LineChart
            {
                Title = $"Data access time vs node count ({about})", XLabel = "nodes", YLabel = "seconds", LimitsLabel = "limit (dotted): max(N/H, 1)·S/B",
            }, series.Select(g => (new LineChart.Series(Label(g.Key.SizeBytes, g.Key.Hosts, g.Key.CodecName, g.Key.WarmAgents, g.Key.HostQueue, g.Key.RateMbit),
                    g.Select(c => ((double)c.Nodes, c.MeasuredSeconds)).ToList(), Dashed: !g.Key.Compress),
                (LineChart.Series?)new LineChart.Series("limit", g.Select(c => ((double)c.Nodes, c.LimitSeconds)).ToList()))).ToList());

            var efficiency = series.Select(g => (new LineChart.Series(Label(g.Key.SizeBytes, g.Key.Hosts, g.Key.CodecName, g.Key.WarmAgents, g.Key.HostQueue, g.Key.RateMbit),
                g.Select(c => ((double)c.Nodes, c.Efficiency)).ToList(), Dashed: !g.Key.Compress), (LineChart.Series?)null)).ToList();
            foreach (var g in r.Calibrations.Where(c => c.RateMbit == panel.Key.RateMbit).GroupBy(c => (c.Pattern, Hosts: c.Pattern == "neighbour" ? 0 : c.Hosts)))
                efficiency.Add((new LineChart.Series(g.Key.Pattern == "neighbour" ? "tcp neighbour" : $"tcp pull H={g.Key.Hosts}",
                    g.GroupBy(c => c.Nodes).Select(n => ((double)n.Key, Median(n.Select(c => c.Efficiency)))).ToList(), Dashed: true), null));
            Save(written, dir, "efficiency-vs-nodes" + Suffix(panel.Key.RateMbit, panel.Key.SizeBytes), () =>
            {
                var chart = new LineChart { Title = $"Efficiency, direct-fetch limit / measured ({about})", XLabel = "nodes", YLabel = "efficiency", YMax = 1.2, YPercent = true };
                chart.ReferenceLines.Add(("limit (100%)", 1.0));
                return chart;
            }, efficiency);
        }
        return written;
    }

    /// <summary>
    /// Saves <paramref name="series"/> (each with its limit, or none) as charts of at most <see cref="LineChart.MaxSeries"/>
    /// series: <c>NAME.svg</c>, and <c>NAME-2.svg</c>… when they do not fit one.
    /// </summary>
    private static void Save(List<string> written, string dir, string name, Func<LineChart> create, List<(LineChart.Series Line, LineChart.Series? Limit)> series)
    {
        var parts = series.Chunk(LineChart.MaxSeries).ToList();
        for (var i = 0; i < parts.Count; i++)
        {
            var chart = create();
            foreach (var (line, limit) in parts[i])
            {
                chart.Lines.Add(line);
                if (limit is not null) chart.Limits.Add(limit);
            }
            var file = $"{name}{(i == 0 ? "" : $"-{i + 1}")}.svg";
            chart.Save(Path.Combine(dir, file));
            written.Add(file);
        }
    }

    /// <summary>
    /// A size in a chart's file name, as a command line writes it (256mb), so names stay put as labels change. A size within
    /// a thousandth of a whole KB, MB or GB is named by it: a generated dataset ends on a whole line, a few bytes past
    /// the size asked for, and its chart should not be called 67108890.
    /// </summary>
    private static string FileSize(long bytes)
    {
        foreach (var shift in (int[])[30, 20, 10])
        {
            var units = Math.Round((double)bytes / (1L << shift));
            if (units >= 1 && Math.Abs(bytes - units * (1L << shift)) <= bytes / 1000.0)
                return new ByteSize((long)units << shift).ToExactString().ToLowerInvariant();
        }
        return new ByteSize(bytes).ToExactString().ToLowerInvariant();
    }
}
