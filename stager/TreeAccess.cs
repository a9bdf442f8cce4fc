using System.Runtime.Versioning;
using Hpc.CommonData.Access;
using Microsoft.Win32.SafeHandles;

namespace Hpc.Stager;

/// <summary>
/// How a tree's entries are listed, examined and opened, by their paths relative to its root: by path, for the user who
/// runs the stager (<see cref="PathAccess"/>), or on another user's behalf (<see cref="UserAccess"/>).
/// </summary>
public abstract class TreeAccess(string root) : IDisposable
{
    /// <summary>The tree's root as the user named it, for messages.</summary>
    public string Root { get; } = root;

    /// <summary>An entry's path as the user would name it.</summary>
    public string Shown(string relative) => relative.Length == 0 ? Root : Path.Combine(Root, relative);

    /// <summary>The names in a directory of the tree ("" for the root), in no particular order.</summary>
    public abstract IEnumerable<string> Names(string relative);

    /// <summary>What an entry is, without following a link; <see cref="FileNotFoundException"/> when it is gone.</summary>
    public abstract FileStatus Status(string relative);

    public abstract string? LinkTarget(string relative);

    /// <summary>
    /// Opens a file of the tree to read; it must still be the file <paramref name="listed"/> saw, or the stage fails with
    /// <see cref="SourceChangedException"/> before a byte of it is read.
    /// </summary>
    public abstract SafeFileHandle OpenFile(string relative, FileStatus listed);

    /// <summary>Why a file is no longer what <paramref name="before"/> saw, or null when it is the same.</summary>
    public string? ChangedSince(string relative, FileStatus before) => FileStatus.ChangedSince(() => Status(relative), before);

    public virtual void Dispose() => GC.SuppressFinalize(this);

    /// <summary>A file replaced by another since it was listed: what it now is was never checked, so it is not read.</summary>
    protected static void RequireSame(string shown, FileStatus listed, FileStatus now)
    {
        if (now.Type != FileStatus.Kind.File || now.Device != listed.Device || now.Inode != listed.Inode)
            throw SourceChangedException.For(shown, "it was replaced by another file");
    }
}

/// <summary>The tree reached by its paths, with this process's own rights: what a user staging their own data gets.</summary>
public sealed class PathAccess(string root) : TreeAccess(root)
{
    public override IEnumerable<string> Names(string relative) =>
        new DirectoryInfo(Shown(relative)).EnumerateFileSystemInfos("*", new EnumerationOptions
        {
            AttributesToSkip = 0, IgnoreInaccessible = false, RecurseSubdirectories = false, ReturnSpecialDirectories = false,
        }).Select(i => i.Name);

    public override FileStatus Status(string relative) => FileStatus.Of(Shown(relative));

    public override string? LinkTarget(string relative) => new FileInfo(Shown(relative)).LinkTarget;

    public override SafeFileHandle OpenFile(string relative, FileStatus listed)
    {
        var handle = File.OpenHandle(Shown(relative), FileMode.Open, FileAccess.Read, FileShare.Read, FileOptions.SequentialScan);
        if (OperatingSystem.IsLinux())
        {
            try { RequireSame(Shown(relative), listed, FileStatus.Of(Descriptor(handle), followLinks: true)); }
            catch { handle.Dispose(); throw; }
        }
        return handle;
    }

    internal static string Descriptor(SafeFileHandle handle) => $"/proc/self/fd/{handle.DangerousGetHandle()}";
}

