using Hpc.CommonData;
using Hpc.CommonData.Agent;

namespace Hpc.Integration.Tests;

/// <summary>
/// An update of a dataset the node already holds: with content-defined segments, rows inserted near the start leave
/// every later segment as it was, so the stager sends and the node fetches only the segments around the edits; the
/// node takes the rest from its copy of the previous version, checked, and the result verifies as a full fetch would.
/// </summary>
public class DeltaTests
{
    [Fact]
    public async Task A_node_holding_the_previous_version_fetches_only_the_changed_segments_of_the_next()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var v1 = Cluster.Csvish(4 << 20, seed: 21);
        var first = await c.StageAsync(Cluster.WriteFile(c.Root, "v1.csv", v1), "delta/prices");
        var (_, pipe, _) = await c.StartAgentAsync();
        await using var client = await AgentClient.ConnectAsync(pipe);
        Assert.Equal("fetched", (await client.PrefetchAsync("delta/prices")).Source);

        // A day's rows inserted near the start and one price revised near the end.
        var inserted = System.Text.Encoding.ASCII.GetBytes(string.Concat(Enumerable.Range(0, 50).Select(i => $"2024-02-{i % 28 + 1:00},INST{i:00000},1{i}.2500\n")));
        var at = Array.IndexOf(v1, (byte)'\n', 100_000) + 1;
        var revise = Array.IndexOf(v1, (byte)'\n', 3_900_000) + 1;
        byte[] v2 = [.. v1[..at], .. inserted, .. v1[at..]];
        v2[revise + inserted.Length] = (byte)'3';
        var second = await c.StageAsync(Cluster.WriteFile(c.Root, "v2.csv", v2), "delta/prices");
        Assert.InRange(second.Segments - second.SkippedSegments, 1, 6);
        Assert.True(second.SentBytes < first.StoredBytes / 10, $"the stager sent {second.SentBytes} of {second.StoredBytes} stored bytes");

        await using var tier = c.Tier();
        var before = await DataPathTests.BytesSent(tier);
        var update = await client.PrefetchAsync("delta/prices");
        var fetched = await DataPathTests.BytesSent(tier) - before;
        Assert.Equal(second.Version, update.Version);
        Assert.True(update.ReusedBytes > v2.Length * 9L / 10, $"{update.ReusedBytes} of {v2.Length} bytes reused");
        Assert.True(fetched < second.StoredBytes / 10, $"the node fetched {fetched} bytes of a {second.StoredBytes}-byte version");

        await using var data = await Dataset.OpenAsync("delta/prices", Cluster.Via(pipe));
        Assert.True(data.VerifyHash());
        Assert.Equal(v2, data.GetSpan(0, v2.Length).ToArray());
        var previous = Cluster.Via(pipe);
        previous.Version = first.Version;
        await using var old = await Dataset.OpenAsync("delta/prices", previous);
        Assert.Equal(v1, old.GetSpan(0, v1.Length).ToArray());
    }

    [Fact]
    public async Task With_fixed_size_segments_an_insert_moves_every_later_segment()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var v1 = Cluster.Csvish(2 << 20, seed: 22);
        await c.StageAsync(Cluster.WriteFile(c.Root, "v1.csv", v1), "delta/fixed", "--chunking", "fixed");
        byte[] v2 = [.. v1[..1000], .. "2024-02-01,INST00001,10.0000\n"u8.ToArray(), .. v1[1000..]];
        var second = await c.StageAsync(Cluster.WriteFile(c.Root, "v2.csv", v2), "delta/fixed", "--chunking", "fixed");
        Assert.Equal(0, second.SkippedSegments);
    }
}
