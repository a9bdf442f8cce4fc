using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent;

/// <summary>
/// The agent's own files — telemetry, pins, manifests, journals — as opposed to the published copies it serves. They
/// name every dataset, version and size on the node, restricted ones included, so on Unix they are created readable
/// and writable by the agent's user only (0600), whatever the umask, and files left wider by an older agent are
/// narrowed at start-up. Published copies keep their own access (<see cref="DataDirectory.ApplyReadAccess"/>).
/// </summary>
public static class AgentFiles
{
    public const UnixFileMode OwnerOnly = UnixFileMode.UserRead | UnixFileMode.UserWrite;

    /// <summary>Opens (creating owner-only where it is new) one of the agent's files.</summary>
    public static FileStream Open(string path, FileMode mode, FileAccess access, FileShare share = FileShare.Read, int bufferSize = 4096)
    {
        var options = new FileStreamOptions { Mode = mode, Access = access, Share = share, BufferSize = bufferSize };
        if (!OperatingSystem.IsWindows()) options.UnixCreateMode = OwnerOnly;
        return new FileStream(path, options);
    }

    /// <summary>Replaces the file's content with <paramref name="bytes"/>.</summary>
    public static void WriteAll(string path, ReadOnlySpan<byte> bytes)
    {
        using var file = Open(path, FileMode.Create, FileAccess.Write, FileShare.None);
        file.Write(bytes);
    }

    public static async Task WriteAllAsync(string path, ReadOnlyMemory<byte> bytes)
    {
        await using var file = Open(path, FileMode.Create, FileAccess.Write, FileShare.None);
        await file.WriteAsync(bytes);
    }

    public static void Append(string path, ReadOnlySpan<byte> bytes)
    {
        using var file = Open(path, FileMode.Append, FileAccess.Write, FileShare.ReadWrite);
        file.Write(bytes);
    }

    /// <summary>Takes group and other access off an existing file of the agent's (one an older agent created with its umask).</summary>
    public static void Restrict(string path, ILogger log)
    {
        if (OperatingSystem.IsWindows() || !File.Exists(path)) return;
        try
        {
            var mode = File.GetUnixFileMode(path);
            if ((mode & ~OwnerOnly & (UnixFileMode)0x1FF) == 0) return; // rwx bits beyond the owner's read and write
            File.SetUnixFileMode(path, mode & OwnerOnly);
            log.LogInformation("Restricted {Path} to the agent's user (it was {Mode})", path, mode);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            log.LogWarning("Cannot restrict {Path} to the agent's user ({Reason}); other users may read it", path, e.Message);
        }
    }
}
