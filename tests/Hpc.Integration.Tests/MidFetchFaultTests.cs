using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Tests;

namespace Hpc.Integration.Tests;

/// <summary>
/// Processes killed outright (SIGKILL) in the middle of a node's fetch. Replies pass a rate-limited relay, so the fetch
/// lasts seconds and the kill lands inside it on any machine.
/// </summary>
public sealed class MidFetchFaultTests
{
    private const int Size = 6 << 20;
    private const long Rate = 1 << 20;

    [Fact]
    public async Task A_cache_host_killed_mid_fetch_with_two_replicas_costs_the_node_nothing_but_time()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(Size, seed: 11);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", bytes), "fault/host", "--replicas", "2");
        await using var relay0 = new ThrottledRelay(c.Hosts[0], Rate);
        await using var relay1 = new ThrottledRelay(c.Hosts[1], Rate);
        var pipe = $"hcdmid{Environment.ProcessId}h";
        await StartAgentAsync(c, pipe, Path.Combine(c.Root, "agent"), [relay0.Address, relay1.Address]);
        await using var client = await AgentClient.ConnectAsync(pipe);

        var fetch = PrefetchAsync(pipe, "fault/host");
        var done = await WaitUntilPartlyFetchedAsync(client, staged.Version);
        await c.Processes.First(p => p.ReadyText == c.Hosts[0]).KillAsync();

