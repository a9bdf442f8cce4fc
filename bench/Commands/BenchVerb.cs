using System.Globalization;
using System.Runtime.InteropServices;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.Bench;

namespace Hpc.Bench.Commands;

public sealed class BenchClusterOptions : IVerbOptions
{
    public static string Verb => "cluster";

    public static string Summary => "Scale-model cluster in network namespaces: H cache hosts, N nodes, tc-shaped links; stage, prefetch everywhere at once, time it.";

    [Switch("--nodes", "Compute-node namespaces, each with a node agent.")]
    public int Nodes { get; set; } = 4;

    [Switch("--cache-host-count", "Cache-host namespaces, each with a cache host.")]
    public int Hosts { get; set; } = 1;

    [Switch("--size", "Dataset size.")]
    public string Size { get; set; } = "64MB";

    [Switch("--out", "Directory for results.jsonl.", Required = true)]
    public string Out { get; set; } = "";

    [Switch("--rate", "Link rate, both directions of every link (e.g. 100mbit, 1gbit).")]
    public string Rate { get; set; } = "100mbit";

    [Switch("--slow-nodes", "Nodes (numbered from 1, as node1…nodeN; a list such as 3 or 2,5) whose link, both ends, runs at --slow-rate " +
        "instead of --rate: a node with a bad cable or a degraded NIC. The results record them, every node's time, and S over the slow rate.")]
    public string SlowNodes { get; set; } = "";

    [Switch("--slow-rate", "The rate of the --slow-nodes' links (e.g. 6.25mbit: a quarter of 25mbit).")]
    public string SlowRate { get; set; } = "";

    [Switch("--kill-rank", "With --fanout mpi: kill this rank's node prep (numbered from 0; SIGKILL) once its agent holds part of the data; the run is timed by the other nodes, and Open MPI leaves them running (--enable-recovery). With --fanout agents: kill that node's agent. -1: none.")]
    public int KillRank { get; set; } = -1;

    [Switch("--delay", "One-way delay added on every link egress (netem).")]
    public string Delay { get; set; } = "0ms";

    [Switch("--no-compress", "Stage the data uncompressed.")]
    public bool NoCompress { get; set; }

    [Switch("--codec", "The stager's codec: lz4, zstd or zstd:LEVEL (the report gives each codec tables of its own).")]
    public string Codec { get; set; } = "lz4";

    [Switch("--workers", "Workers per node that attach the copy (map mode) after the fetch.")]
    public int Workers { get; set; }

    [Switch("--worker-mode", "How the workers attach: map (the shared copy) or stream (a private copy over the pipe).")]
    public string WorkerMode { get; set; } = "map";

    [Switch("--host-queue", "Queue at every member's own link egress: fifo; fq_codel (flow-fair, what a Linux host's NIC uses by default); " +
        "or ack-first (small packets before bulk: what fq_codel gives a node's ACKs, on kernels without it).")]
    public string HostQueue { get; set; } = "fifo";

    [Switch("--data", "csv (market history, compressible) or random.")]
    public string Data { get; set; } = "csv";

    [Switch("--warm-agents", "Let every agent fetch a tiny dataset before the clock starts (a long-running daemon rather than a fresh process).")]
    public bool WarmAgents { get; set; }

    [Switch("--fanout", "none (every agent prefetches directly) or mpi: hpcdata nodeprep --fanout mpi as one Open MPI rank " +
        "per node namespace (mpiexec.openmpi), the nodes sharing the fetching and passing the data on to each other. " +
        "mpich: the same under MPICH (mpiexec.hydra). mpi-ring: mpi with nodeprep --link-probe off (every node in the ring, however slow its link). mpi-grid<G>: mpi with nodeprep --ring-groups G (a grid of rings in groups of G). agents: the agents already running on the nodes (each with --peer-listen) do the same, started by one hpcdata nodeprep --fanout agents request from outside the nodes instead of a launcher. A list (none,mpi) runs each in turn in the same cluster, alternating when repeated.")]
    public string Fanout { get; set; } = "none";

