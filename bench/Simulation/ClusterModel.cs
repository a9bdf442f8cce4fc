namespace Hpc.Bench.Simulation;

/// <summary>Where the CPU that ingests the data sits.</summary>
public enum CpuModel
{
    /// <summary>CPU is not modelled: only links limit.</summary>
    None,
    /// <summary>One pool of cores for every node: the lab, whose emulated nodes all run on the same machine.</summary>
    Shared,
    /// <summary>Each node its own cores: a cluster.</summary>
    PerNode,
}

/// <summary>
/// The machine a simulation runs on: N nodes and H cache hosts with full-duplex links, optionally racks of
/// <see cref="RackSize"/> nodes behind top-of-rack switches whose uplinks are oversubscribed (a two-level leaf–spine
/// with a non-blocking spine), and the CPU that ingests what arrives.
/// </summary>
public sealed record ClusterSpec
{
    public required int Nodes { get; init; }
    public required int CacheHosts { get; init; }
    /// <summary>Every node's link rate, each direction, in bits per second (the shaped rate in the lab).</summary>
    public required double LinkBitsPerSecond { get; init; }
    /// <summary>Cache hosts' link rate; default the nodes'.</summary>
    public double? HostLinkBitsPerSecond { get; init; }
    /// <summary>Nodes per top-of-rack switch; 0: one non-blocking switch (the lab's bridge).</summary>
    public int RackSize { get; init; }
    /// <summary>A compute rack's downlink capacity over its uplink capacity (3 means 3:1).</summary>
    public double Oversubscription { get; init; } = 1;
    /// <summary>The same for the cache tier's racks (hosts packed <see cref="RackSize"/> to a rack).</summary>
    public double TierOversubscription { get; init; } = 1;
    /// <summary>One-way latency of a hop between two nodes (wire, switches, the receiving software), seconds.</summary>
    public double HopLatency { get; init; }
    public CpuModel Cpu { get; init; } = CpuModel.None;
    /// <summary>Shared: the pool's cores. PerNode: the cores a node's direct fetch can use (its agent verifies and
    /// decodes on every connection's task: 4 per cache host), and its start-up.</summary>
    public double Cores { get; init; } = 1;
    /// <summary>PerNode: the cores a fan-out's ingest can use. The ring hands every block to the agent over one ingest
    /// session; the agent verifies, decodes and writes its segments on --ingest-threads workers (one per core), where it
    /// once did so on one thread (1 replays that agent).</summary>
    public double FanoutIngestCores { get; init; } = 1;
    /// <summary>Extra start-up per doubling of the rank count beyond 4 (the launcher's tree, MPI's start); 0 in the lab,
    /// whose start-up growth is its shared cores, which <see cref="CpuModel.Shared"/> models.</summary>
    public double LaunchPerDoubling { get; init; }
    /// <summary>A fan-out requested of the running agents: how their tree starts it (<see cref="JobSpec.Agents"/>).</summary>
    public AgentTreeModel AgentTree { get; init; } = new();
    /// <summary>Nodes whose link runs at <see cref="SlowFactor"/> of the rate, both directions.</summary>
    public IReadOnlySet<int> SlowNodes { get; init; } = new HashSet<int>();
    public double SlowFactor { get; init; } = 0.1;
}

/// <summary>
/// What the product costs beyond the wire, taken from the lab's recorded runs (docs/results/slurm-native.jsonl), never
/// fitted to a cell's time: TCP's payload share of a link; the CPU a node spends per stored byte and at its start (a
/// least-squares line through every node's recorded rank + agent CPU against the dataset's stored size); and the wall
/// start-up a node spends outside the transfer, read from the N = 4 runs' own phases (the step's time less the longest
/// ring and link probe, or the longest fetch), less what 4 nodes' start-up CPU takes on the lab's cores, which the
/// simulation adds back at every N. Runs with slow nodes are left out.
/// </summary>
public sealed record Calibration
{
    /// <summary>TCP payload over Ethernet frames at MTU 1500: 1448 of 1538 bytes. A constant of the wire, not a fit.</summary>
    public double Efficiency { get; init; } = 1448.0 / 1538;
    public double FanoutStartSeconds { get; init; }
    public double FanoutStartCpu { get; init; }
    /// <summary>Rank and agent together, CPU-seconds per stored byte a node receives (what the lab's shared cores carry).</summary>
    public double FanoutCpuPerByte { get; init; }
    /// <summary>The agent alone (its ingest thread: decode, verify, write), CPU-seconds per stored byte.</summary>
    public double FanoutIngestCpuPerByte { get; init; }
    public double DirectStartSeconds { get; init; }
    public double DirectStartCpu { get; init; }
    public double DirectCpuPerByte { get; init; }
    public double DirectIngestCpuPerByte { get; init; }
    /// <summary>A fan-out requested of the running agents (runs of <c>--fanout agents</c>, where recorded): the agent's
    /// CPU per stored byte (it runs the exchange and the ingest), and the wall start-up of the N = 4 runs (the requester's
    /// start and the fresh agents' first request: the run's time less the longest ring and probe). Null without such runs.</summary>
    public double? AgentsCpuPerByte { get; init; }
    public double? AgentsStartSeconds { get; init; }
    /// <summary>Slurm's burst buffer (runs of <c>--fanout burst-buffer</c>, where recorded): what its pre-run hook and the
    /// job's start add to the agents' exchange. Null without such runs.</summary>
    public BurstBufferHook? BurstBuffer { get; init; }
    /// <summary>Cores of the machine the records were made on.</summary>
    public double LabCores { get; init; } = 2;
    public string Source { get; init; } = "";

