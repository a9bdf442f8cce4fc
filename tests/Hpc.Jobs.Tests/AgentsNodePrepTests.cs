using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Node prep requested of the running agents (<c>hpcdata nodeprep --fanout agents</c>): real agents, each taking
/// requests on a port of its own (<c>--peer-listen</c>) with the cluster's key, one cache host. The request goes down a
/// tree of the agents, they exchange the data among themselves, and every node ends with the verified copy pinned.
/// </summary>
public sealed class AgentsNodePrepTests
{
    internal sealed record Agent(string Pipe, string Peer, ComponentProcess Process);

    internal static async Task<List<Agent>> StartAgentsAsync(Sandbox s, int n, string keyFile, string? cacheHosts = null)
    {
        var agents = new List<Agent>();
        for (var i = 0; i < n; i++)
        {
            var pipe = s.NewPipe();
            var peer = $"127.0.0.1:{FreePorts.Next()}";
            var process = s.Track(ComponentProcess.Start(new NodeAgentOptions
            {
                Pipe = pipe, DataDirectory = Path.Combine(s.Root, $"node{i}"), NodeName = $"node{i}", PeerListen = peer, PeerKeyFile = keyFile,
                CacheTier = { Hosts = [.. (cacheHosts ?? s.HostList).Split(',')] },
            }, name: $"agent{i}"));
            agents.Add(new Agent(pipe, peer, process));
        }
        foreach (var a in agents) await a.Process.WaitReadyAsync(Sandbox.Ready);
        return agents;
    }

    /// <summary>Each of <paramref name="positions"/> answered ready with <paramref name="version"/>, its copy made by the
    /// exchange among <paramref name="ranks"/> nodes.</summary>
    private static void AssertPreparedInTheExchange(AgentsReport report, int[] positions, int ranks, string version)
    {
        foreach (var p in positions)
        {
            var outcome = report.Outcomes[p];
            Assert.True(outcome is { Ready: true }, $"position {p}: {outcome?.Detail ?? "no answer"}");
            Assert.Equal(version, outcome!.Version);
            Assert.Contains($"source=fanout fanout=agents ranks={ranks} ", outcome.Detail);
        }
    }

    internal static void Signal(int pid, string signal)
    {
        using var kill = System.Diagnostics.Process.Start(new System.Diagnostics.ProcessStartInfo("kill", [$"-{signal}", pid.ToString()]) { UseShellExecute = false })!;
        kill.WaitForExit();
        Assert.Equal(0, kill.ExitCode);
    }

    internal static string KeyFile(Sandbox s, string secret = "a-cluster-secret-of-some-length")
    {
        var path = s.WriteFile($"peer-{Guid.NewGuid():n}.key", System.Text.Encoding.UTF8.GetBytes(secret + "\n"));
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        return path;
    }

