namespace Hpc.CommonData.Format;

/// <summary>
/// Writes a directory dataset out as the tree it was staged from: directories (empty ones too), files with their
/// bytes, symbolic links as links, hard links as hard links, then modes and modification times — directories last and
/// deepest first, because writing into a directory changes its time and a read-only one could not be written into.
/// Every path was checked when the manifest was parsed (relative, no "..", links staying inside the tree).
/// </summary>
public static class TreeWriter
{
    /// <param name="copy">Writes one file's bytes (<see cref="DatasetFile.Offset"/>, <see cref="DatasetFile.Length"/>) to the stream.</param>
    public static void Write(string destination, IReadOnlyList<DatasetFile> entries, Action<DatasetFile, Stream> copy)
    {
        Directory.CreateDirectory(destination);
        string Full(DatasetFile e) => Path.Combine(destination, e.Path.Replace('/', Path.DirectorySeparatorChar));
        foreach (var e in entries)
        {
            var full = Full(e);
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
                case DatasetEntryType.SymbolicLink:
                    File.CreateSymbolicLink(full, e.Target!);
                    break;
                case DatasetEntryType.HardLink:
                    HardLink(Path.Combine(destination, e.Target!.Replace('/', Path.DirectorySeparatorChar)), full);
                    break;
            }
        }
        foreach (var e in entries.Where(e => e.Type == DatasetEntryType.File))
            Finish(Full(e), e);
        foreach (var e in entries.Where(e => e.Type == DatasetEntryType.Directory).OrderByDescending(e => e.Path.Count(c => c == '/')))
            Finish(Full(e), e);
    }

    private static void Finish(string full, DatasetFile e)
    {
        if (e.ModifiedNanoseconds is { } ns)
        {
            var time = DateTime.UnixEpoch.AddTicks(ns / 100);
            if (e.Type == DatasetEntryType.Directory) Directory.SetLastWriteTimeUtc(full, time);
            else File.SetLastWriteTimeUtc(full, time);
        }
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(full, (UnixFileMode)(e.Mode & 0xFFF));
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
