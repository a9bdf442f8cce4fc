using System.Buffers;
using System.Diagnostics;
using System.Runtime.InteropServices;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.CommonData;

/// <summary>Where the bytes of an open dataset live.</summary>
internal abstract unsafe class DataBacking : IDisposable
{
    public abstract byte* Pointer { get; }
    public abstract long Length { get; }
    public abstract void Dispose();
}

internal sealed unsafe class MappedBacking(MappedFile map) : DataBacking
{
    public override byte* Pointer => map.Pointer;
    public override long Length => map.Length;
    public override void Dispose() => map.Dispose();
}

internal sealed unsafe class NativeBacking : DataBacking
{
    private byte* _pointer;
    public NativeBacking(long length)
    {
        Length = length;
        _pointer = (byte*)NativeMemory.Alloc((nuint)Math.Max(1, length));
    }
    public nint Address => (nint)_pointer;
    public override byte* Pointer => _pointer;
    public override long Length { get; }
    public void Write(long offset, ReadOnlySpan<byte> data)
    {
        if (offset < 0 || offset + data.Length > Length) throw new InvalidDataException("data beyond the announced length");
        data.CopyTo(new Span<byte>(_pointer + offset, data.Length));
    }
    public override void Dispose()
    {
        var p = _pointer;
        _pointer = null;
        if (p is not null) NativeMemory.Free(p);
    }
}

/// <summary>
/// A directory dataset published on the node as a real tree: there is no one mapping of the whole dataset, each member
/// file is mapped when it is first read (and stays mapped, with the pages every worker on the node shares, until the
/// dataset is disposed). Offsets are still the dataset's: a window inside one member file is that file's mapping.
/// </summary>
internal sealed unsafe class TreeBacking : DataBacking
{
    private readonly DatasetFiles _files;
    private readonly DatasetFile[] _members;
    private readonly long[] _starts;
    private readonly MappedFile?[] _maps;
    private readonly object _gate = new();

    public TreeBacking(string root, IReadOnlyList<DatasetFile> files, long length)
    {
        _files = DatasetFiles.Open(root, files, length, writable: false);
        _members = files.Where(f => f.IsFile && f.Length > 0).OrderBy(f => f.Offset).ToArray();
        _starts = _members.Select(m => m.Offset).ToArray();
        _maps = new MappedFile?[_members.Length];
        Root = root;
        Length = length;
        // A worker that may not enter the tree learns it now, while the caller can still fall back to the pipe.
        if (_members.Length > 0) Map(0);
        else _ = Directory.EnumerateFileSystemEntries(root).Any();
    }

    public string Root { get; }
    public DatasetFiles Files => _files;
    public override byte* Pointer => throw new NotSupportedException("a directory dataset on the node has no single mapping");
    public override long Length { get; }

    /// <summary>The mapped bytes at dataset offset <paramref name="offset"/>, which must lie in one member file with the <paramref name="length"/> after it.</summary>
    public byte* Window(long offset, int length)
    {
        if (length == 0) return null;
        var i = Array.BinarySearch(_starts, offset);
        if (i < 0) i = ~i - 1;
        var m = _members[i];
        if (offset + length > m.Offset + m.Length)
            throw new NotSupportedException($"bytes [{offset}, {offset + length}) span more than one file of the tree (they begin in '{m.Path}'); " +
                                            "read member files with OpenFile, or the whole dataset with OpenRead");
        return Map(i) + (offset - m.Offset);
    }

    /// <summary>The windows of each member file, in dataset order, none larger than <paramref name="windowSize"/>.</summary>
    public IEnumerable<(long Offset, int Length)> MemberWindows(int windowSize)
    {
        foreach (var m in _members)
            for (long o = 0; o < m.Length; o += windowSize) yield return (m.Offset + o, (int)Math.Min(windowSize, m.Length - o));
    }

    private byte* Map(int i)
    {
        if (_maps[i] is { } map) return map.Pointer;
        lock (_gate)
        {
            return (_maps[i] ??= MappedFile.Open(DatasetFiles.MemberPath(Root, _members[i].Path), _members[i].Length, writable: false)).Pointer;
        }
    }

    public override void Dispose()
    {
        lock (_gate)
            for (var i = 0; i < _maps.Length; i++)
            {
                _maps[i]?.Dispose();
                _maps[i] = null;
            }
        _files.Dispose();
    }
}