    [Fact]
    public async Task One_request_prepares_every_node_and_the_cache_tier_sends_the_data_about_once()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(8 << 20, seed: 23)), "risk/agents");
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 4, key);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);

        var r = await s.HpcdataAsync(["nodeprep", "risk/agents", "--fanout", "agents", "--agents", string.Join(",", agents.Select(a => a.Peer)),
            "--peer-key-file", key, "--job", "job-a", "--cache-hosts", s.HostList], timeout: TimeSpan.FromMinutes(2));

        Assert.True(r.Code == 0, $"exit {r.Code}\n{r.Out}\n{r.Stderr}");
        var lines = r.Stdout.Where(l => l.StartsWith("node=")).ToList();
        Assert.Equal(4, lines.Count);
        Assert.All(lines, l => Assert.Contains($"version={staged.Version}", l));
        Assert.All(lines, l => Assert.Contains(" source=fanout fanout=agents ranks=4 ", l));
        // Each line times the exchange's steps, and they fit inside the exchange it reports.
        Assert.All(lines, l =>
        {
            var f = l.Split(' ').Select(kv => kv.Split('=', 2)).Where(kv => kv.Length == 2).ToDictionary(kv => kv[0], kv => kv[1]);
            double Seconds(string key) => double.Parse(f[key], System.Globalization.CultureInfo.InvariantCulture);
            var steps = new[] { "manifest-seconds", "agree-seconds", "probe-seconds", "ring-seconds", "end-seconds" }.Select(Seconds).ToList();
            Assert.All(steps, t => Assert.True(t >= 0, l));
            Assert.True(Seconds("ring-seconds") > 0, l);
            Assert.True(steps.Sum() <= Seconds("exchange-seconds") + 0.005, l);
            // The ingest's begin is a part of the agreement.
            Assert.InRange(Seconds("begin-seconds"), 0, Seconds("agree-seconds"));
        });
        Assert.Contains($"nodes=4 ready=4 failed=0 dataset=risk/agents version={staged.Version} joined=4 ", r.Stdout.Last());
        foreach (var a in agents)
        {
            var copy = Assert.Single((await s.StatusAsync(a.Pipe)).Copies);
            Assert.Equal(("complete", staged.Version), (copy.State, copy.Version));
            Assert.Contains("job-a", copy.Pins);
        }
        // 8 MB to four nodes: each segment left the cache tier about once, not four times.
        var sent = await Sandbox.BytesSentAsync(tier) - before;
        Assert.InRange(sent, 8L << 20, (8L << 20) * 13 / 10);
    }

    [Fact]
    public async Task A_node_whose_agent_is_down_is_passed_over_and_the_nodes_below_it_in_the_tree_still_get_the_data()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(4 << 20, seed: 29)), "risk/tree");
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 6, key);
        // In a tree of degree 2, position 1 is the parent of 3 and 4: its agent is gone before the request.
        await agents[1].Process.KillAsync();

        var request = new PrepRequest
        {
            Id = "t1", Name = "risk/tree", Job = "job-t", Members = agents.Select(a => a.Peer).ToList(), Requester = "", Degree = 2,
            JoinTimeout = TimeSpan.FromSeconds(2), StallTimeout = TimeSpan.FromSeconds(20), Timeout = TimeSpan.FromMinutes(2),
            // The dead agent's port refuses at once; the live ones get longer than the half second a busy test machine
            // can take to prove the key, so that only the dead one is passed over.
            ReachTimeout = TimeSpan.FromSeconds(5),
        };
        var report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(3));

        Assert.Equal(5, report.Joined);
        Assert.Null(report.Outcomes[1]);
        AssertPreparedInTheExchange(report, [0, 2, 3, 4, 5], ranks: 5, staged.Version);
    }

    /// <summary>
    /// Stands at one position of the tree as an agent that hangs: it takes the request, forwards it to its children
    /// (who answer it and then wait for its start), and then says nothing more, to its parent or to them.
    /// </summary>
    internal static async Task<Hanging> HangingAgentAsync(string peer, PeerKey key)
    {
        var (host, port) = AgentTree.Endpoint(peer);
        var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Parse(host), port));
        listener.Listen(16);
        var links = new List<PeerLink>();
        var hung = Task.Run(async () =>
        {
            using (listener)
            {
                var parent = await PeerLink.AcceptAsync(await listener.AcceptAsync(), key, TimeSpan.FromSeconds(5), CancellationToken.None);
                links.Add(parent);
            }
            var request = PrepRequest.Decode(await links[0].ReadAsync(PeerFrame.Prep, CancellationToken.None));
            foreach (var child in request.ChildrenOf(request.Position))
            {
                var (h, p) = AgentTree.Endpoint(request.Members[child]);
                var link = await PeerLink.ConnectAsync(h, p, key, TimeSpan.FromSeconds(5), CancellationToken.None);
                links.Add(link);
                await link.WriteAsync(PeerFrame.Prep, request.At(child).Encode(), CancellationToken.None);
                while ((await link.ReadAnyAsync(CancellationToken.None)).Type != PeerFrame.Joined) { }
            }
        });
        await Task.Yield();
        return new Hanging(hung, links);
    }

    internal sealed class Hanging(Task hung, List<PeerLink> links) : IAsyncDisposable
    {
        /// <summary>Completes once the hanging agent has its children's answers: they now wait on it.</summary>
        public Task Hung => hung;

        public async ValueTask DisposeAsync()
        {
            foreach (var link in links) await link.DisposeAsync();
        }
    }

    [Fact]
    public async Task An_agent_that_hangs_after_taking_the_request_is_left_out_and_its_children_join_through_the_node_above_it()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(4 << 20, seed: 43)), "risk/hang");
        var key = KeyFile(s);
        // In a tree of degree 2, position 1 is the parent of 3 and 4; the agent there takes the request, forwards it,
        // and hangs. Its children would wait for its start for the whole stall timeout (ten minutes here).
        var agents = await StartAgentsAsync(s, 6, key);
        var members = agents.Select(a => a.Peer).ToList();
        var hangingPeer = $"127.0.0.1:{FreePorts.Next()}";
        members.Insert(1, hangingPeer);
        await using var hanging = await HangingAgentAsync(hangingPeer, PeerKey.Load(key, "key"));

        var request = new PrepRequest
        {
            Id = "h1", Name = "risk/hang", Job = "job-h", Members = members, Requester = "", Degree = 2,
            // Long enough for the hanging agent to reach both its children first on a loaded machine: otherwise the
            // node above reaches them itself and the hang is never between them and the exchange.
            JoinTimeout = TimeSpan.FromSeconds(10), StallTimeout = TimeSpan.FromMinutes(10), Timeout = TimeSpan.FromMinutes(20),
            // The hang comes after the request is taken. Within the default half second a loaded test machine could leave
            // the hanging agent (in this process) or the first one unreached, and the request then goes elsewhere: round
            // the hanging agent, or to it as the root.
            ReachTimeout = TimeSpan.FromSeconds(5),
        };
        var report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(2));

        Assert.True(hanging.Hung.IsCompletedSuccessfully, $"the hanging agent never had its children's answers ({hanging.Hung.Status}: {hanging.Hung.Exception?.GetBaseException().Message})");
        Assert.Equal(6, report.Joined);
        Assert.Null(report.Outcomes[1]);
        // 3 and 4 took part in the exchange through position 0, not by fetching on their own after a timeout.
        AssertPreparedInTheExchange(report, [0, 2, 3, 4, 5, 6], ranks: 6, staged.Version);
    }

    [Fact]
    public async Task A_first_agent_that_takes_the_request_and_goes_silent_is_called_off_and_the_next_member_roots_the_exchange_with_the_tier_sending_about_once()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(4 << 20, seed: 53)), "risk/root");
        var key = KeyFile(s);
        // Degree 2, and the hanging agent is the root: it takes the request, forwards it to positions 1 and 2, whose
        // subtrees join under them, and then says nothing, to the requester or to its children. Those would wait for its
        // start for the whole stall timeout (ten minutes here), and the requester would give up on every node.
        var agents = await StartAgentsAsync(s, 6, key);
        var hangingPeer = $"127.0.0.1:{FreePorts.Next()}";
        List<string> members = [hangingPeer, .. agents.Select(a => a.Peer)];
        await using var hanging = await HangingAgentAsync(hangingPeer, PeerKey.Load(key, "key"));
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);

        var request = new PrepRequest
        {
            Id = "root1", Name = "risk/root", Job = "job-root", Members = members, Requester = "", Degree = 2,
            // The requester waits this long for a word from the root: long enough for the hanging root's children to
            // gather their own and answer it first on a loaded machine, so that they are waiting on it when it is silent.
            JoinTimeout = TimeSpan.FromSeconds(6), StallTimeout = TimeSpan.FromMinutes(10), Timeout = TimeSpan.FromMinutes(20),
            ReachTimeout = TimeSpan.FromSeconds(5),
        };
        var report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(2));

        Assert.True(hanging.Hung.IsCompletedSuccessfully, $"the hanging root never had its children's answers ({hanging.Hung.Status}: {hanging.Hung.Exception?.GetBaseException().Message})");
        Assert.Equal([hangingPeer], report.SilentRoots);
        // Tried again as the last member, where its parent passed over it.
        Assert.Equal([.. agents.Select(a => a.Peer), hangingPeer], report.Members);
        Assert.Equal(6, report.Joined);
        Assert.Null(report.Outcomes[6]);
        AssertPreparedInTheExchange(report, [0, 1, 2, 3, 4, 5], ranks: 6, staged.Version);
        // Nothing was fetched for the request called off: the tier sent the data about once.
        var sent = await Sandbox.BytesSentAsync(tier) - before;
        Assert.InRange(sent, 4L << 20, (4L << 20) * 13 / 10);
    }

    [Fact]
    public async Task A_request_its_requester_called_off_ends_the_wait_for_its_start_and_a_late_copy_of_it_is_refused_with_nothing_fetched()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(1 << 20, seed: 59)), "risk/late");
        var key = KeyFile(s);
        var peerKey = PeerKey.Load(key, "key");
        var agent = (await StartAgentsAsync(s, 1, key))[0];
        // The agent is the root of two; its child takes the request and never answers, so the root gathers for the
        // join timeout (a minute here), telling the requester it is alive every half of it.
        var childPeer = $"127.0.0.1:{FreePorts.Next()}";
        await using var child = await HangingAgentAsync(childPeer, peerKey);
        var request = new PrepRequest
        {
            Id = "late1", Name = "risk/late", Job = "job-late", Members = [agent.Peer, childPeer], Requester = $"127.0.0.1:{FreePorts.Next()}", Degree = 2,
            JoinTimeout = TimeSpan.FromMinutes(1), StallTimeout = TimeSpan.FromMinutes(10), Timeout = TimeSpan.FromMinutes(20), ReachTimeout = TimeSpan.FromSeconds(5),
        };
        var (host, port) = AgentTree.Endpoint(agent.Peer);
        await using var root = await PeerLink.ConnectAsync(host, port, peerKey, TimeSpan.FromSeconds(5), CancellationToken.None);
        await root.WriteAsync(PeerFrame.Prep, request.Encode(), CancellationToken.None);
        await child.Hung.WaitAsync(TimeSpan.FromSeconds(30));

        await using (var withdraw = await PeerLink.ConnectAsync(host, port, peerKey, TimeSpan.FromSeconds(5), CancellationToken.None))
            await withdraw.WriteAsync(PeerFrame.Withdraw, System.Text.Encoding.UTF8.GetBytes(request.Id), CancellationToken.None);

        // The root stops gathering and closes its link without a start, long before its join timeout.
        var ended = await Record.ExceptionAsync(() => root.ReadAnyAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(20)));
        Assert.True(ended is IOException or EndOfStreamException, $"the root's link: {ended?.GetType().Name ?? "a frame"} ({ended?.Message})");
        // The same request again (a silent root that woke, say) is refused at once: no join, no word that it is alive.
        await using var late = await PeerLink.ConnectAsync(host, port, peerKey, TimeSpan.FromSeconds(5), CancellationToken.None);
        await late.WriteAsync(PeerFrame.Prep, request.Encode(), CancellationToken.None);
        var refused = await Record.ExceptionAsync(() => late.ReadAnyAsync(CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(20)));
        Assert.True(refused is IOException or EndOfStreamException, $"the late copy's link: {refused?.GetType().Name ?? "a frame"} ({refused?.Message})");
        Assert.Empty((await s.StatusAsync(agent.Pipe)).Copies);
    }

    [Fact]
    public async Task Agents_that_are_wedged_or_slow_to_answer_when_the_request_comes_cost_the_others_only_the_reach_timeout_and_a_late_one_prepares_on_its_own_at_once()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(4 << 20, seed: 47)), "risk/reach");
        var key = KeyFile(s);
        // Degree 2: position 1 (parent of 3 and 4) takes connections and never proves the key, a wedged agent; position 2
        // (parent of 5 and 6) is a real agent stopped for 4 s (SIGSTOP: its kernel takes the connection, nothing answers).
        // Both would hold every node's start for the join timeout (10 s here) or the 4 s.
        var agents = await StartAgentsAsync(s, 6, key);
        using var wedged = new TcpListener(IPAddress.Loopback, 0);
        wedged.Start();
        List<string> members = [agents[0].Peer, $"127.0.0.1:{((IPEndPoint)wedged.LocalEndpoint).Port}", agents[1].Peer, .. agents.Skip(2).Select(a => a.Peer)];
        Signal(agents[1].Process.Id, "STOP");
        var resumed = Task.Delay(TimeSpan.FromSeconds(4)).ContinueWith(_ => Signal(agents[1].Process.Id, "CONT"), TaskScheduler.Default);

        var request = new PrepRequest
        {
            Id = "r1", Name = "risk/reach", Job = "job-r", Members = members, Requester = "", Degree = 2, ReachTimeout = TimeSpan.FromSeconds(1),
            JoinTimeout = TimeSpan.FromSeconds(10), StallTimeout = TimeSpan.FromMinutes(10), Timeout = TimeSpan.FromMinutes(20),
        };
        AgentsReport report;
        try { report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(2)); }
        finally { await resumed; }

        Assert.Equal(5, report.Joined);
        Assert.True(report.LaunchSeconds < 4, $"the others started after {report.LaunchSeconds:0.00} s");
        Assert.Null(report.Outcomes[1]);
        AssertPreparedInTheExchange(report, [0, 3, 4, 5, 6], ranks: 5, staged.Version);
        // The late one was told it was left out and fetched its copy itself, not after the ten-minute stall timeout.
        var alone = report.Outcomes[2];
        Assert.True(alone is { Ready: true }, $"position 2: {alone?.Detail ?? "no answer"}");
        Assert.Equal(staged.Version, alone!.Version);
        Assert.Contains("source=fetched fanout=left-out", alone.Detail);
    }

    [Fact]
    public async Task An_agent_killed_mid_exchange_costs_the_others_only_its_part_and_the_tier_little_more_than_one_copy_and_is_lost_at_once_not_after_the_peer_timeout()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        const int size = 12 << 20;
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(size, seed: 31)), "risk/agentkill");
        // A slow cache tier (1 MB/s per connection) keeps the exchange going long enough to kill an agent in the middle of it.
        await using var slowLink = new ThrottledRelay(s.HostList, 1 << 20);
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 4, key, slowLink.Address);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);

        var request = new PrepRequest
        {
            Id = "k1", Name = "risk/agentkill", Job = "job-k", Members = agents.Select(a => a.Peer).ToList(), Requester = "",
            // A peer timeout far above the exchange: a death must not wait for it, only a silence may.
            PeerTimeout = TimeSpan.FromSeconds(90), ReachTimeout = TimeSpan.FromSeconds(1), StallTimeout = TimeSpan.FromSeconds(20),
            Timeout = TimeSpan.FromMinutes(3), LinkProbe = false,
        };
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var lastAnswer = TimeSpan.Zero;
        var running = AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), _ => lastAnswer = clock.Elapsed, CancellationToken.None);
        var killed = await StrikeOnceItHoldsASegmentAsync(s, agents[2], running, () => agents[2].Process.KillAsync());
        Assert.True(killed, "position 2 never held a segment before the exchange ended");
        var report = await running.WaitAsync(TimeSpan.FromMinutes(4));
        var ended = clock.Elapsed;

        foreach (var p in new[] { 0, 1, 3 })
            Assert.True(report.Outcomes[p] is { Ready: true }, $"position {p}: {report.Outcomes[p]?.Detail ?? "no answer"}");
        Assert.All(new[] { 0, 1, 3 }, p => Assert.Contains("source=fanout", report.Outcomes[p]!.Detail));
        Assert.Null(report.Outcomes[2]);
        // Its ring closed around it when its links failed, and its node refused the requester's ask: the request ended
        // with the survivors' answers, not the 90 s peer timeout (less the 18 s suspicion) after them.
        Assert.Contains(report.Outcomes.OfType<NodeOutcome>(), o => o.Lost?.Contains(2) == true);
        Assert.True(ended - lastAnswer < TimeSpan.FromSeconds(30), $"the request ended {(ended - lastAnswer).TotalSeconds:0.0} s after the last answer");
        // The survivors fetched again only what the dead one alone held (a quarter), plus what was in flight.
        var sent = await Sandbox.BytesSentAsync(tier) - before;
        Assert.InRange(sent, (long)size, (long)size * 3 / 2);
    }

    [Fact]
    public async Task An_agent_stopped_mid_exchange_ends_the_request_once_the_others_answer_on_the_exchanges_own_verdict_not_a_join_timeout_later()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        const int size = 12 << 20;
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(size, seed: 37)), "risk/agentstop");
        await using var slowLink = new ThrottledRelay(s.HostList, 1 << 20);
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 4, key, slowLink.Address);
        // A join timeout far above the peer timeout: a requester that found the stopped member gone with a liveness check
        // of its own would wait it out after the others' answers.
        var request = new PrepRequest
        {
            Id = "p1", Name = "risk/agentstop", Job = "job-p", Members = agents.Select(a => a.Peer).ToList(), Requester = "",
            PeerTimeout = TimeSpan.FromSeconds(2), JoinTimeout = TimeSpan.FromSeconds(60), ReachTimeout = TimeSpan.FromSeconds(1),
            StallTimeout = TimeSpan.FromSeconds(20), Timeout = TimeSpan.FromMinutes(2), LinkProbe = false,
        };
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var lastAnswer = TimeSpan.Zero;
        var running = AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), _ => lastAnswer = clock.Elapsed, CancellationToken.None);
        var stopped = false;
        AgentsReport report;
        try
        {
            stopped = await StrikeOnceItHoldsASegmentAsync(s, agents[2], running, () =>
            {
                Signal(agents[2].Process.Id, "STOP");
                return Task.CompletedTask;
            });
            Assert.True(stopped, "position 2 never held a segment before the exchange ended");
            report = await running.WaitAsync(TimeSpan.FromMinutes(3));
        }
        finally { if (stopped) Signal(agents[2].Process.Id, "CONT"); }
        var ended = clock.Elapsed;

        foreach (var p in new[] { 0, 1, 3 })
            Assert.True(report.Outcomes[p] is { Ready: true }, $"position {p}: {report.Outcomes[p]?.Detail ?? "no answer"}");
        Assert.Null(report.Outcomes[2]);
        // The survivors' ring said it went on without position 2, and the requester took that word: it ended within the
        // reach timeout's ping of the last answer, not the join timeout's 60 s.
        Assert.Contains(report.Outcomes.OfType<NodeOutcome>(), o => o.Lost?.Contains(2) == true);
        Assert.True(ended - lastAnswer < TimeSpan.FromSeconds(30), $"the request ended {(ended - lastAnswer).TotalSeconds:0.0} s after the last answer");
    }

    /// <summary>
    /// Suspicion is not the verdict: a node silent for less than the peer timeout is routed around by its ring after
    /// <see cref="PrepRequest.SuspectAfter"/>, so the others go on without waiting for it, but the requester asks it
    /// again until the peer timeout has passed; once it wakes it answers, completes its copy from the tier, and the
    /// request has every node ready.
    /// </summary>
    [Fact]
    public async Task A_node_silent_for_less_than_the_peer_timeout_is_routed_around_by_its_ring_yet_waited_for_and_every_node_is_ready()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(12 << 20, seed: 38)), "risk/agentstall");
        await using var slowLink = new ThrottledRelay(s.HostList, 1 << 20);
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 4, key, slowLink.Address);
        var request = new PrepRequest
        {
            Id = "p1", Name = "risk/agentstall", Job = "job-q", Members = agents.Select(a => a.Peer).ToList(), Requester = "",
            PeerTimeout = TimeSpan.FromSeconds(10), ReachTimeout = TimeSpan.FromSeconds(1), StallTimeout = TimeSpan.FromSeconds(30),
            Timeout = TimeSpan.FromMinutes(2), LinkProbe = false,
        };
        Assert.Equal(TimeSpan.FromSeconds(2), request.SuspectAfter);
        var running = AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None);
        var stopped = false;
        AgentsReport report;
        try
        {
            stopped = await StrikeOnceItHoldsASegmentAsync(s, agents[2], running, () =>
            {
                Signal(agents[2].Process.Id, "STOP");
                return Task.CompletedTask;
            });
            Assert.True(stopped, "position 2 never held a segment before the exchange ended");
            // Silent for twice the suspicion, well within the peer timeout.
            await Task.Delay(2 * request.SuspectAfter);
            Signal(agents[2].Process.Id, "CONT");
            stopped = false;
            report = await running.WaitAsync(TimeSpan.FromMinutes(3));
        }
        finally { if (stopped) Signal(agents[2].Process.Id, "CONT"); }

        for (var p = 0; p < 4; p++)
            Assert.True(report.Outcomes[p] is { Ready: true }, $"position {p}: {report.Outcomes[p]?.Detail ?? "no answer"}");
        // Its ring did go on without it: the survivors said so, and the requester waited for it regardless.
        Assert.Contains(report.Outcomes.OfType<NodeOutcome>(), o => o.Lost?.Contains(2) == true);
    }

    /// <summary>Strikes <paramref name="agent"/> (kills or stops it) once its copy holds a segment, so in the middle of the
    /// exchange; false when the request ended, or a minute passed, first.</summary>
    private static async Task<bool> StrikeOnceItHoldsASegmentAsync(Sandbox s, Agent agent, Task running, Func<Task> strike)
    {
        var deadline = DateTime.UtcNow.AddSeconds(60);
        while (DateTime.UtcNow < deadline && !running.IsCompleted)
        {
            try
            {
                if ((await s.StatusAsync(agent.Pipe)).Copies.Any(c => c.SegmentsDone > 0))
                {
                    await strike();
                    return true;
                }
            }
            catch (Exception e) when (e is IOException or TimeoutException or CommonDataException) { }
            await Task.Delay(50);
        }
        return false;
    }

    [Fact]
    public async Task A_malformed_frame_or_a_stranger_closes_only_its_own_connection_and_the_agent_keeps_taking_requests()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(1 << 20, seed: 41)), "risk/frames");
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 2, key);
        var (host, port) = AgentTree.Endpoint(agents[0].Peer);

        // Past the key's challenge, a frame of no known type, then one that claims more than any request may be.
        await using (var link = await PeerLink.ConnectAsync(host, port, PeerKey.Load(key, "key"), TimeSpan.FromSeconds(5), CancellationToken.None))
            await link.WriteAsync((PeerFrame)200, new byte[] { 1, 2, 3 }, CancellationToken.None);
        await using (var link = await PeerLink.ConnectAsync(host, port, PeerKey.Load(key, "key"), TimeSpan.FromSeconds(5), CancellationToken.None))
            await link.WriteAsync(PeerFrame.Prep, new byte[] { 1, 0, 0 }, CancellationToken.None);
        // No challenge answered at all: bytes from something that is not node prep.
        using (var stranger = new TcpClient())
        {
            await stranger.ConnectAsync(host, port);
            await stranger.GetStream().WriteAsync("GET / HTTP/1.1\r\nHost: x\r\n\r\n"u8.ToArray());
        }

        var r = await s.HpcdataAsync(["nodeprep", "risk/frames", "--fanout", "agents", "--agents", string.Join(",", agents.Select(a => a.Peer)),
            "--peer-key-file", key, "--job", "job-f", "--cache-hosts", s.HostList], timeout: TimeSpan.FromMinutes(1));

        Assert.True(r.Code == 0, $"exit {r.Code}\n{r.Out}\n{r.Stderr}");
        Assert.Contains($"nodes=2 ready=2 failed=0 dataset=risk/frames version={staged.Version}", r.Stdout.Last());
        Assert.False(agents[0].Process.HasExited);
    }

    [Fact]
    public async Task An_agent_asked_to_take_requests_without_a_key_refuses_to_start_and_says_why()
    {
        await using var s = new Sandbox();
        var r = await s.RunAsync("Hpc.NodeAgent", ["--pipe", s.NewPipe(), "--data-dir", Path.Combine(s.Root, "n"), "--peer-listen", $"127.0.0.1:{FreePorts.Next()}"],
            timeout: TimeSpan.FromSeconds(30));
        Assert.NotEqual(0, r.Code);
        Assert.Contains("--peer-listen needs --peer-key-file", r.Stderr);
    }

    [Fact]
    public async Task A_second_agent_told_to_take_requests_on_a_port_another_agent_holds_refuses_to_start_and_the_first_keeps_it()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var key = KeyFile(s);
        var first = Assert.Single(await StartAgentsAsync(s, 1, key));

        var r = await s.RunAsync("Hpc.NodeAgent", ["--pipe", s.NewPipe(), "--data-dir", Path.Combine(s.Root, "second"), "--peer-listen", first.Peer, "--peer-key-file", key,
            "--cache-hosts", s.HostList],
            timeout: TimeSpan.FromSeconds(30));

        // Sharing the port would have the kernel split requests between two agents, each answering for the other's node.
        Assert.NotEqual(0, r.Code);
        Assert.Contains($"cannot listen for node prep requests on {first.Peer} (--peer-listen)", r.Stderr);
        Assert.False(first.Process.HasExited);
    }

    [Fact]
    public async Task A_request_without_the_cluster_key_is_refused_and_no_agent_fetches_anything()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(1 << 20, seed: 37)), "risk/key");
        var agents = await StartAgentsAsync(s, 2, KeyFile(s));

        var r = await s.HpcdataAsync(["nodeprep", "risk/key", "--fanout", "agents", "--agents", string.Join(",", agents.Select(a => a.Peer)),
            "--peer-key-file", KeyFile(s, "somebody-elses-secret-entirely"), "--job", "job-x", "--cache-hosts", s.HostList], timeout: TimeSpan.FromMinutes(1));

        Assert.Equal(ExitCodes.For(ErrorCode.AccessDenied), r.Code);
        Assert.Contains("holds a different peer key", r.Stderr);
        foreach (var a in agents) Assert.Empty((await s.StatusAsync(a.Pipe)).Copies);
    }
}

