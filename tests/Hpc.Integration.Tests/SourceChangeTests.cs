using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// A stage publishes only what its source was from start to end: a file truncated, rewritten or replaced while it is
/// read fails the stage naming it, and nothing is published; an empty standard input is refused unless asked for.
/// </summary>
public sealed class SourceChangeTests
{
    /// <summary>
    /// Starts a stage held to <paramref name="rate"/> bytes per second, and returns once the cache host has received its
    /// first megabyte: the source was opened (and a tree listed) by then, and the stage is still reading.
    /// </summary>
    private static async Task<ComponentProcess> SlowStageAsync(Cluster c, string path, string name, string rate)
    {
        var stage = c.Track(ComponentProcess.Start("Hpc.Stager", [path, "--name", name, "--cache-hosts", c.HostList, "--max-rate", rate, "--chunking", "fixed"], name: "stager"));
        await using var tier = c.Tier();
        for (var clock = System.Diagnostics.Stopwatch.StartNew(); clock.Elapsed < TimeSpan.FromSeconds(60); await Task.Delay(50))
            if ((await tier.GetHostStatusAsync())[0].BytesReceived > 1 << 20) return stage;
        throw new TimeoutException("the stage sent nothing in 60 s");
    }

    [Fact]
    public async Task A_file_truncated_while_it_is_staged_fails_the_stage_naming_it_and_publishes_nothing()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var path = Cluster.WriteFile(c.Root, "growing.bin", Cluster.RandomBytes(64 << 20, seed: 531));
        var stage = await SlowStageAsync(c, path, "risk/truncated", "8MB");
        await using (var file = new FileStream(path, FileMode.Open, FileAccess.Write)) file.SetLength(1 << 20);

        var code = await stage.WaitForExitAsync(TimeSpan.FromMinutes(2));
        Assert.Equal(ExitCodes.IoError, code);
        Assert.Contains($"'{path}' changed while it was staged: its size went from {64 << 20} to {1 << 20} bytes; nothing was published", stage.StandardErrorTail);
        await using var tier = c.Tier();
        Assert.Null(await tier.GetLatestAsync("risk/truncated"));
    }

    [Fact]
    public async Task A_file_of_a_tree_rewritten_in_place_while_the_tree_is_staged_fails_the_stage_naming_it()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Directory.CreateDirectory(Path.Combine(c.Root, "tree")).FullName;
        Cluster.WriteFile(tree, "a.bin", Cluster.RandomBytes(32 << 20, seed: 532));
        var late = Cluster.WriteFile(tree, "z.bin", Cluster.RandomBytes(32 << 20, seed: 533));
        var stage = await SlowStageAsync(c, tree, "risk/tree", "8MB");
        // Same size, new bytes: only its times say it changed.
        await using (var file = new FileStream(late, FileMode.Open, FileAccess.Write)) file.Write(Cluster.RandomBytes(4096, seed: 534));

        var code = await stage.WaitForExitAsync(TimeSpan.FromMinutes(2));
        Assert.Equal(ExitCodes.IoError, code);
        Assert.Contains($"'{late}' changed while it was staged: it was written to; nothing was published", stage.StandardErrorTail);
        await using var tier = c.Tier();
        Assert.Null(await tier.GetLatestAsync("risk/tree"));
    }

    /// <summary>A file deleted while it is read, or before its turn in a tree comes, is a change like any other: the same one line.</summary>
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_file_deleted_while_it_is_staged_fails_the_stage_with_the_same_line_as_a_changed_one(bool inTree)
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Directory.CreateDirectory(Path.Combine(c.Root, "tree")).FullName;
        if (inTree) Cluster.WriteFile(tree, "a.bin", Cluster.RandomBytes(32 << 20, seed: 535));
        var doomed = Cluster.WriteFile(tree, "z.bin", Cluster.RandomBytes(32 << 20, seed: 536));
        var stage = await SlowStageAsync(c, inTree ? tree : doomed, "risk/deleted", "8MB");
        File.Delete(doomed);

        var code = await stage.WaitForExitAsync(TimeSpan.FromMinutes(2));
        Assert.Equal(ExitCodes.IoError, code);
        Assert.Contains($"'{doomed}' changed while it was staged: it was deleted; nothing was published (stage it again once it is complete, or stage a copy)", stage.StandardErrorTail);
        await using var tier = c.Tier();
        Assert.Null(await tier.GetLatestAsync("risk/deleted"));
    }

    [Fact]
    public async Task An_empty_standard_input_is_refused_unless_an_empty_dataset_is_asked_for()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var empty = Cluster.WriteFile(c.Root, "empty", []);
        var (refused, _, why) = await c.RunStagerAsync(["-", "--name", "risk/empty", "--cache-hosts", c.HostList], stdin: empty);
        Assert.Equal(ExitCodes.Usage, refused);
        Assert.Contains("standard input was empty: nothing was published (--allow-empty stages an empty dataset)", why);
        await using var tier = c.Tier();
        Assert.Null(await tier.GetLatestAsync("risk/empty"));

        var (allowed, _, err) = await c.RunStagerAsync(["-", "--name", "risk/empty", "--cache-hosts", c.HostList, "--allow-empty"], stdin: empty);
        Assert.True(allowed == 0, err);
        Assert.NotNull(await tier.GetLatestAsync("risk/empty"));
    }

    [Theory]
    [InlineData("INT")]
    [InlineData("TERM")]
    public async Task A_stage_interrupted_through_hpcdata_says_it_was_cancelled_and_exits_130_publishing_nothing(string signal)
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var path = Cluster.WriteFile(c.Root, "big.bin", Cluster.RandomBytes(64 << 20, seed: 533));
        var stage = c.Track(ComponentProcess.Start("hpcdata", ["stage", path, "--name", "risk/interrupted", "--cache-hosts", c.HostList, "--max-rate", "8MB"], name: "hpcdata stage"));
        await using var tier = c.Tier();
        for (var clock = System.Diagnostics.Stopwatch.StartNew(); (await tier.GetHostStatusAsync())[0].BytesReceived <= 1 << 20; await Task.Delay(50))
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(60), "the stage sent nothing in 60 s");

        // Sent to hpcdata alone (kill -INT, a scheduler's SIGTERM): it passes it on to the stager, which ends as on Ctrl-C.
        using (var kill = System.Diagnostics.Process.Start("kill", [$"-{signal}", stage.Id.ToString(System.Globalization.CultureInfo.InvariantCulture)])!)
            await kill.WaitForExitAsync();
        var code = await stage.WaitForExitAsync(TimeSpan.FromMinutes(1));
        Assert.True(code == 130, $"exit {code}: {stage.StandardErrorTail}");
        Assert.Contains("cancelled; nothing was published", stage.StandardErrorTail);
        Assert.Null(await tier.GetLatestAsync("risk/interrupted"));
    }
}
