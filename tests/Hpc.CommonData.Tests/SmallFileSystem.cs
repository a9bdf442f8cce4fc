using System.Diagnostics;

namespace Hpc.CommonData.Tests;

/// <summary>
/// A real tmpfs of a given size mounted on a directory (needs root): where only the file system, not a budget, can say
/// "no space". Unmounted lazily on dispose, so a test that failed with a file still open cleans up too.
/// </summary>
public sealed class SmallFileSystem : IAsyncDisposable
{
    public string Path { get; }

    private SmallFileSystem(string path) => Path = path;

    /// <param name="size">As tmpfs takes it: <c>1m</c>, <c>32m</c>.</param>
    public static async Task<SmallFileSystem> MountAsync(string directory, string size)
    {
        var path = Directory.CreateDirectory(directory).FullName;
        Assert.True(await RunAsync("mount", "-t", "tmpfs", "-o", $"size={size}", "tmpfs", path) == 0, "mount tmpfs (needs root)");
        return new SmallFileSystem(path);
    }

    public async ValueTask DisposeAsync() => await RunAsync("umount", "-l", Path);

    private static async Task<int> RunAsync(string file, params string[] args)
    {
        using var p = Process.Start(new ProcessStartInfo(file, args) { RedirectStandardError = true })!;
        await p.WaitForExitAsync();
        return p.ExitCode;
    }
}
