using System.Runtime.InteropServices;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.NodeAgent;

/// <summary>
/// The agent's own files — telemetry, pins, manifests, journals — as opposed to the published copies it serves. They
/// name every dataset, version and size on the node, restricted ones included, so on Unix they are created readable
/// and writable by the agent's user only (0600), whatever the umask — or, with an admin group (--admin-group), also
/// readable by that group (0640, the file's group set to it). Files left wider by an older agent are narrowed at
/// start-up. Published copies keep their own access (<see cref="DataDirectory.ApplyReadAccess"/>).
/// </summary>
public sealed class AgentFiles
{
    public const UnixFileMode OwnerOnly = UnixFileMode.UserRead | UnixFileMode.UserWrite;
    public const UnixFileMode OwnerAndGroupRead = OwnerOnly | UnixFileMode.GroupRead;

    private readonly uint? _adminGroup;
    private readonly ILogger _log;
    private int _groupWarned;

    /// <param name="adminGroup">The group that may read the files too, or null for the agent's user only.</param>
    public AgentFiles(uint? adminGroup = null, ILogger? log = null)
    {
        _adminGroup = OperatingSystem.IsWindows() ? null : adminGroup;
        _log = log ?? NullLogger.Instance;
    }

    /// <summary>The mode the agent's files are created with.</summary>
    public UnixFileMode Mode => _adminGroup is null ? OwnerOnly : OwnerAndGroupRead;

    /// <summary>Opens (creating with <see cref="Mode"/>, in the admin group, where it is new) one of the agent's files.</summary>
    public FileStream Open(string path, FileMode mode, FileAccess access, FileShare share = FileShare.Read, int bufferSize = 4096)
    {
        var options = new FileStreamOptions { Mode = mode, Access = access, Share = share, BufferSize = bufferSize };
        if (OperatingSystem.IsWindows()) return new FileStream(path, options);
        // Created owner-only and opened to the admin group only once it is in that group: it is never readable by the
        // agent's primary group, which may be a shared one (e.g. "users").
        options.UnixCreateMode = OwnerOnly;
        var created = !File.Exists(path);
        var file = new FileStream(path, options);
        if (created && _adminGroup is { } group) GiveToAdminGroup(path, group);
        return file;
    }

    /// <summary>Replaces the file's content with <paramref name="bytes"/>.</summary>
    public void WriteAll(string path, ReadOnlySpan<byte> bytes)
    {
        using var file = Open(path, FileMode.Create, FileAccess.Write, FileShare.None);
        file.Write(bytes);
    }

    public async Task WriteAllAsync(string path, ReadOnlyMemory<byte> bytes)
    {
        await using var file = Open(path, FileMode.Create, FileAccess.Write, FileShare.None);
        await file.WriteAsync(bytes);
    }

    public void Append(string path, ReadOnlySpan<byte> bytes)
    {
        using var file = Open(path, FileMode.Append, FileAccess.Write, FileShare.ReadWrite);
        file.Write(bytes);
    }

    /// <summary>Brings an existing file of the agent's to <see cref="Mode"/> and group (one an older agent created with its umask).</summary>
    public void Restrict(string path)
    {
        if (OperatingSystem.IsWindows() || !File.Exists(path)) return;
        try
        {
            var mode = File.GetUnixFileMode(path);
            // Narrowed first even where the admin group will read it: if its group cannot be set, it stays owner-only.
            if ((mode & (UnixFileMode)0x1FF & ~OwnerOnly) != 0) File.SetUnixFileMode(path, mode & OwnerOnly);
            if (_adminGroup is { } group) GiveToAdminGroup(path, group);
            if ((mode & (UnixFileMode)0x1FF & ~Mode) != 0) // rwx bits beyond what the agent's files get
                _log.FileRestricted(path, _adminGroup is null ? "" : " and its admin group", mode);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _log.FileNotRestricted(path, e.Message);
        }
    }

    /// <summary>Sets the file's group to the admin group, then lets that group read it; where the group cannot be set, the file stays owner-only.</summary>
    [System.Runtime.Versioning.UnsupportedOSPlatform("windows")]
    private void GiveToAdminGroup(string path, uint group)
    {
        if (chown(path, uint.MaxValue, group) != 0)
        {
            var errno = Marshal.GetLastPInvokeError();
            if (Interlocked.Exchange(ref _groupWarned, 1) == 0)
                _log.AdminGroupNotGiven(path, group, errno);
            return;
        }
        File.SetUnixFileMode(path, OwnerAndGroupRead);
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int chown([MarshalAs(UnmanagedType.LPUTF8Str)] string path, uint owner, uint group);
}