/// <summary>
/// An open, verified, read-only dataset: <c>await using var data = await Dataset.OpenAsync("risk/market-history");</c>.
/// Dispose it when done: that ends the lease on the node's copy.
/// </summary>
public sealed unsafe partial class Dataset : IAsyncDisposable, IDisposable
{
    internal Dataset(LocalDataset info, DataAccessMode mode, DataBacking backing, AgentClient? agent, TimeSpan openTime, bool verifyOnOpen = false)
    {
        _info = info; _backing = backing; _agent = agent; Mode = mode; OpenTime = openTime;
        if (verifyOnOpen && XxHash.Hash128Of(backing.Pointer, backing.Length).ToString("x32") != info.Hash)
        {
            backing.Dispose();
            throw new CommonDataException(ErrorCode.Integrity, $"dataset '{info.Name}' version {info.Version}: whole-dataset hash mismatch after transfer");
        }
    }

    public string Name => _info.Name;
    public string Version => _info.Version;
    /// <summary>XXH3-128 of the whole dataset, as 32 hex digits.</summary>
    public string Hash => _info.Hash;
    public long Length => _info.Length;
    /// <summary>The file table of a directory dataset; empty for a single-file dataset.</summary>
    public IReadOnlyList<DatasetFile> Files => _info.Files ?? [];
    public DataAccessMode Mode { get; }
    /// <summary>
    /// Path of the node's shared copy (map mode), otherwise empty: the file of a single-file dataset, the root of the
    /// read-only tree of a directory dataset — which any program may read as it reads any directory.
    /// </summary>
    public string LocalPath => Mode == DataAccessMode.Map ? _info.Path : "";
    /// <summary>How long opening took, including any fetch the agent had to do.</summary>
    public TimeSpan OpenTime { get; }

    /// <summary>A read-only window; spans are limited to 2 GB, datasets are not — take several windows for larger ones.</summary>
    /// <remarks>A directory dataset mapped from the node's tree has no single mapping: a window must then lie inside
    /// one member file (<see cref="NotSupportedException"/> otherwise) — open members with <see cref="OpenFile"/>.</remarks>
    public ReadOnlySpan<byte> GetSpan(long offset, int length)
    {
        Check(offset, length);
        return new ReadOnlySpan<byte>(Window(offset, length), length);
    }

    /// <summary>A read-only memory window (usable across awaits); valid until this object is disposed.</summary>
    public ReadOnlyMemory<byte> GetMemory(long offset, int length)
    {
        Check(offset, length);
        return new PointerMemory(Window(offset, length), length).Memory;
    }

    private byte* Window(long offset, int length) => _backing is TreeBacking tree ? tree.Window(offset, length) : _backing.Pointer + offset;

    /// <summary>
    /// Consecutive windows of at most <paramref name="windowSize"/> bytes covering the whole dataset (for a directory
    /// dataset mapped from the node's tree, each window lies in one member file, so some are shorter).
    /// </summary>
    public IEnumerable<ReadOnlyMemory<byte>> Windows(int windowSize = 1 << 30)
    {
        if (_backing is TreeBacking tree)
        {
            foreach (var (o, n) in tree.MemberWindows(windowSize)) yield return GetMemory(o, n);
            yield break;
        }
        for (long o = 0; o < Length; o += windowSize) yield return GetMemory(o, (int)Math.Min(windowSize, Length - o));
    }

    /// <summary>A seekable read-only stream over the whole dataset (a directory dataset's files in dataset order).</summary>
    public Stream OpenRead()
    {
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        return _backing is TreeBacking tree
            ? new DatasetFilesStream(tree.Files)
            : new UnmanagedMemoryStream(_backing.Pointer, Length, Length, FileAccess.Read);
    }

    /// <summary>A read-only stream over one file of a directory dataset (mapped from the node's tree in map mode).</summary>
    public Stream OpenFile(string path)
    {
        var file = Resolve(path);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        if (file.Length == 0) return new MemoryStream([], writable: false);
        if (_backing is TreeBacking tree) return new UnmanagedMemoryStream(tree.Window(file.Offset, (int)Math.Min(file.Length, int.MaxValue)), file.Length, file.Length, FileAccess.Read);
        return new UnmanagedMemoryStream(_backing.Pointer + file.Offset, file.Length, file.Length, FileAccess.Read);
    }

