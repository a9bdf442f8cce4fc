using Hpc.CommonData.Fanout;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Security;
using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Local;

namespace Hpc.Bench;

/// <summary>
/// One emulated cluster (H cache-host and N node namespaces) and the runs made in it: the product's direct fetch, and
/// the plain-TCP calibrations. Every run starts its own processes and stops them before it returns, so runs in one
/// session do not share state; the namespaces and links are reused because building them is the slow part.
/// </summary>
public sealed partial class ClusterSession : IAsyncDisposable
{
    public const int CachePort = 6380;
    private const int TcpPort = 6390;
    private static readonly TimeSpan ReadyTimeout = TimeSpan.FromSeconds(120);

    private readonly Topology _topology;
    private readonly string _scratch;
    private readonly string _runId;
    private readonly List<ComponentProcess> _processes = [];

    public int Nodes => _topology.Nodes.Count;
    public int Hosts => _topology.Hosts.Count;
    public int RateMbit => _topology.RateMbit;
    public double DelayMs => _topology.DelayMs;

    private ClusterSession(Topology topology, string scratch)
    {
        _topology = topology;
        _scratch = scratch;
        _runId = Path.GetFileName(scratch);
    }

    /// <summary>Checks the preconditions, then builds the network. Throws <see cref="BenchRefusedException"/> when it must not start.</summary>
    public static ClusterSession Create(int nodes, int hosts, int rateMbit, double delayMs, string scratchRoot, string hostQueue = "fifo", int instance = 0,
        IReadOnlyDictionary<int, int>? slowNodesKbit = null)
    {
        var topology = new Topology(hosts, nodes, rateMbit, delayMs, hostQueue, instance, slowNodesKbit);
        CheckCanRun(instance);
        CheckKernelQueues(topology);
        var session = new ClusterSession(topology, scratchRoot);
        try
        {
            Directory.CreateDirectory(scratchRoot);
            topology.Create();
            return session;
        }
        catch
        {
            topology.Destroy();
            try { Directory.Delete(scratchRoot, recursive: true); } catch (IOException) { }
            throw;
        }
    }

    public static void CheckCanRun(int instance)
    {
        if (!OperatingSystem.IsLinux()) throw new BenchRefusedException("bench cluster needs Linux network namespaces", 2);
        if (!Shell.IsRoot) throw new BenchRefusedException("bench cluster needs root (it creates network namespaces, veth links and tc shapers); run it with sudo", 2);
        foreach (var tool in new[] { "ip", "tc" })
            if (!Shell.Exists(tool)) throw new BenchRefusedException($"'{tool}' not found; install iproute2 (apt-get install iproute2)", 2);
        var leftovers = Topology.Leftovers(instance);
        if (leftovers.Count > 0)
        {
            var free = Topology.FreeInstance();
            throw new BenchRefusedException($"leftovers of another bench run of instance {instance} would collide: {string.Join(", ", leftovers.Take(8))}{(leftovers.Count > 8 ? ", …" : "")}\n" +
                                            $"remove them with: hpcdata bench clean --instance {instance}" +
                                            (free >= 0 ? $"\nor, if that run is still going, run beside it with --instance {free}" : ""), 3);
        }
        var stale = Topology.StaleScratch();
        if (stale.Count > 0)
            Console.Error.WriteLine($"hpcdata bench: {stale.Count} scratch path(s) of dead bench runs hold tmpfs space ({stale[0]}…); hpcdata bench clean removes them");
    }

    private static void CheckKernelQueues(Topology topology)
    {
        var needed = new List<(string Kind, string Option)>();
        if (topology.HostQueue == "fq_codel") needed.Add((topology.HostQueue, "--host-queue ack-first"));
        if (topology.DelayMs > 0) needed.Add(("netem delay 1ms", "--delay 0ms"));
        foreach (var (kind, option) in needed)
            if (Topology.QdiscUnavailable(kind) is { } complaint)
            {
                var name = kind.Split(' ')[0];
                throw new BenchRefusedException($"this kernel cannot build the {name} queueing discipline (module sch_{name} missing; tc: {complaint}); " +
                                                $"run with {option}, or on a kernel that has it", 2);
            }
    }

