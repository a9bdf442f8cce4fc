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
    /// <summary>Path of the node's shared copy (map mode), otherwise empty.</summary>
    public string LocalPath => Mode == DataAccessMode.Map ? _info.Path : "";
    /// <summary>How long opening took, including any fetch the agent had to do.</summary>
    public TimeSpan OpenTime { get; }

    /// <summary>A read-only window; spans are limited to 2 GB, datasets are not — take several windows for larger ones.</summary>
    public ReadOnlySpan<byte> GetSpan(long offset, int length)
    {
        Check(offset, length);
        return new ReadOnlySpan<byte>(_backing.Pointer + offset, length);
    }

    /// <summary>A read-only memory window (usable across awaits); valid until this object is disposed.</summary>
    public ReadOnlyMemory<byte> GetMemory(long offset, int length)
    {
        Check(offset, length);
        return new PointerMemory(_backing.Pointer + offset, length).Memory;
    }

    /// <summary>Consecutive windows of at most <paramref name="windowSize"/> bytes covering the whole dataset.</summary>
    public IEnumerable<ReadOnlyMemory<byte>> Windows(int windowSize = 1 << 30)
    {
        for (long o = 0; o < Length; o += windowSize) yield return GetMemory(o, (int)Math.Min(windowSize, Length - o));
    }

    /// <summary>A seekable read-only stream over the whole dataset.</summary>
    public Stream OpenRead()
    {
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        return new UnmanagedMemoryStream(_backing.Pointer, Length, Length, FileAccess.Read);
    }

    /// <summary>A read-only stream over one file of a directory dataset.</summary>
    public Stream OpenFile(string path)
    {
        var file = Resolve(path);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        return new UnmanagedMemoryStream(_backing.Pointer + file.Offset, file.Length, file.Length, FileAccess.Read);
    }

    /// <summary>The file entry a path names, following hard links and symbolic links (which stay inside the tree) as a file system would.</summary>
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

    private sealed class PointerMemory(byte* pointer, int length) : MemoryManager<byte>
    {
        public override Span<byte> GetSpan() => new(pointer, length);
        public override MemoryHandle Pin(int elementIndex = 0) => new(pointer + elementIndex);
        public override void Unpin() { }
        protected override void Dispose(bool disposing) { }
    }
}
