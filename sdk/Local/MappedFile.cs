using System.IO.MemoryMappedFiles;

namespace Hpc.CommonData.Local;

/// <summary>
/// A file mapped read-only and read in slices, so a pass over it needs no array of its size (an array, like a span,
/// stops short of 2 GB) and reads the page cache in place, as the stager's reads find it.
/// </summary>
public sealed unsafe class MappedFile : IDisposable
{
    private readonly MemoryMappedFile? _map;
    private MemoryMappedViewAccessor? _view;
    private readonly byte* _start;

    public long Length { get; }

    public MappedFile(string path)
    {
        Length = new FileInfo(path).Length;
        if (Length == 0) return;   // an empty file cannot be mapped, and has no slices to give
        _map = MemoryMappedFile.CreateFromFile(path, FileMode.Open, null, 0, MemoryMappedFileAccess.Read);
        _view = _map.CreateViewAccessor(0, Length, MemoryMappedFileAccess.Read);
        byte* start = null;
        _view.SafeMemoryMappedViewHandle.AcquirePointer(ref start);
        _start = start + _view.PointerOffset;
    }

    /// <summary>The bytes at <paramref name="offset"/>, valid until the file is disposed.</summary>
    public ReadOnlySpan<byte> Slice(long offset, int length)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(offset);
        ArgumentOutOfRangeException.ThrowIfNegative(length);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(offset + length, Length);
        return length == 0 ? [] : new ReadOnlySpan<byte>(_start + offset, length);
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _view, null) is not { } view) return;
        view.SafeMemoryMappedViewHandle.ReleasePointer();
        view.Dispose();
        _map!.Dispose();
    }
}
