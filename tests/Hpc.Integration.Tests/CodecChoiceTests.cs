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
        var text = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(3 << 20)), "risk/text", "--codec", "auto", "--link-rate", "100mbit");
        Assert.Equal("zstd", text.Codec);
        Assert.StartsWith("zstd: a sample of", text.CodecReason);

        var random = await c.StageAsync(Cluster.WriteFile(c.Root, "noise.bin", Cluster.RandomBytes(3 << 20)), "risk/noise", "--codec", "auto", "--link-rate", "100mbit");
        Assert.Equal("lz4", random.Codec);
        Assert.EndsWith("zstd would save too little", random.CodecReason);
    }

    [Fact]
    public async Task Auto_is_the_default_and_takes_the_link_rate_from_the_sites_setting_and_lz4_while_none_is_known()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var path = Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(3 << 20));

        // No --codec and no link rate anywhere: lz4, and the reason says which setting would weigh zstd.
        var unknown = await c.StageAsync(path, "risk/default");
        Assert.Equal("lz4", unknown.Codec);
        Assert.StartsWith($"lz4: the nodes' link rate is not known (--link-rate, or {Hpc.CommonData.Hosting.StagerOptions.LinkRateVariable} for the site)", unknown.CodecReason);

        // The site's setting, given once in the environment (or settings file) every stage runs with: a 10 Mbit/s link
        // makes the smaller zstd bytes worth their slower codec.
        var (code, stdout, stderr) = await c.RunAsync("Hpc.Stager", [path, "--name", "risk/site", "--cache-hosts", c.HostList, "--json"],
            new Dictionary<string, string?> { [Hpc.CommonData.Hosting.StagerOptions.LinkRateVariable] = "10mbit" });
        Assert.True(code == 0, stderr);
        var site = JsonSerializer.Deserialize<Cluster.Staged>(stdout.Last(), JsonSerializerOptions.Web)!;
        Assert.Equal("zstd", site.Codec);
        Assert.Contains("(10 Mbit/s) zstd moves raw data at", site.CodecReason);
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

    [Fact]
    public async Task Restaged_with_another_codec_the_segments_on_the_tier_are_kept_as_stored_and_the_summary_says_so_and_counts_them_so()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var path = Cluster.WriteFile(c.Root, "prices.csv", Cluster.Csvish(3 << 20));
        var lz4 = await c.StageAsync(path, "risk/recoded", "--codec", "lz4");

        var again = await c.RunStagerAsync([path, "--name", "risk/recoded", "--cache-hosts", c.HostList, "--codec", "zstd"]);

        Assert.True(again.Code == 0, again.Stderr);
        var said = string.Join("\n", again.Stdout);
        // What is stored is the LZ4 form, so that is what the summary counts, and the manifest is the LZ4 stage's own.
        Assert.Contains($"stored {Hpc.CommonData.ByteSize.Format(lz4.StoredBytes)} ", said);
        Assert.Contains($"{lz4.Segments} of the segments already on the cache tier are stored in another encoding than zstd and were kept so, not re-encoded", said);
        Assert.Contains($"version {lz4.Version} (unchanged", said);

        // Half of the file changed: the new half goes as zstd, the kept half is counted as stored, in LZ4.
        var changed = Cluster.Csvish(3 << 20);
        Cluster.Csvish(3 << 20, seed: 11).AsSpan(0, 3 << 19).CopyTo(changed);
        var mixed = await c.StageAsync(Cluster.WriteFile(c.Root, "prices2.csv", changed), "risk/recoded", "--codec", "zstd");
        Assert.True(mixed.SkippedSegments > 0 && mixed.SkippedSegments < mixed.Segments, $"{mixed.SkippedSegments} of {mixed.Segments} kept");
        await using var tier = c.Tier();
        var manifest = (await tier.ResolveAsync("risk/recoded", mixed.Version)).Manifest;
        Assert.Equal(mixed.StoredBytes, manifest.Segments.Sum(s => s.StoredLength));
        var asStoredByLz4 = (await tier.ResolveAsync("risk/recoded", lz4.Version)).Manifest.Segments.ToDictionary(s => s.Id, s => s.StoredLength);
        var kept = manifest.Segments.Where(s => asStoredByLz4.ContainsKey(s.Id)).ToList();
        Assert.Equal(mixed.SkippedSegments, kept.Count);
        Assert.All(kept, s => Assert.Equal(asStoredByLz4[s.Id], s.StoredLength));
        // The new ones went as zstd, which stores this kind of text in much less than LZ4 does.
        Assert.True(manifest.Segments.Where(s => !asStoredByLz4.ContainsKey(s.Id)).Average(s => s.StoredLength) < 0.8 * kept.Average(s => s.StoredLength));
    }
}