    /// <summary>A scratch directory name unique to this process, under /dev/shm so datasets never touch a disk.</summary>
    public static string NewScratch() => Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"{Topology.Prefix}-{Environment.ProcessId}");

    /// <summary>Generated once per size and kind and reused by every run of the session.</summary>
    public string Dataset(long size, string kind)
    {
        var path = Path.Combine(_scratch, $"data-{size}-{kind}");
        if (File.Exists(path)) return path;
        var partial = path + ".tmp";
        if (kind == "random") SampleData.GenerateRandom(partial, size);
        else MarketHistory.Generate(partial, size);
        File.Move(partial, path);
        return path;
    }

    // ---------------- the product: stage, then every node fetches at once ----------------

    /// <param name="warmAgents">Before the clock starts, every agent fetches a tiny dataset once, so the timed fetch
    /// measures a running daemon rather than a fresh process's JIT and first connections.</param>
    /// <summary>"mpi-grid4": the fan-out as a grid of rings in groups of 4 (nodeprep --ring-groups 4); null for other modes.</summary>
    public static int? GridGroupSize(string fanout) =>
        fanout.StartsWith("mpi-grid", StringComparison.Ordinal) && int.TryParse(fanout.AsSpan("mpi-grid".Length), System.Globalization.NumberStyles.None,
            System.Globalization.CultureInfo.InvariantCulture, out var g) && g >= 2 ? g : null;

    /// <param name="fanout">"none": every agent prefetches directly. "mpi": hpcdata nodeprep --fanout mpi runs as one Open
    /// MPI rank per node namespace, each rank talking to its own node's agent; "mpich": the same under MPICH's hydra.</param>
    /// <param name="tls">The cache hosts serve TLS with a certificate from a site CA made for this session; the stager
    /// and the agents verify it.</param>
    public async Task<BenchRecord> RunClusterAsync(long size, bool compress, int workers, string data, CancellationToken ct, bool warmAgents = false, string workerMode = "map",
        string fanout = "none", bool tls = false, ByteRate agentMaxRate = default, ByteRate stagerMaxRate = default, string codec = "lz4", int? killRank = null,
        NodeFault? fault = null, double faultAfter = 0)
    {
        if (fault is not null && (killRank is not null || fanout == "none"))
            throw new ArgumentException("a node fault runs with a fan-out (mpi, mpich, mpi-ring, mpi-grid<G> or agents) and without --kill-rank");
        if (killRank is { } victim && (fanout is not ("mpi" or "agents") || victim < 0 || victim >= Nodes))
            throw new ArgumentException($"--kill-rank {victim}: a rank of 0-{Nodes - 1}, with --fanout mpi (Open MPI, which leaves the others running) or agents");
        if (fanout is not ("none" or "mpi" or "mpich" or "mpi-ring" or "agents") && GridGroupSize(fanout) is null) throw new ArgumentException($"fan-out '{fanout}': use none, mpi, mpich, mpi-ring, mpi-grid<G> or agents");
        if (tls && fanout != "none") throw new ArgumentException("TLS cells run with --fanout none");
        var config = Config(size, compress, workers, data);
        if (compress && codec != "lz4") config.Codec = codec;
        if (tls) config.Tls = true;
        var certificates = tls ? Certificates() : null;
        _infoTls = certificates is null ? null : CacheTls.Create(certificates.CaFile);
        config.WarmAgents = warmAgents;
        if (fanout != "none") config.Fanout = fanout;
        config.KillRank = killRank;
        if (fault is not null) (config.Fault, config.FaultNodes) = (fault.Kind, [.. fault.Nodes.Select(n => $"node{n + 1}")]);
        _lastFate = null;
        if (workers > 0) config.WorkerMode = workerMode;
        var file = Dataset(size, data);
        var run = $"{_runId}-c{DateTime.UtcNow:HHmmssfff}";
        const string name = "bench/data";
        var budget = (long)(size * 1.3) + (64L << 20);
        var processes = new List<ComponentProcess>();
        try
        {
            var hosts = _topology.Hosts.Select((h, i) => Start(processes,
                new CacheHostOptions
                {
                    Address = h.Address, Port = CachePort, MaxMemoryBytes = budget,
                    TlsCertificateFile = certificates?.CertificateFile, TlsKeyFile = certificates?.KeyFile,
                }, $"cachehost{i + 1}", h)).ToList();
            foreach (var h in hosts) await h.WaitReadyAsync(ReadyTimeout, ct);
            var hostList = string.Join(",", _topology.Hosts.Select(h => $"{h.Address}:{CachePort}"));

            var stager = Start(processes, new StagerOptions
                {
                    Path = file, Name = name, CacheTier = { Hosts = [hostList], TlsCaFile = certificates?.CaFile, MaxRate = stagerMaxRate }, Json = true, NoCompress = !compress, Codec = codec,
                },
                "stager", null);
            double? stagerSteady = null;
            await using (var received = stagerMaxRate.IsUnlimited ? null : new TrafficSampler(async t => (await InfoAsync(t)).Sum(h => h.Input), SampleEvery))
            {
                if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(20), ct) != 0) throw new InvalidOperationException($"staging failed:\n{stager.StandardErrorTail}");
                stagerSteady = received?.SteadyRate();
            }
            var stage = JsonSerializer.Deserialize(stager.StandardOutput.Last(), ContractJson.Default.StageResult)!;
            const string warmName = "bench/warmup";
            if (warmAgents)
            {
                var warmFile = Dataset(256 << 10, data);
                var warmStager = Start(processes, new StagerOptions { Path = warmFile, Name = warmName, CacheTier = { Hosts = [hostList], TlsCaFile = certificates?.CaFile }, Json = true },
                    "stager-warmup", null);
                if (await warmStager.WaitForExitAsync(TimeSpan.FromMinutes(2), ct) != 0) throw new InvalidOperationException($"staging the warm-up data failed:\n{warmStager.StandardErrorTail}");
            }

            // Numbered from 0 like MPI ranks, so one {rank} pattern names every node's pipe for nodeprep --fanout mpi.
            var pipePattern = Path.Combine(Path.GetTempPath(), $"CoreFxPipe_{Topology.Prefix}{Environment.ProcessId}n{{rank}}");
            var pipes = _topology.Nodes.Select((_, i) => pipePattern.Replace("{rank}", i.ToString(System.Globalization.CultureInfo.InvariantCulture))).ToList();
            // With --fanout agents each agent takes node prep requests on its node's address, with a key made for the session.
            var peerKey = fanout == "agents" ? PeerKeyFile() : null;
            var agents = _topology.Nodes.Select((n, i) => Start(processes, new NodeAgentOptions
            {
                Pipe = pipes[i], DataDirectory = Path.Combine(_scratch, run, $"node{i + 1}"),
                CacheTier = { Hosts = [hostList], TlsCaFile = certificates?.CaFile, MaxRate = agentMaxRate },
                NodeName = $"node{i + 1}", Budget = budget * 2,
                PeerListen = peerKey is null ? "" : $"{n.Address}:{NodeAgentOptions.DefaultPeerPort}", PeerKeyFile = peerKey,
            }, $"agent{i + 1}", n)).ToList();
            await Task.WhenAll(agents.Select(a => a.WaitReadyAsync(ReadyTimeout, ct)));

            var clients = await Task.WhenAll(pipes.Select(p => AgentClient.ConnectAsync(p, TimeSpan.FromSeconds(10), ct)));
            if (warmAgents) await Task.WhenAll(clients.Select(c => c.PrefetchAsync(warmName, null, pin: null, ct)));
            var before = await InfoAsync(ct);
            var linksBefore = LinkCounters();
            var (busyBefore, timed) = (CpuClock.MachineBusySeconds(), Stopwatch.StartNew());
            List<NodeTime> nodes;
            double? agentsSteady = null, linkPeak = null;
            // Each agent's own progress (raw bytes verified and written), read over a second connection: what its bucket paces.
            // The cache hosts' output counter is no use here, it counts a whole 1 MB reply when it is queued.
            var progress = agentMaxRate.IsUnlimited ? [] : await Task.WhenAll(pipes.Select(p => AgentClient.ConnectAsync(p, TimeSpan.FromSeconds(10), ct)));
            var progressSamplers = progress.Select(c => new TrafficSampler(async t =>
                (await c.StatusAsync(t)).Copies.FirstOrDefault(x => x.Version == stage.Version)?.BytesDone ?? 0, SampleEvery)).ToList();
            var link = agentMaxRate.IsUnlimited ? null : new TrafficSampler(_ => Task.FromResult(LinkCounters()[0].Rx), SampleEvery);
            try
            {
                var striking = fault is null ? null : new Strike(fault, faultAfter);
                if (fanout == "agents")
                    (nodes, config.KillSeconds) = await RunAgentsFanoutAsync(processes, name, stage, hostList, run, peerKey!, ct,
                        killRank is { } k ? (agents[k], pipes[k]) : null, striking);
                else if (fanout != "none")
                    (nodes, config.KillSeconds) = await RunMpiFanoutAsync(processes, name, stage, hostList, pipePattern, run, fanout == "mpich", ct, probe: fanout != "mpi-ring",
                        ringGroups: GridGroupSize(fanout)?.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? "auto", killRank: killRank, strike: striking);
                else
                {
                // Every connection is open before the clock starts, so the start is common to all nodes.
                var start = Stopwatch.StartNew();
                nodes = (await Task.WhenAll(clients.Select(async (c, i) =>
                {
                    var local = await c.PrefetchAsync(name, stage.Version, pin: null, ct);
                    var wall = start.Elapsed.TotalSeconds;
                    if (local.Length != stage.RawBytes || local.Hash.Length == 0) throw new InvalidDataException($"node{i + 1} reported {local.Length} bytes, hash '{local.Hash}'");
                    return new NodeTime($"node{i + 1}", wall, local.FetchSeconds, local.Length, local.Source);
                }))).ToList();
                }
                if (striking is not null) (config.FaultSeconds, config.KillSeconds) = (config.KillSeconds, null);
            }
            finally
            {
                foreach (var c in clients) await c.DisposeAsync();
                if (progressSamplers.Count > 0)
                {
                    // Raw bytes to stored (what crosses the link and the bucket charges): the ratio is even across segments.
                    var storedPerRaw = (double)stage.StoredBytes / stage.RawBytes;
                    var rates = progressSamplers.Select(p => p.SteadyRate() * storedPerRaw).Where(r => r is not null).Select(r => r!.Value).Order().ToList();
                    agentsSteady = rates.Count == 0 ? null : rates[rates.Count / 2];
                    foreach (var p in progressSamplers) await p.DisposeAsync();
                    foreach (var c in progress) await c.DisposeAsync();
                    linkPeak = link!.PeakRate();
                    await link.DisposeAsync();
                }
            }
            var machineBusy = (CpuClock.MachineBusySeconds() - busyBefore) / (timed.Elapsed.TotalSeconds * Environment.ProcessorCount);
            var after = await InfoAsync(ct);
            var linksAfter = LinkCounters();
            // By name: a killed rank's node has no entry.
            nodes = nodes.Select(n => int.Parse(n.Node.AsSpan("node".Length), System.Globalization.CultureInfo.InvariantCulture) - 1)
                .Zip(nodes, (i, n) => n with { LinkRxBytes = linksAfter[i].Rx - linksBefore[i].Rx, LinkTxBytes = linksAfter[i].Tx - linksBefore[i].Tx }).ToList();
            var cacheHosts = _topology.Hosts.Select((h, i) => new HostBytes($"{h.Address}:{CachePort}",
                after[i].Output - before[i].Output, after[i].Used)).ToList();

            List<WorkerTime>? workerTimes = workers > 0 ? await RunWorkersAsync(processes, name, pipes, workers, workerMode, ct) : null;

            var samples = processes.Where(p => !p.HasExited).Select(p => ProcStats.Read(p.Name, p.Id)).Append(ProcStats.Self("driver")).ToList();
            // Under a fault the survivors' lines are the result; a launcher that ended every rank leaves none, and the
            // run is then as long as the launcher took.
            var measured = nodes.Count > 0 ? nodes.Max(n => n.WallSeconds) : timed.Elapsed.TotalSeconds;
            var limit = fanout != "none" ? Limits.Fanout(stage.StoredBytes, RateMbit) : Limits.DirectFetch(Nodes, Hosts, stage.StoredBytes, RateMbit);
            return new BenchRecord
            {
                Kind = "cluster", Run = run, Config = config, JobFate = _lastFate,
                Dataset = new DatasetInfo(stage.Version, stage.RawBytes, stage.StoredBytes, stage.Segments, stage.Seconds),
                LimitSeconds = limit, MeasuredSeconds = measured, Efficiency = nodes.Count > 0 ? limit / measured : 0,
                SlowNodeLimitSeconds = config.SlowRateMbit is { } slow ? stage.StoredBytes / (slow * 1e6 / 8) : null,
                Nodes = nodes, CacheHosts = cacheHosts, Processes = samples, Workers = workerTimes, Machine = BenchJson.Machine(),
                MachineBusy = double.IsFinite(machineBusy) ? Math.Round(machineBusy, 3) : null,
                Programs = ComponentLocator.BuildKind(ComponentLocator.Find(NodeAgentOptions.Assembly)),
                BlockRamp = BlockSizing.RampBlocks,
                RateLimit = RateLimitOf(agentMaxRate, stagerMaxRate, stage, nodes) is { } limits ? limits with
                {
                    AgentSteadyBytesPerSecond = agentsSteady, StagerSteadyBytesPerSecond = stagerSteady, NodeLinkPeakBytesPerSecond = linkPeak,
                } : null,
            };
        }
        finally
        {
            await StopAllAsync(processes);
            try { Directory.Delete(Path.Combine(_scratch, run), recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
        }
    }

    private static RateLimitResult? RateLimitOf(ByteRate agent, ByteRate stager, StageResult stage, List<NodeTime> nodes)
    {
        if (agent.IsUnlimited && stager.IsUnlimited) return null;
        var rates = nodes.Select(n => stage.StoredBytes / n.FetchSeconds).Order().ToList();
        return new RateLimitResult(
            agent.IsUnlimited ? null : agent.BytesPerSecond, agent.IsUnlimited ? null : rates[rates.Count / 2], agent.IsUnlimited ? null : rates[0],
            agent.IsUnlimited ? null : rates[^1], stager.IsUnlimited ? null : stager.BytesPerSecond,
            stager.IsUnlimited ? null : stage.SentBytes / stage.Seconds);
    }

    /// <summary>
    /// mpiexec.openmpi in the root namespace, one rank per node namespace: Open MPI's rsh launcher is pointed at a script
    /// that runs the daemon inside the namespace named as its host, and both its out-of-band channel and the TCP
    /// transport are held to the cluster's subnet, so the exchange between ranks crosses the shaped veth links. The
    /// clock starts as mpiexec is started; a node's time is when its rank's line arrived.
    /// </summary>
    private async Task<(List<NodeTime> Nodes, double? KilledAt)> RunMpiFanoutAsync(List<ComponentProcess> processes, string name, StageResult stage, string hostList,
        string pipePattern, string run, bool mpich, CancellationToken ct, bool probe = true, string ringGroups = "auto", int? killRank = null, Strike? strike = null)
    {
        var agent = Path.Combine(_scratch, "netns-rsh");
        if (!File.Exists(agent) && !OperatingSystem.IsWindows())
        {
            // Every namespace also gets a host name of its own (a UTS namespace): otherwise all daemons carry the
            // machine's name, the same as mpiexec's, and Open MPI 4.1's daemons now and then crashed at start-up.
            File.WriteAllText(agent, "#!/bin/sh\n# Open MPI's rsh agent: $1 is the host, here a network namespace; the rest is what ssh would hand a shell.\n" +
                                     "host=$1; shift\nexec ip netns exec \"$host\" unshare --uts sh -c \"hostname $host; $*\"\n");
            File.SetUnixFileMode(agent, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute | UnixFileMode.GroupRead |
                                        UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute);
        }
        var hosts = string.Join(",", _topology.Nodes.Select(n => n.Namespace));
        var count = Nodes.ToString(System.Globalization.CultureInfo.InvariantCulture);
        string[] launcher = mpich
            ?
            [
                // Hydra starts a proxy per host through the same agent; the proxies call back to mpiexec at the bridge's
                // address (the root namespace's side of the cluster). UCX is kept to TCP on the namespace's own link:
                // its shared-memory transports would carry the exchange past the shaped links, all ranks being on one machine.
                "mpiexec.hydra", "-launcher", "rsh", "-launcher-exec", agent, "-hosts", hosts, "-n", count, "-ppn", "1",
                "-localhost", _topology.BridgeAddress, "-genv", "UCX_TLS", "tcp,self", "-genv", "UCX_NET_DEVICES", "eth0",
            ]
            :
            [
                "mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", count,
                "--host", hosts, "--map-by", "node",
                "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", _topology.Subnet,
                "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", _topology.Subnet, "--mca", "mpi_yield_when_idle", "1",
                // The host names are namespace names no resolver knows: with 8 of them mpiexec spent 5 s trying to resolve
                // them before launching anything (7: none).
                "--mca", "if_base_do_not_resolve", "1",
                // A killed rank leaves the others running (as srun does), so the ring can close around it.
                .. (killRank is null ? Array.Empty<string>() : ["--enable-recovery"]),
            ];
        var start = Stopwatch.StartNew();
        var mpi = Track(processes, ComponentProcess.Start("hpcdata",
            ["nodeprep", "--fanout", "mpi", $"{name}@{stage.Version}", "--job", run, "--pipe", pipePattern,
             "--cache-hosts", hostList, "--no-start", "--timeout", "20m", "--link-probe", probe ? "on" : "off", "--ring-groups", ringGroups],
            new Dictionary<string, string?> { ["TERM"] = "dumb" }, "mpiexec", launcher));
        var kill = killRank is { } victim ? KillOnceExchangingAsync(pipePattern.Replace("{rank}", victim.ToString(System.Globalization.CultureInfo.InvariantCulture)),
            run, victim, stage.Version, start, mpi, ct) : strike is not null ? StrikeAsync(strike, start, mpi, ct) : Task.FromResult<double?>(null);
        var (arrived, exited) = await StampLinesAsync(mpi, start, ct, strike?.Limit);
        var code = await exited;
        var total = start.Elapsed.TotalSeconds;
        var killedAt = await kill;
        if (strike is not null) return (Struck(strike, mpi, code, total, arrived, stage, mpich ? "mpiexec.hydra" : "mpiexec.openmpi"), killedAt);
        // With a rank killed, mpiexec reports the death in its exit code; the others' lines are the result.
        if ((code != 0 && killRank is null) || arrived.Count != Nodes - (killRank is null ? 0 : 1))
            throw new InvalidOperationException($"mpiexec exited {code} with {arrived.Count} of {Nodes} ranks' lines " +
                $"({string.Join(",", arrived.Keys.Select(k => k.Split(' ')[0][5..]).Order())}); other output: " +
                $"{string.Join(" | ", mpi.StandardOutput.Where(l => !l.StartsWith("node=", StringComparison.Ordinal)).TakeLast(5))}\n{mpi.StandardErrorTail}");
        Console.Error.WriteLine(string.Create(System.Globalization.CultureInfo.InvariantCulture, $"  mpiexec: every rank's line by {arrived.Values.Max():0.00} s, exited at {total:0.00} s"));
        var nodes = NodeTimes(arrived, stage, "mpi");
        // In node order, so the link counters (read per namespace, in order) line up with them.
        var order = _topology.Nodes.Select((_, i) => $"node{i + 1}").ToList();
        if (!order.Where((_, i) => i != killRank).Order().SequenceEqual(nodes.Select(n => n.Node).Order()))
            throw new InvalidDataException($"ranks reported nodes {string.Join(",", nodes.Select(n => n.Node))}");
        return ([.. nodes.OrderBy(n => order.IndexOf(n.Node))], killedAt);
    }


    /// <summary>Node prep requested of the running agents: one <c>hpcdata nodeprep --fanout agents</c> in the root namespace,
    /// the request's tree among the agents in the node namespaces; a node's time is when its line arrived.</summary>
    /// <param name="kill">An agent to kill (SIGKILL) once it holds part of the version, and its pipe; the run is timed by the others.</param>
    private async Task<(List<NodeTime> Nodes, double? KilledAt)> RunAgentsFanoutAsync(List<ComponentProcess> processes, string name, StageResult stage, string hostList, string run,
        string peerKey, CancellationToken ct, (ComponentProcess Agent, string Pipe)? kill = null, Strike? strike = null)
    {
        var members = string.Join(",", _topology.Nodes.Select(n => $"{n.Address}:{NodeAgentOptions.DefaultPeerPort}"));
        var start = Stopwatch.StartNew();
        var request = Track(processes, ComponentProcess.Start("hpcdata",
            ["nodeprep", "--fanout", "agents", $"{name}@{stage.Version}", "--job", run, "--agents", members, "--peer-key-file", peerKey,
             "--cache-hosts", hostList, "--timeout", "20m"],
            new Dictionary<string, string?> { ["TERM"] = "dumb" }, "nodeprep-agents"));
        var killing = kill is { } victim ? KillAgentOnceExchangingAsync(victim.Agent, victim.Pipe, stage.Version, start, request, ct)
            : strike is not null ? StrikeAsync(strike, start, request, ct) : Task.FromResult<double?>(null);
        var (arrived, exited) = await StampLinesAsync(request, start, ct, strike?.Limit);
        var code = await exited;
        var killedAt = await killing;
        if (strike is not null) return (Struck(strike, request, code, start.Elapsed.TotalSeconds, arrived, stage, "nodeprep --fanout agents"), killedAt);
        // With an agent killed, the request reports its node as not ready; the others' lines are the result.
        if ((code != 0 && kill is null) || arrived.Count != Nodes - (kill is null ? 0 : 1))
            throw new InvalidOperationException($"nodeprep --fanout agents exited {code} with {arrived.Count} of {Nodes} nodes' lines; " +
                $"{string.Join(" | ", request.StandardOutput.Where(l => !l.StartsWith("node=", StringComparison.Ordinal)).TakeLast(5))}\n{request.StandardErrorTail}");
        var summary = request.StandardOutput.LastOrDefault(l => l.StartsWith("nodes=", StringComparison.Ordinal)) ?? "";
        Console.Error.WriteLine(string.Create(System.Globalization.CultureInfo.InvariantCulture, $"  nodeprep --fanout agents: every node's line by {arrived.Values.Max():0.00} s; {summary}"));
        var order = _topology.Nodes.Select((_, i) => $"node{i + 1}").ToList();
        return ([.. NodeTimes(arrived, stage, "agents").OrderBy(n => order.IndexOf(n.Node))], killedAt);
    }

    /// <summary>A node fault to strike <paramref name="After"/> seconds into a fan-out, and how long its launcher may then
    /// run: long enough for the survivors at any sane pace, short enough that a launcher waiting for the dead node for
    /// ever is recorded as such.</summary>
    internal sealed record Strike(NodeFault Fault, double After)
    {
        public TimeSpan Limit => TimeSpan.FromSeconds(Math.Max(120, 10 * After));
    }

    /// <summary>What became of the last fault run's launcher or request; null for healthy runs.</summary>
    private string? _lastFate;

    private async Task<double?> StrikeAsync(Strike strike, Stopwatch start, ComponentProcess launcher, CancellationToken ct)
    {
        _lastFate = null;
        while (start.Elapsed.TotalSeconds < strike.After)
        {
            if (launcher.HasExited) return null;
            await Task.Delay(20, ct);
        }
        foreach (var n in strike.Fault.Nodes) Topology.Fault(_topology.Nodes[n], strike.Fault.Kind);
        var at = start.Elapsed.TotalSeconds;
        Console.Error.WriteLine(string.Create(System.Globalization.CultureInfo.InvariantCulture,
            $"  fault {strike.Fault.Kind} on {string.Join(",", strike.Fault.Nodes.Select(n => $"node{n + 1}"))} at {at:0.00} s"));
        return at;
    }

    /// <summary>After a fault run: the survivors' node lines as the result, the launcher's fate recorded, the struck nodes'
    /// links and processes given back (a killed node's processes are gone with it).</summary>
    private List<NodeTime> Struck(Strike strike, ComponentProcess launcher, int code, double total, Dictionary<string, double> arrived, StageResult stage, string what)
    {
        var limit = strike.Limit.TotalSeconds;
        _lastFate = launcher.HasExited && total < limit
            ? FormattableString.Invariant($"{what} exited {code} at {total:0.00} s with {arrived.Count} of {Nodes} nodes' lines")
            : FormattableString.Invariant($"{what} still running at {limit:0} s (ended by the bench) with {arrived.Count} of {Nodes} nodes' lines");
        foreach (var n in strike.Fault.Nodes) Topology.Recover(_topology.Nodes[n], strike.Fault.Kind);
        Console.Error.WriteLine($"  {_lastFate}");
        var order = _topology.Nodes.Select((_, i) => $"node{i + 1}").ToList();
        var mode = what.Contains("agents", StringComparison.Ordinal) ? "agents" : "mpi";
        // A survivor that fell back to its own fetch says so; its line still counts, with what it took.
        return [.. NodeTimes(arrived.Where(a => a.Key.Contains($"fanout={mode}", StringComparison.Ordinal)).ToDictionary(), stage, mode).OrderBy(n => order.IndexOf(n.Node))];
    }

    private static async Task<double?> KillAgentOnceExchangingAsync(ComponentProcess agent, string pipe, string version, Stopwatch start, ComponentProcess request,
        CancellationToken ct)
    {
        await using var client = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(10), ct);
        while (!request.HasExited)
        {
            if ((await client.StatusAsync(ct)).Copies.FirstOrDefault(c => c.Version == version) is { BytesDone: > 0 })
            {
                await agent.KillAsync();
                var at = start.Elapsed.TotalSeconds;
                Console.Error.WriteLine(string.Create(System.Globalization.CultureInfo.InvariantCulture, $"  {agent.Name} killed at {at:0.00} s"));
                return at;
            }
            await Task.Delay(20, ct);
        }
        return null;
    }

    private string PeerKeyFile()
    {
        var path = Path.Combine(_scratch, "peer.key");
        if (!File.Exists(path))
        {
            File.WriteAllText(path, Convert.ToHexString(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32)) + "\n");
            if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        }
        return path;
    }

    /// <summary>Reads <paramref name="p"/>'s node lines as they come, each stamped with its arrival on <paramref name="start"/>.</summary>
    /// <param name="limit">How long the process may run before it is ended (a launcher that waits for a dead or hung
    /// node); 20 minutes by default.</param>
    private static async Task<(Dictionary<string, double> Arrived, Task<int> Exited)> StampLinesAsync(ComponentProcess p, Stopwatch start, CancellationToken ct,
        TimeSpan? limit = null)
    {
        // Lines are stamped as they arrive: the process keeps them, but not when each came.
        var arrived = new Dictionary<string, double>();
        var seen = 0;
        var exited = limit is { } l ? EndAfterAsync(p, l, ct) : p.WaitForExitAsync(TimeSpan.FromMinutes(20), ct);
        while (true)
        {
            var done = exited.IsCompleted;
            var lines = p.StandardOutput.ToList();
            for (; seen < lines.Count; seen++)
                // With 32 ranks Open MPI's output forwarding once ran two ranks' lines together: split them apart.
                foreach (var line in System.Text.RegularExpressions.Regex.Split(lines[seen], @"(?=node=\S+ dataset=)"))
                    if (line.StartsWith("node=", StringComparison.Ordinal)) arrived[line.TrimEnd()] = start.Elapsed.TotalSeconds;
            if (done) break;
            await Task.WhenAny(exited, Task.Delay(10, ct));
        }
        return (arrived, exited);
    }

    private static async Task<int> EndAfterAsync(ComponentProcess p, TimeSpan limit, CancellationToken ct)
    {
        try { return await p.WaitForExitAsync(limit, ct); }
        catch (TimeoutException)
        {
            await p.KillAsync();
            return -1;
        }
    }

    /// <summary>Each node's figures from its node prep line, which must say it took part in the fan-out (<paramref name="mode"/>).</summary>
    private static List<NodeTime> NodeTimes(Dictionary<string, double> arrived, StageResult stage, string mode)
    {
        var nodes = arrived.Select(a =>
        {
            var f = a.Key.Split(' ', StringSplitOptions.RemoveEmptyEntries).Select(kv => kv.Split('=', 2)).Where(kv => kv.Length == 2).ToDictionary(kv => kv[0], kv => kv[1]);
            if (f.GetValueOrDefault("fanout") != mode) throw new InvalidDataException($"a rank did not take part in the fan-out: {a.Key}");
            if (f["version"] != stage.Version || long.Parse(f["bytes"], System.Globalization.CultureInfo.InvariantCulture) != stage.RawBytes)
                throw new InvalidDataException($"a rank reported another copy: {a.Key}");
            var own = double.Parse(f["seconds"], System.Globalization.CultureInfo.InvariantCulture);
            double? Seconds(string key) => f.TryGetValue(key, out var v) ? double.Parse(v, System.Globalization.CultureInfo.InvariantCulture) : null;
            long? Bytes(string key) => f.TryGetValue(key, out var v) ? long.Parse(v, System.Globalization.CultureInfo.InvariantCulture) : null;
            return new NodeTime(f["node"], a.Value, own, stage.RawBytes, f.GetValueOrDefault("source"),
                LaunchSeconds: Math.Max(0, a.Value - own), ExchangeSeconds: Seconds("exchange-seconds"),
                RingSeconds: Seconds("ring-seconds"), PublishSeconds: Seconds("publish-seconds"), RankCpuSeconds: Seconds("cpu-seconds"), AgentCpuSeconds: Seconds("agent-cpu-seconds"),
                Route: f.GetValueOrDefault("route"), ProbeSeconds: Seconds("probe-seconds"), JoinSeconds: Seconds("join-seconds"),
                ShareSeconds: Seconds("share-seconds"), ManifestSeconds: Seconds("manifest-seconds"), AgreeSeconds: Seconds("agree-seconds"),
                EndSeconds: Seconds("end-seconds"),
                // What the node took from the cache tier, and of that what it fetched again for the member after a lost
                // one; what it resent from the blocks it kept: where a fault's extra tier bytes went.
                FetchedBytes: Bytes("fetched-bytes"), RepairBytes: Bytes("repair-bytes"), RepairResentBytes: Bytes("repair-resent-bytes"),
                Bypassed: (int?)Bytes("bypassed"), BeginSeconds: Seconds("begin-seconds"));
        }).ToList();
        return nodes;
    }

    /// <summary>
    /// Kills rank <paramref name="rank"/>'s node prep (SIGKILL, as a crash or the OOM killer would) once its node's agent
    /// holds part of the version: mid-exchange. Returns when that was, from the launch.
    /// </summary>
    private static async Task<double?> KillOnceExchangingAsync(string pipe, string run, int rank, string version, Stopwatch start, ComponentProcess launcher, CancellationToken ct)
    {
        await using var agent = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(10), ct);
        while (!launcher.HasExited)
        {
            if ((await agent.StatusAsync(ct)).Copies.FirstOrDefault(c => c.Version == version) is { BytesDone: > 0 })
                foreach (var pid in Directory.EnumerateDirectories("/proc").Select(Path.GetFileName).Where(d => d!.All(char.IsAsciiDigit)))
                {
                    try
                    {
                        var args = File.ReadAllText($"/proc/{pid}/cmdline").Split('\0');
                        if (!args.Contains("nodeprep") || !args.Contains(run)) continue;
                        if (!File.ReadAllText($"/proc/{pid}/environ").Split('\0').Contains($"OMPI_COMM_WORLD_RANK={rank}")) continue;
                        System.Diagnostics.Process.GetProcessById(int.Parse(pid!, System.Globalization.CultureInfo.InvariantCulture)).Kill();
                        var at = start.Elapsed.TotalSeconds;
                        Console.Error.WriteLine(string.Create(System.Globalization.CultureInfo.InvariantCulture, $"  rank {rank} (pid {pid}) killed at {at:0.00} s"));
                        return at;
                    }
                    catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException or InvalidOperationException) { }
                }
            await Task.Delay(20, ct);
        }
        return null;
    }

    /// <summary>Bytes received and sent so far by every node namespace's own interface (its end of the shaped veth).</summary>
    private List<(long Rx, long Tx)> LinkCounters() => _topology.Nodes.Select(n =>
    {
        using var doc = JsonDocument.Parse(Shell.Check("ip", "-n", n.Namespace, "-s", "-j", "link", "show", "dev", "eth0"));
        var stats = doc.RootElement[0].GetProperty("stats64");
        return (stats.GetProperty("rx").GetProperty("bytes").GetInt64(), stats.GetProperty("tx").GetProperty("bytes").GetInt64());
    }).ToList();

    private async Task<List<WorkerTime>> RunWorkersAsync(List<ComponentProcess> processes, string name, List<string> pipes, int perNode, string mode, CancellationToken ct)
    {
        var workers = new List<(string Node, ComponentProcess P)>();
        for (var n = 0; n < Nodes; n++)
            for (var w = 0; w < perNode; w++)
                workers.Add(($"node{n + 1}", Start(processes, "hpcdata", ["worker", name, "--mode", mode, "--wait-go"],
                    $"worker{n + 1}.{w + 1}", _topology.Nodes[n], new Dictionary<string, string?> { [AgentClient.PipeVariable] = pipes[n] })));
        await Task.WhenAll(workers.Select(w => w.P.WaitReadyAsync(ReadyTimeout, ct)));
        await Task.WhenAll(workers.Select(w => w.P.SendLineAsync("go")));
        var result = new List<WorkerTime>();
        foreach (var (node, p) in workers)
        {
            if (await p.WaitForExitAsync(TimeSpan.FromMinutes(5), ct) != 0) throw new InvalidOperationException($"{p.Name} failed:\n{p.StandardErrorTail}");
            var r = WorkerProbe.ReadResult(p.StandardOutput.Last())!;
            result.Add(new WorkerTime(node, r.Mode, r.AttachMs, r.WarmAttachMs, r.Verified));
        }
        return result;
    }

    private CacheTls? _infoTls;
    private SiteCertificates? _certificates;

    /// <summary>One site CA and host certificate per session, valid for every cache-host namespace's address.</summary>
    private SiteCertificates Certificates() =>
        _certificates ??= SiteCertificates.Create(Path.Combine(_scratch, "tls"), _topology.Hosts.Select(h => h.Address).ToList(), TimeSpan.FromDays(1));

    private async Task<List<(long Output, long Used, long Input)>> InfoAsync(CancellationToken ct) =>
        (await Task.WhenAll(_topology.Hosts.Select(async h =>
        {
            var info = await RespInfo.ReadAsync(h.Address, CachePort, ct, _infoTls);
            return (RespInfo.Long(info, "total_net_output_bytes"), RespInfo.Long(info, "used_memory"), RespInfo.Long(info, "total_net_input_bytes"));
        }))).ToList();

    /// <summary>How often a rate-limited run reads the hosts' byte counters.</summary>
    private static readonly TimeSpan SampleEvery = TimeSpan.FromMilliseconds(100);

    // ---------------- calibration: plain TCP over the same links ----------------

    /// <summary>(a) every node pulls bytes/H from each cache-host namespace at once: the direct-fetch pattern.</summary>
    public async Task<BenchRecord> CalibratePullAsync(long bytes, CancellationToken ct, bool iperf3 = false)
    {
        var each = bytes / Hosts;
        var servers = _topology.Hosts.Select(h => (Member: h, Source: $"{h.Address}:{TcpPort}")).ToList();
        var record = iperf3
            ? await CalibrateWithIperf3Async("pull", bytes, _topology.Nodes.SelectMany((n, i) =>
                _topology.Hosts.Select(h => new Iperf3.Transfer(h, n, TcpPort + 1 + i, each))).ToList(), ct)
            : await CalibrateAsync("pull", bytes, servers.Select(s => s.Member).ToList(),
            _ => servers.Select(s => s.Source).ToList(), each, ct);
        record.LimitSeconds = Limits.DirectFetch(Nodes, Hosts, each * Hosts, RateMbit);
        record.Efficiency = record.LimitSeconds / record.MeasuredSeconds;
        return record;
    }

    /// <summary>(b) every node sends bytes to its neighbour at once: the pattern a fan-out between nodes needs.</summary>
    public async Task<BenchRecord> CalibrateNeighbourAsync(long bytes, CancellationToken ct, bool iperf3 = false)
    {
        var record = iperf3
            ? await CalibrateWithIperf3Async("neighbour", bytes, _topology.Nodes.Select((n, i) =>
                new Iperf3.Transfer(_topology.Nodes[(i + Nodes - 1) % Nodes], n, TcpPort + 1 + i, bytes)).ToList(), ct)
            : await CalibrateAsync("neighbour", bytes, _topology.Nodes.ToList(),
            n => [$"{_topology.Nodes[(n + Nodes - 1) % Nodes].Address}:{TcpPort}"], bytes, ct);
        record.LimitSeconds = Limits.Neighbour(bytes, RateMbit);
        record.Efficiency = record.LimitSeconds / record.MeasuredSeconds;
        return record;
    }

    /// <summary>The same patterns measured by iperf3 (pattern "pull-iperf3" / "neighbour-iperf3").</summary>
    private async Task<BenchRecord> CalibrateWithIperf3Async(string pattern, long bytes, List<Iperf3.Transfer> transfers, CancellationToken ct)
    {
        var seconds = await Iperf3.RunAsync(_topology.Nodes, transfers, ct);
        var nodes = seconds.Select((t, i) => new NodeTime($"node{i + 1}", t, t, transfers.Where(x => x.To == _topology.Nodes[i]).Sum(x => x.Bytes))).ToList();
        return new BenchRecord
        {
            Kind = "calibration", Pattern = pattern + "-iperf3", Run = $"{_runId}-{pattern}-iperf3{DateTime.UtcNow:HHmmssfff}", Config = Config(bytes, false, 0, "tcp"),
            MeasuredSeconds = seconds.Max(), Nodes = nodes, Machine = BenchJson.Machine(),
        };
    }

    private async Task<BenchRecord> CalibrateAsync(string pattern, long bytes, List<Topology.Member> serveIn, Func<int, List<string>> sourcesOf, long bytesEach, CancellationToken ct)
    {
        var processes = new List<ComponentProcess>();
        try
        {
            var servers = serveIn.Select((m, i) => Start(processes, "hpcdata", ["bench", "tcp-serve", "--address", m.Address, "--port", TcpPort.ToString()], $"tcp-serve{i + 1}", m)).ToList();
            await Task.WhenAll(servers.Select(s => s.WaitReadyAsync(ReadyTimeout, ct)));
            var pullers = _topology.Nodes.Select((n, i) => Start(processes, "hpcdata",
                ["bench", "tcp-pull", "--from", string.Join(",", sourcesOf(i)), "--bytes", bytesEach.ToString(), "--wait-go"], $"tcp-pull{i + 1}", n)).ToList();
            await Task.WhenAll(pullers.Select(p => p.WaitReadyAsync(ReadyTimeout, ct)));
            var start = Stopwatch.StartNew();
            await Task.WhenAll(pullers.Select(p => p.SendLineAsync("go")));
            var nodes = (await Task.WhenAll(pullers.Select(async (p, i) =>
            {
                if (await p.WaitForExitAsync(TimeSpan.FromMinutes(20), ct) != 0) throw new InvalidOperationException($"{p.Name} failed:\n{p.StandardErrorTail}");
                var wall = start.Elapsed.TotalSeconds;
                var r = JsonSerializer.Deserialize<TcpTools.PullResult>(p.StandardOutput.Last(), BenchJson.Options)!;
                return new NodeTime($"node{i + 1}", wall, r.Seconds, r.Bytes);
            }))).ToList();
            // A process's exit is noticed late on a busy machine; its own clock is the better end time.
            var measured = nodes.Max(n => n.FetchSeconds);
            return new BenchRecord
            {
                Kind = "calibration", Pattern = pattern, Run = $"{_runId}-{pattern}{DateTime.UtcNow:HHmmssfff}", Config = Config(bytes, false, 0, "tcp"),
                MeasuredSeconds = measured, Nodes = nodes, Machine = BenchJson.Machine(),
                Processes = servers.Select(s => ProcStats.Read(s.Name, s.Id)).ToList(),
            };
        }
        finally
        {
            await StopAllAsync(processes);
        }
    }

    // ---------------- plumbing ----------------

    private RunConfig Config(long size, bool compress, int workers, string data) => new()
    {
        Nodes = Nodes, Hosts = Hosts, SizeBytes = size, RateMbit = RateMbit, DelayMs = DelayMs, Compress = compress, Workers = workers, Data = data,
        HostQueue = _topology.HostQueue == "fifo" ? null : _topology.HostQueue,
        SlowNodes = _topology.SlowNodesKbit.Count == 0 ? null : [.. _topology.SlowNodesKbit.Keys.Order().Select(n => $"node{n + 1}")],
        SlowRateMbit = _topology.SlowNodesKbit.Count == 0 ? null : _topology.SlowNodesKbit.Values.Min() / 1000.0,
    };

    private ComponentProcess Start(List<ComponentProcess> list, string assembly, IEnumerable<string> args, string name, Topology.Member? inside,
        Dictionary<string, string?>? env = null) =>
        Track(list, ComponentProcess.Start(assembly, args, env, name, inside is null ? null : Topology.Launcher(inside)));

    private ComponentProcess Start<T>(List<ComponentProcess> list, T options, string name, Topology.Member? inside) where T : class, IProgramOptions, new() =>
        Track(list, ComponentProcess.Start(options, name: name, launcher: inside is null ? null : Topology.Launcher(inside)));

    private ComponentProcess Track(List<ComponentProcess> list, ComponentProcess p)
    {
        lock (list) list.Add(p);
        lock (_processes) _processes.Add(p);
        return p;
    }

    private async Task StopAllAsync(List<ComponentProcess> list)
    {
        await Task.WhenAll(list.Select(p => p.DisposeAsync().AsTask()));
        lock (_processes) _processes.RemoveAll(list.Contains);
        list.Clear();
    }

    public async ValueTask DisposeAsync()
    {
        List<ComponentProcess> left;
        lock (_processes) left = [.. _processes];
        try
        {
            await StopAllAsync(left);
            await DisposeSlurmAsync();
        }
        finally
        {
            _topology.Destroy();
            try { Directory.Delete(_scratch, recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
            foreach (var sock in Directory.GetFiles(Path.GetTempPath(), $"CoreFxPipe_{Topology.Prefix}{Environment.ProcessId}n*"))
                try { File.Delete(sock); } catch (IOException) { }
        }
    }

}

/// <summary>The run must not start (no root, missing tools, leftovers); the message says what to do.</summary>
public sealed class BenchRefusedException(string message, int exitCode) : Exception(message)
{
    public int ExitCode { get; } = exitCode;
}