    public static Calibration FromRecords(IReadOnlyCollection<BenchRecord> records, string source)
    {
        // Runs with slow nodes are what a calibration must predict, not what it is read from.
        var cells = records.Where(r => r.Kind == "cluster" && r.Dataset is not null && r.Nodes.Count > 0 && r.Config.SlowNodes is not { Count: > 0 }).ToList();
        var fan = cells.Where(r => Mode(r) == "mpi").ToList();
        var direct = cells.Where(r => Mode(r) == "none").ToList();
        if (fan.Count == 0 || direct.Count == 0) throw new InvalidOperationException($"{source}: no fan-out and direct runs with per-node CPU to calibrate from");
        var cores = cells.Where(r => r.Machine is not null).Select(r => (double)r.Machine!.Cores).DefaultIfEmpty(2).Min();

        var (fanPerByte, fanStartCpu) = Line(fan, n => (n.RankCpuSeconds ?? 0) + (n.AgentCpuSeconds ?? 0));
        var (fanIngest, _) = Line(fan, n => n.AgentCpuSeconds ?? 0);
        var (dirPerByte, dirStartCpu) = Line(direct, n => (n.RankCpuSeconds ?? 0) + (n.AgentCpuSeconds ?? 0));
        var (dirIngest, _) = Line(direct, n => n.AgentCpuSeconds ?? 0);

        var small = fan.Where(r => r.Config.Nodes == 4).ToList();
        var smallDirect = direct.Where(r => r.Config.Nodes == 4).ToList();
        if (small.Count == 0 || smallDirect.Count == 0) throw new InvalidOperationException($"{source}: no N = 4 runs to read the start-up from");
        // The link probe is simulated in its own right, so where the ranks probed, its time is not start-up.
        var fanStart = Median(small.Select(r => r.MeasuredSeconds - r.Nodes.Max(n => (n.RingSeconds ?? n.FetchSeconds) + (n.ProbeSeconds ?? 0))));
        var dirStart = Median(smallDirect.Select(r => r.MeasuredSeconds - r.Nodes.Max(n => n.FetchSeconds)));
        var agents = cells.Where(r => r.Config.Fanout == "agents" && r.Config.KillRank is null && r.Nodes.All(n => n.AgentCpuSeconds is not null)).ToList();
        var smallAgents = agents.Where(r => r.Config.Nodes == 4).ToList();
        return new Calibration
        {
            BurstBuffer = BurstBufferHook.FromRecords(records, source),
            AgentsCpuPerByte = agents.Count == 0 ? null : Line(agents, n => n.AgentCpuSeconds ?? 0).Slope,
            AgentsStartSeconds = smallAgents.Count == 0 ? null
                : Math.Max(0, Median(smallAgents.Select(r => r.MeasuredSeconds - r.Nodes.Max(n => (n.RingSeconds ?? n.FetchSeconds) + (n.ProbeSeconds ?? 0))))),
            FanoutStartCpu = Math.Max(0, fanStartCpu),
            FanoutCpuPerByte = fanPerByte,
            FanoutIngestCpuPerByte = fanIngest,
            FanoutStartSeconds = Math.Max(0, fanStart - 4 * Math.Max(0, fanStartCpu) / cores),
            DirectStartCpu = Math.Max(0, dirStartCpu),
            DirectCpuPerByte = dirPerByte,
            DirectIngestCpuPerByte = dirIngest,
            DirectStartSeconds = Math.Max(0, dirStart - 4 * Math.Max(0, dirStartCpu) / cores),
            LabCores = cores,
            Source = source,
        };
    }

    /// <summary>"mpi" or "none" for the product's own modes, whether run by the bench or as Slurm steps.</summary>
    public static string? Mode(BenchRecord r) => r.Config.Fanout switch
    {
        null or "none" or "slurm:none" => "none",
        "mpi" or "slurm:mpi" => "mpi",
        _ => null,
    };

