using Hpc.CommonData.Fanout;

namespace Hpc.Bench.Simulation;

/// <summary>How a job's nodes get their dataset.</summary>
public enum Delivery { Direct, Fanout }

/// <summary>One job: a run of consecutive nodes (ranks in node order, as a launcher places them) that need one dataset.</summary>
/// <param name="FailAfter">Fan-out only: one node dies this long after the exchange began (null: none does).</param>
/// <param name="FailRank">Which rank of the job dies.</param>
/// <param name="StallTimeout">How long the surviving ranks wait for a ring that stopped moving before each fetches the
/// rest directly (nodeprep --stall-timeout, 2 minutes by default).</param>
/// <param name="Probe">Fan-out only: the ranks probe their links before the exchange and route slow nodes out of the
/// ring as leaves (nodeprep --link-probe on, the default); false: every rank in the ring (--link-probe off, and every
/// run made before the probe existed).</param>
/// <param name="ShortestTelling">The probe's shortest duration that may make a leaf; null: node prep's own
/// (<see cref="LeafRule.ShortestTelling"/>). Only for asking what the rule would do without its floor.</param>
/// <param name="PeerTimeout">With a death: the ring closes around the dead member after this long (nodeprep
/// --peer-timeout over the TCP ring); null: the survivors wait the stall timeout and fetch directly (the MPI link,
/// and every run made before the ring could close).</param>
/// <param name="RingGroups">nodeprep --ring-groups: auto (node prep's default: a grid of rings from
/// <see cref="RingGrid.AutoFromRanks"/> ranks on), off (one ring) or a group size.</param>
/// <param name="Agents">Fan-out: requested of the running agents (<c>nodeprep --fanout agents</c>) rather than launched as
/// ranks: no process starts, and the start is the request's tree (<see cref="AgentTreeModel"/>).</param>
/// <param name="OneDownAtRequest">Agents: one more member of the request, not among <paramref name="Nodes"/>, is down or
/// wedged when the request comes (<see cref="AgentTreeModel.Seconds"/>).</param>
/// <param name="RampBlocks">Fan-out: the small first blocks each share begins with (<see cref="BlockSizing.RampBlocks"/>;
/// 0 replays the builds before them, whose shares began with a whole block).</param>
public sealed record JobSpec(Delivery Delivery, int FirstNode, int Nodes, long StoredBytes, double? FailAfter = null, int FailRank = 0,
    double StallTimeout = 120, bool Probe = false, double? ShortestTelling = null, double? PeerTimeout = null, string RingGroups = "auto", bool Agents = false,
    bool OneDownAtRequest = false, int RampBlocks = BlockSizing.RampBlocks);

/// <summary>
/// The start of a fan-out requested of the running agents (sdk/Fanout AgentTree): the requester's own start, then three
/// passes over a tree of degree <see cref="Degree"/> (the request down, who joined up, the start down). Each level of a
/// pass costs a connection and the key's challenge where the request goes down (3.5 round trips in all over the
/// passes), the parent's sends to its children on its one link (the request carries every member's address), and the
/// agents' own handling (<see cref="StepSeconds"/>, each pass).
/// </summary>
public sealed record AgentTreeModel
{
    public int Degree { get; init; } = 8;
    /// <summary>The requester's own part: its start, the first connection, the root's answer. Measured with the native
    /// programs (the default build) on the lab machine: 16 running agents on loopback, a tree of height 1, median 6 ms.</summary>
    public double RequesterSeconds { get; init; } = 0.005;
    /// <summary>An agent's handling of one pass at one level. Measured as above: height 4 (degree 2) took a median 8 ms
    /// against 6 ms at height 1, 0.7 ms per level for its three passes.</summary>
    public double StepSeconds { get; init; } = 0.00025;
    /// <summary>Bytes of one member's address in the request.</summary>
    public double MemberBytes { get; init; } = 24;

    public static int Height(int nodes, int degree)
    {
        var height = 0;
        for (long first = 0; first * degree + 1 < nodes; first = first * degree + 1) height++;
        return height;
    }

    /// <summary>How long a parent waits for a child to take its connection before it passes over it (PrepRequest's
    /// ReachTimeout, 0.5 s by default).</summary>
    public double ReachSeconds { get; init; } = 0.5;
    /// <summary>Each node's own work around its ring, which every node does at once: beginning the ingest (the copy's
    /// files, its first 32 MB reserved) and the local part of the collectives before the ring, 0.037–0.080 s (median
    /// 0.045), and completing, publishing and pinning the copy after it, 0.005–0.010 s. Measured with the native programs
    /// on the lab machine (2 nodes, 256 MiB, docs/benchmarks.md "Reserved beside the writes"), its 2 cores shared by both
    /// agents and the cache host, so likely more than a node of its own takes. The lab's replay has it in its measured start.</summary>
    public double NodeSeconds { get; init; } = 0.052;

