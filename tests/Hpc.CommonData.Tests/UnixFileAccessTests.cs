using System.Runtime.Versioning;
using Hpc.CommonData.Access;

namespace Hpc.CommonData.Tests;

/// <summary>
/// Whether a user may read a file a privileged process opened for them, decided as the kernel would for that user: the
/// owner's, the group's or others' bits, and search permission on every directory above the file's real path. Files are
/// made with owners and modes of their own, so these run as root (as CI does) and say so otherwise.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class UnixFileAccessTests : IDisposable
{
    private const uint User = 4242, Group = 4243, OtherGroup = 4244;
    private static readonly uint[] Groups = [User, Group];
    private readonly string _root = Directory.CreateTempSubdirectory("hpcd-access-").FullName;

    public UnixFileAccessTests() => File.SetUnixFileMode(_root, (UnixFileMode)0b111_101_101);

    public void Dispose() => Directory.Delete(_root, recursive: true);

    private static bool AsRoot(out string why)
    {
        why = OperatingSystem.IsLinux() && Environment.UserName == "root" ? "" : "needs root, to give files other owners";
        return why.Length == 0;
    }

    private string Make(string relative, int mode, uint owner = 0, uint group = 0)
    {
        var path = Path.Combine(_root, relative);
        Directory.CreateDirectory(Path.GetDirectoryName(path)!);
        File.WriteAllText(path, "data");
        Chown(path, owner, group);
        File.SetUnixFileMode(path, (UnixFileMode)mode);
        return path;
    }

    private static void Chown(string path, uint owner, uint group)
    {
        var r = System.Diagnostics.Process.Start("chown", $"{owner}:{group} {path}")!;
        r.WaitForExit();
        Assert.Equal(0, r.ExitCode);
    }

    private static string? Why(string path)
    {
        using var file = File.OpenHandle(path);
        return UnixFileAccess.WhyNotReadable(file, path, User, Groups);
    }

    [Theory]
    [InlineData(0b110_100_100, 0u, 0u, null)]                          // others may read
    [InlineData(0b110_000_000, 0u, 0u, "permissions do not let")]      // only root may
    [InlineData(0b110_100_000, 0u, Group, null)]                       // the user's group may
    [InlineData(0b110_100_000, 0u, OtherGroup, "permissions do not let")]
    [InlineData(0b000_100_100, User, 0u, "permissions do not let")]    // the owner's own bits decide for the owner
    [InlineData(0b100_000_000, User, 0u, null)]
    public void A_file_is_readable_by_the_users_class_of_its_mode_bits(int mode, uint owner, uint group, string? refusal)
    {
        if (!AsRoot(out var why)) { Console.Error.WriteLine($"not run: {why}"); return; }
        var why2 = Why(Make("f.csv", mode, owner, group));
        if (refusal is null) Assert.Null(why2);
        else Assert.Contains(refusal, why2);
    }

    [Fact]
    public void A_directory_above_the_file_the_user_cannot_search_stops_them_and_is_named()
    {
        if (!AsRoot(out var why)) { Console.Error.WriteLine($"not run: {why}"); return; }
        var file = Make("private/f.csv", 0b110_100_100);
        File.SetUnixFileMode(Path.GetDirectoryName(file)!, (UnixFileMode)0b111_000_000);
        Assert.Contains($"'{Path.GetDirectoryName(file)}'", Why(file));
    }

    [Fact]
    public void A_link_the_user_may_make_to_a_file_they_may_not_read_is_judged_by_the_file_it_reaches()
    {
        if (!AsRoot(out var why)) { Console.Error.WriteLine($"not run: {why}"); return; }
        var secret = Make("secret", 0b110_000_000);
        var mine = Path.Combine(_root, "mine");
        Directory.CreateDirectory(mine);
        Chown(mine, User, User);
        var link = Path.Combine(mine, "innocent.csv");
        File.CreateSymbolicLink(link, secret);
        Assert.Contains("permissions do not let", Why(link));
    }

    [Fact]
    public void Only_a_regular_file_is_taken()
    {
        if (!OperatingSystem.IsLinux()) return;
        using var file = File.OpenHandle("/dev/null");
        Assert.Contains("not a regular file", UnixFileAccess.WhyNotReadable(file, "/dev/null", User, Groups));
    }

    [Fact]
    public void A_fifo_or_a_device_is_told_apart_before_it_is_opened()
    {
        if (!OperatingSystem.IsLinux()) return;
        var fifo = Path.Combine(_root, "fifo");
        using (var p = System.Diagnostics.Process.Start("mkfifo", [fifo])!) { p.WaitForExit(); Assert.Equal(0, p.ExitCode); }
        Assert.False(UnixFileAccess.IsRegularFile(fifo));
        Assert.False(UnixFileAccess.IsRegularFile("/dev/null"));
        Assert.False(UnixFileAccess.IsRegularFile(_root));
        Assert.False(UnixFileAccess.IsRegularFile(Path.Combine(_root, "absent")));
        var file = Path.Combine(_root, "f.csv");
        File.WriteAllText(file, "data");
        File.CreateSymbolicLink(Path.Combine(_root, "link"), file);
        Assert.True(UnixFileAccess.IsRegularFile(file));
        Assert.True(UnixFileAccess.IsRegularFile(Path.Combine(_root, "link")));
    }

    [Theory]
    [InlineData(0b111_101_101, null)]
    [InlineData(0b111_100_100, "do not let the user list it")]   // listed but not searched: its files cannot be opened
    [InlineData(0b111_001_001, "do not let the user list it")]   // searched but not listed
    public void A_tree_root_is_readable_when_the_user_may_list_and_search_it(int mode, string? refusal)
    {
        if (!AsRoot(out var why)) { Console.Error.WriteLine($"not run: {why}"); return; }
        var tree = Path.Combine(_root, "tree");
        Directory.CreateDirectory(tree);
        File.SetUnixFileMode(tree, (UnixFileMode)mode);
        using var handle = UnixFileAccess.Open(tree);
        var said = UnixFileAccess.WhyNotReadableTree(handle, tree, User, Groups);
        if (refusal is null) Assert.Null(said);
        else Assert.Contains(refusal, said);
    }

    [Fact]
    public void An_entry_is_opened_from_its_directory_without_following_a_link()
    {
        if (!OperatingSystem.IsLinux()) return;
        File.WriteAllText(Path.Combine(_root, "f.csv"), "data");
        File.CreateSymbolicLink(Path.Combine(_root, "link"), Path.Combine(_root, "f.csv"));
        using var directory = UnixFileAccess.Open(_root);
        using (var file = UnixFileAccess.OpenEntry(directory, "f.csv", "f.csv")) Assert.Null(UnixFileAccess.WhyNotReadableEntry(file, "f.csv", 0, []));
        Assert.Throws<UnixFileAccess.EntryIsLinkException>(() => UnixFileAccess.OpenEntry(directory, "link", "link"));
        Assert.Throws<FileNotFoundException>(() => UnixFileAccess.OpenEntry(directory, "absent", "absent"));
    }
}
