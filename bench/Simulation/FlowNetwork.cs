namespace Hpc.Bench.Simulation;

/// <summary>
/// A flow-level discrete-event network: links with a capacity, flows that cross a set of links (each with a weight,
/// the link units one flow unit uses), rates shared weighted max-min fairly (progressive filling), and a clock that jumps
/// from event to event — a flow finishing or a timer firing. Between events every rate is constant, so a run costs
/// (events × flows), not (bytes ÷ packets): a 10,000-node ring is a few dozen events.
/// </summary>
/// <remarks>
/// Max-min fairness is what many long TCP flows sharing FIFO links converge to (the lab's plain-TCP calibrations hold
/// 0.90–0.96 of the rate in both the pull and the neighbour pattern); per-packet effects (slow start, queueing, the
/// tail of unequal flows) are outside it and show up as the validation's error. A CPU is a link too: a flow that costs
/// CPU per byte crosses it with that weight, so cores and wires are shared by the same rule.
/// </remarks>
public sealed class FlowNetwork
{
    private double[] _capacity = new double[64];
    private int _links;
    private readonly List<Flow> _active = [];
    private readonly PriorityQueue<Action, (double Time, long Order)> _timers = new();
    private long _timerOrder;
    private bool _dirty;
    private readonly List<Flow> _ended = [];

    // Scratch for the solver, kept between solves so the event loop does not allocate.
    private double[] _remaining = [];
    private double[] _weightSum = [];
    private int[] _version = [];
    private int[] _linkStart = [];
    private int[] _linkFlows = [];
    private readonly PriorityQueue<(int Link, int Version), double> _levels = new();

    public double Now { get; private set; }
    public int Events { get; private set; }
    public int ActiveFlows => _active.Count;

    public int AddLink(double capacity)
    {
        if (capacity < 0 || double.IsNaN(capacity)) throw new ArgumentOutOfRangeException(nameof(capacity));
        if (_links == _capacity.Length) Array.Resize(ref _capacity, _links * 2);
        _capacity[_links] = capacity;
        return _links++;
    }

    public double Capacity(int link) => _capacity[link];

    /// <summary>A link's capacity changes (a NIC renegotiating, a node dying: 0); the flows on it are re-shared at once.</summary>
    public void SetCapacity(int link, double capacity)
    {
        _capacity[link] = capacity;
        _dirty = true;
    }

    /// <summary>Starts a flow of <paramref name="units"/> (bytes, or CPU-seconds on a CPU link) across <paramref name="links"/>.</summary>
    /// <param name="weights">Units of each link one unit of the flow uses; null: 1 on every link.</param>
    public Flow Start(double units, int[] links, double[]? weights, Action<Flow>? done, int owner = -1)
    {
        if (links.Length == 0) throw new ArgumentException("a flow crosses at least one link", nameof(links));
        if (weights is not null && weights.Length != links.Length) throw new ArgumentException("one weight per link", nameof(weights));
        var f = new Flow(units, links, weights, done, owner, Now) { Slot = _active.Count };
        if (units <= 0)
        {
            // Nothing to move: done now, but from the event loop so callers never re-enter themselves.
            At(Now, () => { f.Finished = Now; done?.Invoke(f); });
            f.Slot = -1;
            return f;
        }
        _active.Add(f);
        _dirty = true;
        return f;
    }

    /// <summary>Stops a flow where it is; <see cref="Flow.Remaining"/> says what it had left.</summary>
    public void Cancel(Flow f)
    {
        if (f.Slot < 0) return;
        Remove(f);
        f.Rate = 0;
        _dirty = true;
    }

    public void At(double time, Action action) => _timers.Enqueue(action, (Math.Max(time, Now), _timerOrder++));

    public void After(double seconds, Action action) => At(Now + seconds, action);

    /// <summary>Runs until nothing is left to happen (or <paramref name="until"/>). Flows whose every path has no capacity wait for a timer that changes it; with none pending they are left where they are.</summary>
    public void Run(double until = double.PositiveInfinity)
    {
        while (true)
        {
            if (_dirty) Solve();
            var next = double.PositiveInfinity;
            foreach (var f in _active)
                if (f.Rate > 0) next = Math.Min(next, Now + f.Remaining / f.Rate);
            if (_timers.TryPeek(out _, out var timer)) next = Math.Min(next, timer.Time);
            if (double.IsPositiveInfinity(next) || next > until) break;
            Advance(next);
            Events++;
            // Flows that end within a nanosecond of each other end together: a symmetric ring is one event, not N.
            _ended.Clear();
            for (var i = _active.Count - 1; i >= 0; i--)
            {
                var f = _active[i];
                if (f.Remaining <= 1e-9 * f.Size || (f.Rate > 0 && f.Remaining / f.Rate <= 1e-9)) _ended.Add(f);
            }
            foreach (var f in _ended)
            {
                Remove(f);
                f.Remaining = 0;
                f.Finished = Now;
                _dirty = true;
            }
            // Only now the callbacks, which may start or cancel flows.
            foreach (var f in _ended) f.Done?.Invoke(f);
            while (_timers.TryPeek(out var action, out var t) && t.Time <= Now + 1e-12)
            {
                _timers.Dequeue();
                action();
            }
        }
    }