    /// <param name="oneDown">One member, a child of the root (the largest subtree), is down or wedged when the request
    /// comes: the root waits <see cref="ReachSeconds"/> for it, then forwards to its children, a level later.</param>
    public double Seconds(int nodes, double hopLatency, double linkBytesPerSecond, bool oneDown = false)
    {
        var perLevel = 7 * hopLatency + Degree * (nodes * MemberBytes + 4.0 * nodes) / linkBytesPerSecond + 3 * StepSeconds;
        return RequesterSeconds + Height(nodes, Degree) * perLevel + (oneDown ? ReachSeconds + perLevel : 0) + NodeSeconds;
    }
}

/// <summary>What a job took. Seconds: from the common start until its last surviving node held the data.</summary>
/// <param name="Leaves">Ranks the probe routed out of the ring (empty without a probe or with no slow node).</param>
/// <param name="ProbeSeconds">From the probe's start until the exchange began (the probe, the all-gather of its rates,
/// the connections to the leaves); 0 without a probe.</param>
/// <param name="ExchangeStart">Fan-out: when the exchange began (after the start-up, the launch and the probe), from the common start.</param>
public sealed record JobResult(Delivery Delivery, int Nodes, double Seconds, double[] NodeSeconds, double TierBytes, double? ExchangeSeconds, int FellBack,
    IReadOnlyList<int>? Leaves = null, double ProbeSeconds = 0, double ExchangeStart = double.NaN);

/// <summary>A run of one or more jobs on one <see cref="ClusterSpec"/>.</summary>
public sealed record SimulationResult(IReadOnlyList<JobResult> Jobs, int Events, double WallMilliseconds)
{
    public double Seconds => Jobs.Max(j => j.Seconds);
}

/// <summary>
/// The product's delivery protocols as flows on a <see cref="FlowNetwork"/>, in the shape the code gives them:
/// <list type="bullet">
/// <item>Direct fetch (the node agent's prefetch): after its start-up a node fetches every stored segment from the H
/// cache hosts at once, its segments spread over the hosts by rendezvous placement. Replicas are read only when the
/// first copy fails, so with every host up the bytes are those of the first copies.</item>
/// <item>Fan-out (<c>nodeprep --fanout mpi</c>, sdk/Fanout): every rank starts (the launch, MPI's start, the agent);
/// the ranks wait for each other (manifest broadcast, agreeing on what is missing); rank r fetches share r (S/N) from
/// the tier and the pipelined ring all-gather sends every block on to r+1 until it has crossed N−1 links. So each
/// node's link receives S (its share plus the ring) and sends (N−1)/N·S, and the cache tier sends S once.</item>
/// <item>With the link probe (<see cref="JobSpec.Probe"/>), before the exchange every rank sends <see cref="LeafRule.FirstRoundBytes"/> to its right
/// neighbour (all links at once) and times what arrives from its left, in rounds four times larger until the median
/// link took long enough to judge (at most 64 MB, a second in all); the last round's rates are all-gathered and
/// <see cref="LeafRule"/> decides, as node prep does, which nodes become leaves. The M others form the
/// ring over shares of S/M, and each member also sends its own share to every leaf; a member is done when its node has
/// the data, a leaf when every member's share has crossed its link.</item>
/// <item>A node that dies stops the ring. With <see cref="JobSpec.PeerTimeout"/> the ring closes around it after that
/// long (<see cref="FanoutRun"/>'s CloseRing); without, the others notice when nothing has moved for the stall timeout
/// and each fetches what it lacks directly (the agent kept every block it verified).</item>
/// </list>
/// The ring runs as one flow per edge (what rank r sends to r+1), sharing links max-min with the share fetches, other
/// jobs and the CPU. Its pipelining enters where it changes the time: an edge starts after one block is fetched, and a
/// node holds everything only when the last block that reached it has crossed every link between its origin and this
/// node — after its in-edge ends, and one block's time per hop after the edges upstream of it end
/// (<see cref="RingFinish"/>). On a uniform ring that is the cost model's S/(η·B) + (N−1)·b/B; behind a slow link it is
/// that link's time plus the hops after it.
/// </summary>
public sealed partial class Simulator
{
    private readonly ClusterSpec _spec;
    private readonly Calibration _cal;
    private readonly FlowNetwork _net = new();
    private readonly int[] _up, _down, _cpu, _rack;
    private readonly int[] _rackUp = [], _rackDown = [];
    private readonly int _tierOut, _tierRacks = -1, _sharedCpu = -1;
    private readonly double _nodeRate, _slowRate, _tierRate;

