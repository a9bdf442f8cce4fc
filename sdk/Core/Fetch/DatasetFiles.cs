using System.Buffers;
using System.Runtime.InteropServices;
using Hpc.CommonData.Format;
using Microsoft.Win32.SafeHandles;

namespace Hpc.CommonData.Fetch;

/// <summary>
/// The raw bytes of a dataset version as they lie on a node's disk: one file for a single-file dataset, or the member
/// files of a real directory tree for a directory dataset. Reads and writes address the dataset's byte offsets —
/// the offsets segments and the whole-dataset hash are defined over — whatever member files a range falls in, so
/// fetching, resuming, delta copies, verification and serving are the same code for both.
/// </summary>
/// <remarks>
/// A tree of 100k files must not hold 100k descriptors: a member that spans several segments keeps its handle open
/// (up to <see cref="MaxOpenHandles"/>), a small one is opened for each access — one open per file, as any copy does.
/// </remarks>
public sealed class DatasetFiles : IDisposable
{
    private const int MaxOpenHandles = 512;
    private const long KeepOpenFrom = 256 * 1024;

    private readonly long[] _starts;
    private readonly long[] _lengths;
    private readonly string[] _paths;
    private readonly SafeFileHandle?[] _handles;
    private readonly bool _writable;
    private int _open;

    private DatasetFiles(string path, bool tree, long length, long[] starts, long[] lengths, string[] paths, bool writable)
    {
        Path = path; IsTree = tree; Length = length;
        _starts = starts; _lengths = lengths; _paths = paths; _writable = writable;
        _handles = new SafeFileHandle?[paths.Length];
    }

    /// <summary>The file, or the root of the tree.</summary>
    public string Path { get; }
    public bool IsTree { get; }
    public long Length { get; }

    /// <summary>
    /// Whether a version with this file table is laid out on a node as a tree: it has entries, and its regular files'
    /// bytes tile the dataset exactly (each byte in one file, in order). Anything else stays one file.
    /// </summary>
    public static bool IsTreeLayout(IReadOnlyList<DatasetFile>? files, long rawLength)
    {
        if (files is not { Count: > 0 }) return false;
        long next = 0;
        foreach (var f in files.Where(f => f.IsFile && f.Length > 0).OrderBy(f => f.Offset))
        {
            if (f.Offset != next) return false;
            next += f.Length;
        }
        return next == rawLength;
    }

    /// <remarks>Asked on every open of a copy; a manifest is immutable, so its answer is kept (a 100k-file table sorts in tens of ms).</remarks>
    public static bool IsTreeLayout(Manifest m) => TreeLayouts.GetValue(m, x => IsTreeLayout(x.Files, x.RawLength) ? True : False) == True;

    private static readonly System.Runtime.CompilerServices.ConditionalWeakTable<Manifest, object> TreeLayouts = new();
    private static readonly object True = new(), False = new();

    /// <summary>Opens a copy (file or tree root at <paramref name="path"/>) that already exists with every member at its length.</summary>
    public static DatasetFiles Open(string path, IReadOnlyList<DatasetFile>? files, long rawLength, bool writable)
    {
        if (!IsTreeLayout(files, rawLength))
        {
            var single = new DatasetFiles(path, false, rawLength, [0], [rawLength], [path], writable);
            single.Handle(0); // a missing file fails here, as opening it should
            return single;
        }
        var members = files!.Where(f => f.IsFile && f.Length > 0).OrderBy(f => f.Offset).ToArray();
        return new DatasetFiles(path, true, rawLength, members.Select(m => m.Offset).ToArray(), members.Select(m => m.Length).ToArray(),
            members.Select(m => MemberPath(path, m.Path)).ToArray(), writable);
    }

    public static DatasetFiles Open(string path, Manifest m, bool writable) => Open(path, m.Files, m.RawLength, writable);

    /// <summary>
    /// Creates (or, resuming, completes) the writable copy of <paramref name="m"/> at <paramref name="path"/>: one file
    /// of the dataset's length, or the tree's directories and its regular files at their lengths, their blocks reserved.
    /// Links, modes and times come when the copy is finished (<see cref="TreeWriter.Finish"/>).
    /// </summary>
    public static DatasetFiles Create(string path, Manifest m)
    {
        if (!IsTreeLayout(m))
        {
            using (var h = File.OpenHandle(path, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.ReadWrite))
                Size(h, path, m.RawLength, ReservedAtOnce);
            var single = Open(path, m, writable: true);
            if (OperatingSystem.IsLinux() && m.RawLength > ReservedAtOnce) single.ReserveBesideTheWrites(ReservedAtOnce);
            return single;
        }
        Directory.CreateDirectory(path);
        foreach (var e in m.Files!)
        {
            var full = MemberPath(path, e.Path);
            if (e.Type == DatasetEntryType.Directory) { Directory.CreateDirectory(full); continue; }
            if (e.Type != DatasetEntryType.File) continue;
            Directory.CreateDirectory(System.IO.Path.GetDirectoryName(full)!);
            using var h = File.OpenHandle(full, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.ReadWrite);
            Size(h, full, e.Length, long.MaxValue);
        }
        return Open(path, m, writable: true);
    }

