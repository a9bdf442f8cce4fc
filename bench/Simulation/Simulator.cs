namespace Hpc.Bench.Simulation;

/// <summary>How a job's nodes get their dataset.</summary>
public enum Delivery { Direct, Fanout }

/// <summary>One job: a run of consecutive nodes (ranks in node order, as a launcher places them) that need one dataset.</summary>
/// <param name="FailAfter">Fan-out only: one node dies this long after the exchange began (null: none does).</param>
/// <param name="FailRank">Which rank of the job dies.</param>
/// <param name="StallTimeout">How long the surviving ranks wait for a ring that stopped moving before each fetches the
/// rest directly (nodeprep --stall-timeout, 2 minutes by default).</param>
public sealed record JobSpec(Delivery Delivery, int FirstNode, int Nodes, long StoredBytes, double? FailAfter = null, int FailRank = 0,
    double StallTimeout = 120);

/// <summary>What a job took. Seconds: from the common start until its last surviving node held the data.</summary>
public sealed record JobResult(Delivery Delivery, int Nodes, double Seconds, double[] NodeSeconds, double TierBytes, double? ExchangeSeconds, int FellBack);

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
/// <item>Fan-out (<c>nodeprep --fanout mpi</c>, jobs/Fanout): every rank starts (the launch, MPI's start, the agent);
/// the ranks wait for each other (manifest broadcast, agreeing on what is missing); rank r fetches share r (S/N) from
/// the tier and the pipelined ring all-gather sends every block on to r+1 until it has crossed N−1 links. So each
/// node's link receives S (its share plus the ring) and sends (N−1)/N·S, and the cache tier sends S once.</item>
/// <item>A node that dies stops the ring; the others notice when nothing has moved for the stall timeout and each
/// fetches what it lacks directly (the agent kept every block it verified).</item>
/// </list>
/// The ring runs as one flow per edge (what rank r sends to r+1), sharing links max-min with the share fetches, other
/// jobs and the CPU. Its pipelining enters where it changes the time: an edge starts after one block is fetched, and a
/// node holds everything only when the last block that reached it has crossed every link between its origin and this
/// node — after its in-edge ends, and one block's time per hop after the edges upstream of it end
/// (<see cref="RingFinish"/>). On a uniform ring that is the cost model's S/(η·B) + (N−1)·b/B; behind a slow link it is
/// that link's time plus the hops after it.
/// </summary>
public sealed class Simulator
{
    private readonly ClusterSpec _spec;
    private readonly Calibration _cal;
    private readonly FlowNetwork _net = new();
    private readonly int[] _up, _down, _cpu, _rack;
    private readonly int[] _rackUp = [], _rackDown = [];
    private readonly int _tierOut, _tierRacks = -1, _sharedCpu = -1;
    private readonly double _nodeRate, _slowRate;

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
        if (spec.RackSize > 0)
        {
            var tierRacks = (spec.CacheHosts + spec.RackSize - 1) / spec.RackSize;
            _tierRacks = _net.AddLink(tierRacks * spec.RackSize * hostRate / spec.TierOversubscription);
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
            if (j.FirstNode < 0 || j.FirstNode + j.Nodes > spec.Nodes) throw new ArgumentException($"job on nodes {j.FirstNode}..{j.FirstNode + j.Nodes - 1} is outside the cluster's {spec.Nodes}");
            return j.Delivery == Delivery.Direct ? (IJobRun)new DirectRun(sim, j) : new FanoutRun(sim, j);
        }).ToList();
        foreach (var r in runs) r.Start();
        sim._net.Run();
        return new SimulationResult(runs.Select(r => r.Result()).ToList(), sim._net.Events, clock.Elapsed.TotalMilliseconds);
    }

    /// <summary>One job on its own cluster of its size.</summary>
    public static SimulationResult Run(ClusterSpec spec, Calibration cal, Delivery delivery, long storedBytes, double? failAfter = null, double stallTimeout = 120) =>
        Run(spec, cal, [new JobSpec(delivery, 0, spec.Nodes, storedBytes, failAfter, spec.Nodes / 2, stallTimeout)]);

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

    private sealed class FanoutRun(Simulator sim, JobSpec job) : IJobRun
    {
        private readonly int _n = job.Nodes;
        private readonly double _s = job.StoredBytes;
        private readonly double[] _done = Enumerable.Repeat(double.NaN, job.Nodes).ToArray();
        private readonly Flow?[] _fetch = new Flow?[job.Nodes];
        private readonly Flow?[] _edge = new Flow?[job.Nodes];
        private readonly double[] _fetchEnd = new double[job.Nodes];
        private readonly double[] _edgeEnd = new double[job.Nodes];
        private int _joined, _pending, _fellBack;
        private double _exchangeStart = double.NaN, _exchangeEnd = double.NaN, _tierBytes;
        private bool _stopped;
        private int _dead = -1;

        /// <summary>FanoutPlan's block: a share over 8, within 128 KB and 1 MB.</summary>
        private double Block => Math.Clamp(_s / _n / 8, 128 << 10, 1 << 20);

        private int Node(int rank) => job.FirstNode + rank;

        public void Start()
        {
            var startWall = sim._cal.FanoutStartSeconds + sim.Launch(_n);
            for (var r = 0; r < _n; r++)
                sim.StartUp(Node(r), sim._cal.FanoutStartCpu, startWall, Joined);
        }

        private void Joined()
        {
            if (++_joined < _n) return;
            // The collectives before the ring (manifest broadcast, all-gather of what is missing): a tree each way.
            sim._net.After(2 * Math.Ceiling(Math.Log2(Math.Max(2, _n))) * sim._spec.HopLatency, Exchange);
        }

        private void Exchange()
        {
            _exchangeStart = sim._net.Now;
            if (_n == 1)
            {
                _pending = 1;
                _fetch[0] = sim.FromTier(Node(0), _s, Delivery.Fanout, f => { _tierBytes += f.Size; _fetchEnd[0] = sim._net.Now; EdgeOrFetchDone(); });
                return;
            }
            _pending = 2 * _n;
            for (var r = 0; r < _n; r++)
            {
                var rank = r;
                _fetch[r] = sim.FromTier(Node(r), _s / _n, Delivery.Fanout, f => { _tierBytes += f.Size; _fetchEnd[rank] = sim._net.Now; EdgeOrFetchDone(); });
                // Rank r sends once its first own block is in: one block at its link's rate.
                sim._net.After(Block / sim.LinkRate(Node(r)) + sim._spec.HopLatency, () =>
                {
                    if (_stopped) return;
                    _edge[rank] = sim.Between(Node(rank), Node((rank + 1) % _n), _s * (_n - 1) / _n, _ => { _edgeEnd[rank] = sim._net.Now; EdgeOrFetchDone(); });
                });
            }
            if (job.FailAfter is { } after) sim._net.After(after, Fail);
        }

        private void EdgeOrFetchDone()
        {
            if (--_pending > 0 || _stopped) return;
            _exchangeEnd = sim._net.Now;
            if (_n == 1) { _done[0] = Ingested(_fetchEnd[0]); return; }
            var finish = RingFinish(_edgeEnd, _fetchEnd, r => Block / Math.Min(sim.LinkRate(Node(r)), sim.LinkRate(Node((r + 1) % _n))) + sim._spec.HopLatency);
            for (var r = 0; r < _n; r++) _done[r] = Ingested(finish[r]);
        }

        /// <summary>
        /// On a node of its own, the agent has the data when its one ingest thread has taken every byte: it starts with
        /// the first block and keeps up with the ring or falls behind it, so the later of the last block's arrival (plus
        /// that block's ingest) and S at the thread's rate. In the lab the ingest's CPU is on the flows themselves, since
        /// every process there shares the same cores.
        /// </summary>
        private double Ingested(double lastArrival)
        {
            if (sim._spec.Cpu != CpuModel.PerNode) return lastArrival;
            var perByte = sim._cal.FanoutIngestCpuPerByte / Math.Min(sim._spec.FanoutIngestCores, sim._spec.Cores);
            return Math.Max(lastArrival + Block * perByte, _exchangeStart + Block / sim._nodeRate + _s * perByte);
        }

        /// <summary>
        /// When each rank holds every block. Edge j (rank j to j+1) ended at <paramref name="edgeEnd"/>[j], and not before
        /// rank j's own share was in and sent. The last block over edge j goes on one link per hop (a block's time on
        /// that link), so it reaches rank i at end[j] plus the hops of edges j+1 … i−1 — for every j but i itself, since a
        /// block stops one rank short of its origin and crosses at most N−1 links. Rank i finishes at the latest of
        /// those: a sliding maximum over N−1 edges of the ring laid out twice, O(N).
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
        /// fetches directly what it did not get: its own share's fetched part and what its left neighbour sent are kept.
        /// </summary>
        private void Fail()
        {
            if (_stopped || !double.IsNaN(_exchangeEnd)) return;
            _stopped = true;
            _dead = Math.Clamp(job.FailRank, 0, _n - 1);
            var received = new double[_n];
            for (var r = 0; r < _n; r++)
            {
                if (_fetch[r] is { } f) { sim._net.Cancel(f); received[r] += f.Moved; _tierBytes += f.Moved; }
                if (_edge[r] is { } e) { sim._net.Cancel(e); received[(r + 1) % _n] += e.Moved; }
            }
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

        public JobResult Result()
        {
            var survivors = _done.Where((_, r) => r != _dead).ToArray();
            return new(Delivery.Fanout, _n, survivors.Max(), _done, _tierBytes,
                double.IsNaN(_exchangeEnd) ? null : _exchangeEnd - _exchangeStart, _fellBack);
        }
    }

    /// <summary>The ring's completion rule on its own, for tests.</summary>
    public static double[] RingFinish(double[] edgeEnd, double[] fetchEnd, double hopSeconds) =>
        FanoutRun.RingFinish(edgeEnd, fetchEnd, _ => hopSeconds);
}
