using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>
/// Directory datasets as users have them: a tree staged faithfully (links kept as links and never followed, hard links
/// once, empty files and directories, modes and times) comes back identical with <c>hpcdata get</c>; what cannot be
/// staged is skipped with a warning or refused with a reason.
/// </summary>
public class TreeTests
{
    private static async Task<(int Code, string Output)> Shell(string script)
    {
        using var p = Process.Start(new ProcessStartInfo("bash", ["-c", script]) { RedirectStandardOutput = true, RedirectStandardError = true })!;
        var output = await p.StandardOutput.ReadToEndAsync() + await p.StandardError.ReadToEndAsync();
        await p.WaitForExitAsync();
        return (p.ExitCode, output);
    }

    /// <summary>Every case a real tree has that round-trips (no fifo, no link out of the tree).</summary>
    private static async Task<string> BuildTree(string root)
    {
        var tree = Path.Combine(root, "tree");
        var deep = string.Join('/', Enumerable.Repeat("d", 150));
        var (code, output) = await Shell($"""
            set -e
            mkdir -p '{tree}/a/b' '{tree}/empty-dir' '{tree}/{deep}'
            printf 'alpha\n' > '{tree}/a/one.csv'
            head -c 300000 /dev/urandom > '{tree}/a/b/big.bin'
            : > '{tree}/empty-file'
            printf 'x' > '{tree}/{deep}/leaf'
            printf '#!/bin/sh\necho hi\n' > '{tree}/a/run.sh'; chmod 750 '{tree}/a/run.sh'
            chmod 700 '{tree}/a/b'
            ln '{tree}/a/one.csv' '{tree}/a/one-again.csv'
            mkdir '{tree}/links'; ln -s ../a/one.csv '{tree}/links/to-one'
            ln -s '{tree}/a/b' '{tree}/absolute-to-b'
            mkdir '{tree}/sub'; ln -s .. '{tree}/sub/up'
            touch -d '2001-02-03 04:05:06.123456789' '{tree}/a/one.csv' '{tree}/empty-dir'
            """);
        Assert.True(code == 0, output);
        return tree;
    }

    [Fact]
    public async Task A_tree_staged_and_fetched_with_get_is_identical_links_compared_as_links()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = await BuildTree(c.Root);
        var staged = await c.StageAsync(tree, "tree/everything");
        Assert.Equal(300_000 + 6 + 1 + 18, staged.RawBytes);     // the hard link's bytes once

        var copy = Path.Combine(c.Root, "copy");
        var (code, stdout, stderr) = await c.RunAsync("hpcdata", ["get", "tree/everything", copy, "--cache-hosts", c.HostList]);
        Assert.True(code == 0, stderr);
        Assert.Contains("verified", string.Join("\n", stdout));

        // The one difference by design: an absolute link into the tree comes back relative.
        var (same, diff) = await Shell($"diff -r --no-dereference -x absolute-to-b '{tree}' '{copy}'");
        Assert.True(same == 0, diff);
        Assert.Equal("../a/one.csv", new FileInfo(Path.Combine(copy, "links", "to-one")).LinkTarget);
        Assert.Equal("a/b", new FileInfo(Path.Combine(copy, "absolute-to-b")).LinkTarget);   // made relative, so the tree can live anywhere
        Assert.Equal("..", new FileInfo(Path.Combine(copy, "sub", "up")).LinkTarget);
        var (_, links) = await Shell($"stat -c '%h %a' '{copy}/a/one.csv' '{copy}/a/one-again.csv' '{copy}/a/run.sh' '{copy}/a/b' && stat -c %i '{copy}/a/one.csv' '{copy}/a/one-again.csv' | uniq | wc -l");
        Assert.Equal(["2 644", "2 644", "1 750", "2 700", "1"], links.Trim().Split('\n').Select(l => l.Trim()).ToArray());
        Assert.Equal(File.GetLastWriteTimeUtc(Path.Combine(tree, "a/one.csv")), File.GetLastWriteTimeUtc(Path.Combine(copy, "a/one.csv")));
        Assert.Equal(Directory.GetLastWriteTimeUtc(Path.Combine(tree, "empty-dir")), Directory.GetLastWriteTimeUtc(Path.Combine(copy, "empty-dir")));

        var (again, _, refused) = await c.RunAsync("hpcdata", ["get", "tree/everything", copy, "--cache-hosts", c.HostList]);
        Assert.Equal(2, again);
        Assert.Contains("give --force", refused);
    }

    [Fact]
    public async Task Links_out_of_the_tree_fifos_and_sockets_are_skipped_with_a_warning_each_and_nothing_outside_is_staged()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Path.Combine(c.Root, "odd");
        var outside = Path.Combine(c.Root, "outside");
        var (code, output) = await Shell($"""
            set -e
            mkdir -p '{tree}' '{outside}'
            printf 'secret' > '{outside}/secret'
            printf 'data' > '{tree}/data'
            ln -s '{outside}' '{tree}/etc'
            ln -s ../outside/secret '{tree}/peek'
            mkfifo '{tree}/pipe'
            """);
        Assert.True(code == 0, output);

        var (staged, stdout, stderr) = await c.RunAsync("Hpc.Stager", [tree, "--name", "tree/odd", "--cache-hosts", c.HostList, "--json"]);
        Assert.True(staged == 0, stderr);
        Assert.Contains("skipping the link 'etc'", stderr);
        Assert.Contains("skipping the link 'peek'", stderr);
        Assert.Contains("skipping 'pipe': a fifo is not data", stderr);
        Assert.Equal(4, JsonDocument.Parse(stdout.Last()).RootElement.GetProperty("RawBytes").GetInt64());
    }

    [Fact]
    public async Task A_name_that_is_not_UTF_8_is_refused_naming_the_file_before_anything_is_sent()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Path.Combine(c.Root, "names");
        var (code, output) = await Shell($"mkdir -p '{tree}' && printf x > '{tree}/ok' && printf y > \"{tree}/$(printf 'bad\\377')\"");
        Assert.True(code == 0, output);

        var (refused, _, stderr) = await c.RunAsync("Hpc.Stager", [tree, "--name", "tree/names", "--cache-hosts", c.HostList]);
        Assert.NotEqual(0, refused);
        Assert.Contains("is not valid UTF-8", stderr);
        await using var tier = c.Tier();
        Assert.Empty((await tier.KeysAsync(Hpc.CommonData.Cache.CacheKeys.SegmentPrefix)).SelectMany(k => k));
    }
}