    /// <summary>
    /// Bytes of a one-file copy reserved before <see cref="Create"/> returns; the rest is reserved on a thread of its own
    /// while the writes go on. On tmpfs, where diskless nodes keep their copies, reserving is the kernel allocating every
    /// page (0.23–0.25 s per GiB here, against nothing on ext4), and done whole before the first write it held every
    /// fetch and fan-out that long before its first byte.
    /// </summary>
    private const long ReservedAtOnce = 32L << 20;
    private const long ReserveChunk = 32L << 20;

    private volatile bool _stopReserving;
    private volatile IOException? _noRoom;

    /// <summary>
    /// Sets a member to its length and reserves its first <paramref name="upTo"/> bytes (the whole of a small copy), so a
    /// node without room for the copy fails before the first segment is fetched rather than part-way, and the writes
    /// that follow only copy: on tmpfs two threads writing 64 KB blocks into the holes of one file spent 0.38–0.56 CPU-s
    /// per GiB, 0.30–0.44 with the blocks reserved first (a C program, five runs each). Blocks already written, on a
    /// resume, are left as they are.
    /// </summary>
    private static void Size(SafeFileHandle h, string path, long length, long upTo)
    {
        if (RandomAccess.GetLength(h) != length) RandomAccess.SetLength(h, length);
        if (length == 0 || !OperatingSystem.IsLinux()) return;
        Reserve(h, path, 0, Math.Min(length, upTo), length);
    }

    private static void Reserve(SafeFileHandle h, string path, long offset, long count, long length)
    {
        if (fallocate((int)h.DangerousGetHandle(), 0, offset, count) == 0) return;
        var errno = Marshal.GetLastPInvokeError();
        // A file system that cannot reserve (EOPNOTSUPP) simply allocates as the writes come.
        if (errno is ENOSPC or EDQUOT)
            throw new IOException($"{path}: no room for the copy's {length} bytes ({Marshal.GetPInvokeErrorMessage(errno)})", errno);
    }

