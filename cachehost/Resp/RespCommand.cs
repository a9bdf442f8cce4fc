using System.Buffers;

namespace Hpc.CacheHost.Resp;

/// <summary>
/// The arguments of one parsed request, kept as slices of the receive buffer. They are valid only until the
/// connection advances its reader, so a command must be fully executed before the next read.
/// </summary>
internal sealed class RespCommand : IDisposable
{
    private const int InitialCapacity = 16;
    private const int RetainedCapacity = 1024;
    private const int RetainedArenaBytes = 1024 * 1024;

    private ReadOnlySequence<byte>[] _args = new ReadOnlySequence<byte>[InitialCapacity];
    private byte[] _arena = [];
    private int _arenaUsed;
    private List<byte[]>? _retiredArenas;

    public int Count { get; private set; }

    public ref readonly ReadOnlySequence<byte> this[int index]
    {
        get
        {
            ArgumentOutOfRangeException.ThrowIfGreaterThanOrEqual((uint)index, (uint)Count, nameof(index));
            return ref _args[index];
        }
    }

    /// <summary>
    /// The argument as one span. Most arguments lie in a single receive segment and are returned in place; one that
    /// straddles a segment boundary is copied into a per-command arena that stays valid until <see cref="Reset"/>.
    /// </summary>
    public ReadOnlySpan<byte> Span(int index)
    {
        ref readonly var arg = ref this[index];
        if (arg.IsSingleSegment)
            return arg.FirstSpan;

        int length = checked((int)arg.Length);
        if (_arena.Length - _arenaUsed < length)
        {
            // Spans handed out earlier still point into the old arena, so it is retired, not returned, until Reset.
            if (_arena.Length > 0)
                (_retiredArenas ??= []).Add(_arena);
            _arena = ArrayPool<byte>.Shared.Rent(Math.Max(length, Math.Max(256, _arena.Length * 2)));
            _arenaUsed = 0;
        }
        var target = _arena.AsSpan(_arenaUsed, length);
        arg.CopyTo(target);
        _arenaUsed += length;
        return target;
    }

    internal void Add(in ReadOnlySequence<byte> arg)
    {
        if (Count == _args.Length)
            Array.Resize(ref _args, _args.Length * 2);
        _args[Count++] = arg;
    }

    /// <summary>Forgets the arguments (they point into buffers about to be recycled) and the arena's contents.</summary>
    public void Reset()
    {
        if (_args.Length > RetainedCapacity)
            _args = new ReadOnlySequence<byte>[InitialCapacity];
        else
            Array.Clear(_args, 0, Count);
        Count = 0;
        _arenaUsed = 0;
        if (_retiredArenas is { Count: > 0 })
        {
            foreach (var arena in _retiredArenas)
                ArrayPool<byte>.Shared.Return(arena);
            _retiredArenas.Clear();
        }
        if (_arena.Length > RetainedArenaBytes)
        {
            ArrayPool<byte>.Shared.Return(_arena);
            _arena = [];
        }
    }

    public void Dispose()
    {
        Reset();
        if (_arena.Length > 0)
            ArrayPool<byte>.Shared.Return(_arena);
        _arena = [];
    }
}
