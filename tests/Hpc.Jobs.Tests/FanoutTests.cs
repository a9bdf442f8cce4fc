using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The fan-out against real processes: one cache host, one real node agent per rank (each node from its own address,
/// <see cref="Sandbox.NodeTier"/>), the ranks in this process. The
/// exchange only hands segments to the agents; each node's ordinary prefetch then verifies and publishes.
/// </summary>
public sealed class FanoutTests
{
    private static readonly TimeSpan Stall = TimeSpan.FromSeconds(20);

    private static async Task<List<string>> StartAgentsAsync(Sandbox s, int n)
    {
        var pipes = new List<string>();
        for (var i = 0; i < n; i++)
        {
            var pipe = s.NewPipe();
            var agent = s.Track(ComponentProcess.Start(new NodeAgentOptions
            {
                Pipe = pipe, DataDirectory = Path.Combine(s.Root, $"node{i}"), CacheTier = s.NodeTier(), NodeName = $"node{i}",
            }));
            await agent.WaitReadyAsync(Sandbox.Ready);
            pipes.Add(pipe);
        }
        return pipes;
    }

    [Fact]
    public async Task Four_nodes_get_the_version_while_the_cache_tier_sends_it_about_once()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(6 << 20)), "risk/fan");
        var pipes = await StartAgentsAsync(s, 4);
        await using var tier = new CacheTierClient(s.NodeTier());
        var before = await Sandbox.BytesSentAsync(tier);

        var ranks = InProcessRanks.Create(4);
        var summaries = await Task.WhenAll(ranks.Select(async r =>
        {
            await using var node = new AgentIngest(pipes[r.Rank]);
            return await FanoutExchange.RunAsync(r, tier, node, "risk/fan", null, CancellationToken.None, Stall);
        })).WaitAsync(TimeSpan.FromSeconds(60));
        var sent = await Sandbox.BytesSentAsync(tier) - before;

        Assert.All(summaries, x => Assert.Equal(staged.Version, x.Version));
        Assert.All(summaries, x => Assert.Equal((staged.Segments, 0), (x.Accepted, x.Rejected)));   // each node took every segment
        var stored = summaries.Sum(x => x.Ring.BytesFetched);
        // Every segment left the cache tier once (plus RESP framing and the manifest), not once per node.
        Assert.InRange(sent, stored, stored * 11 / 10 + (64 << 10));
        foreach (var pipe in pipes)
        {
            await using var agent = await AgentClient.ConnectAsync(pipe);
            var copy = await agent.PrefetchAsync("risk/fan", staged.Version);
            Assert.Equal(staged.Hash, copy.Hash);
            Assert.Equal(6 << 20, copy.Length);
        }
        // The prefetch found every segment already on the node: the tier sent nothing more but the manifest.
        Assert.InRange(await Sandbox.BytesSentAsync(tier) - before - sent, 0, 4 * (64 << 10));
    }

    /// <summary>
    /// One member damages the blocks it puts into the ring (a bad NIC, memory, or a forged sender). Every other node
    /// rejects those segments, names that member as the one whose blocks they were, and still ends with the verified
    /// copy, fetched from the tier.
    /// </summary>
    [Fact]
    public async Task A_member_whose_blocks_fail_verification_is_named_by_every_node_that_rejects_them()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(4 << 20, seed: 5)), "risk/damaged");
        var pipes = await StartAgentsAsync(s, 4);
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });

        var ranks = InProcessRanks.Create(4);
        var summaries = await Task.WhenAll(ranks.Select(async r =>
        {
            await using var node = new AgentIngest(pipes[r.Rank]);
            var ring = r.Rank == 2 ? new DamagingOwnBlocks(r.Ring) : r.Ring;
            return await FanoutExchange.RunAsync(r, tier, node, "risk/damaged", null, CancellationToken.None, Stall, ring, probeLinks: false);
        })).WaitAsync(TimeSpan.FromSeconds(60));

        Assert.Equal(0, summaries[2].Rejected);                                   // its own node took its own blocks as fetched
        foreach (var other in new[] { 0, 1, 3 })
        {
            var summary = summaries[other];
            Assert.True(summary.Rejected > 0, $"rank {other} rejected nothing");
            Assert.Equal([new MemberRejections(2, summary.Rejected)], summary.RejectedFrom);
            Assert.Contains($" rejected={summary.Rejected} rejected-from=2:{summary.Rejected}", NodeExchange.Fields(summary));
            var warning = Assert.Single(NodeExchange.Warnings(summary, r => $"rank {r}"));
            Assert.StartsWith($"{summary.Rejected} segment(s) in blocks that rank 2 put into the ring failed verification", warning);
        }
        foreach (var pipe in pipes)
        {
            await using var agent = await AgentClient.ConnectAsync(pipe);
            Assert.Equal(staged.Hash, (await agent.PrefetchAsync("risk/damaged", staged.Version)).Hash);
        }
    }

    /// <summary>A ring link that flips a byte inside the first segment of every block its own rank puts into the ring.</summary>
    private sealed class DamagingOwnBlocks(IRingLink inner) : IRingLink
    {
        public int Rank => inner.Rank;
        public int Size => inner.Size;
        public int SendWindow => inner.SendWindow;
        public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => inner.ReceiveAsync(buffer, ct);

        public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct)
        {
            if (System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(message.Span[4..]) != Rank) return inner.SendAsync(message, ct);
            var damaged = message.ToArray();
            damaged[BlockMessage.HeaderLength + BlockMessage.RecordHeaderLength + 100] ^= 0x5a;
            return inner.SendAsync(damaged, ct);
        }
    }

    [Fact]
    public async Task A_node_that_already_holds_the_version_passes_blocks_on_and_rewrites_nothing()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(3 << 20, seed: 9)), "risk/held");
        var pipes = await StartAgentsAsync(s, 3);
        await using (var first = await AgentClient.ConnectAsync(pipes[1])) await first.PrefetchAsync("risk/held", staged.Version);
        await using var tier = new CacheTierClient(s.NodeTier());

        var ranks = InProcessRanks.Create(3);
        var summaries = await Task.WhenAll(ranks.Select(async r =>
        {
            await using var node = new AgentIngest(pipes[r.Rank]);
            return await FanoutExchange.RunAsync(r, tier, node, "risk/held", staged.Version, CancellationToken.None, Stall);
        }));

        Assert.True(summaries[1].NodeHadIt);
        Assert.Equal(0, summaries[1].Accepted);
        Assert.False(summaries[0].NodeHadIt);
        Assert.True(summaries[0].Accepted > 0 && summaries[2].Accepted > 0);
        foreach (var pipe in pipes)
        {
            await using var agent = await AgentClient.ConnectAsync(pipe);
            Assert.Equal(staged.Hash, (await agent.PrefetchAsync("risk/held", staged.Version)).Hash);
        }
    }

    /// <summary>
    /// Nodes holding yesterday's version: each copies the unchanged segments from its own copy when the ingest begins,
    /// the ranks agree on the union of what is still missing, and only that leaves the cache tier and travels the ring.
    /// </summary>
    [Fact]
    public async Task Nodes_holding_yesterdays_version_carry_only_the_segments_that_changed()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var yesterday = Sandbox.RandomBytes(8 << 20, seed: 31);
        var v1 = await s.StageAsync(s.WriteFile("v1.bin", yesterday), "risk/daily");
        var today = yesterday.ToArray();
        new Random(32).NextBytes(today.AsSpan(4 << 20, 100_000));   // about 100 KB rewritten in the middle
        var v2 = await s.StageAsync(s.WriteFile("v2.bin", today), "risk/daily");
        var pipes = await StartAgentsAsync(s, 3);
        foreach (var pipe in pipes)
            await using (var agent = await AgentClient.ConnectAsync(pipe)) await agent.PrefetchAsync("risk/daily", v1.Version);
        await using var tier = new CacheTierClient(s.NodeTier());
        var before = await Sandbox.BytesSentAsync(tier);

        var ranks = InProcessRanks.Create(3);
        var summaries = await Task.WhenAll(ranks.Select(async r =>
        {
            await using var node = new AgentIngest(pipes[r.Rank]);
            return await FanoutExchange.RunAsync(r, tier, node, "risk/daily", v2.Version, CancellationToken.None, Stall);
        })).WaitAsync(TimeSpan.FromSeconds(60));
        var sent = await Sandbox.BytesSentAsync(tier) - before;

        var carried = summaries[0].SegmentsCarried;
        Assert.All(summaries, x => Assert.Equal(carried, x.SegmentsCarried));            // one plan on every rank
        Assert.InRange(carried, 1, v2.Segments / 10);                                     // the changed region's few segments
        Assert.All(summaries, x => Assert.Equal((carried, 0), (x.Accepted, x.Rejected)));
        Assert.True(sent < v2.RawBytes / 10, $"the tier sent {sent} bytes of a {v2.RawBytes}-byte version (incompressible: stored as large)");
        foreach (var pipe in pipes)
        {
            await using var agent = await AgentClient.ConnectAsync(pipe);
            var copy = await agent.PrefetchAsync("risk/daily", v2.Version);
            Assert.Equal(v2.Hash, copy.Hash);
        }
    }

    [Fact]
    public async Task A_dataset_nobody_staged_fails_on_every_rank_with_the_same_reason()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipes = await StartAgentsAsync(s, 2);
        await using var tier = new CacheTierClient(s.NodeTier());
        var ranks = InProcessRanks.Create(2);
        var errors = await Task.WhenAll(ranks.Select(async r =>
        {
            await using var node = new AgentIngest(pipes[r.Rank]);
            return await Assert.ThrowsAsync<CommonDataException>(() => FanoutExchange.RunAsync(r, tier, node, "nobody/staged", null, CancellationToken.None, Stall));
        }));
        Assert.All(errors, e => Assert.Equal(ErrorCode.NotFound, e.Code));
        Assert.All(errors, e => Assert.Contains("nobody/staged", e.Message));
    }
}