    /// <summary>
    /// Where a member of a directory dataset lies in the node's read-only tree (map mode), for programs that take a
    /// path; empty in other modes. Links are the tree's own: the path names the entry, not what it points to.
    /// </summary>
    public string LocalPathOf(string path)
    {
        if (!Files.Any(f => f.Path == path)) throw new FileNotFoundException($"dataset '{Name}' has no entry '{path}'", path);
        return _backing is TreeBacking tree ? DatasetFiles.MemberPath(tree.Root, path) : "";
    }

    /// <summary>
    /// The file entry a path names, following hard links and symbolic links that stay inside the tree as a file system
    /// would. A link leading out of the tree (absolute, or climbing above its root) is not followed: what it names is
    /// the node's, not the dataset's.
    /// </summary>
    private Dictionary<string, DatasetFile>? _byPath;

    private DatasetFile Resolve(string path)
    {
        // A tree may hold 100k entries: look them up, do not scan them, on every open.
        var byPath = LazyInitializer.EnsureInitialized(ref _byPath, () => Files.ToDictionary(f => f.Path, StringComparer.Ordinal));
        for (var hops = 0; hops < 40; hops++)
        {
            var entry = byPath.GetValueOrDefault(path)
                        ?? throw new FileNotFoundException($"dataset '{Name}' has no file '{path}'", path);
            switch (entry.Type)
            {
                case DatasetEntryType.File:
                    return entry;
                case DatasetEntryType.HardLink:
                    path = entry.Target!;
                    break;
                case DatasetEntryType.SymbolicLink:
                    if (!Manifest.LinkStaysInside(entry.Path, entry.Target!))
                        throw new FileNotFoundException($"'{entry.Path}' in dataset '{Name}' is a link to '{entry.Target}', outside the dataset; " +
                                                        "open it through the file system (LocalPathOf) if the node has it", path);
                    var parts = new List<string>(entry.Path.Split('/')[..^1]);
                    foreach (var part in entry.Target!.Split('/'))
                    {
                        if (part is "" or ".") continue;
                        if (part == "..") parts.RemoveAt(parts.Count - 1);
                        else parts.Add(part);
                    }
                    path = string.Join('/', parts);
                    break;
                default:
                    throw new FileNotFoundException($"'{path}' in dataset '{Name}' is a directory, not a file", path);
            }
        }
        throw new FileNotFoundException($"'{path}' in dataset '{Name}': too many levels of links", path);
    }

    /// <summary>Recomputes the whole-dataset hash over the bytes this process sees.</summary>
    public bool VerifyHash()
    {
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        if (_backing is TreeBacking tree) return tree.Files.HashMatches(Hash);
        return XxHash.Hash128Of(_backing.Pointer, Length).ToString("x32") == Hash;
    }

    private void Check(long offset, int length)
    {
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        if (offset < 0 || length < 0 || offset + length > Length)
            throw new ArgumentOutOfRangeException(nameof(offset), $"window [{offset}, {offset + length}) outside dataset of {Length} bytes");
    }

    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();

    public ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0) return default;
        _backing.Dispose();
        return _agent?.DisposeAsync() ?? default;
    }

    /// <summary>The whole of a directory dataset from its tree, read in dataset order.</summary>
    private sealed class DatasetFilesStream(DatasetFiles files) : Stream
    {
        private long _position;
        public override bool CanRead => true;
        public override bool CanSeek => true;
        public override bool CanWrite => false;
        public override long Length => files.Length;
        public override long Position { get => _position; set => _position = Math.Clamp(value, 0, files.Length); }
        public override int Read(byte[] buffer, int offset, int count) => Read(buffer.AsSpan(offset, count));
        public override int Read(Span<byte> buffer)
        {
            var n = (int)Math.Min(buffer.Length, files.Length - _position);
            if (n <= 0) return 0;
            files.Read(buffer[..n], _position);
            _position += n;
            return n;
        }
        public override long Seek(long offset, SeekOrigin origin) => Position = origin switch
        {
            SeekOrigin.Begin => offset, SeekOrigin.Current => _position + offset, _ => files.Length + offset,
        };
        public override void Flush() { }
        public override void SetLength(long value) => throw new NotSupportedException();
        public override void Write(byte[] buffer, int offset, int count) => throw new NotSupportedException();
    }

    private sealed class PointerMemory(byte* pointer, int length) : MemoryManager<byte>
    {
        public override Span<byte> GetSpan() => new(pointer, length);
        public override MemoryHandle Pin(int elementIndex = 0) => new(pointer + elementIndex);
        public override void Unpin() { }
        protected override void Dispose(bool disposing) { }
    }
}
