using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

public class PlacementTests
{
    private static CacheTierClient Client(int hosts, int replicas) =>
        new(new CacheTierOptions { Hosts = Enumerable.Range(0, hosts).Select(i => $"10.0.0.{i + 1}:6380").ToList(), Replicas = replicas });

    [Fact]
    public async Task Rendezvous_placement_spreads_segments_evenly_and_replicas_on_distinct_hosts()
    {
        await using var client = Client(4, 2);
        var counts = new int[4];
        Span<int> place = stackalloc int[2];
        for (var i = 0; i < 40_000; i++)
        {
            client.Place(SegmentId.Of(BitConverter.GetBytes(i)), place);
            Assert.NotEqual(place[0], place[1]);
            counts[place[0]]++;
        }
        Assert.All(counts, c => Assert.InRange(c, 9_000, 11_000));
    }

    [Fact]
    public async Task Adding_a_host_moves_only_the_segments_it_takes_over()
    {
        await using var three = Client(3, 1);
        await using var four = Client(4, 1);
        var moved = 0;
        Span<int> a = stackalloc int[1], b = stackalloc int[1];
        for (var i = 0; i < 20_000; i++)
        {
            var id = SegmentId.Of(BitConverter.GetBytes(i));
            three.Place(id, a);
            four.Place(id, b);
            if (a[0] != b[0]) { moved++; Assert.Equal(3, b[0]); }
        }
        Assert.InRange(moved, 4_000, 6_000); // about a quarter
    }

    [Theory]
    [InlineData("h:1", "h", 1)]
    [InlineData("127.0.0.1", "127.0.0.1", CacheEndpoint.DefaultPort)]
    [InlineData("[::1]:7000", "::1", 7000)]
    public void Parses_host_addresses(string text, string host, int port) =>
        Assert.Equal(new CacheEndpoint(host, port), CacheEndpoint.Parse(text));

    [Theory]
    [InlineData("h:0")]
    [InlineData("h:70000")]
    [InlineData(":80")]
    [InlineData("h:x")]
    public void Rejects_bad_host_addresses(string text) => Assert.Throws<FormatException>(() => CacheEndpoint.Parse(text));

    [Theory]
    [InlineData("64KB", 65536)]
    [InlineData("1.5MB", 1572864)]
    [InlineData("1GB", 1073741824)]
    [InlineData("100", 100)]
    public void Parses_sizes(string text, long bytes) => Assert.Equal(bytes, ByteSize.Parse(text).Bytes);

    /// <summary>
    /// Sizes print one way in every program: powers of 1024, as they are parsed, labelled KiB/MiB/GiB, three
    /// significant digits at most; what is printed parses back to within that rounding.
    /// </summary>
    [Theory]
    [InlineData(0, "0 B")]
    [InlineData(681, "681 B")]
    [InlineData(1024, "1 KiB")]
    [InlineData(1536, "1.5 KiB")]
    [InlineData(13_956_000, "13.3 MiB")]
    [InlineData(256L << 20, "256 MiB")]
    [InlineData((1L << 20) - 1, "1 MiB")]
    [InlineData(1_299_227_607, "1.21 GiB")]
    [InlineData(5L << 40, "5 TiB")]
    public void Formats_sizes_in_powers_of_1024_labelled_so(long bytes, string text)
    {
        Assert.Equal(text, ByteSize.Format(bytes));
        Assert.Equal(text, new ByteSize(bytes).ToString());
        Assert.InRange(ByteSize.Parse(text).Bytes, bytes * 0.99, bytes * 1.01 + 1);
    }

    [Fact]
    public void Formats_rates_in_the_units_of_sizes() => Assert.Equal("120 MiB/s", ByteRate.Format(120 << 20));
}