/// <summary>The request and the answers between agents, as bytes: what one side writes the other reads, and what is
/// malformed is refused with a clear error rather than read as something else.</summary>
public sealed class PrepRequestTests
{
    private static PrepRequest Sample(int members = 20) => new()
    {
        Id = "r1", Name = "risk/prices", Version = "abcd1234", Job = "job-9", Members = Enumerable.Range(0, members).Select(i => $"10.0.{i / 250}.{i % 250}:6390").ToList(),
        Requester = "10.9.9.9:40000", Degree = 4, RingGroups = "off", LinkProbe = false, PeerTimeout = TimeSpan.FromSeconds(3), JoinTimeout = TimeSpan.FromSeconds(1),
        ReachTimeout = TimeSpan.FromMilliseconds(300), Alone = true,
        StallTimeout = TimeSpan.FromSeconds(40), Timeout = TimeSpan.FromMinutes(5),
    };

    [Fact]
    public void A_request_reads_back_as_it_was_written_at_any_position()
    {
        var request = (Sample() with { User = "u1" }).At(7);
        var read = PrepRequest.Decode(request.Encode());
        Assert.Equal(request with { Members = [] }, read with { Members = [] });
        Assert.Equal(request.Members, read.Members);
    }

    [Fact]
    public void The_tree_gives_each_position_its_children_and_every_position_one_parent()
    {
        var request = Sample(20);
        Assert.Equal([1, 2, 3, 4], request.ChildrenOf(0));
        Assert.Equal([17, 18, 19], request.ChildrenOf(4));
        Assert.Empty(request.ChildrenOf(5));
        var parents = Enumerable.Range(0, 20).SelectMany(p => request.ChildrenOf(p)).ToList();
        Assert.Equal(Enumerable.Range(1, 19), parents.Order());
        Assert.Equal(2, request.HeightOf(0));
        Assert.Equal(0, request.HeightOf(19));
        // Only a node above a position's parent may adopt it; the requester (-1) is above no one.
        Assert.Equal((-1, 0, 4), (request.ParentOf(0), request.ParentOf(4), request.ParentOf(19)));
        Assert.True(request.IsAncestor(0, 19));
        Assert.True(request.IsAncestor(4, 19));
        Assert.False(request.IsAncestor(19, 19));
        Assert.False(request.IsAncestor(3, 19));
        Assert.False(request.IsAncestor(-1, 4));
        Assert.Equal((4, 19), (request.At(4).At(19).From, request.At(4).At(19).Position));
    }