    [Switch("--scheduler", "none: the bench starts every process in the namespaces itself. slurm: a real Slurm across the node namespaces " +
        "(slurmctld, one slurmd per node), and --fanout's modes run as steps of one allocation: none, mpi (srun hpcdata nodeprep), sbcast " +
        "(sbcast --compress=lz4 at Slurm's defaults), sbcast-f<F>, sbcast-tree<W>, sbcast-f<F>-tree<W> (with --fanout=F, 1-8, and/or TreeWidth=W for " +
        "the step), srun-bcast (srun --bcast --compress=lz4); burst-buffer: a user's own script with '#BB_LUA hpcdata NAME@VERSION', a job of its own " +
        "per run, the controller running deploy/slurm/burst_buffer.lua and every node's agent running as a service, timed from the allocation to the script's first line.")]
    public string Scheduler { get; set; } = "none";

    [Switch("--fault", "After the healthy runs of each fan-out mode (mpi, mpich, agents, …; with --scheduler slurm: burst-buffer), one more with a node " +
        "fault: kill (every process of the node's namespaces SIGKILLed), down (its link set down) or stop (its processes SIGSTOPped), struck at --fault-at of " +
        "their median; the survivors' lines, the launcher's fate and the tier's bytes are recorded, and the node is brought back.")]
    public string? Fault { get; set; }

    [Switch("--peer-timeout", "With --fanout burst-buffer: the site's --peer-timeout in burst_buffer.lua's site line (how long a node may take nothing " +
        "before the others route around it); the product's default when not given.", Meta = "DURATION")]
    public string? PeerTimeout { get; set; }

    [Switch("--fault-nodes", "The nodes the fault hits (numbered from 1; a list such as 3 or 3,4).")]
    public string FaultNodes { get; set; } = "2";

    [Switch("--fault-at", "When the fault hits, as a share of the healthy runs' median time from the allocation (0.33: mid-exchange).")]
    public double FaultAt { get; set; } = 0.33;

    [Switch("--transport", "plain (TCP) or tls (the cache hosts serve TLS, the stager and agents verify it); a list (plain,tls) runs each in turn in the same cluster. Direct fetch only.")]
    public string Transport { get; set; } = "plain";

    [Switch("--calibrate", "Also run the plain-TCP calibrations (pull from hosts; send to neighbour) in the same namespaces.")]
    public bool Calibrate { get; set; }

    [Switch("--calibrate-tool", "--calibrate with hpcdata's own TCP sender and receiver, or iperf3 (zero-copy, needs iperf3 installed).")]
    public string CalibrateTool { get; set; } = "hpcdata";

    [Switch("--matrix", "Run the reference axes (--sizes × --node-counts × --host-counts × compression on/off) instead of one run.")]
    public bool Matrix { get; set; }

    [Switch("--sizes", "Matrix: data sizes.")]
    public string Sizes { get; set; } = "16MB,64MB,256MB";

    [Switch("--node-counts", "Matrix: node counts.")]
    public string NodeCounts { get; set; } = "1,2,4,8,16,32";

    [Switch("--host-counts", "Matrix: cache-host counts.")]
    public string HostCounts { get; set; } = "1,2";

    [Switch("--compression", "Matrix: compression settings to run (on, off or both).")]
    public string Compression { get; set; } = "on,off";

    [Switch("--time-limit", "Matrix: total time bound; runs predicted to pass it are skipped and noted.")]
    public string TimeLimit { get; set; } = "20m";

    [Switch("--calibrate-size", "Matrix: bytes per node moved by each calibration (once per node/host count).")]
    public string CalibrateSize { get; set; } = "16MB";

    [Switch("--repeat", "Runs per configuration; the report shows their median and range.")]
    public int Repeat { get; set; } = 1;

    [Switch("--agent-max-rate", "The agents' --max-rate (e.g. 100mbit, 12MB); 0: unlimited. The run records each node's achieved fetch rate against it.")]
    public string AgentMaxRate { get; set; } = "0";

    [Switch("--stager-max-rate", "The stager's --max-rate; 0: unlimited. The run records its achieved upload rate against it.")]
    public string StagerMaxRate { get; set; } = "0";

    [Switch("--instance", "0-63: names and addresses of this cluster (namespaces hcdK-*, bridge hcdbrK, 198.18.4K.0/22), so clusters can run side by side.")]
    public int Instance { get; set; }
}

public sealed class BenchCleanOptions : IVerbOptions
{
    public static string Verb => "clean";

    public static string Summary => "Remove the hcd* namespaces and links of interrupted bench runs (one --instance, or all), and their dead scratch directories and agent sockets.";

