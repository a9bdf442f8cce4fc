using System.IO.MemoryMappedFiles;

namespace Hpc.CommonData.Fetch;

/// <summary>A whole file mapped into memory, exposed as a pointer and a 64-bit length (datasets pass 2 GB).</summary>
public sealed unsafe class MappedFile : IDisposable
{
    private readonly MemoryMappedFile? _map;
    private readonly MemoryMappedViewAccessor? _view;
    private byte* _pointer;

    public long Length { get; }
    public byte* Pointer => _pointer;

    private MappedFile(MemoryMappedFile? map, MemoryMappedViewAccessor? view, long length)
    {
        _map = map; _view = view; Length = length;
        if (view is not null)
        {
            view.SafeMemoryMappedViewHandle.AcquirePointer(ref _pointer);
            _pointer += view.PointerOffset;
        }
    }

    /// <summary>Maps <paramref name="path"/>; the file must be exactly <paramref name="length"/> bytes.</summary>
    public static MappedFile Open(string path, long length, bool writable)
    {
        using var file = new FileStream(path, FileMode.Open, writable ? FileAccess.ReadWrite : FileAccess.Read,
            FileShare.ReadWrite | FileShare.Delete, 1, FileOptions.None);
        if (file.Length != length) throw new InvalidDataException($"{path}: {file.Length} bytes, expected {length}");
        if (length == 0) return new MappedFile(null, null, 0);
        var access = writable ? MemoryMappedFileAccess.ReadWrite : MemoryMappedFileAccess.Read;
        var map = MemoryMappedFile.CreateFromFile(file, null, 0, access, HandleInheritability.None, leaveOpen: false);
        try
        {
            return new MappedFile(map, map.CreateViewAccessor(0, length, access), length);
        }
        catch
        {
            map.Dispose();
            throw;
        }
    }

    public Span<byte> Writable(long offset, int length) => new(_pointer + offset, length);

    public void Flush() => _view?.Flush();

    public void Dispose()
    {
        if (_view is not null && _pointer is not null)
        {
            _pointer = null;
            _view.SafeMemoryMappedViewHandle.ReleasePointer();
        }
        _view?.Dispose();
        _map?.Dispose();
    }
}