        var copy = await fetch;
        Assert.True(done.BytesDone < Size, $"the kill came after the fetch ended ({done.BytesDone} of {Size} bytes)");
        Assert.Equal("fetched", copy.Source);
        await using var data = await Dataset.OpenAsync("fault/host", Cluster.Via(pipe));
        Assert.True(data.VerifyHash());
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
    }

    [Fact]
    public async Task An_agent_killed_mid_fetch_and_restarted_keeps_what_it_verified_and_fetches_only_the_rest()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(Size, seed: 12);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", bytes), "fault/agent");
        await using var relay = new ThrottledRelay(c.Hosts[0], Rate);
        var pipe = $"hcdmid{Environment.ProcessId}a";
        var dataDir = Path.Combine(c.Root, "agent");
        var first = await StartAgentAsync(c, pipe, dataDir, [relay.Address]);

        CopyStatus done;
        await using (var client = await AgentClient.ConnectAsync(pipe))
        {
            _ = PrefetchAsync(pipe, "fault/agent");
            done = await WaitUntilPartlyFetchedAsync(client, staged.Version);
        }
        await first.KillAsync();
        Assert.True(done.SegmentsDone < staged.Segments, "the kill came after the fetch ended");

        await StartAgentAsync(c, pipe, dataDir, [c.Hosts[0]]);
        await using (var client = await AgentClient.ConnectAsync(pipe))
        {
            var before = (await client.StatusAsync()).Copies.Single(x => x.Version == staged.Version);
            Assert.Equal("partial", before.State);
            Assert.True(before.SegmentsDone >= 1, "verified segments survive the kill in the journal");
            Assert.Equal("resumed", (await client.PrefetchAsync("fault/agent")).Source);
        }
        await using var data = await Dataset.OpenAsync("fault/agent", Cluster.Via(pipe));
        Assert.True(data.VerifyHash());
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
    }

    /// <summary>
    /// What a service manager's stop does (systemctl stop: SIGTERM, then SIGKILL after TimeoutStopSec=30): the agent
    /// stops well within that, exit code 0, and what it verified before the stop is kept for the next start.
    /// </summary>
    [Fact]
    public async Task An_agent_stopped_with_SIGTERM_mid_fetch_exits_cleanly_and_the_next_start_resumes()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(Size, seed: 13);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", bytes), "fault/term");
        await using var relay = new ThrottledRelay(c.Hosts[0], Rate);
        var pipe = $"hcdmid{Environment.ProcessId}t";
        var dataDir = Path.Combine(c.Root, "agent");
        var first = await StartAgentAsync(c, pipe, dataDir, [relay.Address]);

        CopyStatus done;
        await using (var client = await AgentClient.ConnectAsync(pipe))
        {
            _ = PrefetchAsync(pipe, "fault/term");
            done = await WaitUntilPartlyFetchedAsync(client, staged.Version);
        }
        var stopping = System.Diagnostics.Stopwatch.StartNew();
        ComponentProcess.Terminate(first.Id);
        Assert.Equal(0, await first.WaitForExitAsync(TimeSpan.FromSeconds(30)));
        Assert.True(stopping.Elapsed < TimeSpan.FromSeconds(20), $"the agent took {stopping.Elapsed.TotalSeconds:0} s to stop");
        Assert.True(done.SegmentsDone < staged.Segments, "the stop came after the fetch ended");

        await StartAgentAsync(c, pipe, dataDir, [c.Hosts[0]]);
        await using (var client = await AgentClient.ConnectAsync(pipe))
        {
            var before = (await client.StatusAsync()).Copies.Single(x => x.Version == staged.Version);
            Assert.Equal("partial", before.State);
            Assert.True(before.SegmentsDone >= done.SegmentsDone, $"verified before the stop: {done.SegmentsDone}, kept: {before.SegmentsDone}");
            Assert.Equal("resumed", (await client.PrefetchAsync("fault/term")).Source);
        }
        await using var data = await Dataset.OpenAsync("fault/term", Cluster.Via(pipe));
        Assert.True(data.VerifyHash());
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
    }

    /// <summary>
    /// A worker that asked for a copy and went away before the answer (Ctrl-C, a killed job): the agent's answer meets a
    /// broken pipe. The agent keeps serving, and a later stop is still clean: exit 0, no critical line, no socket file.
    /// </summary>
    [Fact]
    public async Task An_agent_whose_client_went_away_before_its_answer_keeps_serving_and_stops_cleanly_leaving_no_socket()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(Size, seed: 17)), "fault/gone");
        await using var relay = new ThrottledRelay(c.Hosts[0], Rate);
        var pipe = $"hcdmid{Environment.ProcessId}g";
        var agent = await StartAgentAsync(c, pipe, Path.Combine(c.Root, "agent"), [relay.Address]);

        await using (var status = await AgentClient.ConnectAsync(pipe))
        {
            using (var cancel = new CancellationTokenSource())
            {
                var gone = await AgentClient.ConnectAsync(pipe);
                var asking = gone.PrefetchAsync("fault/gone", ct: cancel.Token);
                await WaitUntilPartlyFetchedAsync(status, staged.Version);
                cancel.Cancel();
                await gone.DisposeAsync();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => asking);
            }
            // The fetch goes on for the node; its answer to the worker that left meets a broken pipe.
            var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(60);
            while ((await status.StatusAsync()).Copies.Single(x => x.Version == staged.Version).State != "complete")
            {
                Assert.True(DateTime.UtcNow < deadline, "the fetch did not complete within 60 s");
                await Task.Delay(50);
            }
            await Task.Delay(300);
            Assert.Equal("local", (await status.PrefetchAsync("fault/gone")).Source); // still serving
        }

        ComponentProcess.Terminate(agent.Id);
        Assert.Equal(0, await agent.WaitForExitAsync(TimeSpan.FromSeconds(30)));
        Assert.DoesNotContain("crit", agent.StandardErrorTail);
        Assert.False(File.Exists(AgentClient.SocketPath(pipe)), "the agent left its socket file");
    }

    private static async Task<ComponentProcess> StartAgentAsync(Cluster c, string pipe, string dataDir, List<string> hosts)
    {
        var agent = c.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = dataDir,
            CacheTier = new CacheTierOptions { Hosts = hosts, Replicas = hosts.Count > 1 ? 2 : 1 },
        }), name: "agent"));
        await agent.WaitReadyAsync(TimeSpan.FromSeconds(30));
        return agent;
    }

    /// <summary>A prefetch on its own connection, so the test's connection stays free for status.</summary>
    private static async Task<LocalDataset> PrefetchAsync(string pipe, string name)
    {
        await using var client = await AgentClient.ConnectAsync(pipe);
        return await client.PrefetchAsync(name);
    }

    private static async Task<CopyStatus> WaitUntilPartlyFetchedAsync(AgentClient client, string version)
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(60);
        while (DateTime.UtcNow < deadline)
        {
            if ((await client.StatusAsync()).Copies.FirstOrDefault(x => x.Version == version) is { BytesDone: >= 1 << 20 } copy)
                return copy;
            await Task.Delay(20);
        }
        throw new TimeoutException("the fetch did not reach 1 MB within 60 s");
    }
}
