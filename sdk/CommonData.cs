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

/// <summary>
/// The worker's entry point: <c>await using var data = await CommonData.OpenAsync("risk/market-history");</c>
/// </summary>
public static class CommonData
{
    /// <summary>
    /// Opens a dataset for reading. With a node agent, the agent's verified local copy is memory-mapped read-only
    /// (every worker on the node shares the same pages); without one, the data is fetched from the cache tier into
    /// private memory and a warning is logged. Every byte returned has been verified against its content hash.
    /// </summary>
    /// <exception cref="DatasetNotFoundException">No such dataset or version.</exception>
    /// <exception cref="DataIntegrityException">The data failed verification; nothing was returned.</exception>
    public static async Task<CommonDataSet> OpenAsync(string name, CommonDataOptions? options = null, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        options ??= new CommonDataOptions();
        var log = options.Logger ?? NullLogger.Instance;
        var version = options.VersionFor(name);
        var clock = Stopwatch.StartNew();
        if (options.Mode == DataAccessMode.Direct) return await OpenDirectAsync(name, version, options, clock, ct);

        AgentClient agent;
        try
        {
            agent = await AgentClient.ConnectAsync(options.AgentPipe, options.AgentConnectTimeout, ct);
        }
        catch (Exception e) when (options.Mode == DataAccessMode.Auto && e is TimeoutException or IOException or UnauthorizedAccessException)
        {
            log.LogWarning("No node agent on pipe '{Pipe}' ({Reason}); fetching {Dataset} straight from the cache tier into private memory",
                options.AgentPipe, e.Message, name);
            return await OpenDirectAsync(name, version, options, clock, ct);
        }
        catch (Exception e) when (e is TimeoutException or IOException)
        {
            throw new IOException($"no node agent answers on pipe '{options.AgentPipe}' ({e.Message}); is it running? (HPCDATA_AGENT_PIPE)", e);
        }

        try
        {
            if (options.Mode != DataAccessMode.Stream)
            {
                var local = await agent.OpenAsync(name, version, ct);
                try
                {
                    var map = MappedFile.Open(local.Path, local.Length, writable: false);
                    return new CommonDataSet(local, DataAccessMode.Map, new MappedBacking(map), agent, clock.Elapsed);
                }
                catch (Exception e) when (options.Mode == DataAccessMode.Auto && e is IOException or UnauthorizedAccessException)
                {
                    log.LogWarning("Cannot map {Path} ({Reason}); streaming {Dataset} over the pipe instead", local.Path, e.Message, name);
                }
            }
            return await OpenStreamAsync(name, version, agent, clock, ct);
        }
        catch
        {
            await agent.DisposeAsync();
            throw;
        }
    }

    private static async Task<CommonDataSet> OpenStreamAsync(string name, string? version, AgentClient agent, Stopwatch clock, CancellationToken ct)
    {
        NativeBacking? memory = null;
        try
        {
            var local = await agent.StreamAsync(name, version, (offset, data) => memory!.Write(offset, data), ct,
                onHeader: length => memory = new NativeBacking(length));
            return new CommonDataSet(local, DataAccessMode.Stream, memory!, agent, clock.Elapsed, verifyOnOpen: true);
        }
        catch
        {
            memory?.Dispose();
            throw;
        }
    }

    private static async Task<CommonDataSet> OpenDirectAsync(string name, string? version, CommonDataOptions options, Stopwatch clock, CancellationToken ct)
    {
        await using var client = new CacheTierClient(options.CacheTier, options.Logger);
        var (v, manifest) = await client.ResolveAsync(name, version, ct);
        var memory = new NativeBacking(manifest.RawLength);
        try
        {
            await SegmentFetcher.FetchAsync(client, manifest, v, memory.Address, Enumerable.Range(0, manifest.Segments.Count).ToArray(), null, ct);
            var local = new LocalDataset
            {
                Name = name, Version = v, Length = manifest.RawLength, StoredLength = manifest.StoredLength, Hash = manifest.Hash,
                Files = manifest.Files, Source = "cache-tier", Path = "",
            };
            return new CommonDataSet(local, DataAccessMode.Direct, memory, null, clock.Elapsed, verifyOnOpen: true);
        }
        catch
        {
            memory.Dispose();
            throw;
        }
    }
}

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
/// An open, verified, read-only dataset. Dispose it when done: that ends the lease on the node's copy.
/// </summary>
public sealed unsafe class CommonDataSet : IAsyncDisposable, IDisposable
{
    private readonly LocalDataset _info;
    private readonly DataBacking _backing;
    private readonly AgentClient? _agent;
    private int _disposed;

    internal CommonDataSet(LocalDataset info, DataAccessMode mode, DataBacking backing, AgentClient? agent, TimeSpan openTime, bool verifyOnOpen = false)
    {
        _info = info; _backing = backing; _agent = agent; Mode = mode; OpenTime = openTime;
        if (verifyOnOpen && XxHash.Hash128Of(backing.Pointer, backing.Length).ToString("x32") != info.Hash)
        {
            backing.Dispose();
            throw new DataIntegrityException($"dataset '{info.Name}' version {info.Version}: whole-dataset hash mismatch after transfer");
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
        var file = Files.FirstOrDefault(f => f.Path == path)
                   ?? throw new FileNotFoundException($"dataset '{Name}' has no file '{path}'", path);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        return new UnmanagedMemoryStream(_backing.Pointer + file.Offset, file.Length, file.Length, FileAccess.Read);
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