/// <summary>
/// The tree reached on behalf of user <c>uid</c> by a process that may read more than they may (the controller's
/// SlurmUser staging a job's files): every directory is opened from its parent's descriptor without following a link,
/// and must let the user list and search it; every file is opened so from its directory, must let the user read it,
/// and must be the very file that was listed. A link, or a rename, put anywhere in the tree between the listing and
/// the read reaches nothing the user could not have read themselves; links in the tree are stored as links.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class UserAccess : TreeAccess
{
    private readonly SafeFileHandle _root;
    private readonly uint _uid;
    private readonly uint[] _groups;
    // The directory opened last: the listing and the read each go through one directory's entries in turn, so the
    // chain from the root is opened again only when the walk moves on.
    private (string Relative, SafeFileHandle Handle)? _current;

    /// <param name="root">The tree's root, already opened and checked for the user (<see cref="UnixFileAccess.WhyNotReadableTree"/>); owned from here.</param>
    public UserAccess(string shown, SafeFileHandle root, uint uid, uint[] groups) : base(shown)
    {
        (_root, _uid, _groups) = (root, uid, groups);
    }

    public override IEnumerable<string> Names(string relative) =>
        new DirectoryInfo(PathAccess.Descriptor(Directory(relative))).EnumerateFileSystemInfos("*", new EnumerationOptions
        {
            AttributesToSkip = 0, IgnoreInaccessible = false, RecurseSubdirectories = false, ReturnSpecialDirectories = false,
        }).Select(i => i.Name).ToList();

    public override FileStatus Status(string relative) => FileStatus.Of(InDirectory(relative), shown: Shown(relative));

    public override string? LinkTarget(string relative) => new FileInfo(InDirectory(relative)).LinkTarget;

    public override SafeFileHandle OpenFile(string relative, FileStatus listed)
    {
        var (parent, name) = Split(relative);
        SafeFileHandle file;
        try { file = UnixFileAccess.OpenEntry(Directory(parent), name, Shown(relative)); }
        catch (UnixFileAccess.EntryIsLinkException) { throw SourceChangedException.For(Shown(relative), "it was replaced by a link, which is never followed"); }
        try
        {
            RequireSame(Shown(relative), listed, FileStatus.Of(PathAccess.Descriptor(file), followLinks: true));
            if (UnixFileAccess.WhyNotReadableEntry(file, Shown(relative), _uid, _groups) is { } why) throw Refused(why);
            return file;
        }
        catch
        {
            file.Dispose();
            throw;
        }
    }

    /// <summary>The one line a stage for the user fails with when the tree holds what they may not read: nothing is sent.</summary>
    private UnauthorizedAccessException Refused(string why) =>
        new($"user {UnixAccounts.UserName(_uid) ?? _uid.ToString(System.Globalization.CultureInfo.InvariantCulture)} may not stage '{Root}': {why}; nothing was sent");

    /// <summary>The entry's path through its directory's descriptor: only its last part is looked up by name.</summary>
    private string InDirectory(string relative)
    {
        var (parent, name) = Split(relative);
        return PathAccess.Descriptor(Directory(parent)) + "/" + name;
    }

    private static (string Parent, string Name) Split(string relative)
    {
        var slash = relative.LastIndexOf('/');
        return slash < 0 ? ("", relative) : (relative[..slash], relative[(slash + 1)..]);
    }

    /// <summary>A directory of the tree, opened part by part from the root, each part checked for the user.</summary>
    private SafeFileHandle Directory(string relative)
    {
        if (relative.Length == 0) return _root;
        if (_current is { } open && open.Relative == relative) return open.Handle;
        var handle = _root;
        var at = 0;
        try
        {
            foreach (var part in relative.Split('/'))
            {
                at += (at == 0 ? 0 : 1) + part.Length;
                var shown = Shown(relative[..at]);
                var next = UnixFileAccess.OpenEntry(handle, part, shown);
                if (handle != _root) handle.Dispose();
                handle = next;
                if (FileStatus.Of(PathAccess.Descriptor(next), followLinks: true).Type != FileStatus.Kind.Directory)
                    throw SourceChangedException.For(shown, "it is no longer a directory");
                if (UnixFileAccess.WhyNotReadableEntry(next, shown, _uid, _groups) is { } why) throw Refused(why);
            }
        }
        catch
        {
            if (handle != _root) handle.Dispose();
            throw;
        }
        if (_current is { } previous) previous.Handle.Dispose();
        _current = (relative, handle);
        return handle;
    }

    public override void Dispose()
    {
        _current?.Handle.Dispose();
        _root.Dispose();
        base.Dispose();
    }
}