    /// <summary>
    /// A calibration for a file of burst-buffer runs: the ranks' and direct fetch's figures from the file's own MPI and
    /// direct runs where it has them (at N = 4), else <paramref name="fallback"/>'s (the same Slurm lab's); the agents'
    /// from its healthy burst-buffer runs: their CPU per stored byte, and as their start the part of the slowest node's own
    /// time outside its ring and probe (the exchange's collectives, the ingest's begin and end) at the smallest N recorded;
    /// and the hook (<see cref="BurstBufferHook"/>). The request itself, the hook's process and Slurm's are in the hook.
    /// </summary>
    public static Calibration ForBurstBuffer(IReadOnlyCollection<BenchRecord> records, Calibration fallback, string source)
    {
        var hook = BurstBufferHook.FromRecords(records, source) ?? throw new InvalidOperationException($"{source}: no healthy burst-buffer runs to calibrate from");
        Calibration own;
        try { own = FromRecords(records, source); }
        catch (InvalidOperationException) { own = fallback with { Source = $"{fallback.Source} (ranks and direct fetch) and {source} (the burst buffer's runs)" }; }
        var runs = records.Where(BurstBufferHook.Healthy).ToList();
        var smallest = runs.Min(r => r.Config.Nodes);
        return own with
        {
            BurstBuffer = hook,
            AgentsCpuPerByte = runs.All(r => r.Nodes.All(n => n.AgentCpuSeconds is not null)) ? Line(runs, n => n.AgentCpuSeconds ?? 0).Slope : own.AgentsCpuPerByte,
            AgentsStartSeconds = Math.Max(0, Median(runs.Where(r => r.Config.Nodes == smallest)
                .Select(r => r.Nodes.Max(n => n.FetchSeconds) - r.Nodes.Max(n => (n.RingSeconds ?? n.FetchSeconds) + (n.ProbeSeconds ?? 0))))),
        };
    }

    /// <summary>Least squares of a node's CPU against the run's stored bytes: slope per byte and intercept.</summary>
    private static (double Slope, double Intercept) Line(List<BenchRecord> runs, Func<NodeTime, double> cpu)
    {
        double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
        foreach (var r in runs)
            foreach (var node in r.Nodes)
            {
                double x = r.Dataset!.StoredBytes, y = cpu(node);
                n++; sx += x; sy += y; sxx += x * x; sxy += x * y;
            }
        var d = n * sxx - sx * sx;
        if (n < 2 || Math.Abs(d) < 1e-9 * Math.Max(1, sxx)) return (n > 0 ? sy / sx : 0, 0);
        var slope = (n * sxy - sx * sy) / d;
        return (slope, (sy - slope * sx) / n);
    }

    internal static double Median(IEnumerable<double> values)
    {
        var v = values.Order().ToArray();
        if (v.Length == 0) return double.NaN;
        return v.Length % 2 == 1 ? v[v.Length / 2] : (v[v.Length / 2 - 1] + v[v.Length / 2]) / 2;
    }
}

/// <summary>
/// What Slurm's burst buffer adds to the agents' exchange, read from the lab's runs of <c>bench cluster --scheduler slurm
/// --fanout burst-buffer</c>: slurmctld's allocation to the job script's first line (measuredSeconds) less the slowest
/// node's own exchange (its fetchSeconds, from the agents' node lines), the median over the healthy runs (no fault
/// injected, every node ready). That is the pre-run hook's process start, its two <c>scontrol</c> calls and the
/// request's own start before the nodes' exchange (<see cref="BeforeExchangeSeconds"/>: the hook's end, in its note and
/// every node's wallSeconds, less the slowest node's time), and slurmctld starting the script after the hook returned
/// (<see cref="AfterHookSeconds"/>), each the median of its own part. Neither grows with the data; the lab's 8 and 16
/// nodes show whether either grows with N.
/// </summary>
public sealed record BurstBufferHook(double Seconds, double BeforeExchangeSeconds, double AfterHookSeconds, int Runs, string Source)
{
    public const string Fanout = "slurm:burst-buffer";

    /// <summary>A burst-buffer run with no fault injected, that ran, every node reporting its exchange.</summary>
    public static bool Healthy(BenchRecord r) =>
        r.Kind == "cluster" && r.Config.Fanout == Fanout && r.Config.Fault is null && r.JobFate is null && r.Config.SlowNodes is not { Count: > 0 }
        && r.MeasuredSeconds > 0 && r.Nodes.Count > 0 && r.Nodes.Count == r.Config.Nodes;

    public static BurstBufferHook? FromRecords(IEnumerable<BenchRecord> records, string source)
    {
        var runs = records.Where(Healthy).ToList();
        if (runs.Count == 0) return null;
        // Every node's wallSeconds is the hook's end from the allocation (slurmctld's log), where the log had it.
        var hooked = runs.Where(r => r.Nodes.All(n => double.IsFinite(n.WallSeconds) && n.WallSeconds > 0)).ToList();
        return new BurstBufferHook(
            Calibration.Median(runs.Select(r => r.MeasuredSeconds - r.Nodes.Max(n => n.FetchSeconds))),
            hooked.Count == 0 ? double.NaN : Calibration.Median(hooked.Select(r => r.Nodes.Max(n => n.WallSeconds) - r.Nodes.Max(n => n.FetchSeconds))),
            hooked.Count == 0 ? double.NaN : Calibration.Median(hooked.Select(r => r.MeasuredSeconds - r.Nodes.Max(n => n.WallSeconds))),
            runs.Count, source);
    }
}
