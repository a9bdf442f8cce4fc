using System.Text.Json;

namespace Hpc.Integration.Tests;

/// <summary><c>stage --codec auto</c>: the stager picks LZ4 or Zstandard from a sample of the data and says why.</summary>
public sealed class CodecChoiceTests
{
    [Fact]
    public async Task Auto_picks_zstd_for_text_and_lz4_for_incompressible_bytes_and_the_summary_says_why()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var text = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(3 << 20)), "risk/text", "--codec", "auto");
        Assert.Equal("zstd", text.Codec);
        Assert.StartsWith("zstd: a sample of", text.CodecReason);

        var random = await c.StageAsync(Cluster.WriteFile(c.Root, "noise.bin", Cluster.RandomBytes(3 << 20)), "risk/noise", "--codec", "auto");
        Assert.Equal("lz4", random.Codec);
        Assert.EndsWith("zstd would save too little", random.CodecReason);
    }

    [Fact]
    public async Task With_a_link_rate_auto_weighs_the_link_against_the_codecs_speed()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        // On a slow link the stored bytes set the time: zstd, with the rate in the reason.
        var slow = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(3 << 20)), "risk/slow", "--codec", "auto", "--link-rate", "10mbit");
        Assert.Equal("zstd", slow.Codec);
        Assert.Contains("(10 Mbit/s) zstd moves raw data at", slow.CodecReason);
    }

    [Fact]
    public async Task A_fixed_codec_is_used_as_given_with_no_reason()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(1 << 20)), "risk/fixed", "--codec", "zstd:5");
        Assert.Equal("zstd:5", staged.Codec);
        Assert.Null(staged.CodecReason);
    }
}
