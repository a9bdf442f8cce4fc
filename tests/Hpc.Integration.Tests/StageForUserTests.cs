using System.Runtime.Versioning;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// A privileged stager acting for a user (<c>--for-user</c>, as Slurm's burst buffer hooks run it as SlurmUser) stages
/// only what that user may read: a file, or every directory and file of a tree, checked as the user on the very file it
/// opens and reads. A tree the user may read all of is the same dataset it is staged by path; an entry they may not read
/// refuses the stage, naming it, before anything is sent; and a file or directory swapped for a link while the stage
/// runs is never read through it. These run as root (as CI does), to give files other owners; uid 4242 has no account.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class StageForUserTests
{
    private const string User = "4242";

    private static string Tree(Cluster c)
    {
        // The directories above the tree must let the user reach it, as on a shared file system.
        File.SetUnixFileMode(c.Root, (UnixFileMode)0b111_101_101);
        var tree = Directory.CreateDirectory(Path.Combine(c.Root, "model")).FullName;
        Cluster.WriteFile(tree, "weights.bin", Cluster.RandomBytes(300_000, seed: 601));
        Directory.CreateDirectory(Path.Combine(tree, "conf"));
        Cluster.WriteFile(Path.Combine(tree, "conf"), "run.toml", "steps = 10\n"u8.ToArray());
        // A link to what the user may not read is kept as a link, never followed.
        File.CreateSymbolicLink(Path.Combine(tree, "conf", "shadow"), "/etc/shadow");
        Chown(tree, User, recursive: true);
        File.SetUnixFileMode(tree, (UnixFileMode)0b111_000_000);
        File.SetUnixFileMode(Path.Combine(tree, "conf"), (UnixFileMode)0b111_000_000);
        File.SetUnixFileMode(Path.Combine(tree, "weights.bin"), (UnixFileMode)0b110_000_000);
        return tree;
    }

    [RootOnLinuxFact]
    public async Task A_tree_the_user_may_read_all_of_is_staged_for_them_as_the_same_dataset_as_by_path_with_its_links_kept_as_links()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Tree(c);

        var byPath = await c.StageAsync(tree, "risk/model-by-path");
        var forUser = await c.StageAsync(tree, "risk/model", "--for-user", User);
        Assert.Equal(byPath.Hash, forUser.Hash);
        Assert.Equal(300_000 + 11, forUser.RawBytes);
    }

    [RootOnLinuxTheory]
    [InlineData("conf/run.toml", false, "the file's permissions do not let the user read")]
    [InlineData("conf", true, "the permissions of the directory")]
    public async Task An_entry_of_the_tree_the_user_may_not_read_refuses_the_stage_naming_it_before_anything_is_sent(string entry, bool directory, string why)
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var tree = Tree(c);
        var path = Path.Combine(tree, entry);
        Chown(path, "0", recursive: false);
        File.SetUnixFileMode(path, (UnixFileMode)(directory ? 0b111_000_000 : 0b110_000_000));

        var (code, _, stderr) = await c.RunStagerAsync([tree, "--name", "risk/model", "--cache-hosts", c.HostList, "--for-user", User]);
        Assert.Equal(ExitCodes.Denied, code);
        Assert.Contains($"user {User} may not stage '{tree}': {why}", stderr);
        Assert.Contains($"'{path}'", stderr);
        await using var tier = c.Tier();
        Assert.Null(await tier.GetLatestAsync("risk/model"));
        Assert.True((await tier.GetHostStatusAsync())[0].BytesReceived < 64 << 10, "nothing of the tree was sent");
    }

    [RootOnLinuxFact]
    public async Task A_file_the_user_may_not_read_is_refused_whichever_path_leads_to_it()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        File.SetUnixFileMode(c.Root, (UnixFileMode)0b111_101_101);
        var secret = Cluster.WriteFile(c.Root, "secret.bin", Cluster.RandomBytes(100_000, seed: 602));
        File.SetUnixFileMode(secret, (UnixFileMode)0b110_000_000);
        var link = Path.Combine(c.Root, "innocent.bin");
        File.CreateSymbolicLink(link, secret);

        foreach (var path in new[] { secret, link })
        {
            var (code, _, stderr) = await c.RunStagerAsync([path, "--name", "risk/secret", "--cache-hosts", c.HostList, "--for-user", User]);
            Assert.Equal(ExitCodes.Denied, code);
            Assert.Contains($"user {User} may not stage '{path}': the file's permissions do not let the user read", stderr);
        }
        await using var tier = c.Tier();
        Assert.Null(await tier.GetLatestAsync("risk/secret"));
    }

    /// <summary>
    /// The race a privileged stager must not lose: the tree is listed and checked, and then, while an earlier file is
    /// still being sent, the user swaps a later file (or the directory holding it) for a link to a file only root may
    /// read. The stage fails naming the file, and not one byte of the secret reaches the cache tier.
    /// </summary>
    [RootOnLinuxTheory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_file_or_directory_swapped_for_a_link_after_the_tree_was_listed_is_never_read_through_it(bool swapDirectory)
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        File.SetUnixFileMode(c.Root, (UnixFileMode)0b111_101_101);
        var tree = Directory.CreateDirectory(Path.Combine(c.Root, "tree")).FullName;
        // Larger than what the stager reads ahead of what it sends (64 MiB), so the later file is read after the swap.
        Cluster.WriteFile(tree, "a.bin", Cluster.RandomBytes(80 << 20, seed: 603));
        var late = Directory.CreateDirectory(Path.Combine(tree, "z")).FullName;
        var target = Cluster.WriteFile(late, "data.bin", Cluster.RandomBytes(8 << 20, seed: 604));
        Chown(tree, User, recursive: true);
        var vault = Directory.CreateDirectory(Path.Combine(c.Root, "vault")).FullName;
        File.SetUnixFileMode(vault, (UnixFileMode)0b111_000_000);
        var secret = Cluster.WriteFile(vault, "data.bin", Cluster.RandomBytes(8 << 20, seed: 605));
        File.SetUnixFileMode(secret, (UnixFileMode)0b110_000_000);

        var stage = c.Track(ComponentProcess.Start("Hpc.Stager",
            [tree, "--name", "risk/tree", "--cache-hosts", c.HostList, "--for-user", User, "--max-rate", "16MB", "--chunking", "fixed", "--codec", "none"], name: "stager"));
        await using var tier = c.Tier();
        for (var clock = System.Diagnostics.Stopwatch.StartNew(); (await tier.GetHostStatusAsync())[0].BytesReceived <= 1 << 20; await Task.Delay(50))
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(60), "the stage sent nothing in 60 s");
        if (swapDirectory)
        {
            Directory.Delete(late, recursive: true);
            File.CreateSymbolicLink(late, vault);
        }
        else
        {
            File.Delete(target);
            File.CreateSymbolicLink(target, secret);
        }

        var code = await stage.WaitForExitAsync(TimeSpan.FromMinutes(2));
        Assert.Equal(ExitCodes.IoError, code);
        // Refused by what the read found there: the link itself, or, where the stager still holds the checked directory
        // open, the file that is no longer in it.
        Assert.Contains($"'{target}' changed while it was staged: ", stage.StandardErrorTail);
        Assert.Null(await tier.GetLatestAsync("risk/tree"));
        var received = (await tier.GetHostStatusAsync())[0].BytesReceived;
        Assert.True(received < (80 << 20) + (2 << 20), $"the cache host received {received} bytes: more than the one file the user may read");
    }

    private static void Chown(string path, string owner, bool recursive)
    {
        using var p = System.Diagnostics.Process.Start("chown", recursive ? ["-R", "-h", $"{owner}:{owner}", path] : ["-h", $"{owner}:{owner}", path])!;
        p.WaitForExit();
        Assert.Equal(0, p.ExitCode);
    }
}
