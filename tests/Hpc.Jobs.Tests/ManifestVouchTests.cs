using Hpc.CommonData.Cache;

namespace Hpc.Jobs.Tests;

/// <summary>
/// What an agent asks its cache tier before it ingests a fan-out's blocks: whether the tier holds the version offered.
/// The version id is the manifest's hash, so that is a question of a few bytes per host; reading the manifest to compare
/// moved it whole from every host, on every node of a job at once.
/// </summary>
public sealed class ManifestVouchTests
{
    [Fact]
    public async Task Asking_whether_the_tier_holds_a_version_answers_without_moving_its_manifest()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StartCacheHostAsync();
        // Many small segments: a manifest of some size.
        var staged = await s.StageAsync(s.WriteFile("ticks.bin", Sandbox.RandomBytes(64 << 20, seed: 41)), "risk/vouch");
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var (_, _, manifest) = await tier.Catalog.ResolveWithBytesAsync("risk/vouch", staged.Version);

        var before = await Sandbox.BytesSentAsync(tier);
        Assert.True(await tier.Catalog.HoldsManifestAsync(staged.Version));
        Assert.False(await tier.Catalog.HoldsManifestAsync(new string('7', staged.Version.Length)));
        var asking = await Sandbox.BytesSentAsync(tier) - before;

        before = await Sandbox.BytesSentAsync(tier);
        await tier.Catalog.ResolveWithBytesAsync("risk/vouch", staged.Version);
        var reading = await Sandbox.BytesSentAsync(tier) - before;

        // The INFO replies that count the bytes are in both figures alike.
        Assert.True(manifest.Length > 16_000, $"a manifest of {manifest.Length} bytes does not tell");
        Assert.True(asking < reading / 4, $"asking moved {asking} bytes, reading the manifest {reading} (it is {manifest.Length} bytes)");
    }
}