    private void Advance(double to)
    {
        var dt = to - Now;
        if (dt > 0)
            foreach (var f in _active)
                f.Remaining = Math.Max(0, f.Remaining - f.Rate * dt);
        Now = to;
    }

    private void Remove(Flow f)
    {
        var last = _active[^1];
        _active[f.Slot] = last;
        last.Slot = f.Slot;
        _active.RemoveAt(_active.Count - 1);
        f.Slot = -1;
    }

    /// <summary>
    /// Weighted progressive filling: every unfixed flow's rate rises together; the link whose remaining capacity over
    /// the summed weights of its unfixed flows is least saturates first, and its flows are fixed at that level.
    /// </summary>
    private void Solve()
    {
        _dirty = false;
        var n = _links;
        if (_remaining.Length < n)
        {
            _remaining = new double[_capacity.Length];
            _weightSum = new double[_capacity.Length];
            _version = new int[_capacity.Length];
            _linkStart = new int[_capacity.Length + 1];
        }
        Array.Copy(_capacity, _remaining, n);
        Array.Clear(_weightSum, 0, n);
        Array.Clear(_linkStart, 0, n + 1);
        var incidences = 0;
        foreach (var f in _active)
        {
            f.Fixed = false;
            f.Rate = 0;
            for (var k = 0; k < f.Links.Length; k++)
            {
                _weightSum[f.Links[k]] += f.Weight(k);
                _linkStart[f.Links[k] + 1]++;
            }
            incidences += f.Links.Length;
        }
        for (var l = 0; l < n; l++) _linkStart[l + 1] += _linkStart[l];
        if (_linkFlows.Length < incidences) _linkFlows = new int[Math.Max(incidences, _linkFlows.Length * 2)];
        // Fill the per-link flow lists; _version doubles as the fill cursor, then is reset as the staleness counter.
        for (var l = 0; l < n; l++) _version[l] = _linkStart[l];
        for (var i = 0; i < _active.Count; i++)
            foreach (var l in _active[i].Links)
                _linkFlows[_version[l]++] = i;
        Array.Clear(_version, 0, n);

        _levels.Clear();
        for (var l = 0; l < n; l++)
            if (_weightSum[l] > 0) _levels.Enqueue((l, 0), _remaining[l] / _weightSum[l]);
        while (_levels.TryDequeue(out var entry, out var level))
        {
            var l = entry.Link;
            if (entry.Version != _version[l] || _weightSum[l] <= 1e-12) continue;
            for (var j = _linkStart[l]; j < _linkStart[l + 1]; j++)
            {
                var f = _active[_linkFlows[j]];
                if (f.Fixed) continue;
                f.Fixed = true;
                f.Rate = level;
                for (var k = 0; k < f.Links.Length; k++)
                {
                    var other = f.Links[k];
                    var w = f.Weight(k);
                    _remaining[other] = Math.Max(0, _remaining[other] - w * level);
                    _weightSum[other] -= w;
                    _version[other]++;
                    if (other != l && _weightSum[other] > 1e-12)
                        _levels.Enqueue((other, _version[other]), Math.Max(level, _remaining[other] / _weightSum[other]));
                }
            }
        }
    }
}

/// <summary>One transfer (or one piece of CPU work) in a <see cref="FlowNetwork"/>.</summary>
public sealed class Flow(double units, int[] links, double[]? weights, Action<Flow>? done, int owner, double started)
{
    public double Size { get; } = units;
    public double Remaining { get; internal set; } = units;
    public double Rate { get; internal set; }
    public double Started { get; } = started;
    public double Finished { get; internal set; } = double.NaN;
    /// <summary>Whatever the protocol wants to know the flow by (a node, a ring edge).</summary>
    public int Owner { get; } = owner;
    public double Moved => Size - Remaining;
    internal int[] Links { get; } = links;
    internal Action<Flow>? Done { get; } = done;
    internal int Slot { get; set; }
    internal bool Fixed { get; set; }
    internal double Weight(int k) => weights is null ? 1.0 : weights[k];
}
