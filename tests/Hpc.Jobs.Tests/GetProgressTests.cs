namespace Hpc.Jobs.Tests;

/// <summary><c>hpcdata get</c> on a terminal shows its fetch on the progress line whichever way the data comes.</summary>
public sealed class GetProgressTests
{
    [Fact]
    public async Task Get_without_an_agent_shows_the_direct_fetch_on_the_progress_line()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var file = s.WriteFile("d.bin", Sandbox.RandomBytes(3_000_000, seed: 31));
        await s.StageAsync(file, "risk/direct");
        var noAgent = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() };
        var destination = Path.Combine(s.Root, "out.bin");

        var r = await Terminal.HpcdataAsync(s, ["get", "risk/direct", destination, "--cache-hosts", s.HostList], noAgent);

        Assert.True(r.Code == 0, r.Text);
        Assert.Contains("no node agent answers", r.Text);   // direct mode it was
        Assert.Matches(@"\rfetching risk/direct: \d+\.\d% [\d.]+ (B|KiB|MiB) of 2\.86 MiB", r.Text);
        Assert.Contains("writing out.bin: ", r.Text);
        Assert.Equal(File.ReadAllBytes(file), File.ReadAllBytes(destination));
    }
}