    [Switch("--instance", "Only this instance's namespaces and links (default: every instance).")]
    public int? Instance { get; set; }
}

public sealed class TcpServeOptions : IVerbOptions
{
    public static string Verb => "tcp-serve";

    public static string Summary => "";

    public static bool Hidden => true;

    [Switch("--address", "", Required = true)] public string Address { get; set; } = "";
    [Switch("--port", "")] public int Port { get; set; }
}

public sealed class BenchLoadOptions : IVerbOptions
{
    public static string Verb => "load";

    public static string Summary => "";

    public static bool Hidden => true;

    [Switch("--kind", "", Required = true)] public string Kind { get; set; } = "";
    [Switch("--seconds", "")] public int Seconds { get; set; } = 600;
    [Switch("--dir", "")] public string? Dir { get; set; }
}

public sealed class TcpPullOptions : IVerbOptions
{
    public static string Verb => "tcp-pull";

    public static string Summary => "";

    public static bool Hidden => true;

    [Switch("--from", "", Required = true)] public string From { get; set; } = "";
    [Switch("--bytes", "", Required = true)] public long Bytes { get; set; }
    [Switch("--wait-go", "")] public bool WaitGo { get; set; }
}

/// <summary><c>hpcdata bench cluster|clean</c>: the scale-model cluster, its calibration and cleanup.</summary>
public static class BenchVerb
{
    public static int Clean(int? instance)
    {
        if (!Shell.IsRoot) { Console.Error.WriteLine("hpcdata bench clean: needs root"); return 2; }
        if (instance is < 0 or > Topology.MaxInstance) { Console.Error.WriteLine($"hpcdata bench clean: --instance must be 0..{Topology.MaxInstance}"); return 2; }
        var removed = Topology.Clean(instance);
        Console.WriteLine(removed.Count == 0 ? "nothing to clean" : $"removed {removed.Count}: {string.Join(", ", removed)}");
        var left = Topology.Leftovers(instance);
        if (left.Count > 0) Console.Error.WriteLine($"still there: {string.Join(", ", left)}");
        return left.Count == 0 ? 0 : 1;
    }

