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
    }

    /// <summary>
    /// Why user <paramref name="uid"/> (with <paramref name="groups"/>, the primary one among them) may not read the
    /// open file <paramref name="file"/>, in one sentence naming <paramref name="shown"/> or the directory that stops
    /// them; null when they may. Only a regular file qualifies.
    /// </summary>
    public static string? WhyNotReadable(SafeFileHandle file, string shown, uint uid, IReadOnlyCollection<uint> groups)
    {
        var fd = (int)file.DangerousGetHandle();
        var status = Stat(fd, "", AtEmptyPath) ?? throw new IOException($"cannot read the status of '{shown}': {Marshal.GetLastPInvokeErrorMessage()}");
        if (!status.IsRegularFile) return $"'{shown}' is not a regular file";
        if (uid == 0) return null;
        if (HasAcl(() => fgetxattr(fd, AclAttribute, IntPtr.Zero, 0)))
            return $"'{shown}' has an access control list, which this check does not evaluate";
        if (!Allows(status, uid, groups, Read)) return $"the file's permissions do not let the user read '{shown}'";
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
    private static partial nint fgetxattr(int fd, string name, IntPtr value, nint size);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial nint getxattr(string path, string name, IntPtr value, nint size);
}
