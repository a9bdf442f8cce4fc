using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Microsoft.Win32.SafeHandles;

namespace Hpc.CommonData.Access;

/// <summary>
/// Whether a user may read a file that a privileged process (the controller's SlurmUser) opened on that user's behalf,
/// decided as the kernel would for that user: the file's mode bits for its owner, its group or others, and search
/// permission on every directory above its real path.
/// </summary>
/// <remarks>
/// The check is made on the file already open, so a link or a rename between the check and the read cannot swap in a
/// file the user may not read. Access control lists are not evaluated: a file or directory that carries one is refused
/// (an ACL can deny a user what the mode bits allow), and the user stages it under their own identity instead.
/// </remarks>
[SupportedOSPlatform("linux")]
public static partial class UnixFileAccess
{
    /// <summary>What <c>statx</c> gives of a file: its type and mode, owner and group.</summary>
    private readonly record struct Status(uint Mode, uint Owner, uint Group)
    {
        public bool IsRegularFile => (Mode & 0xF000) == 0x8000;
        public bool IsDirectory => (Mode & 0xF000) == 0x4000;
    }

    /// <summary>
    /// Why user <paramref name="uid"/> (with <paramref name="groups"/>, the primary one among them) may not read the
    /// open file <paramref name="file"/>, in one sentence naming <paramref name="shown"/> or the directory that stops
    /// them; null when they may. Only a regular file qualifies.
    /// </summary>
    public static string? WhyNotReadable(SafeFileHandle file, string shown, uint uid, IReadOnlyCollection<uint> groups) =>
        WhyNot(file, shown, uid, groups, directory: false, above: true);

    /// <summary>
    /// As <see cref="WhyNotReadable"/>, for what a tree is staged from: a regular file, or a directory the user may list
    /// and search; and every directory above its real path.
    /// </summary>
    public static string? WhyNotReadableTree(SafeFileHandle root, string shown, uint uid, IReadOnlyCollection<uint> groups) =>
        WhyNot(root, shown, uid, groups, directory: true, above: false) ?? WhyNot(root, shown, uid, groups, directory: true, above: true);

    /// <summary>
    /// Why the user may not read <paramref name="entry"/>, a regular file or a directory (list and search) within a tree
    /// whose directories above it were checked as they were opened (<see cref="OpenEntry"/>): the entry's own bits only.
    /// </summary>
    public static string? WhyNotReadableEntry(SafeFileHandle entry, string shown, uint uid, IReadOnlyCollection<uint> groups) =>
        WhyNot(entry, shown, uid, groups, directory: true, above: false);

    private static string? WhyNot(SafeFileHandle file, string shown, uint uid, IReadOnlyCollection<uint> groups, bool directory, bool above)
    {
        var fd = (int)file.DangerousGetHandle();
        var status = Stat(fd, "", AtEmptyPath) ?? throw new IOException($"cannot read the status of '{shown}': {Marshal.GetLastPInvokeErrorMessage()}");
        if (!status.IsRegularFile && !(directory && status.IsDirectory)) return directory ? $"'{shown}' is neither a regular file nor a directory" : $"'{shown}' is not a regular file";
        if (uid == 0) return null;
        if (HasAcl(() => fgetxattr(fd, AclAttribute, IntPtr.Zero, 0)))
            return $"'{shown}' has an access control list, which this check does not evaluate";
        if (status.IsDirectory)
        {
            if (!Allows(status, uid, groups, Read | Search)) return $"the permissions of the directory '{shown}' do not let the user list it";
        }
        else if (!Allows(status, uid, groups, Read)) return $"the file's permissions do not let the user read '{shown}'";
        if (!above) return null;
        // The directories above the file's real path, as the kernel resolved it when it was opened.
        var real = new FileInfo($"/proc/self/fd/{fd}").LinkTarget;
        if (real is null || !real.StartsWith('/') || real.EndsWith(" (deleted)", StringComparison.Ordinal))
            return $"'{shown}' has no path the user could reach it by";
        for (var dir = Path.GetDirectoryName(real); dir is not null; dir = Path.GetDirectoryName(dir))
        {
            if (Stat(AtFdCwd, dir, 0) is not { } d) return $"cannot read the status of '{dir}': {Marshal.GetLastPInvokeErrorMessage()}";
            var path = dir;
            if (HasAcl(() => getxattr(path, AclAttribute, IntPtr.Zero, 0)))
                return $"'{dir}' (above '{shown}') has an access control list, which this check does not evaluate";
            if (!Allows(d, uid, groups, Search)) return $"the permissions of '{dir}' do not let the user reach '{shown}'";
        }
        return null;
    }

