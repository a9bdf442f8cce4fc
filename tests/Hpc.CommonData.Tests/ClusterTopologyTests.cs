using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Tests;

/// <summary>How the client finds a key's node in a Redis Cluster: the slot function, the map, and the redirects.</summary>
public sealed class ClusterTopologyTests
{
    [Theory]
    // Values Redis itself gives (CLUSTER KEYSLOT), including the hash-tag rule of its cluster specification.
    [InlineData("foo", 12182)]
    [InlineData("bar", 5061)]
    [InlineData("123456789", 0x31C3)]
    [InlineData("{user1000}.following", 3443)]
    [InlineData("{user1000}.followers", 3443)]
    [InlineData("foo{}{bar}", 8363)] // an empty first tag hashes the whole key
    [InlineData("foo{{bar}}zap", 4015)] // the tag is "{bar" up to the first '}'
    public void A_key_hashes_to_the_slot_redis_gives_it(string key, int slot) => Assert.Equal(slot, ClusterTopology.SlotOf(key));

    [Fact]
    public void A_segment_key_hashes_as_its_text()
    {
        var id = Format.SegmentId.Of("some bytes"u8);
        Assert.Equal(ClusterTopology.SlotOf(CacheKeys.Segment(id)), ClusterTopology.SlotOf(id));
    }

    [Fact]
    public void The_slot_map_puts_each_range_on_its_master_then_its_replicas()
    {
        var reply = Array(
            Array(Int(0), Int(8191), Node("10.0.0.1", 7000), Node("10.0.0.4", 7000)),
            Array(Int(8192), Int(16383), Node("10.0.0.2", 7000)));
        var known = new List<CacheEndpoint>();
        var map = new ClusterTopology();
        Assert.Null(map.Load(reply, e => { if (!known.Contains(e)) known.Add(e); return known.IndexOf(e); }));

        Assert.Equal([0, 1], map.NodesOf(0));
        Assert.Equal([0, 1], map.NodesOf(8191));
        Assert.Equal([2], map.NodesOf(8192));
        Assert.Equal([new CacheEndpoint("10.0.0.1", 7000), new("10.0.0.4", 7000), new("10.0.0.2", 7000)], known);
        Assert.Equal(2, map.Shards.Count);

        map.Move(5, 2); // MOVED 5 10.0.0.2:7000
        Assert.Equal([2, 0, 1], map.NodesOf(5));
        Assert.Equal([0, 1], map.NodesOf(6));
    }

    [Fact]
    public void A_reply_that_is_no_slot_map_is_refused_with_the_reason()
    {
        var map = new ClusterTopology();
        Assert.Equal("ERR This instance has cluster support disabled", map.Load(new RespReply(RespKind.Error, "ERR This instance has cluster support disabled"), _ => 0));
        Assert.NotNull(map.Load(Array(Array(Int(0), Int(20000), Node("a", 1))), _ => 0));
        Assert.False(map.Known);
    }

    [Theory]
    [InlineData("MOVED 3999 127.0.0.1:6381", false, 3999, "127.0.0.1", 6381)]
    [InlineData("ASK 3999 [::1]:6381", true, 3999, "::1", 6381)]
    public void Redirects_name_the_slot_and_the_node_to_ask(string message, bool ask, int slot, string host, int port)
    {
        Assert.True(ClusterRedirect.TryParse(message, out var r));
        Assert.Equal((ask, slot, new CacheEndpoint(host, port)), (r.Ask, r.Slot, r.Target));
        Assert.True(ClusterRedirect.IsRouting(message));
    }

    [Theory]
    [InlineData("CLUSTERDOWN The cluster is down", true)]
    [InlineData("TRYAGAIN Multiple keys request during rehashing of slot", true)]
    [InlineData("ERR unknown command", false)]
    [InlineData("MOVED x 127.0.0.1:1", false)]
    public void Only_the_clusters_own_answers_count_as_routing(string message, bool routing) => Assert.Equal(routing, ClusterRedirect.IsRouting(message));

    [Fact]
    public void A_plain_client_that_meets_a_cluster_is_told_the_setting()
    {
        var e = new RespErrorException("127.0.0.1:7000", "MOVED 12182 127.0.0.1:7002");
        Assert.Contains("--cache-cluster", e.Message);
        Assert.DoesNotContain("--cache-cluster", new RespErrorException("h:1", "ERR wrong").Message);
    }

    private static RespReply Array(params RespReply[] items) => new(RespKind.Array, Items: items);
    private static RespReply Int(long v) => new(RespKind.Integer, Integer: v);
    private static RespReply Node(string ip, int port) => Array(new RespReply(RespKind.Bulk, Bulk: Encoding.UTF8.GetBytes(ip)), Int(port), new RespReply(RespKind.Bulk, Bulk: "id"u8.ToArray()));
}
