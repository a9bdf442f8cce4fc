using Hpc.CommonData.Fanout;
using Hpc.CommonData.Format;
using Hpc.NodeAgent.Fanout;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// An exchange run by the agent itself (node prep requested of the running agents) hands its blocks straight to the
/// store: each record verified like a fetched segment and journaled in the partial copy, which the next prefetch
/// completes and publishes.
/// </summary>
public class IngestingTheAgentsOwnExchange
{
    private const int Seg = 4096;

    /// <summary>Every block of a one-member plan as its message, the records exactly as the tier stores them.</summary>
    private static List<byte[]> Blocks(Node node, string version, FanoutPlan plan)
    {
        var messages = new List<byte[]>();
        foreach (var block in plan.Shares[0])
        {
            // Sized for the encoded records (the fake tier's manifests give the raw length as the stored one).
            var message = new byte[BlockMessage.HeaderLength + block.Count * (BlockMessage.RecordHeaderLength + SegmentCodec.MaxEncodedLength(Seg))];
            var at = BlockMessage.HeaderLength;
            for (var i = block.First; i < block.First + block.Count; i++)
                at += BlockMessage.WriteRecord(message.AsSpan(at), i, node.Source.StoredSegment(version, i));
            BlockMessage.WriteHeader(message, block, at);
            messages.Add(message[..at]);
        }
        return messages;
    }

    [Fact]
    public async Task Blocks_are_kept_once_verified_without_asking_the_tier_a_damaged_record_is_rejected_and_the_prefetch_fetches_only_that_one()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(12 * Seg, seed: 5);
        var version = node.Source.Stage("ring/a", data);
        var manifest = node.Source.ManifestBytes(version);
        var plan = new FanoutPlan(Manifest.Parse(manifest), ranks: 1, maxBlockBytes: 3 * Seg);
        var blocks = Blocks(node, version, plan);
        Assert.True(blocks.Count > 1);
        // One byte of segment 7's stored bytes damaged on the way (its record is the last 4 KB-odd of its block).
        var damaged = blocks.Single(b => BlockMessage.Layout(b, plan).Any(r => r.Index == 7));
        var record = BlockMessage.Layout(damaged, plan).Single(r => r.Index == 7);
        damaged[record.Offset + record.Length / 2] ^= 0x40;

        // The manifest came from another agent of the cluster, which resolved it: the tier is not asked again (with the
        // tier down, an ingest from a process on the node would be refused).
        node.Source.Down = true;
        await using (var ingest = new StoreIngest(node.Store, threads: 2, TimeSpan.FromSeconds(5)))
        {
            Assert.True(await ingest.BeginAsync("ring/a", version, manifest, CancellationToken.None));
            node.Source.Down = false;
            Assert.All(Enumerable.Range(0, 12), i => Assert.True(ingest.Lacks(i)));
            foreach (var message in blocks)
            {
                await ingest.WriteAsync(message, plan, CancellationToken.None);
                // The exchange reuses its receive buffers as soon as the block is handed over.
                Array.Fill(message, (byte)0xEE);
            }
            var end = await ingest.EndAsync(CancellationToken.None);
            Assert.Equal((11, 0, 1), (end.Accepted, end.AlreadyHad, end.Rejected));
            Assert.Equal([7], end.RejectedSegments());   // which one, so the exchange can name whose block it was
        }
        Assert.False(File.Exists(node.Complete(version))); // an exchange never publishes

        var published = await node.Store.EnsureAsync("ring/a", version, lease: false, pin: null, CancellationToken.None);
        Assert.Equal([7], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
    }

    [Fact]
    public async Task A_version_the_node_already_holds_takes_nothing()
    {
        using var node = new Node();
        var version = node.Source.Stage("ring/b", FakeSegmentSource.Bytes(4 * Seg, seed: 6));
        await node.Prefetch("ring/b");

        await using var ingest = new StoreIngest(node.Store, threads: 2, TimeSpan.FromSeconds(5));
        Assert.False(await ingest.BeginAsync("ring/b", version, node.Source.ManifestBytes(version), CancellationToken.None));
        Assert.False(ingest.Lacks(0));
    }

    [Fact]
    public async Task While_the_agent_is_already_fetching_the_version_the_ingest_does_not_wait_for_that_fetch_and_takes_nothing()
    {
        using var node = new Node();
        var data = FakeSegmentSource.Bytes(8 * Seg, seed: 7);
        var version = node.Source.Stage("ring/c", data);
        // A worker's open started a fetch of the version, which holds its writer turn (paused after one segment).
        node.Source.PauseAfter = 1;
        var fetching = node.Prefetch("ring/c");
        await node.Source.Paused;

        await using (var ingest = new StoreIngest(node.Store, threads: 2, turnWait: TimeSpan.FromMilliseconds(300)))
        {
            // The exchange's other nodes would wait on this one: it gives up the turn and only forwards.
            Assert.False(await ingest.BeginAsync("ring/c", version, node.Source.ManifestBytes(version), CancellationToken.None).WaitAsync(TimeSpan.FromSeconds(30)));
            Assert.False(fetching.IsCompleted);
        }
        node.Source.Resume();
        var fetched = await fetching;
        Assert.Equal(data, File.ReadAllBytes(fetched.Dataset.Path));
    }
}
