using System.Runtime.InteropServices;
using System.Text;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;

namespace Hpc.Stager;

/// <summary>
/// Lists a directory tree for staging exactly as it is: links are recorded as links and never followed (so no link
/// leads out of the tree and no loop can exist), hard links are stored once, directories (empty ones too), modes and
/// modification times are kept; fifos, sockets and devices are skipped with a warning each. Every file is opened once
/// before anything is sent, so an unreadable one fails the stage up front (or is skipped, when asked).
/// </summary>
public sealed class TreeWalker(ILogger log, bool skipUnreadable)
{
    /// <param name="Status">For a file with data: what it was when listed, to tell whether it changed while it was read.</param>
    public sealed record Entry(string FullPath, DatasetFile File, FileStatus? Status = null);

    public int Skipped { get; private set; }

    /// <summary>
    /// The tree's entries, each directory's own entries in ordinal name order before those of its subdirectories (a
    /// directory always before what it holds); file offsets are assigned in that order, so the same tree always gives
    /// the same dataset.
    /// </summary>
    public List<Entry> Walk(string root) => Walk(new PathAccess(root));

    /// <inheritdoc cref="Walk(string)"/>
    public List<Entry> Walk(TreeAccess tree)
    {
        var entries = new List<Entry>();
        var inodes = new Dictionary<(ulong Device, ulong Inode), string>();
        long offset = 0;
        // An explicit stack rather than recursion: a tree thousands of levels deep must not overflow the thread's stack.
        var pending = new Stack<string>();
        pending.Push("");
        while (pending.Count > 0)
        {
            var relative = pending.Pop();
            var children = tree.Names(relative).Order(StringComparer.Ordinal).ToList();
            var subdirectories = new List<string>();
            foreach (var name in children)
            {
                var path = relative.Length == 0 ? name : relative + "/" + name;
                var full = tree.Shown(path);
                if (name.Contains('\uFFFD'))
                    throw new IOException($"cannot stage '{Escape(full)}': its name is not valid UTF-8; rename it or leave it out");
                if (!Manifest.IsSafeRelativePath(path))
                    throw new IOException($"cannot stage '{full}': its name is not a portable relative path");
                var info = tree.Status(path);
                switch (info.Type)
                {
                    case FileStatus.Kind.Directory:
                        entries.Add(new Entry(full, new DatasetFile(path, offset, 0, info.Permissions) { Type = DatasetEntryType.Directory, ModifiedNanoseconds = info.ModifiedNanoseconds }));
                        subdirectories.Add(path);
                        break;
                    case FileStatus.Kind.SymbolicLink:
                        // Kept as written, whatever it points at (absolute, out of the tree, nothing): a software tree's
                        // bin/python -> /usr/bin/python3 must resolve on the node as it did here. Never followed.
                        var target = tree.LinkTarget(path) ?? "";
                        if (!Manifest.IsStorableLinkTarget(target))
                        {
                            Warn($"skipping the link '{path}' -> '{Escape(target)}': a target must be 1 to {Manifest.MaxLinkTarget} characters with no control characters");
                            break;
                        }
                        entries.Add(new Entry(full, new DatasetFile(path, offset, 0, info.Permissions) { Type = DatasetEntryType.SymbolicLink, Target = target, ModifiedNanoseconds = info.ModifiedNanoseconds }));
                        break;
                    case FileStatus.Kind.File:
                        if (info.Links > 1 && inodes.TryGetValue((info.Device, info.Inode), out var first))
                        {
                            entries.Add(new Entry(full, new DatasetFile(path, offset, 0, info.Permissions) { Type = DatasetEntryType.HardLink, Target = first, ModifiedNanoseconds = info.ModifiedNanoseconds }));
                            break;
                        }
                        if (!Readable(tree, path, info)) break;
                        if (info.Links > 1) inodes[(info.Device, info.Inode)] = path;
                        entries.Add(new Entry(full, new DatasetFile(path, offset, info.Size, info.Permissions) { ModifiedNanoseconds = info.ModifiedNanoseconds }, info));
                        offset += info.Size;
                        break;
                    default:
                        Warn($"skipping '{path}': a {info.Type.ToString().ToLowerInvariant()} is not data");
                        break;
                }
            }
            // Pushed in reverse so they are walked in path order.
            for (var i = subdirectories.Count - 1; i >= 0; i--) pending.Push(subdirectories[i]);
        }
        if (Skipped > 0) log.LogWarning("Skipped {Count} entries of {Root} (each named above)", Skipped, tree.Root);
        return entries;
    }

    private bool Readable(TreeAccess tree, string path, FileStatus listed)
    {
        var full = tree.Shown(path);
        try
        {
            using var handle = tree.OpenFile(path, listed);
            return true;
        }
        catch (Exception e) when (e is UnauthorizedAccessException or IOException && e is not SourceChangedException && skipUnreadable)
        {
            Warn($"skipping '{full}': {e.Message}");
            return false;
        }
        catch (Exception e) when (e is UnauthorizedAccessException or IOException && e is not SourceChangedException && tree is PathAccess)
        {
            throw new IOException($"cannot stage '{full}': it cannot be read ({e.Message}); nothing was sent (--skip-unreadable leaves such files out)", e);
        }
    }

    private void Warn(string message)
    {
        Skipped++;
        log.LogWarning("{Message}", message);
    }