    [Fact]
    public void A_truncated_or_inconsistent_request_is_refused()
    {
        var bytes = Sample().Encode();
        Assert.Throws<InvalidDataException>(() => PrepRequest.Decode(bytes[..(bytes.Length / 2)]));
        Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { Degree = 1 }).Encode()));
        var wrongFormat = (byte[])bytes.Clone();
        wrongFormat[0] = 9;
        Assert.Throws<InvalidDataException>(() => PrepRequest.Decode(wrongFormat));
        Assert.Throws<InvalidDataException>(() => NodeOutcome.Decode([1, 2, 3]));
    }

    [Fact]
    public void A_request_that_asks_for_timeouts_or_a_degree_beyond_what_an_agent_takes_is_refused_naming_the_bound()
    {
        Assert.Contains("stall timeout", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { StallTimeout = TimeSpan.FromHours(2) }).Encode())).Message);
        Assert.Contains("overall timeout", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { Timeout = TimeSpan.FromDays(3) }).Encode())).Message);
        Assert.Contains("peer timeout", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { PeerTimeout = TimeSpan.Zero }).Encode())).Message);
        Assert.Contains("join timeout", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { JoinTimeout = TimeSpan.FromHours(1) }).Encode())).Message);
        Assert.Contains("degree of 65", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { Degree = 65 }).Encode())).Message);
        Assert.Contains("--ring-groups", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { RingGroups = "two" }).Encode())).Message);
        // A withdrawal carries the id alone: an id longer than its frame takes is refused with the request.
        Assert.Contains("an id of 65 characters", Assert.Throws<InvalidDataException>(() => PrepRequest.Decode((Sample() with { Id = new string('a', 65) }).Encode())).Message);
        // At the bounds it is taken.
        var longest = Sample() with
        {
            PeerTimeout = PrepRequest.MaxPeerTimeout, JoinTimeout = PrepRequest.MaxJoinTimeout, ReachTimeout = PrepRequest.MaxReachTimeout,
            StallTimeout = PrepRequest.MaxStallTimeout, Timeout = PrepRequest.MaxTimeout, Degree = PrepRequest.MaxDegree,
            Id = new string('a', PrepRequest.MaxIdLength),
        };
        Assert.Equal(PrepRequest.MaxTimeout, PrepRequest.Decode(longest.Encode()).Timeout);
    }

    [Fact]
    public void A_node_outcome_reads_back_as_it_was_written()
    {
        var outcome = new NodeOutcome(12, "node13", 0, "abcd", 1.25, "bytes=10 source=fanout fanout=agents ranks=20");
        Assert.Equal(outcome, NodeOutcome.Decode(outcome.Encode()));
        var lost = NodeOutcome.Decode((outcome with { Lost = [3, 17], LostFor = 0.75 }).Encode());
        Assert.Equal([3, 17], lost.Lost!);
        Assert.Equal(0.75, lost.LostFor);
        Assert.Equal(outcome, lost with { Lost = null, LostFor = 0 });
        // Agents of earlier builds send the outcome without the lost members, or without how long they were lost for:
        // it reads as losing none, or as having just lost them.
        var earliest = outcome.Encode()[..^(sizeof(int) + sizeof(double))];
        Assert.Equal(outcome, NodeOutcome.Decode(earliest));
        var earlier = NodeOutcome.Decode((outcome with { Lost = [3], LostFor = 2 }).Encode()[..^sizeof(double)]);
        Assert.Equal([3], earlier.Lost!);
        Assert.Equal(0, earlier.LostFor);
        Assert.Throws<InvalidDataException>(() => NodeOutcome.Decode((outcome with { Lost = [3], LostFor = double.NaN }).Encode()));
    }

    [Fact]
    public void The_reason_a_job_is_sent_back_names_each_node_that_is_not_ready_and_says_which_the_exchange_went_on_without()
    {
        NodeOutcome Ready(int p, IReadOnlyList<int>? lost = null) => new(p, $"n{p}", 0, "abcd", 1, "bytes=10 source=fanout", lost);
        var report = new AgentsReport(["a:6390", "b:6390", "c:6390", "d:6390", "e:6390"], 0.1, 3,
            [Ready(0, lost: [2]), null, null, new NodeOutcome(3, "n3", (int)ErrorCode.AccessDenied, "", 0, "user alice may not read risk/x"), null], 2) { SilentRoots = ["e:6390"] };

        var reason = Hpc.Jobs.Commands.AgentsNodePrep.NotReady(report, m => $"node-{m[0]} at {m}");

        Assert.Equal("4 of 5 nodes are not ready: node-b at b:6390 (no answer), node-c at c:6390 (lost in the exchange, no answer), " +
                     "n3 (user alice may not read risk/x), node-e at e:6390 (took the request first and went silent, no answer)", reason);
        // A job step without the key gets the report through its node's agent: the verdict crosses the pipe with it.
        var piped = new Hpc.CommonData.Agent.AgentResponse { Ok = true, Exchange = new() { Outcomes = [new() { Position = 0, Lost = [2] }, null], SilentRoots = ["e:6390"] } };
        var back = System.Text.Json.JsonSerializer.Deserialize(System.Text.Json.JsonSerializer.Serialize(piped, Hpc.CommonData.Agent.AgentJson.Default.AgentResponse),
            Hpc.CommonData.Agent.AgentJson.Default.AgentResponse)!;
        Assert.Equal([2], back.Exchange!.Outcomes[0]!.Lost!);
        Assert.Null(back.Exchange.Outcomes[1]);
        Assert.Equal(["e:6390"], back.Exchange.SilentRoots!);
    }

    [Fact]
    public void Members_come_from_a_list_or_a_file_and_get_the_agents_port_when_they_name_none()
    {
        Assert.Equal(["n1:6390", "n2:7000", "[fe80::1]:6390"], Hpc.Jobs.Commands.AgentsNodePrep.Members("n1, n2:7000,[fe80::1]"));
        var file = Path.Combine(Path.GetTempPath(), $"members-{Guid.NewGuid():n}.txt");
        File.WriteAllLines(file, ["# the job's nodes", "node1", "node2  # rack 2", ""]);
        try { Assert.Equal(["node1:6390", "node2:6390"], Hpc.Jobs.Commands.AgentsNodePrep.Members(file)); }
        finally { File.Delete(file); }
        Assert.Throws<ArgumentException>(() => Hpc.Jobs.Commands.AgentsNodePrep.Members("n1,n1"));
    }
}