    public static async Task<int> ClusterAsync(BenchClusterOptions o, CancellationToken ct)
    {
        try
        {
            var rate = ParseRateMbit(o.Rate);
            var delay = ParseMs(o.Delay);
            var slow = ParseSlowNodes(o.SlowNodes, o.SlowRate, o.Nodes);
            if (slow is not null && (o.Matrix || o.Scheduler != "none"))
                throw new FormatException("--slow-nodes runs single cells without --matrix, with --scheduler none");
            if (o.Data is not ("csv" or "random")) throw new FormatException("--data must be csv or random");
            if (o.WorkerMode is not ("map" or "stream")) throw new FormatException("--worker-mode must be map or stream");
            if (o.Repeat is < 1 or > 100) throw new FormatException("--repeat must be between 1 and 100");
            if (!Hpc.CommonData.Format.SegmentCompression.TryParse(o.Codec, out _, out var codecError)) throw new FormatException($"--codec: {codecError}");
            if (o.CalibrateTool is not ("hpcdata" or "iperf3")) throw new FormatException("--calibrate-tool must be hpcdata or iperf3");
            if (o.Instance is < 0 or > Topology.MaxInstance) throw new FormatException($"--instance must be 0..{Topology.MaxInstance}");
            var fanouts = o.Fanout.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList();
            if (o.Scheduler is not ("none" or "slurm")) throw new FormatException("--scheduler must be none or slurm");
            if (o.Scheduler == "slurm") return await SlurmAsync(o, fanouts, rate, delay, ct);
            if (fanouts.Count == 0 || fanouts.Any(f => f is not ("none" or "mpi" or "mpich" or "mpi-ring" or "agents") && ClusterSession.GridGroupSize(f) is null))
                throw new FormatException("--fanout must be none, mpi, mpich, mpi-ring, mpi-grid<G>, agents or a list of them");
            if (fanouts.Any(f => f is "mpi" or "mpi-ring" || ClusterSession.GridGroupSize(f) is not null) && !Shell.Exists("mpiexec.openmpi"))
                throw new BenchRefusedException("--fanout mpi needs Open MPI's mpiexec.openmpi (apt-get install openmpi-bin)", 2);
            if (fanouts.Contains("mpich") && !Shell.Exists("mpiexec.hydra"))
                throw new BenchRefusedException("--fanout mpich needs MPICH's mpiexec.hydra (apt-get install mpich)", 2);
            var transports = o.Transport.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList();
            if (transports.Count == 0 || transports.Any(t => t is not ("plain" or "tls"))) throw new FormatException("--transport must be plain, tls or plain,tls");
            if (transports.Contains("tls") && (fanouts.Any(f => f != "none") || o.Matrix)) throw new FormatException("--transport tls runs single cells with --fanout none");
            var agentMaxRate = ByteRate.Parse(o.AgentMaxRate);
            var stagerMaxRate = ByteRate.Parse(o.StagerMaxRate);
            if ((!agentMaxRate.IsUnlimited || !stagerMaxRate.IsUnlimited) && (o.Matrix || fanouts.Any(f => f != "none")))
                throw new FormatException("--agent-max-rate and --stager-max-rate run single cells with --fanout none");
            if (o.Matrix && o.Fault is not null) throw new FormatException("--fault runs single cells, not --matrix");
            if (o.Matrix) return await MatrixAsync(o, rate, delay, ct);
            await using var session = ClusterSession.Create(o.Nodes, o.Hosts, rate, delay, ClusterSession.NewScratch(), o.HostQueue, o.Instance, slow);
            var size = ByteSize.Parse(o.Size);
            var fault = Fault(o, fanouts.All(f => f != "none") && o.KillRank < 0 && transports.SequenceEqual(["plain"]) ? null
                : "--fault runs with fan-out modes only (not none), plain transport and without --kill-rank");
            var healthy = fanouts.ToDictionary(f => f, _ => new List<double>());
            for (var run = 0; run < o.Repeat; run++)
                foreach (var fanout in fanouts)
                    foreach (var transport in transports)
                    {
                        var record = await session.RunClusterAsync(size, !o.NoCompress, o.Workers, o.Data, ct, o.WarmAgents, o.WorkerMode, fanout, transport == "tls",
                            agentMaxRate, stagerMaxRate, Hpc.CommonData.Format.SegmentCompression.Parse(o.Codec).ToString(),
                            killRank: o.KillRank >= 0 && fanout is ("mpi" or "agents") ? o.KillRank : null);
                        healthy[fanout].Add(record.MeasuredSeconds);
                        Emit(o.Out, record);
                    }
            // After the healthy runs of each mode, one more with the fault, struck at its share of their median.
            if (fault is not null)
                foreach (var fanout in fanouts)
                {
                    var times = healthy[fanout].Order().ToList();
                    Emit(o.Out, await session.RunClusterAsync(size, !o.NoCompress, o.Workers, o.Data, ct, o.WarmAgents, o.WorkerMode, fanout, false,
                        agentMaxRate, stagerMaxRate, Hpc.CommonData.Format.SegmentCompression.Parse(o.Codec).ToString(),
                        fault: fault, faultAfter: fault.At * times[times.Count / 2]));
                }
            if (o.Calibrate)
            {
                Emit(o.Out, await session.CalibratePullAsync(size, ct, o.CalibrateTool == "iperf3"));
                if (o.Nodes > 1) Emit(o.Out, await session.CalibrateNeighbourAsync(size, ct, o.CalibrateTool == "iperf3"));
            }
            return 0;
        }
        catch (BenchRefusedException e)
        {
            Console.Error.WriteLine($"hpcdata bench: {e.Message}");
            return e.ExitCode;
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine("hpcdata bench: interrupted; everything it started was removed");
            return 130;
        }
        catch (Exception e) when (e is FormatException or ArgumentException)
        {
            Console.Error.WriteLine($"hpcdata bench cluster: {e.Message}");
            return 2;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or CommonDataException or TimeoutException or InvalidDataException)
        {
            Console.Error.WriteLine($"hpcdata bench cluster: {e.Message}");
            return 1;
        }
    }