    private static string Escape(string s) => new(s.Select(c => c == '\uFFFD' ? '?' : c).ToArray());
}

/// <summary>What <c>statx</c> says of a path, by default without following a final link: type, permissions, links, identity, times.</summary>
public readonly record struct FileStatus(FileStatus.Kind Type, int Permissions, uint Links, ulong Device, ulong Inode, long Size, long ModifiedNanoseconds,
    long ChangedNanoseconds = 0)
{
    public enum Kind { File, Directory, SymbolicLink, Fifo, Socket, CharacterDevice, BlockDevice }

    private const int AtFdCwd = -100;
    private const int ENOENT = 2, ENOTDIR = 20;
    private const int AtSymlinkNoFollow = 0x100;
    private const uint StatxBasicStats = 0x7ff;

    /// <param name="followLinks">The file a final link leads to, as opening the path reads it (a single file staged).</param>
    /// <param name="shown">The path named in a failure, where <paramref name="path"/> is not what the user named.</param>
    /// <exception cref="FileNotFoundException">Nothing is there (any more).</exception>
    public static FileStatus Of(string path, bool followLinks = false, string? shown = null)
    {
        if (!OperatingSystem.IsLinux()) return Portable(path);
        Span<byte> buffer = stackalloc byte[256];
        var name = Encoding.UTF8.GetBytes(path + "\0");
        if (statx(AtFdCwd, name, followLinks ? 0 : AtSymlinkNoFollow, StatxBasicStats, ref MemoryMarshal.GetReference(buffer)) != 0)
        {
            var error = Marshal.GetLastPInvokeError();
            var message = $"cannot stage '{shown ?? path}': {Marshal.GetPInvokeErrorMessage(error)}";
            throw error is ENOENT or ENOTDIR ? new FileNotFoundException(message, shown ?? path) : new IOException(message);
        }
        // Offsets of struct statx (linux/stat.h); the layout is the same on every architecture.
        var mode = BitConverter.ToUInt16(buffer[28..]);
        var type = (mode & 0xF000) switch
        {
            0x8000 => Kind.File, 0x4000 => Kind.Directory, 0xA000 => Kind.SymbolicLink, 0x1000 => Kind.Fifo,
            0xC000 => Kind.Socket, 0x2000 => Kind.CharacterDevice, _ => Kind.BlockDevice,
        };
        var device = ((ulong)BitConverter.ToUInt32(buffer[136..]) << 32) | BitConverter.ToUInt32(buffer[140..]);
        var mtime = BitConverter.ToInt64(buffer[112..]) * 1_000_000_000 + BitConverter.ToUInt32(buffer[120..]);
        var ctime = BitConverter.ToInt64(buffer[96..]) * 1_000_000_000 + BitConverter.ToUInt32(buffer[104..]);
        return new FileStatus(type, mode & 0xFFF, BitConverter.ToUInt32(buffer[16..]), device, BitConverter.ToUInt64(buffer[32..]),
            (long)BitConverter.ToUInt64(buffer[40..]), mtime, ctime);
    }

    /// <summary>What <see cref="ChangedSince"/> says of a file that is gone.</summary>
    public const string Deleted = "it was deleted";

    /// <summary>
    /// Why the file at <paramref name="path"/> is no longer what <paramref name="before"/> saw (its size, modification
    /// or change time, or identity), or null when it is the same.
    /// </summary>
    public static string? ChangedSince(string path, FileStatus before, bool followLinks = false) => ChangedSince(() => Of(path, followLinks), before);

    /// <summary>As <see cref="ChangedSince(string, FileStatus, bool)"/>, of the status <paramref name="read"/> reads now.</summary>
    public static string? ChangedSince(Func<FileStatus> read, FileStatus before)
    {
        FileStatus now;
        try { now = read(); }
        catch (FileNotFoundException) { return Deleted; }
        catch (Hpc.CommonData.Access.UnixFileAccess.EntryIsLinkException) { return "a directory above it was replaced by a link"; }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return $"it can no longer be read ({e.Message})"; }
        if (now.Inode != before.Inode || now.Device != before.Device) return "it was replaced by another file";
        if (now.Size != before.Size) return $"its size went from {before.Size} to {now.Size} bytes";
        if (now.ModifiedNanoseconds != before.ModifiedNanoseconds) return "it was written to";
        if (now.ChangedNanoseconds != before.ChangedNanoseconds) return "its status changed (written to, or its mode or owner changed)";
        return null;
    }

    /// <summary>Elsewhere (Windows): files, directories and links only, no hard-link identity.</summary>
    private static FileStatus Portable(string path)
    {
        var info = new FileInfo(path);
        if (!info.Exists && !Directory.Exists(path) && info.LinkTarget is null) throw new FileNotFoundException($"cannot stage '{path}': it does not exist", path);
        var directory = (info.Attributes & FileAttributes.Directory) != 0;
        var type = info.LinkTarget is not null ? Kind.SymbolicLink : directory ? Kind.Directory : Kind.File;
        var time = (info.LastWriteTimeUtc - DateTime.UnixEpoch).Ticks * 100;
        return new FileStatus(type, directory ? 493 : 420, 1, 0, 0, type == Kind.File ? info.Length : 0, time, time);
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int statx(int dirfd, byte[] path, int flags, uint mask, ref byte buffer);
}
