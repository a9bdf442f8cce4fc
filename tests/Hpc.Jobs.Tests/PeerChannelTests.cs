using System.Buffers.Binary;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Access;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Hosting;
using static Hpc.Jobs.Tests.AgentsNodePrepTests;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The agents' peer channel as an attacker on the cluster's network meets it: someone without the key who holds a node's
/// port and passes challenges between agents gets no link; bytes changed on the wire close the link; a frame larger than
/// its phase allows is refused before anything is allocated for it; a member that joins and then says nothing costs the
/// others the stall timeout, not the request's; a node too busy to take a request tells the requester; and a request
/// made for a user who may not read the dataset fetches nothing anywhere.
/// </summary>
public sealed class PeerChannelTests
{
    private static readonly PeerKey Key = PeerKey.FromSecret("peer-channel-test-key");

    private static async Task<(PeerLink Client, PeerLink Server)> PairAsync(string? via = null)
    {
        using var listener = new Socket(SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen(1);
        var port = ((IPEndPoint)listener.LocalEndPoint!).Port;
        var (host, target) = via is null ? ("127.0.0.1", port) : AgentTree.Endpoint(via);
        var connecting = PeerLink.ConnectAsync(host, target, Key, TimeSpan.FromSeconds(10), CancellationToken.None);
        var accepted = PeerLink.AcceptAsync(await listener.AcceptAsync(), Key, TimeSpan.FromSeconds(10), CancellationToken.None);
        return (await connecting, await accepted);
    }

    [Fact]
    public async Task Frames_go_both_ways_sealed_and_in_order()
    {
        var (client, server) = await PairAsync();
        await using (client)
        await using (server)
        {
            for (var i = 0; i < 3; i++) await client.WriteAsync(PeerFrame.Collective, new byte[] { (byte)i, 2, 3 }, CancellationToken.None);
            for (var i = 0; i < 3; i++) Assert.Equal(new byte[] { (byte)i, 2, 3 }, await server.ReadAsync(PeerFrame.Collective, CancellationToken.None));
            await server.WriteAsync(PeerFrame.Outcome, "ok"u8.ToArray(), CancellationToken.None);
            Assert.Equal("ok"u8.ToArray(), await client.ReadAsync(PeerFrame.Outcome, CancellationToken.None));
        }
    }

    [Fact]
    public async Task A_relay_that_passes_the_challenges_on_without_the_key_gets_no_link()
    {
        // The relay holds a port of its own (a node whose agent is down) and copies bytes both ways unchanged: each end
        // sees other addresses than the other end does, so neither proof matches.
        using var listener = new Socket(SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen(1);
        await using var relay = new ThrottledRelay($"127.0.0.1:{((IPEndPoint)listener.LocalEndPoint!).Port}", long.MaxValue);
        var (host, port) = AgentTree.Endpoint(relay.Address);
        var connecting = PeerLink.ConnectAsync(host, port, Key, TimeSpan.FromSeconds(10), CancellationToken.None);
        var accepting = PeerLink.AcceptAsync(await listener.AcceptAsync(), Key, TimeSpan.FromSeconds(10), CancellationToken.None);

        var refused = await Assert.ThrowsAsync<UnauthorizedAccessException>(() => accepting);
        Assert.Contains("relayed from another address", refused.Message);
        await Assert.ThrowsAsync<UnauthorizedAccessException>(() => connecting);
    }

    [Fact]
    public async Task A_frame_changed_on_the_wire_is_refused_and_so_is_one_of_a_type_the_phase_does_not_take()
    {
        var (client, server) = await PairAsync();
        await using (client)
        await using (server)
        {
            // A well-formed header with bytes that were not sealed with this connection's key.
            var forged = new byte[5 + 3 + 16];
            forged[0] = (byte)PeerFrame.Prep;
            BinaryPrimitives.WriteInt32LittleEndian(forged.AsSpan(1), 3);
            await client.Wire.WriteAsync(forged);
            var e = await Assert.ThrowsAsync<InvalidDataException>(() => server.ReadAnyAsync(CancellationToken.None));
            Assert.Contains("whose seal does not open", e.Message);
        }
        (client, server) = await PairAsync();
        await using (client)
        await using (server)
        {
            // A collective may be 256 MiB, but not as a connection's first frame: refused on its header alone.
            var header = new byte[5];
            header[0] = (byte)PeerFrame.Collective;
            BinaryPrimitives.WriteInt32LittleEndian(header.AsSpan(1), 256 << 20);
            await client.Wire.WriteAsync(header);
            var e = await Assert.ThrowsAsync<InvalidDataException>(() => server.ReadAnyAsync(CancellationToken.None, [PeerFrame.Prep, PeerFrame.Ping]));
            Assert.Contains("a malformed frame", e.Message);
        }
    }

    [Fact]
    public void Each_frame_type_has_a_ceiling_of_its_own()
    {
        Assert.Equal(0, PeerLink.MaxPayload(PeerFrame.Ping));
        Assert.Equal(64 << 10, PeerLink.MaxPayload(PeerFrame.Outcome));
        Assert.True(PeerLink.MaxPayload(PeerFrame.Prep) < PeerLink.MaxPayload(PeerFrame.Collective));
        Assert.Equal(-1, PeerLink.MaxPayload((PeerFrame)200));
    }

    [Fact]
    public async Task A_job_step_without_the_key_has_its_nodes_agent_make_the_request_for_its_user()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(4 << 20, seed: 97)), "risk/local-ask");
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 3, key);

        // No --peer-key-file: the caller cannot read the key, and the agent on its own node asks for it, with the
        // caller's own switches: no link probe here.
        var members = string.Join(",", agents.Select(a => a.Peer));
        var r = await s.HpcdataAsync(["nodeprep", "risk/local-ask", "--fanout", "agents", "--agents", members,
            "--pipe", agents[0].Pipe, "--job", "job-ask", "--cache-hosts", s.HostList, "--link-probe", "off", "--peer-timeout", "3s"], timeout: TimeSpan.FromMinutes(2));

        Assert.True(r.Code == 0, $"exit {r.Code}\n{r.Out}\n{r.Stderr}");
        Assert.Contains($"nodes=3 ready=3 failed=0 dataset=risk/local-ask version={staged.Version}", r.Stdout.Last());
        var lines = r.Stdout.Where(l => l.StartsWith("node=")).ToList();
        Assert.Equal(3, lines.Count(l => l.Contains(" source=fanout fanout=agents ranks=3 ")));
        Assert.All(lines, l => Assert.Contains(" probe-seconds=0.000 ", l));
        foreach (var a in agents) Assert.Contains("job-ask", Assert.Single((await s.StatusAsync(a.Pipe)).Copies).Pins);

        // A setting beyond what every agent takes is refused by the caller's agent, naming it, before anything travels.
        var beyond = await s.HpcdataAsync(["nodeprep", "risk/local-ask", "--fanout", "agents", "--agents", members,
            "--pipe", agents[0].Pipe, "--job", "job-beyond", "--cache-hosts", s.HostList, "--peer-timeout", "11m"], timeout: TimeSpan.FromMinutes(1));
        Assert.Equal(ExitCodes.Usage, beyond.Code);
        Assert.Contains("peer timeout of 00:11:00 (more than 0 and at most 00:10:00 is taken)", beyond.Stderr);
        foreach (var a in agents) Assert.DoesNotContain("job-beyond", Assert.Single((await s.StatusAsync(a.Pipe)).Copies).Pins);

        // An agent that takes no part in exchanges says so, and nothing is fetched.
        var lone = s.NewPipe();
        var plain = s.Track(Hpc.CommonData.Hosting.ComponentProcess.Start(new Hpc.CommonData.Hosting.NodeAgentOptions
        {
            Pipe = lone, DataDirectory = Path.Combine(s.Root, "lone"), NodeName = "lone", CacheTier = { Hosts = [.. s.Hosts] },
        }, name: "lone"));
        await plain.WaitReadyAsync(Sandbox.Ready);
        var refused = await s.HpcdataAsync(["nodeprep", "risk/local-ask", "--fanout", "agents", "--agents", agents[1].Peer, "--pipe", lone, "--job", "job-lone",
            "--cache-hosts", s.HostList], timeout: TimeSpan.FromMinutes(1));
        Assert.NotEqual(0, refused.Code);
        Assert.Contains("takes no part in exchanges", refused.Stderr);
    }

    [Fact]
    public async Task An_agent_whose_peer_key_file_others_can_read_says_so_at_start()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var key = KeyFile(s);
        File.SetUnixFileMode(key, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
        var agent = Assert.Single(await StartAgentsAsync(s, 1, key));
        var warning = $"--peer-key-file {key} is readable by every user of this machine (mode 0644): it holds the cluster's peer key";
        // The agent says it as it starts, and its stderr is read on another thread: ready can come first (a native agent
        // starts in milliseconds), so the line is waited for, a few seconds at most.
        for (var waited = Stopwatch.StartNew(); !agent.Process.StandardErrorTail.Contains(warning) && waited.Elapsed < TimeSpan.FromSeconds(10);)
            await Task.Delay(50);
        Assert.Contains(warning, agent.Process.StandardErrorTail);
    }

    [Fact]
    public async Task Agents_relayed_to_each_other_by_someone_without_the_key_fetch_and_pin_nothing()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(1 << 20, seed: 71)), "risk/relay");
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 2, key);
        // Position 1's address is the relay's: what the first agent sends there reaches the second only through it.
        await using var relay = new ThrottledRelay(agents[1].Peer, long.MaxValue);
        var request = new PrepRequest
        {
            Id = "relay1", Name = "risk/relay", Job = "job-relay", Members = [agents[0].Peer, relay.Address], Requester = "", Degree = 2,
            StallTimeout = TimeSpan.FromSeconds(20), Timeout = TimeSpan.FromMinutes(2),
        };
        var report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(3));

        Assert.True(report.Outcomes[0] is { Ready: true }, report.Outcomes[0]?.Detail ?? "no answer from position 0");
        Assert.True(report.Outcomes[1] is not { Ready: true }, "the relayed position answered ready");
        Assert.Empty((await s.StatusAsync(agents[1].Pipe)).Copies);
        Assert.Contains("relayed from another address", agents[1].Process.StandardErrorTail);
    }

    [Fact]
    public async Task A_member_that_joins_and_then_says_nothing_costs_the_others_the_stall_timeout_not_the_requests()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(2 << 20, seed: 73)), "risk/silent");
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 3, key);
        // The last position is a leaf of the tree: it takes the request, answers the join and then never speaks again,
        // so its parent waits on it in the first collective.
        var silentPeer = $"127.0.0.1:{FreePorts.Next()}";
        await using var silent = await SilentMemberAsync(silentPeer, PeerKey.Load(key, "key"));
        var request = new PrepRequest
        {
            // The join is not what this test is about: 10 s, so that four members join on a machine busy with other work
            // (with 2 s, the silent member missed the start once with a CPU loop and a disk writer beside the suite).
            Id = "silent1", Name = "risk/silent", Job = "job-silent", Members = [.. agents.Select(a => a.Peer), silentPeer], Requester = "", Degree = 2,
            JoinTimeout = TimeSpan.FromSeconds(10), StallTimeout = TimeSpan.FromSeconds(6), Timeout = TimeSpan.FromMinutes(4),
        };
        var clock = Stopwatch.StartNew();
        var report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(5));

        Assert.True(silent.Joined.IsCompletedSuccessfully, "the silent member never took the start");
        Assert.Equal(4, report.Joined);
        foreach (var p in new[] { 0, 1, 2 })
        {
            Assert.True(report.Outcomes[p] is { Ready: true }, $"position {p}: {report.Outcomes[p]?.Detail ?? "no answer"}");
            Assert.Equal(staged.Version, report.Outcomes[p]!.Version);
        }
        Assert.Null(report.Outcomes[3]);
        // The request's own limit is four minutes; the stall timeout is six seconds.
        Assert.True(clock.Elapsed < TimeSpan.FromMinutes(2), $"the nodes were ready after {clock.Elapsed.TotalSeconds:0} s");
    }

    [Fact]
    public async Task A_node_working_on_as_many_requests_as_it_takes_refuses_another_and_tells_its_requester_why()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(1 << 20, seed: 79)), "risk/busy");
        var key = KeyFile(s);
        var started = await StartAgentsAsync(s, 2, key);
        var (agent, other) = (started[0], started[1]);
        var (host, port) = AgentTree.Endpoint(agent.Peer);
        // Four requests from a parent that never sends the start: the agent works on each for their stall timeout.
        var holding = new List<PeerLink>();
        try
        {
            for (var i = 0; i < 4; i++)
            {
                var link = await PeerLink.ConnectAsync(host, port, PeerKey.Load(key, "key"), TimeSpan.FromSeconds(5), CancellationToken.None);
                holding.Add(link);
                var held = new PrepRequest
                {
                    Id = $"held{i}", Name = "risk/busy", Job = $"job-held{i}", Members = ["127.0.0.1:9", agent.Peer], Requester = "127.0.0.1:9", Position = 1, From = 0,
                    StallTimeout = TimeSpan.FromMinutes(2), Timeout = TimeSpan.FromMinutes(3),
                };
                await link.WriteAsync(PeerFrame.Prep, held.Encode(), CancellationToken.None);
                Assert.Equal(PeerFrame.Joined, (await link.ReadAnyAsync(CancellationToken.None)).Type);
            }
            // Below another node in the tree: its outcome says why, and the other node goes on without it.
            var request = new PrepRequest
            {
                Id = "busy5", Name = "risk/busy", Job = "job-busy", Members = [other.Peer, agent.Peer], Requester = "", StallTimeout = TimeSpan.FromSeconds(20), Timeout = TimeSpan.FromMinutes(2),
            };
            var report = await AgentsRequest.RunAsync(request, PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(1));
            Assert.True(report.Outcomes[0] is { Ready: true }, report.Outcomes[0]?.Detail ?? "no answer from position 0");
            var outcome = report.Outcomes[1];
            Assert.NotNull(outcome);
            Assert.Equal((int)ErrorCode.Unavailable, outcome!.Code);
            Assert.Contains("already working on 4 requests", outcome.Detail);

            // At the root: the request ends at once with the reason.
            var e = await Assert.ThrowsAsync<CommonDataException>(() => AgentsRequest.RunAsync(request with { Id = "busy6", Members = [agent.Peer] }, PeerKey.Load(key, "key"), null, CancellationToken.None)
                .WaitAsync(TimeSpan.FromMinutes(1)));
            Assert.Equal(ErrorCode.Unavailable, e.Code);
            Assert.Contains("already working on 4 requests", e.Message);
        }
        finally
        {
            foreach (var link in holding) await link.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_request_for_a_user_who_may_not_read_the_dataset_fetches_nothing_on_any_node_and_says_why()
    {
        if (!OperatingSystem.IsLinux() || UnixAccounts.EffectiveUserId != 0) return; // needs accounts it can create
        EnsureUser("hpcd-peer-reader");
        EnsureUser("hpcd-peer-other");
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var r = await s.RunAsync("Hpc.Stager", [s.WriteFile("prices.bin", Sandbox.RandomBytes(1 << 20, seed: 83)), "--name", "risk/readers", "--cache-hosts", s.HostList,
            "--readers", "user:hpcd-peer-reader", "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var version = JsonDocument.Parse(r.Stdout.Last()).RootElement.GetProperty("version").GetString();
        var key = KeyFile(s);
        var agents = await StartAgentsAsync(s, 2, key);
        PrepRequest For(string user) => new()
        {
            Id = $"u-{user}", Name = "risk/readers", Job = $"job-{user}", User = user, Members = [.. agents.Select(a => a.Peer)], Requester = "",
            StallTimeout = TimeSpan.FromSeconds(20), Timeout = TimeSpan.FromMinutes(2),
        };

        var denied = await AgentsRequest.RunAsync(For("hpcd-peer-other"), PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(2));
        foreach (var outcome in denied.Outcomes)
        {
            Assert.NotNull(outcome);
            Assert.Equal((int)ErrorCode.AccessDenied, outcome!.Code);
            Assert.Contains("hpcd-peer-other", outcome.Detail);
        }
        foreach (var a in agents) Assert.Empty((await s.StatusAsync(a.Pipe)).Copies);

        var allowed = await AgentsRequest.RunAsync(For("hpcd-peer-reader"), PeerKey.Load(key, "key"), null, CancellationToken.None).WaitAsync(TimeSpan.FromMinutes(2));
        foreach (var outcome in allowed.Outcomes)
        {
            Assert.True(outcome is { Ready: true }, outcome?.Detail ?? "no answer");
            Assert.Equal(version, outcome!.Version);
        }
        // The pin is the reader's: it is among the pins that user may release, and the agent's own status names it.
        foreach (var a in agents) Assert.Contains("job-hpcd-peer-reader", Assert.Single((await s.StatusAsync(a.Pipe)).Copies).Pins);
    }

    /// <summary>Stands at one position as an agent that answers the join for itself, takes the start, and then says
    /// nothing more while keeping its connection open (a hung process, or someone with the key stalling the others).</summary>
    private static async Task<Silent> SilentMemberAsync(string peer, PeerKey key)
    {
        var (host, port) = AgentTree.Endpoint(peer);
        var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Parse(host), port));
        listener.Listen(16);
        var joined = Task.Run(async () =>
        {
            using (listener)
            {
                var parent = await PeerLink.AcceptAsync(await listener.AcceptAsync(), key, TimeSpan.FromSeconds(30), CancellationToken.None);
                var request = PrepRequest.Decode(await parent.ReadAsync(PeerFrame.Prep, CancellationToken.None));
                var self = new byte[4];
                BinaryPrimitives.WriteInt32LittleEndian(self, request.Position);
                await parent.WriteAsync(PeerFrame.Joined, self, CancellationToken.None);
                await parent.ReadAsync(PeerFrame.Start, CancellationToken.None);
                return parent;
            }
        });
        await Task.Yield();
        return new Silent(joined);
    }

    private sealed class Silent(Task<PeerLink> joined) : IAsyncDisposable
    {
        /// <summary>Completes once the member has taken the start: the others now wait on it in the collectives.</summary>
        public Task<PeerLink> Joined => joined;

        public async ValueTask DisposeAsync()
        {
            if (joined.IsCompletedSuccessfully) await joined.Result.DisposeAsync();
        }
    }

    [SupportedOSPlatform("linux")]
    internal static void EnsureUser(string name)
    {
        if (UnixAccounts.UserId(name) is not null) return;
        using var p = Process.Start(new ProcessStartInfo("useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            { RedirectStandardError = true, UseShellExecute = false })!;
        var error = p.StandardError.ReadToEnd();
        p.WaitForExit();
        Assert.True(p.ExitCode is 0 or 9 && UnixAccounts.UserId(name) is not null, $"useradd {name} failed ({p.ExitCode}): {error}");
    }
}