    /// <summary>--fault, --fault-nodes and --fault-at checked; null without --fault. <paramref name="refusal"/>: why these
    /// modes take no fault, or null when they do.</summary>
    private static ClusterSession.NodeFault? Fault(BenchClusterOptions o, string? refusal)
    {
        if (o.Fault is null) return null;
        if (!Topology.IsFault(o.Fault)) throw new FormatException($"--fault must be {Topology.FaultKinds}");
        if (refusal is not null) throw new FormatException(refusal);
        if (!(o.FaultAt is > 0 and < 10)) throw new FormatException("--fault-at is a share of the healthy time, above 0 and below 10");
        var hit = o.FaultNodes.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
            .Select(n => int.TryParse(n, System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var k) && k >= 1 && k <= o.Nodes ? k - 1
                : throw new FormatException($"--fault-nodes: '{n}' is not a node of 1-{o.Nodes}")).Distinct().ToList();
        if (hit.Count == 0 || hit.Count >= o.Nodes) throw new FormatException("--fault-nodes: at least one node, and not every node");
        return new ClusterSession.NodeFault(o.Fault, hit, o.FaultAt);
    }

    private static async Task<int> SlurmAsync(BenchClusterOptions o, List<string> modes, int rate, double delay, CancellationToken ct)
    {
        if (modes.Count == 0 || modes.Any(m => !Hpc.CommonData.Report.SlurmModes.IsKnown(m)))
            throw new FormatException($"--fanout with --scheduler slurm: a list of {Hpc.CommonData.Report.SlurmModes.Help}");
        if (o.Matrix || o.Transport != "plain" || o.Workers > 0) throw new FormatException("--scheduler slurm runs single cells, plain transport, without workers");
        if (SlurmLab.Unavailable() is { } why) throw new BenchRefusedException(why, 2);
        await using var session = ClusterSession.Create(o.Nodes, o.Hosts, rate, delay, ClusterSession.NewScratch(), o.HostQueue, o.Instance);
        var fault = Fault(o, modes.Contains(Hpc.CommonData.Report.SlurmModes.BurstBuffer) ? null
            : "--fault with --scheduler slurm needs --fanout burst-buffer (the MPI modes take --kill-rank)");
        TimeSpan? peerTimeout = o.PeerTimeout is null ? null : Durations.Parse(o.PeerTimeout);
        if (peerTimeout is not null && !modes.Contains(Hpc.CommonData.Report.SlurmModes.BurstBuffer)) throw new FormatException("--peer-timeout is the burst buffer site's: it needs --fanout burst-buffer");
        foreach (var r in await session.RunSlurmAsync(ByteSize.Parse(o.Size), o.Data, modes, o.Repeat, Hpc.CommonData.Format.SegmentCompression.Parse(o.Codec).ToString(), ct, fault, peerTimeout))
            if (r.Kind == "skipped") { BenchJson.Append(o.Out, r); Console.Error.WriteLine($"  N={r.Config.Nodes} {r.Note}"); }
            else Emit(o.Out, r);
        if (o.Calibrate)
        {
            Emit(o.Out, await session.CalibratePullAsync(ByteSize.Parse(o.Size), ct, o.CalibrateTool == "iperf3"));
            if (o.Nodes > 1) Emit(o.Out, await session.CalibrateNeighbourAsync(ByteSize.Parse(o.Size), ct, o.CalibrateTool == "iperf3"));
        }
        return 0;
    }