    /// <summary>
    /// Reserves the rest of the file from <paramref name="from"/> a chunk at a time beside the writes (each chunk holds
    /// the file's lock briefly, so writes interleave). Meeting a full file system stops it, and every write after says the
    /// disk is full, so a copy that cannot fit still fails early rather than at its last segment. A second copy created
    /// meanwhile may take room this one has not reserved yet: one of the two then fails part-way.
    /// </summary>
    private void ReserveBesideTheWrites(long from)
    {
        var (path, length) = (Path, Length);
        _ = Task.Run(() =>
        {
            try
            {
                using var h = File.OpenHandle(path, FileMode.Open, FileAccess.ReadWrite, FileShare.ReadWrite | FileShare.Delete);
                for (var at = from; at < length && !_stopReserving; at += ReserveChunk)
                    Reserve(h, path, at, Math.Min(ReserveChunk, length - at), length);
            }
            catch (IOException e) when (CommonDataException.IsDiskFull(e)) { _noRoom = e; }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException) { } // removed meanwhile: the writes meet what this met
        });
    }

    private const int ENOSPC = 28, EDQUOT = 122;

    [DllImport("libc", SetLastError = true)]
    private static extern int fallocate(int fd, int mode, long offset, long length);

    /// <summary>Where entry <paramref name="relative"/> ('/'-separated, checked when its manifest was parsed) lies under <paramref name="root"/>.</summary>
    public static string MemberPath(string root, string relative) => System.IO.Path.Combine(root, relative.Replace('/', System.IO.Path.DirectorySeparatorChar));

    /// <summary>Writes <paramref name="data"/> at dataset offset <paramref name="offset"/>, across member files as it falls.</summary>
    public void Write(ReadOnlySpan<byte> data, long offset)
    {
        if (_noRoom is { } full) throw new IOException(full.Message, full.HResult);
        Check(offset, data.Length);
        for (var i = Find(offset); data.Length > 0; i++)
        {
            var inFile = offset - _starts[i];
            var n = (int)Math.Min(data.Length, _lengths[i] - inFile);
            var h = Acquire(i, out var once);
            try { RandomAccess.Write(h, data[..n], inFile); }
            finally { if (once) h.Dispose(); }
            data = data[n..];
            offset += n;
        }
    }

    /// <summary>Fills <paramref name="data"/> from dataset offset <paramref name="offset"/>.</summary>
    public void Read(Span<byte> data, long offset)
    {
        Check(offset, data.Length);
        for (var i = Find(offset); data.Length > 0; i++)
        {
            var inFile = offset - _starts[i];
            var n = (int)Math.Min(data.Length, _lengths[i] - inFile);
            var h = Acquire(i, out var once);
            try
            {
                for (var done = 0; done < n;)
                {
                    var read = RandomAccess.Read(h, data[done..n], inFile + done);
                    if (read <= 0) throw new IOException($"{_paths[i]} ended at {inFile + done} of {_lengths[i]} bytes");
                    done += read;
                }
            }
            finally { if (once) h.Dispose(); }
            data = data[n..];
            offset += n;
        }
    }

    /// <summary>Makes every member's bytes durable (before the copy is published under its final name).</summary>
    public void FlushToDisk()
    {
        // One syncfs for a tree instead of an fsync per file: 100k small files would otherwise take 100k journal commits.
        if (IsTree && OperatingSystem.IsLinux() && _paths.Length > 1)
        {
            var any = Acquire(0, out var one);
            try
            {
                if (syncfs((int)any.DangerousGetHandle()) == 0) return;
            }
            finally { if (one) any.Dispose(); }
        }
        for (var i = 0; i < _paths.Length; i++)
        {
            var h = Acquire(i, out var once);
            try { RandomAccess.FlushToDisk(h); }
            finally { if (once) h.Dispose(); }
        }
    }

    /// <summary>Recomputes the whole-dataset hash (XXH3-128 of the bytes in dataset order) and compares it with <paramref name="expected"/>.</summary>
    public unsafe bool HashMatches(string expected)
    {
        if (!IsTree)
        {
            using var map = MappedFile.Open(Path, Length, writable: false);
            return XxHash.Hash128Of(map.Pointer, map.Length).ToString("x32") == expected;
        }
        using var hash = new XxHash.Streaming128();
        var buffer = ArrayPool<byte>.Shared.Rent(1 << 20);
        try
        {
            for (long o = 0; o < Length;)
            {
                var n = (int)Math.Min(buffer.Length, Length - o);
                Read(buffer.AsSpan(0, n), o);
                hash.Append(buffer.AsSpan(0, n));
                o += n;
            }
        }
        finally { ArrayPool<byte>.Shared.Return(buffer); }
        return hash.Digest().ToString("x32") == expected;
    }

    private void Check(long offset, int length)
    {
        if (offset < 0 || length < 0 || offset + length > Length)
            throw new ArgumentOutOfRangeException(nameof(offset), $"[{offset}, {offset + length}) lies outside the {Length} bytes of {Path}");
    }

    /// <summary>The member holding dataset offset <paramref name="offset"/>.</summary>
    private int Find(long offset)
    {
        var i = Array.BinarySearch(_starts, offset);
        return i >= 0 ? i : ~i - 1;
    }

    /// <summary>A handle of member <paramref name="i"/>: the kept one, or one opened for this access (<paramref name="once"/>: dispose it after).</summary>
    private SafeFileHandle Acquire(int i, out bool once)
    {
        var kept = Handle(i);
        once = kept is null;
        return kept ?? OpenMember(i);
    }

    /// <summary>The kept handle of member <paramref name="i"/>, opened now if it is worth keeping; null for a small one.</summary>
    private SafeFileHandle? Handle(int i)
    {
        if (_handles[i] is { } h) return h;
        if (_paths.Length > 1 && (_lengths[i] < KeepOpenFrom || Volatile.Read(ref _open) >= MaxOpenHandles)) return null;
        var opened = OpenMember(i);
        if (Interlocked.CompareExchange(ref _handles[i], opened, null) is { } other)
        {
            opened.Dispose();
            return other;
        }
        Interlocked.Increment(ref _open);
        return opened;
    }

    private SafeFileHandle OpenMember(int i) =>
        File.OpenHandle(_paths[i], FileMode.Open, _writable ? FileAccess.ReadWrite : FileAccess.Read, FileShare.ReadWrite | FileShare.Delete);

    [System.Runtime.InteropServices.DllImport("libc", SetLastError = true)]
    private static extern int syncfs(int fd);

    public void Dispose()
    {
        _stopReserving = true;
        for (var i = 0; i < _handles.Length; i++) Interlocked.Exchange(ref _handles[i], null)?.Dispose();
    }
}
