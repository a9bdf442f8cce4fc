using Hpc.CommonData.Access;
using Hpc.CommonData.Format;
using Microsoft.Win32.SafeHandles;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.Stager;

/// <summary>What is being staged: one file, a directory tree (files concatenated in path order), or standard input.</summary>
public sealed class StageSource : IDisposable
{
    private readonly List<(string FullPath, DatasetFile Entry, FileStatus? Status)> _files = [];
    private readonly TreeAccess? _tree;
    // A single file's status when it was opened (none for standard input), and where its status is read again.
    private readonly (string Path, string StatusPath, FileStatus Status)? _singleStatus;
    private readonly Stream? _single;
    private int _current = -1;
    private Stream? _open;

    public IReadOnlyList<DatasetFile>? Files { get; }
    /// <summary>The data comes from standard input (its length is known only at its end).</summary>
    public bool IsStandardInput { get; }
    public long? KnownLength { get; }
    public string Description { get; }

    private StageSource(Stream single, long? length, string description, bool standardInput = false, (string, string, FileStatus)? singleStatus = null)
    {
        _single = single; KnownLength = length; Description = description; IsStandardInput = standardInput; _singleStatus = singleStatus;
    }

    private StageSource(TreeAccess tree, ILogger log, bool skipUnreadable)
    {
        Description = tree.Root;
        _tree = tree;
        var entries = new TreeWalker(log, skipUnreadable).Walk(tree);
        foreach (var e in entries.Where(e => e.File.IsFile)) _files.Add((e.FullPath, e.File, e.Status));
        Files = entries.Select(e => e.File).ToList();
        KnownLength = _files.Sum(f => f.Entry.Length);
    }

    /// <summary>
    /// Opens a path ("-" for standard input). Throws <see cref="FileNotFoundException"/> naming it when absent. With
    /// <paramref name="forUser"/>, reads only what that user may read (<see cref="OpenForUser"/>).
    /// </summary>
    public static StageSource Open(string path, ILogger? log = null, bool skipUnreadable = false, uint? forUser = null)
    {
        if (path == "-") return new StageSource(Console.OpenStandardInput(1 << 20), null, "standard input", standardInput: true);
        if (forUser is { } uid) return OperatingSystem.IsLinux() ? OpenForUser(path, uid, log, skipUnreadable) : throw new PlatformNotSupportedException("--for-user needs Linux");
        if (Directory.Exists(path)) return new StageSource(new PathAccess(Path.GetFullPath(path)), log ?? NullLogger.Instance, skipUnreadable);
        if (!File.Exists(path)) throw new FileNotFoundException($"nothing to stage: '{path}' does not exist", path);
        var full = Path.GetFullPath(path);
        // Taken before the first byte is read: a change from here on shows when the stage ends. Of the file the path
        // leads to, as the read follows a link (a descriptor's /proc/PID/fd/N included) to it.
        var status = FileStatus.Of(full, followLinks: true);
        var stream = new FileStream(path, FileMode.Open, FileAccess.Read, FileShare.Read, 1 << 20, FileOptions.SequentialScan);
        return new StageSource(stream, stream.Length, full, singleStatus: (full, full, status));
    }