    /// <summary>
    /// Opens <paramref name="path"/> to read, following links as the user's own open would: a regular file or a
    /// directory; anything else (a fifo, a device) is refused by its type before it is opened.
    /// </summary>
    /// <exception cref="FileNotFoundException">Nothing is there.</exception>
    /// <exception cref="UnauthorizedAccessException">This process may not open it.</exception>
    public static SafeFileHandle Open(string path)
    {
        if (Stat(AtFdCwd, path, 0) is { } s && !s.IsRegularFile && !s.IsDirectory) throw new IOException($"'{path}' is neither a regular file nor a directory");
        return Handle(open(path, OpenFlags, 0), path);
    }

    /// <summary>
    /// Opens the entry <paramref name="name"/> of the open directory <paramref name="directory"/> without following a
    /// link: where a link is now, the open fails rather than lead out of the tree (a file swapped for a link after it
    /// was listed reaches nothing). Its type is for the caller to check on the handle.
    /// </summary>
    public static SafeFileHandle OpenEntry(SafeFileHandle directory, string name, string shown)
    {
        if (name.Length == 0 || name.Contains('/')) throw new ArgumentException($"'{name}' is not one entry's name", nameof(name));
        var fd = openat((int)directory.DangerousGetHandle(), name, OpenFlags | NoFollow, 0);
        if (fd < 0 && Marshal.GetLastPInvokeError() == ELOOP) throw new EntryIsLinkException(shown);
        return Handle(fd, shown);
    }

    /// <summary><see cref="OpenEntry"/> found a link where it expected a file or a directory, and did not follow it.</summary>
    public sealed class EntryIsLinkException(string shown)
        : IOException($"'{shown}' is a link where a file or directory was listed; a link within a tree is never followed");

    private static SafeFileHandle Handle(int fd, string shown)
    {
        if (fd >= 0) return new SafeFileHandle(fd, ownsHandle: true);
        var error = Marshal.GetLastPInvokeError();
        var message = Marshal.GetPInvokeErrorMessage(error);
        throw error switch
        {
            ENOENT or ENOTDIR => new FileNotFoundException($"'{shown}' does not exist", shown),
            EACCES or EPERM => new UnauthorizedAccessException($"'{shown}' cannot be opened: {message}"),
            _ => new IOException($"'{shown}' cannot be opened: {message}"),
        };
    }

    // O_RDONLY | O_NONBLOCK | O_CLOEXEC: non-blocking so a fifo put there after the type check cannot hold the open.
    private const int OpenFlags = 0x800 | 0x80000;
    // O_NOFOLLOW's value differs between architectures.
    private static int NoFollow => RuntimeInformation.ProcessArchitecture is Architecture.Arm64 or Architecture.Arm ? 0x8000 : 0x20000;
    private const int ENOENT = 2, EPERM = 1, EACCES = 13, ENOTDIR = 20, ELOOP = 40;

    /// <summary>
    /// Whether <paramref name="path"/> leads to a regular file, asked before opening it: opening a FIFO would wait for a
    /// writer, and a device is not data. <see cref="WhyNotReadable"/> asks again of the file opened.
    /// </summary>
    public static bool IsRegularFile(string path) => Stat(AtFdCwd, path, 0) is { IsRegularFile: true };

    private const uint Read = 4, Search = 1;

    /// <summary>POSIX: the owner's bits decide for the owner, the group's for a member of the group, others' for the rest.</summary>
    private static bool Allows(Status s, uint uid, IReadOnlyCollection<uint> groups, uint what)
    {
        var bits = s.Owner == uid ? (s.Mode >> 6) & 7 : groups.Contains(s.Group) ? (s.Mode >> 3) & 7 : s.Mode & 7;
        return (bits & what) == what;
    }

    private const string AclAttribute = "system.posix_acl_access";
    private const int ENODATA = 61, ENOTSUP = 95;

    private static bool HasAcl(Func<nint> query)
    {
        if (query() >= 0) return true;
        var error = Marshal.GetLastPInvokeError();
        // No such attribute, or a file system without extended attributes: the mode bits are all there is.
        return error is not (ENODATA or ENOTSUP);
    }

    private const int AtFdCwd = -100;
    private const int AtEmptyPath = 0x1000;
    private const uint StatxBasicStats = 0x7ff;

    private static Status? Stat(int dirfd, string path, int flags)
    {
        Span<byte> buffer = stackalloc byte[256];
        if (statx(dirfd, path, flags, StatxBasicStats, ref MemoryMarshal.GetReference(buffer)) != 0) return null;
        // Offsets of struct statx (linux/stat.h); the layout is the same on every architecture.
        return new Status(BitConverter.ToUInt16(buffer[28..]), BitConverter.ToUInt32(buffer[20..]), BitConverter.ToUInt32(buffer[24..]));
    }

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int statx(int dirfd, string path, int flags, uint mask, ref byte buffer);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int open(string path, int flags, int mode);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int openat(int dirfd, string path, int flags, int mode);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial nint fgetxattr(int fd, string name, IntPtr value, nint size);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial nint getxattr(string path, string name, IntPtr value, nint size);
}