    public Simulator(ClusterSpec spec, Calibration cal)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(spec.Nodes, 1);
        ArgumentOutOfRangeException.ThrowIfLessThan(spec.CacheHosts, 1);
        _spec = spec;
        _cal = cal;
        _nodeRate = spec.LinkBitsPerSecond / 8 * cal.Efficiency;
        _slowRate = _nodeRate * spec.SlowFactor;
        var hostRate = (spec.HostLinkBitsPerSecond ?? spec.LinkBitsPerSecond) / 8 * cal.Efficiency;
        var n = spec.Nodes;
        _up = new int[n];
        _down = new int[n];
        _cpu = new int[n];
        _rack = new int[n];
        // Hosts are identical and placement spreads every node's segments evenly over them, so with every host up each
        // carries 1/H of every node's fetch: one link of H hosts' capacity gives the same max-min rates as H links,
        // without N·H flows at 10,000 nodes.
        _tierOut = _net.AddLink(spec.CacheHosts * hostRate);
        _tierRate = spec.CacheHosts * hostRate;
        if (spec.RackSize > 0)
        {
            var tierRacks = (spec.CacheHosts + spec.RackSize - 1) / spec.RackSize;
            _tierRacks = _net.AddLink(tierRacks * spec.RackSize * hostRate / spec.TierOversubscription);
            _tierRate = Math.Min(_tierRate, tierRacks * spec.RackSize * hostRate / spec.TierOversubscription);
            var racks = (n + spec.RackSize - 1) / spec.RackSize;
            _rackUp = new int[racks];
            _rackDown = new int[racks];
            for (var r = 0; r < racks; r++)
            {
                var members = Math.Min(spec.RackSize, n - r * spec.RackSize);
                _rackUp[r] = _net.AddLink(members * _nodeRate / spec.Oversubscription);
                _rackDown[r] = _net.AddLink(members * _nodeRate / spec.Oversubscription);
            }
        }
        if (spec.Cpu == CpuModel.Shared) _sharedCpu = _net.AddLink(spec.Cores);
        for (var i = 0; i < n; i++)
        {
            var rate = spec.SlowNodes.Contains(i) ? _slowRate : _nodeRate;
            _up[i] = _net.AddLink(rate);
            _down[i] = _net.AddLink(rate);
            _cpu[i] = spec.Cpu switch { CpuModel.Shared => _sharedCpu, CpuModel.PerNode => _net.AddLink(spec.Cores), _ => -1 };
            _rack[i] = spec.RackSize > 0 ? i / spec.RackSize : 0;
        }
    }

    public FlowNetwork Network => _net;

    public static SimulationResult Run(ClusterSpec spec, Calibration cal, IReadOnlyList<JobSpec> jobs)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var sim = new Simulator(spec, cal);
        var runs = jobs.Select(j =>
        {
            // A job of no nodes has no time of its own to report.
            if (j.Nodes < 1) throw new ArgumentException($"job at node {j.FirstNode} has {j.Nodes} nodes; a job has one at least");
            if (j.FirstNode < 0 || j.FirstNode + j.Nodes > spec.Nodes) throw new ArgumentException($"job on nodes {j.FirstNode}..{j.FirstNode + j.Nodes - 1} is outside the cluster's {spec.Nodes}");
            return j.Delivery == Delivery.Direct ? (IJobRun)new DirectRun(sim, j) : new FanoutRun(sim, j);
        }).ToList();
        foreach (var r in runs) r.Start();
        sim._net.Run();
        return new SimulationResult(runs.Select(r => r.Result()).ToList(), sim._net.Events, clock.Elapsed.TotalMilliseconds);
    }

    /// <summary>One job on its own cluster of its size.</summary>
    public static SimulationResult Run(ClusterSpec spec, Calibration cal, Delivery delivery, long storedBytes, double? failAfter = null, double stallTimeout = 120,
        bool probe = false, double? shortestTelling = null, double? peerTimeout = null, string ringGroups = "auto", int? failRank = null, bool agents = false,
        bool oneDownAtRequest = false, int rampBlocks = BlockSizing.RampBlocks) =>
        Run(spec, cal, [new JobSpec(delivery, 0, spec.Nodes, storedBytes, failAfter, failRank ?? spec.Nodes / 2, stallTimeout, probe, shortestTelling, peerTimeout, ringGroups, agents,
            oneDownAtRequest, rampBlocks)]);

    private interface IJobRun
    {
        void Start();
        JobResult Result();
    }

    /// <summary>CPU weight of a stored byte that reaches a node, and the CPU link it lands on.</summary>
    private (int Link, double Weight) Ingest(int node, Delivery d) => _spec.Cpu switch
    {
        CpuModel.Shared => (_cpu[node], d == Delivery.Fanout ? _cal.FanoutCpuPerByte : _cal.DirectCpuPerByte),
        // A fan-out's ring does not wait for the agent: blocks queue for it (RingAllGather never holds a forwarded block
        // back), so on a node of its own the ingest runs beside the transfer (FanoutRun.Ingested), not in its way. A
        // direct fetch decodes each batch on the connection's task before asking for the next: the CPU is in its path.
        CpuModel.PerNode => d == Delivery.Fanout ? (-1, 0) : (_cpu[node], _cal.DirectIngestCpuPerByte),
        _ => (-1, 0),
    };

    private Flow FromTier(int node, double bytes, Delivery d, Action<Flow> done)
    {
        var links = new List<int>(6) { _tierOut };
        if (_tierRacks >= 0)
        {
            links.Add(_tierRacks);
            links.Add(_rackDown[_rack[node]]);
        }
        links.Add(_down[node]);
        return Start(bytes, links, node, d, done);
    }

    private Flow Between(int from, int to, double bytes, Action<Flow> done)
    {
        var links = new List<int>(6) { _up[from] };
        if (_tierRacks >= 0 && _rack[from] != _rack[to])
        {
            links.Add(_rackUp[_rack[from]]);
            links.Add(_rackDown[_rack[to]]);
        }
        links.Add(_down[to]);
        return Start(bytes, links, to, Delivery.Fanout, done);
    }

    /// <summary>
    /// Every member's own share to one leaf, as one flow: each member sends S/M of the S that crosses the leaf's link,
    /// so one byte of it uses 1/M of every member's uplink (and of each rack link on the way). The leaf's link is the
    /// narrow one by construction, so the members' flows to it move at the same pace and end together; one flow per
    /// leaf instead of M keeps 100 leaves among 10,000 nodes at a hundred flows.
    /// </summary>
    private Flow ToLeaf(IReadOnlyList<int> members, int leaf, double bytes, Action<Flow> done)
    {
        var weights = new Dictionary<int, double>();
        void Add(int link, double w) => weights[link] = weights.GetValueOrDefault(link) + w;
        var share = 1.0 / members.Count;
        foreach (var m in members)
        {
            Add(_up[m], share);
            if (_tierRacks >= 0 && _rack[m] != _rack[leaf])
            {
                Add(_rackUp[_rack[m]], share);
                Add(_rackDown[_rack[leaf]], share);
            }
        }
        Add(_down[leaf], 1);
        var (cpu, weight) = Ingest(leaf, Delivery.Fanout);
        if (cpu >= 0 && weight > 0) Add(cpu, weight);
        return _net.Start(bytes, [.. weights.Keys], [.. weights.Values], done, leaf);
    }

    private Flow Start(double bytes, List<int> links, int node, Delivery d, Action<Flow> done)
    {
        var (cpu, weight) = Ingest(node, d);
        if (cpu < 0 || weight <= 0) return _net.Start(bytes, [.. links], null, done, node);
        var weights = new double[links.Count + 1];
        Array.Fill(weights, 1.0);
        weights[^1] = weight;
        links.Add(cpu);
        return _net.Start(bytes, [.. links], weights, done, node);
    }

    /// <summary>A node's start-up: its CPU work on its cores (shared ones in the lab), then the wall time outside it.</summary>
    private void StartUp(int node, double cpuSeconds, double wallSeconds, Action then)
    {
        if (_spec.Cpu == CpuModel.None || cpuSeconds <= 0) _net.After(wallSeconds + cpuSeconds, then);
        else _net.Start(cpuSeconds, [_cpu[node]], null, _ => _net.After(wallSeconds, then), node);
    }

    private double LinkRate(int node) => _spec.SlowNodes.Contains(node) ? _slowRate : _nodeRate;

    private double Launch(int ranks) => ranks <= 4 ? 0 : _spec.LaunchPerDoubling * Math.Log2(ranks / 4.0);

    private sealed class DirectRun(Simulator sim, JobSpec job) : IJobRun
    {
        private readonly double[] _done = new double[job.Nodes];
        private double _tierBytes;

        public void Start()
        {
            for (var r = 0; r < job.Nodes; r++)
            {
                var rank = r;
                var node = job.FirstNode + r;
                sim.StartUp(node, sim._cal.DirectStartCpu, sim._cal.DirectStartSeconds, () =>
                    sim.FromTier(node, job.StoredBytes, Delivery.Direct, f =>
                    {
                        _done[rank] = sim._net.Now;
                        _tierBytes += f.Size;
                    }));
            }
        }

        public JobResult Result() => new(Delivery.Direct, job.Nodes, _done.Max(), _done, _tierBytes, null, 0);
    }

    private sealed partial class FanoutRun(Simulator sim, JobSpec job) : IJobRun
    {
        private readonly int _n = job.Nodes;
        private readonly double _s = job.StoredBytes;
        private readonly double[] _done = Enumerable.Repeat(double.NaN, job.Nodes).ToArray();
        // By ring position; position k is rank _members[k].
        private int[] _members = Enumerable.Range(0, job.Nodes).ToArray();
        private int[] _leaves = [];
        private Flow?[] _fetch = [];
        private Flow?[] _edge = [];
        private Flow?[] _toLeaf = [];
        private double[] _fetchEnd = [];
        private double[] _edgeEnd = [];
        private double[] _leafEnd = [];
        // The probe: what is still on the link into each rank, and the ring edges waiting behind it.
        private readonly Flow?[] _probeRest = new Flow?[job.Nodes];
        private readonly List<Action>?[] _afterProbe = new List<Action>?[job.Nodes];
        private readonly bool[] _probed = new bool[job.Nodes];
        private int _joined, _pending, _fellBack, _unmeasured;
        private double _exchangeStart = double.NaN, _exchangeEnd = double.NaN, _tierBytes, _probeStart = double.NaN;
        private bool _stopped;
        private int _dead = -1;

        private int M => _members.Length;

        /// <summary>The largest block (<see cref="BlockSizing.For"/>) of a share: S over the ring's members.</summary>
        private double Block => _grid is not null ? _gridBlock : BlockSizing.For(_s / M);

        private int Node(int rank) => job.FirstNode + rank;

        /// <summary>
        /// When a member may first send: once the first block of its share is in. With the ramp that block is the
        /// smallest (<see cref="BlockSizing.RampBlocks"/>: an eighth of a block), and it comes from the tier at this
        /// node's part of the tier's rate among the <paramref name="fetching"/> nodes that fetch at once, not at its link's.
        /// </summary>
        private double FirstSend(int node, double block, int fetching) =>
            block / (1 << job.RampBlocks) / Math.Min(sim.LinkRate(node), sim._tierRate / fetching) + sim._spec.HopLatency;

        private double LatencyOfTree => 2 * Math.Ceiling(Math.Log2(Math.Max(2, _n))) * sim._spec.HopLatency;

        public void Start()
        {
            if (job.Agents)
            {
                // No process starts: the agents run. The request's tree is the whole start, the same for every node
                // (each waits for the root's start); the collectives that follow are counted below as for the ranks.
                var tree = sim._spec.AgentTree.Seconds(job.OneDownAtRequest ? _n + 1 : _n, sim._spec.HopLatency, sim._nodeRate, job.OneDownAtRequest);
                for (var r = 0; r < _n; r++) sim._net.After(tree, Joined);
                return;
            }
            var startWall = sim._cal.FanoutStartSeconds + sim.Launch(_n);
            for (var r = 0; r < _n; r++)
                sim.StartUp(Node(r), sim._cal.FanoutStartCpu, startWall, Joined);
        }

        private void Joined()
        {
            if (++_joined < _n) return;
            // The collectives before the ring (manifest broadcast, all-gather of what is missing): a tree each way.
            sim._net.After(LatencyOfTree, job.Probe && _n >= LeafRule.SmallestWithLeaves ? Probe : Exchange);
        }

        /// <summary>
        /// LinkProbe: in each round every rank sends its chunks to the right neighbour at once, and times the link from
        /// its left from the first chunk's arrival on (the ranks' start skew is in that first chunk); the ranks
        /// all-gather (a tree each way) and all decide alike whether to run a round four times larger, or one more
        /// round to confirm a leaf (<see cref="LeafRule.After"/>). A round cut short
        /// by the limit (1 s from the probe's start) is measured by what had arrived and is the last. The first chunk and
        /// the other seven are two flows one after the other on the same path.
        /// </summary>
        private void Probe()
        {
            _probeStart = sim._net.Now;
            var round = 0;
            var finished = false;
            ProbeResult[]? judged = null; // the round a confirming round repeats
            var incoming = new ProbeResult[_n];
            var complete = new bool[_n];
            var roundEnd = new double[_n];
            var first = new double[_n];
            var measured = new bool[_n];
            var roundStart = 0.0;
            var chunk = 0.0;
            void Measure(int r)
            {
                if (measured[r] || finished) return;
                measured[r] = true;
                var now = sim._net.Now;
                roundEnd[r] = now;
                var rest = _probeRest[r];
                if (rest is not null && rest.Remaining <= 0)
                {
                    complete[r] = true;
                    incoming[r] = new((LeafRule.Chunks - 1) * chunk / (now - first[r]), now - first[r]);
                }
                else
                {
                    // At the limit: the chunks in so far, timed from the first to the last whole one.
                    complete[r] = false;
                    var got = rest is null ? 0 : 1 + (int)Math.Floor(rest.Moved / chunk);
                    if (got >= 2)
                    {
                        var seconds = (got - 1) * chunk * (now - first[r]) / rest!.Moved;
                        incoming[r] = new((got - 1) * chunk / seconds, seconds);
                    }
                    else incoming[r] = new(got * chunk / (now - roundStart), now - roundStart);
                }
                if (--_unmeasured == 0) Gathered();
            }
            void Gathered()
            {
                // What every rank decides from the gathered readings (LinkProbe.RunAsync).
                var shortest = job.ShortestTelling is { } floor ? TimeSpan.FromSeconds(floor) : (TimeSpan?)null;
                var step = LeafRule.After(incoming, complete.All(c => c), confirming: judged is not null, nextFits: LeafRule.RoundBytes(round + 1) <= LeafRule.LastRoundBytes,
                    roundEnd.Max() - _probeStart, roundEnd.Max() - roundStart, LeafRule.Limit.TotalSeconds, shortest);
                if (step == ProbeStep.Stop)
                {
                    finished = true;
                    Route(judged is null ? incoming.ToArray() : LeafRule.Confirmed(judged, incoming, shortest));
                    return;
                }
                if (step == ProbeStep.Grow) round++;
                else (judged, round) = (incoming.ToArray(), LeafRule.ConfirmingRound(incoming, round, shortest));
                sim._net.After(LatencyOfTree, Round);
            }
            void Round()
            {
                roundStart = sim._net.Now;
                chunk = (double)LeafRule.RoundBytes(round) / LeafRule.Chunks;
                _unmeasured = _n;
                Array.Clear(measured);
                Array.Clear(_probed);
                Array.Clear(_probeRest);
                var size = chunk;
                for (var r = 0; r < _n; r++)
                {
                    var from = r;
                    var to = (r + 1) % _n;
                    sim.Between(Node(from), Node(to), size, _ =>
                    {
                        first[to] = sim._net.Now;
                        _probeRest[to] = sim.Between(Node(from), Node(to), (LeafRule.Chunks - 1) * size, _ =>
                        {
                            _probed[to] = true;
                            Measure(to);
                            if (_afterProbe[to] is { } waiting) foreach (var go in waiting) go();
                            _afterProbe[to] = null;
                        });
                    });
                }
                // A round begun at or past the limit has nothing to wait for: LinkProbe measures it at once.
                if (sim._net.Now - _probeStart >= LeafRule.Limit.TotalSeconds)
                    for (var r = 0; r < _n; r++) Measure(r);
            }
            Round();
            sim._net.After(LeafRule.Limit.TotalSeconds, () => { for (var r = 0; r < _n; r++) Measure(r); });
        }

        /// <summary>The rates all-gathered (a tree each way), the route decided alike on every rank, connections to the leaves made.</summary>
        private void Route(ProbeResult[] incoming)
        {
            var leaves = LeafRule.Leaves(incoming, job.ShortestTelling is { } floor ? TimeSpan.FromSeconds(floor) : null);
            var connect = leaves.Length > 0 ? 2 * sim._spec.HopLatency : 0;
            sim._net.After(LatencyOfTree + connect, () =>
            {
                _leaves = leaves;
                _members = Enumerable.Range(0, _n).Except(leaves).ToArray();
                Exchange();
            });
        }

        private void Exchange()
        {
            _exchangeStart = sim._net.Now;
            if (RingGrid.For(M, job.RingGroups) is { } grid)
            {
                ExchangeOverGrid(grid);
                return;
            }
            var m = M;
            _fetch = new Flow?[m];
            _edge = new Flow?[m];
            _fetchEnd = new double[m];
            _edgeEnd = new double[m];
            _toLeaf = new Flow?[_leaves.Length];
            _leafEnd = new double[_leaves.Length];
            if (m == 1)
            {
                _pending = 1;
                _fetch[0] = sim.FromTier(Node(_members[0]), _s, Delivery.Fanout, f => { _tierBytes += f.Size; _fetchEnd[0] = sim._net.Now; EdgeOrFetchDone(); });
                return;
            }
            _pending = 2 * m + _leaves.Length;
            for (var k = 0; k < m; k++)
            {
                var position = k;
                var rank = _members[k];
                var right = _members[(k + 1) % m];
                _fetch[k] = sim.FromTier(Node(rank), _s / m, Delivery.Fanout, f => { _tierBytes += f.Size; _fetchEnd[position] = sim._net.Now; EdgeOrFetchDone(); });
                sim._net.After(FirstSend(Node(rank), Block, m), () =>
                {
                    if (_stopped) return;
                    void Send() => _edge[position] = sim.Between(Node(rank), Node(right), _s * (m - 1) / m, _ => { _edgeEnd[position] = sim._net.Now; EdgeOrFetchDone(); });
                    // On a link the probe used, the ring's blocks queue behind what is left of it.
                    if (!double.IsNaN(_probeStart) && right == (rank + 1) % _n && !_probed[right])
                        (_afterProbe[right] ??= []).Add(() => { if (!_stopped) Send(); });
                    else Send();
                });
            }
            if (_leaves.Length > 0)
            {
                // Each member queues its blocks for the leaves as it fetches them: the sends start with the first block.
                var firstBlock = _members.Max(r => FirstSend(Node(r), Block, m));
                var members = _members.Select(Node).ToArray();
                sim._net.After(firstBlock, () =>
                {
                    if (_stopped) return;
                    for (var i = 0; i < _leaves.Length; i++)
                    {
                        var index = i;
                        _toLeaf[i] = sim.ToLeaf(members, Node(_leaves[i]), _s, _ => { _leafEnd[index] = sim._net.Now; EdgeOrFetchDone(); });
                    }
                });
            }
            if (job.FailAfter is { } after) sim._net.After(after, Fail);
        }

        private void EdgeOrFetchDone()
        {
            if (--_pending > 0 || _stopped) return;
            _exchangeEnd = sim._net.Now;
            if (M == 1) { _done[_members[0]] = Ingested(_fetchEnd[0]); return; }
            var finish = RingFinish(_edgeEnd, _fetchEnd, k => Block / Math.Min(sim.LinkRate(Node(_members[k])), sim.LinkRate(Node(_members[(k + 1) % M]))) + sim._spec.HopLatency);
            for (var k = 0; k < M; k++) _done[_members[k]] = Ingested(finish[k]);
            // A leaf has everything when every member's share has crossed its link, and not before the last share was fetched.
            var lastFetch = _fetchEnd.Max();
            for (var i = 0; i < _leaves.Length; i++)
                _done[_leaves[i]] = Ingested(Math.Max(_leafEnd[i], lastFetch + Block / sim.LinkRate(Node(_leaves[i])) + sim._spec.HopLatency));
        }

        /// <summary>
        /// On a node of its own, the agent has the data when its ingest threads have taken every byte: they start with
        /// the first block and keep up with the ring or fall behind it, so the later of the last block's arrival (plus
        /// that block's ingest) and S at the threads' rate. In the lab the ingest's CPU is on the flows themselves, since
        /// every process there shares the same cores.
        /// </summary>
        private double Ingested(double lastArrival)
        {
            if (sim._spec.Cpu != CpuModel.PerNode) return lastArrival;
            var perByte = sim._cal.FanoutIngestCpuPerByte / Math.Min(sim._spec.FanoutIngestCores, sim._spec.Cores);
            return Math.Max(lastArrival + Block * perByte, _exchangeStart + Block / sim._nodeRate + _s * perByte);
        }

        /// <summary>
        /// When each ring member holds every block. Edge j (member j to j+1) ended at <paramref name="edgeEnd"/>[j], and
        /// not before member j's own share was in and sent. The last block over edge j goes on one link per hop (a
        /// block's time on that link), so it reaches member i at end[j] plus the hops of edges j+1 … i−1 — for every j but
        /// i itself, since a block stops one member short of its origin and crosses at most M−1 links. Member i finishes
        /// at the latest of those: a sliding maximum over M−1 edges of the ring laid out twice, O(M).
        /// </summary>
        internal static double[] RingFinish(double[] edgeEnd, double[] fetchEnd, Func<int, double> hop)
        {
            var n = edgeEnd.Length;
            var end = new double[n];
            for (var r = 0; r < n; r++) end[r] = Math.Max(edgeEnd[r], fetchEnd[r] + hop(r));
            // prefix[t]: hops of edges 0 … t around the doubled ring; value[t]: edge t's end less the hops up to it.
            var prefix = new double[2 * n];
            var value = new double[2 * n];
            for (var t = 0; t < 2 * n; t++)
            {
                prefix[t] = (t > 0 ? prefix[t - 1] : 0) + hop(t % n);
                value[t] = end[t % n] - prefix[t];
            }
            var finish = new double[n];
            var window = new int[2 * n];
            int head = 0, tail = 0;
            for (var i = 1; i < 2 * n; i++)
            {
                // Edges i−N+1 … i−1 may bring rank i its last block.
                var t = i - 1;
                while (tail > head && value[window[tail - 1]] <= value[t]) tail--;
                window[tail++] = t;
                while (window[head] < i - n + 1) head++;
                if (i >= n) finish[i - n] = Math.Max(value[window[head]] + prefix[i - 1], fetchEnd[i - n]);
            }
            return finish;
        }

        /// <summary>
        /// A rank dies: the ring stops where it is. The others wait the stall timeout (nothing moves), then each
        /// fetches directly what it did not get: its own share's fetched part, what its left neighbour sent, and as a
        /// leaf what the members had sent it are kept.
        /// </summary>
        private void Fail()
        {
            if (_stopped || !double.IsNaN(_exchangeEnd)) return;
            _stopped = true;
            _dead = Math.Clamp(job.FailRank, 0, _n - 1);
            if (_grid is not null)
            {
                FailOverGrid();
                return;
            }
            if (job.PeerTimeout is { } peerTimeout && M > 2 && _leaves.Length == 0 && _members.Contains(_dead))
            {
                CloseRing(peerTimeout);
                return;
            }
            var received = new double[_n];
            var fetched = new double[M];
            for (var k = 0; k < M; k++)
            {
                if (_fetch[k] is not { } f) continue;
                // A fetch that had ended was counted when it ended.
                if (double.IsNaN(f.Finished)) { sim._net.Cancel(f); _tierBytes += f.Moved; }
                fetched[k] = f.Moved;
                received[_members[k]] += f.Moved;
            }
            var fetchedByAll = fetched.Sum();
            for (var k = 0; k < M; k++)
            {
                if (_edge[k] is not { } e) continue;
                sim._net.Cancel(e);
                // An edge's flow is not held back by the fetches upstream of it and can run ahead of them (a ring of two,
                // whose edges carry only the sender's share, beside fetches slowed by the rack's uplink): a member can
                // have been sent only blocks the others had fetched.
                var to = (k + 1) % M;
                received[_members[to]] += Math.Min(e.Moved, fetchedByAll - fetched[to]);
            }
            for (var i = 0; i < _leaves.Length; i++)
                if (_toLeaf[i] is { } l) { sim._net.Cancel(l); received[_leaves[i]] += l.Moved; }
            FallBack(received);
        }

        /// <summary>After the stall timeout every survivor fetches directly what it did not receive.</summary>
        private void FallBack(double[] received)
        {
            sim._net.After(job.StallTimeout, () =>
            {
                for (var r = 0; r < _n; r++)
                {
                    if (r == _dead) continue;
                    var rank = r;
                    var rest = Math.Max(0, _s - received[r]);
                    _fellBack++;
                    sim.StartUp(Node(r), sim._cal.DirectStartCpu, sim._cal.DirectStartSeconds, () =>
                        sim.FromTier(Node(rank), rest, Delivery.Direct, f =>
                        {
                            _done[rank] = sim._net.Now;
                            _tierBytes += f.Size;
                        }));
                }
            });
        }

        /// <summary>
        /// The ring closes around the dead member (RingAllGather over the TCP ring): its links stop; after the peer
        /// timeout and a connection (a round trip) its left neighbour sends its successor what that one still lacks of
        /// the ring, and fetches from the tier the part of the dead member's share that had not gone out (taken as the
        /// share times the part of the dead member's out-edge not yet sent: its own blocks went first, so this errs
        /// high). Every other edge carries what it had left, every survivor fetches the rest of its own share, and the
        /// survivors finish as a ring of M − 1. Not modelled: a death with leaves (the survivors then fall back).
        /// </summary>
        private void CloseRing(double peerTimeout)
        {
            var old = _members;
            var m = old.Length;
            var load = _s * (m - 1) / m;
            var dead = Array.IndexOf(old, _dead);
            var fetchMoved = new double[m];
            var edgeMoved = new double[m];
            for (var k = 0; k < m; k++)
            {
                if (_fetch[k] is { } f)
                {
                    if (_fetchEnd[k] == 0) { sim._net.Cancel(f); _tierBytes += f.Moved; fetchMoved[k] = f.Moved; }
                    else fetchMoved[k] = _s / m;
                }
                if (_edge[k] is { } e)
                {
                    if (_edgeEnd[k] == 0) { sim._net.Cancel(e); edgeMoved[k] = e.Moved; }
                    else edgeMoved[k] = load;
                }
            }
            sim._net.After(peerTimeout + 2 * sim._spec.HopLatency, () =>
            {
                var survivors = old.Where(r => r != _dead).ToArray();
                var n = survivors.Length;
                _members = survivors;
                _fetch = new Flow?[n];
                _edge = new Flow?[n];
                _fetchEnd = new double[n];
                _edgeEnd = new double[n];
                _pending = 2 * n;
                _stopped = false;
                // Of its own share the dead member can have sent on only what it had fetched.
                var deadShareLeft = _s / m - Math.Min(fetchMoved[dead], _s / m * edgeMoved[dead] / load);
                for (var k2 = 0; k2 < n; k2++)
                {
                    var position = k2;
                    var rank = survivors[k2];
                    var k = Array.IndexOf(old, rank);
                    var bypass = (k + 1) % m == dead;
                    var fetch = Math.Max(1, _s / m - fetchMoved[k] + (bypass ? deadShareLeft : 0));
                    var edge = Math.Max(1, bypass ? load - edgeMoved[dead] : load - edgeMoved[k]);
                    _fetch[k2] = sim.FromTier(Node(rank), fetch, Delivery.Fanout, f => { _tierBytes += f.Size; _fetchEnd[position] = sim._net.Now; EdgeOrFetchDone(); });
                    _edge[k2] = sim.Between(Node(rank), Node(survivors[(k2 + 1) % n]), edge, _ => { _edgeEnd[position] = sim._net.Now; EdgeOrFetchDone(); });
                }
            });
        }

        public JobResult Result()
        {
            var survivors = _done.Where((_, r) => r != _dead).ToArray();
            return new(Delivery.Fanout, _n, survivors.Max(), _done, _tierBytes,
                double.IsNaN(_exchangeEnd) ? null : _exchangeEnd - _exchangeStart, _fellBack, _leaves,
                double.IsNaN(_probeStart) ? 0 : _exchangeStart - _probeStart, _exchangeStart);
        }
    }

    /// <summary>The ring's completion rule on its own, for tests.</summary>
    public static double[] RingFinish(double[] edgeEnd, double[] fetchEnd, double hopSeconds) =>
        FanoutRun.RingFinish(edgeEnd, fetchEnd, _ => hopSeconds);
}