    private static async Task<int> MatrixAsync(BenchClusterOptions o, int rate, double delay, CancellationToken ct)
    {
        var sizes = o.Sizes.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(ByteSize.Parse).Order().ToList();
        var nodeCounts = o.NodeCounts.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(int.Parse).Order().ToList();
        var hostCounts = o.HostCounts.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(int.Parse).Order().ToList();
        var compression = o.Compression.Split(',', StringSplitOptions.RemoveEmptyEntries).Select(c => c.Trim().ToLowerInvariant() switch
        {
            "on" or "true" => true, "off" or "false" => false, var x => throw new FormatException($"--compression: '{x}' is not on or off"),
        }).ToList();
        var bound = Durations.Parse(o.TimeLimit);
        var calibrate = ByteSize.Parse(o.CalibrateSize);
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var failures = 0;

        // Smallest clusters first, so the bound cuts the largest (slowest) cells, and every size is seen at every N it reaches.
        foreach (var n in nodeCounts)
            foreach (var h in hostCounts)
            {
                // The uncompressed run at the largest size dominates; a cell that cannot finish in the bound is noted, not started.
                double Predict(long s, bool _) => Limits.DirectFetch(n, h, s, rate) * 1.25 + 5 + n * 0.3;
                if (clock.Elapsed.TotalSeconds + Predict(sizes[0], false) > bound.TotalSeconds)
                {
                    foreach (var s in sizes) foreach (var c in compression) Skip(o.Out, n, h, s, c, rate, delay, o.HostQueue, "time bound reached");
                    continue;
                }
                Console.Error.WriteLine($"[{clock.Elapsed:mm\\:ss}] N={n} H={h}: building the network");
                await using var session = ClusterSession.Create(n, h, rate, delay, ClusterSession.NewScratch(), o.HostQueue, o.Instance);
                if (calibrate > 0)
                {
                    Emit(o.Out, await session.CalibratePullAsync(calibrate, ct));
                    // A single node would send to itself over loopback, which no link shapes.
                    if (h == hostCounts[0] && n > 1) Emit(o.Out, await session.CalibrateNeighbourAsync(calibrate, ct));
                }
                // Repetitions go round the whole cell list, so a slow spell of the machine does not land on one cell's every run.
                var fanouts = o.Fanout.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
                var cells = from run in Enumerable.Range(0, o.Repeat) from s in sizes from c in compression from f in fanouts select (s, c, f);
                foreach (var (s, c, f) in cells)
                {
                    if (clock.Elapsed.TotalSeconds + Predict(s, c) > bound.TotalSeconds)
                    {
                        Skip(o.Out, n, h, s, c, rate, delay, o.HostQueue, "time bound reached");
                        continue;
                    }
                    try
                    {
                        Emit(o.Out, await session.RunClusterAsync(s, c, o.Workers, o.Data, ct, o.WarmAgents, o.WorkerMode, f));
                    }
                    catch (Exception e) when (e is InvalidOperationException or IOException or CommonDataException or TimeoutException or InvalidDataException)
                    {
                        failures++;
                        Console.Error.WriteLine($"  N={n} H={h} S={ByteSize.Format(s)} compress={c}: failed: {e.Message}");
                        Skip(o.Out, n, h, s, c, rate, delay, o.HostQueue, "failed: " + e.Message.Split('\n')[0]);
                    }
                }
            }
        Console.Error.WriteLine($"matrix done in {clock.Elapsed:mm\\:ss}; {failures} failed runs");
        return failures == 0 ? 0 : 1;
    }

    private static void Skip(string dir, int n, int h, long s, bool c, int rate, double delay, string queue, string why) =>
        BenchJson.Append(dir, new BenchRecord
        {
            Kind = "skipped", Note = why,
            Config = new RunConfig { Nodes = n, Hosts = h, SizeBytes = s, Compress = c, RateMbit = rate, DelayMs = delay, HostQueue = queue == "fifo" ? null : queue },
        });

