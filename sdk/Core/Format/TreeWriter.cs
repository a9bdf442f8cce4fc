namespace Hpc.CommonData.Format;

/// <summary>
/// Writes a directory dataset out as the tree it was staged from: directories (empty ones too), files with their
/// bytes, symbolic links as links, hard links as hard links, then modes and modification times — directories last and
/// deepest first, because writing into a directory changes its time and a read-only one could not be written into.
/// Every path was checked when the manifest was parsed (relative, no "..", nothing below a link); links are created with their
/// targets as staged and never followed: modes and times are set on files and directories only.
/// </summary>
public static class TreeWriter
{
    /// <param name="copy">Writes one file's bytes (<see cref="DatasetFile.Offset"/>, <see cref="DatasetFile.Length"/>) to the stream.</param>
    public static void Write(string destination, IReadOnlyList<DatasetFile> entries, Action<DatasetFile, Stream> copy)
    {
        Directory.CreateDirectory(destination);
        foreach (var e in entries)
        {
            var full = Full(destination, e);
            Directory.CreateDirectory(Path.GetDirectoryName(full)!);
            switch (e.Type)
            {
                case DatasetEntryType.Directory:
                    Directory.CreateDirectory(full);
                    break;
                case DatasetEntryType.File:
                    using (var file = new FileStream(full, FileMode.CreateNew, FileAccess.Write, FileShare.None, 1 << 16))
                        copy(e, file);
                    break;
            }
        }
        Finish(destination, entries, readOnly: false);
    }

    /// <summary>
    /// Completes a tree whose directories and files are in place: creates its links, then sets modes and modification
    /// times. <paramref name="readOnly"/> publishes it read-only for everyone who may pass its root (the node's shared
    /// copy): files as <see cref="SharedFileMode"/>, directories r-x; the root itself is left to the caller, which
    /// decides who may enter. Safe to run again over a tree it finished part of.
    /// </summary>
    public static void Finish(string root, IReadOnlyList<DatasetFile> entries, bool readOnly)
    {
        foreach (var e in entries)
        {
            if (e.Type is not (DatasetEntryType.SymbolicLink or DatasetEntryType.HardLink)) continue;
            var full = Full(root, e);
            Directory.CreateDirectory(Path.GetDirectoryName(full)!);
            if (new FileInfo(full).LinkTarget is not null || File.Exists(full)) File.Delete(full);
            if (e.Type == DatasetEntryType.SymbolicLink) File.CreateSymbolicLink(full, e.Target!);
            else HardLink(Path.Combine(root, e.Target!.Replace('/', Path.DirectorySeparatorChar)), full);
        }
        foreach (var e in entries.Where(e => e.Type == DatasetEntryType.File))
            SetModeAndTime(Full(root, e), e, readOnly ? SharedFileMode(e.Mode) : e.Mode & 0xFFF, readOnly);
        foreach (var e in entries.Where(e => e.Type == DatasetEntryType.Directory).OrderByDescending(e => e.Path.Count(c => c == '/')))
            SetModeAndTime(Full(root, e), e, readOnly ? 0b101_101_101 : e.Mode & 0xFFF, readOnly);
    }

    /// <summary>
    /// A file's mode in a shared read-only tree: readable by all, executable by all when anyone could execute it (a
    /// software tree's programs must run for every reader), never writable, no set-id bits. Who is "all" is decided
    /// by the tree's root.
    /// </summary>
    public static int SharedFileMode(int staged) => (staged & 0b001_001_001) != 0 ? 0b101_101_101 : 0b100_100_100;

    /// <summary>
    /// Removes a tree, read-only directories included (opened up first: an entry cannot be removed from a directory
    /// without write permission on it). Links are removed, never followed.
    /// </summary>
    public static void Delete(string path)
    {
        if (new FileInfo(path).LinkTarget is not null || File.Exists(path))
        {
            File.Delete(path);
            return;
        }
        if (!Directory.Exists(path)) return;
        OpenUp(path, files: OperatingSystem.IsWindows());
        Directory.Delete(path, recursive: true);
    }

    /// <summary>
    /// Gives the owner write access again throughout a tree made read-only by <see cref="Finish"/> (directories, and
    /// with <paramref name="files"/> the files too), so it can be written into or removed. Links are not followed.
    /// </summary>
    public static void OpenUp(string root, bool files = true)
    {
        var walk = new EnumerationOptions { RecurseSubdirectories = true, AttributesToSkip = FileAttributes.ReparsePoint };
        if (OperatingSystem.IsWindows())
        {
            if (files) foreach (var f in Directory.EnumerateFiles(root, "*", walk)) File.SetAttributes(f, FileAttributes.Normal);
            return;
        }
        const UnixFileMode owner = UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute;
        File.SetUnixFileMode(root, File.GetUnixFileMode(root) | owner);
        foreach (var d in Directory.EnumerateDirectories(root, "*", walk)) File.SetUnixFileMode(d, File.GetUnixFileMode(d) | owner);
        if (files)
            foreach (var f in Directory.EnumerateFiles(root, "*", walk)) File.SetUnixFileMode(f, File.GetUnixFileMode(f) | UnixFileMode.UserRead | UnixFileMode.UserWrite);
    }

    private static string Full(string root, DatasetFile e) => Path.Combine(root, e.Path.Replace('/', Path.DirectorySeparatorChar));

    private static void SetModeAndTime(string full, DatasetFile e, int mode, bool readOnly)
    {
        if (e.ModifiedNanoseconds is { } ns)
        {
            var time = DateTime.UnixEpoch.AddTicks(ns / 100);
            if (e.Type == DatasetEntryType.Directory) Directory.SetLastWriteTimeUtc(full, time);
            else File.SetLastWriteTimeUtc(full, time);
        }
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(full, (UnixFileMode)mode);
        else if (readOnly && e.Type == DatasetEntryType.File) File.SetAttributes(full, FileAttributes.ReadOnly);
    }

    private static void HardLink(string existing, string link)
    {
        if (OperatingSystem.IsWindows())
        {
            // No portable hard-link API: a copy gives the same bytes under both names.
            File.Copy(existing, link);
            return;
        }
        if (link_native(existing, link) != 0)
            throw new IOException($"cannot create the hard link '{link}' to '{existing}': {System.Runtime.InteropServices.Marshal.GetLastPInvokeErrorMessage()}");
    }

    [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "link", SetLastError = true)]
    private static extern int link_native([System.Runtime.InteropServices.MarshalAs(System.Runtime.InteropServices.UnmanagedType.LPUTF8Str)] string existing,
        [System.Runtime.InteropServices.MarshalAs(System.Runtime.InteropServices.UnmanagedType.LPUTF8Str)] string link);
}