    /// <summary>
    /// A file or a tree staged on behalf of user <paramref name="uid"/> by a process that may read more than they may:
    /// the file, or the tree's root, is opened and checked as that user may read it (its mode bits and every directory
    /// above it; an ACL is refused), and a tree's every directory and file again as it is reached
    /// (<see cref="UserAccess"/>). What is read is what was checked: the file through the descriptor opened.
    /// </summary>
    [System.Runtime.Versioning.SupportedOSPlatform("linux")]
    private static StageSource OpenForUser(string path, uint uid, ILogger? log, bool skipUnreadable)
    {
        var full = Path.GetFullPath(path);
        var groups = UnixAccounts.GroupsOf(uid);
        SafeFileHandle handle;
        try { handle = UnixFileAccess.Open(full); }
        catch (FileNotFoundException) { throw new FileNotFoundException($"nothing to stage: '{path}' does not exist", path); }
        try
        {
            if (UnixFileAccess.WhyNotReadableTree(handle, full, uid, groups) is { } why)
                throw new UnauthorizedAccessException($"user {UnixAccounts.UserName(uid) ?? uid.ToString(System.Globalization.CultureInfo.InvariantCulture)} may not stage '{full}': {why}; nothing was sent");
            var descriptor = PathAccess.Descriptor(handle);
            var status = FileStatus.Of(descriptor, followLinks: true);
            if (status.Type == FileStatus.Kind.Directory) return new StageSource(new UserAccess(full, handle, uid, groups), log ?? NullLogger.Instance, skipUnreadable);
            var stream = new FileStream(handle, FileAccess.Read, 1 << 20);
            return new StageSource(stream, stream.Length, full, singleStatus: (full, descriptor, status));
        }
        catch
        {
            handle.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Throws, naming the file and what changed, when a file of the source is not what it was when listed or opened
    /// (size, modification or change time, identity): what was read may then match neither state, as when a job is
    /// still writing the file. Called once everything is read, before anything is published.
    /// </summary>
    public void CheckUnchanged()
    {
        if (_singleStatus is { } single)
        {
            if (FileStatus.ChangedSince(single.StatusPath, single.Status, followLinks: true) is { } change) throw SourceChangedException.For(single.Path, change);
            return;
        }
        foreach (var (path, entry, status) in _files)
            if (status is { } before && _tree!.ChangedSince(entry.Path, before) is { } change)
                throw SourceChangedException.For(path, change);
    }

    /// <summary>Opens a file of a tree for reading; one deleted since it was listed fails the stage as any other change does.</summary>
    private static T OpenListed<T>(string path, Func<T> open)
    {
        try { return open(); }
        catch (Exception e) when (e is FileNotFoundException or DirectoryNotFoundException) { throw SourceChangedException.For(path, FileStatus.Deleted); }
        catch (UnixFileAccess.EntryIsLinkException) { throw SourceChangedException.For(path, "a directory above it was replaced by a link, which is never followed"); }
    }

    /// <summary>
    /// Reads at <paramref name="offset"/> of the dataset without disturbing the sequential read (at most to the end of
    /// the file holding it); -1 when the source cannot be read out of order (standard input).
    /// </summary>
    public int ReadAt(long offset, Span<byte> buffer)
    {
        if (_single is FileStream file)
            return RandomAccess.Read(file.SafeFileHandle, buffer, offset);
        if (_single is not null)
            return -1;
        var i = _files.FindLastIndex(f => f.Entry.Offset <= offset && f.Entry.Length > 0);
        if (i < 0) return 0;
        var (path, entry, status) = _files[i];
        using var handle = OpenListed(path, () => _tree!.OpenFile(entry.Path, status!.Value));
        var within = offset - entry.Offset;
        return RandomAccess.Read(handle, buffer[..(int)Math.Min(buffer.Length, entry.Length - within)], within);
    }

    /// <summary>Fills <paramref name="buffer"/> as far as the data goes (crossing file boundaries); 0 at the end.</summary>
    public int ReadBlock(Span<byte> buffer)
    {
        var total = 0;
        while (total < buffer.Length)
        {
            var stream = _single ?? NextFile();
            if (stream is null) break;
            var n = stream.Read(buffer[total..]);
            if (n == 0)
            {
                if (_single is not null) break;
                _open!.Dispose();
                _open = null;
                continue;
            }
            total += n;
        }
        return total;
    }

    private Stream? NextFile()
    {
        if (_open is not null) return _open;
        if (++_current >= _files.Count) return null;
        var (path, entry, status) = _files[_current];
        return _open = OpenListed(path, () => new FileStream(_tree!.OpenFile(entry.Path, status!.Value), FileAccess.Read, 1 << 20));
    }

    public void Dispose()
    {
        _single?.Dispose();
        _open?.Dispose();
        _tree?.Dispose();
    }
}

/// <summary>The source was not the same from start to end of a stage (a job still writing it); nothing was published.</summary>
public sealed class SourceChangedException(string message) : IOException(message)
{
    /// <summary>The one line a change of a source file fails a stage with, whatever the change (deleted, written, replaced).</summary>
    public static SourceChangedException For(string path, string change) =>
        new($"'{path}' changed while it was staged: {change}; nothing was published (stage it again once it is complete, or stage a copy)");
}