    private static void Emit(string dir, BenchRecord r)
    {
        BenchJson.Append(dir, r);
        var what = r.Kind == "calibration" ? $"tcp {r.Pattern,-9}" : $"cluster {(r.Config.Compress ? r.Config.Codec ?? "lz4" : "raw")}{(r.Config.Fanout is { } f ? " " + f : "")}{(r.Config.Tls == true ? " tls" : "")}  ";
        var nodes = r.Nodes.Select(x => x.WallSeconds).Order().ToList();
        var spread = nodes.Count == 0 ? "no node's line" : string.Create(CultureInfo.InvariantCulture, $"nodes {nodes[0]:0.00}…{nodes[^1]:0.00}");
        Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  {what} N={r.Config.Nodes,-2} H={r.Config.Hosts} S={ByteSize.Format(r.Config.SizeBytes),-7} " +
            $"{r.MeasuredSeconds,7:0.00} s ({spread}), limit {r.LimitSeconds,7:0.00} s, efficiency {r.Efficiency:P1}") +
            (r.JobFate is { } fate ? $"; {fate}" : ""));
        if (r.Config.SlowNodes is { } slow)
        {
            // Each node's own time, the slow ones against their own link's limit, the others against the cell's.
            var each = string.Join(", ", r.Nodes.Select(n => string.Create(CultureInfo.InvariantCulture,
                $"{n.Node}{(slow.Contains(n.Node) ? "*" : "")} {n.WallSeconds:0.00} s{(n.Route is { } route && route != "ring" ? $" [{route}]" : "")}")));
            Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"    slow {string.Join(",", slow)} at {r.Config.SlowRateMbit:0.###} Mbit/s (limit S/B_slow {r.SlowNodeLimitSeconds:0.00} s): {each}"));
        }
        if (r.Nodes.Any(n => n.ProbeSeconds is > 0))
            Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"    link probe: {r.Nodes.Min(n => n.ProbeSeconds ?? 0):0.000}…{r.Nodes.Max(n => n.ProbeSeconds ?? 0):0.000} s, route {r.Nodes.Select(n => n.Route).FirstOrDefault(x => x is not null) ?? "?"}"));
        if (r.RateLimit is { } l)
            Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"    max rate: {(l.AgentMaxRateBytes is { } a ? $"agents {Mbit(a)} configured, {Mbit(l.AgentMedianBytesPerSecond!.Value)} end to end (nodes {Mbit(l.AgentMinBytesPerSecond!.Value)}…{Mbit(l.AgentMaxBytesPerSecond!.Value)}), {Mbit(l.AgentSteadyBytesPerSecond ?? double.NaN)} steady, node link peak {Mbit(l.NodeLinkPeakBytesPerSecond ?? double.NaN)} in 100 ms; " : "")}" +
                $"{(l.StagerMaxRateBytes is { } st ? $"stager {Mbit(st)} configured, {Mbit(l.StagerBytesPerSecond!.Value)} end to end, {Mbit(l.StagerSteadyBytesPerSecond ?? double.NaN)} steady" : "")}"));
    }

    private static string Mbit(double bytesPerSecond) => string.Create(CultureInfo.InvariantCulture, $"{bytesPerSecond * 8 / 1e6:0.0} Mbit/s");

    public static int ParseRateMbit(string text)
    {
        var t = text.Trim().ToLowerInvariant();
        double factor = t.EndsWith("gbit") ? 1000 : t.EndsWith("mbit") ? 1 : throw new FormatException($"rate '{text}': use e.g. 100mbit or 1gbit");
        var v = double.Parse(t[..^4], CultureInfo.InvariantCulture) * factor;
        if (v < 1 || v > 100_000) throw new FormatException($"rate '{text}' out of range");
        return (int)v;
    }

    /// <summary>--slow-nodes and --slow-rate: node index (from 0) to kbit/s, or null when no node is slow.</summary>
    public static Dictionary<int, int>? ParseSlowNodes(string nodes, string rate, int nodeCount)
    {
        if (string.IsNullOrWhiteSpace(nodes) && string.IsNullOrWhiteSpace(rate)) return null;
        if (string.IsNullOrWhiteSpace(nodes) || string.IsNullOrWhiteSpace(rate))
            throw new FormatException("--slow-nodes and --slow-rate go together (e.g. --slow-nodes 3 --slow-rate 6.25mbit)");
        var t = rate.Trim().ToLowerInvariant();
        double factor = t.EndsWith("gbit") ? 1e6 : t.EndsWith("mbit") ? 1e3 : t.EndsWith("kbit") ? 1 : throw new FormatException($"--slow-rate '{rate}': use e.g. 6.25mbit or 500kbit");
        if (!double.TryParse(t[..^4], NumberStyles.Float, CultureInfo.InvariantCulture, out var value) || value * factor is < 100 or > 100e6)
            throw new FormatException($"--slow-rate '{rate}' out of range (100kbit to 100gbit)");
        var kbit = (int)Math.Round(value * factor);
        var result = new Dictionary<int, int>();
        foreach (var part in nodes.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
        {
            if (!int.TryParse(part, NumberStyles.None, CultureInfo.InvariantCulture, out var n) || n < 1 || n > nodeCount)
                throw new FormatException($"--slow-nodes: '{part}' is not a node between 1 and {nodeCount} (--nodes)");
            if (!result.TryAdd(n - 1, kbit)) throw new FormatException($"--slow-nodes: node {n} given twice");
        }
        if (result.Count == 0) throw new FormatException("--slow-nodes: no node given");
        if (result.Count == nodeCount) throw new FormatException("--slow-nodes: every node is slow; lower --rate instead");
        return result;
    }

    public static double ParseMs(string text)
    {
        var t = text.Trim().ToLowerInvariant();
        if (t.EndsWith("ms")) t = t[..^2];
        var v = double.Parse(t, CultureInfo.InvariantCulture);
        if (v is < 0 or > 10_000) throw new FormatException($"delay '{text}' out of range");
        return v;
    }
}
