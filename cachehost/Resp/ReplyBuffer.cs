using System.Buffers;

namespace Hpc.CacheHost.Resp;

/// <summary>
/// Collects the replies to one batch of pipelined requests as a gather list: small replies and headers are
/// formatted into pooled chunks, while large stored values are referenced in place and never copied, so the kernel
/// reads a 64 KB segment straight from the store's array.
/// </summary>
/// <remarks>
/// Referencing is safe because stored arrays are immutable; a DEL or overwrite only drops the store's reference.
/// </remarks>
internal sealed class ReplyBuffer : IDisposable
{
    /// <summary>Values at least this long are sent from the stored array; shorter ones are cheaper to copy.</summary>
    public const int ReferenceThresholdBytes = 2048;

    private const int ChunkBytes = 16 * 1024;

    // Linux refuses sendmsg with more than IOV_MAX (1024) parts; flushing well before keeps each send one syscall.
    private const int MaxSegments = 256;
    private const int MaxCopiedBytes = 256 * 1024;

    private readonly List<ArraySegment<byte>> _segments = [];
    private readonly List<byte[]> _rented = [];
    private byte[] _chunk = [];
    private int _position;
    private int _regionStart;
    private long _copiedBytes;

    /// <summary>Bytes waiting to be sent.</summary>
    public long Length { get; private set; }

    public bool IsEmpty => Length == 0;

    /// <summary>True once the batch is big enough that it should be sent before more replies are added.</summary>
    public bool ShouldFlush => _segments.Count >= MaxSegments - 4 || _copiedBytes >= MaxCopiedBytes;

    public void WriteRaw(ReadOnlySpan<byte> bytes)
    {
        var span = GetSpan(bytes.Length);
        bytes.CopyTo(span);
        Advance(bytes.Length);
    }

    public void WriteSimpleString(ReadOnlySpan<byte> text)
    {
        if (!RespWriter.TryWriteSimpleString(Free, text, out int written))
            RespWriter.TryWriteSimpleString(GetSpan(text.Length + 3), text, out written);
        Advance(written);
    }

    public void WriteError(ReadOnlySpan<byte> message)
    {
        if (!RespWriter.TryWriteError(Free, message, out int written))
            RespWriter.TryWriteError(GetSpan(message.Length + 3), message, out written);
        Advance(written);
    }

    /// <summary>Writes an error assembled from parts, e.g. a fixed text around a client-supplied name.</summary>
    public void WriteError(ReadOnlySpan<byte> part1, ReadOnlySpan<byte> part2, ReadOnlySpan<byte> part3 = default)
    {
        int length = 1 + part1.Length + part2.Length + part3.Length + 2;
        var span = GetSpan(length);
        span[0] = (byte)'-';
        part1.CopyTo(span[1..]);
        part2.CopyTo(span[(1 + part1.Length)..]);
        part3.CopyTo(span[(1 + part1.Length + part2.Length)..]);
        RespWriter.Crlf.CopyTo(span[(length - 2)..]);
        Advance(length);
    }

    public void WriteInteger(long value)
    {
        if (!RespWriter.TryWriteInteger(Free, value, out int written))
            RespWriter.TryWriteInteger(GetSpan(RespWriter.MaxIntegerReplyBytes), value, out written);
        Advance(written);
    }

    public void WriteArrayHeader(int count)
    {
        if (!RespWriter.TryWriteArrayHeader(Free, count, out int written))
            RespWriter.TryWriteArrayHeader(GetSpan(RespWriter.MaxIntegerReplyBytes), count, out written);
        Advance(written);
    }

    public void WriteNullBulk()
    {
        if (!RespWriter.TryWriteNullBulk(Free, out int written))
            RespWriter.TryWriteNullBulk(GetSpan(5), out written);
        Advance(written);
    }

    public void WriteBulk(ReadOnlySpan<byte> value)
    {
        if (!RespWriter.TryWriteBulk(Free, value, out int written))
            RespWriter.TryWriteBulk(GetSpan(value.Length + RespWriter.MaxIntegerReplyBytes + 2), value, out written);
        Advance(written);
    }

    /// <summary>Writes a stored value; a large one joins the gather list by reference.</summary>
    public void WriteBulk(byte[] storedValue)
    {
        if (storedValue.Length < ReferenceThresholdBytes)
        {
            WriteBulk(storedValue.AsSpan());
            return;
        }
        if (!RespWriter.TryWriteBulkHeader(Free, storedValue.Length, out int written))
            RespWriter.TryWriteBulkHeader(GetSpan(RespWriter.MaxIntegerReplyBytes), storedValue.Length, out written);
        Advance(written);
        CloseRegion();
        _segments.Add(new ArraySegment<byte>(storedValue));
        Length += storedValue.Length;
        WriteRaw(RespWriter.Crlf);
    }

    /// <summary>The pending replies as a gather list; valid until <see cref="Reset"/>.</summary>
    public IList<ArraySegment<byte>> GetSegments()
    {
        CloseRegion();
        return _segments;
    }

    /// <summary>Forgets the pending replies after they were sent, keeping one chunk for the next batch.</summary>
    public void Reset()
    {
        _segments.Clear();
        // Keep one ordinary chunk for the next batch; an outsized one, rented for a single huge reply, goes back.
        int keep = _rented.Count > 0 && _rented[0].Length <= 2 * ChunkBytes ? 1 : 0;
        for (int i = keep; i < _rented.Count; i++)
            ArrayPool<byte>.Shared.Return(_rented[i]);
        _rented.RemoveRange(keep, _rented.Count - keep);
        _chunk = _rented.Count > 0 ? _rented[0] : [];
        _position = 0;
        _regionStart = 0;
        _copiedBytes = 0;
        Length = 0;
    }

    public void Dispose()
    {
        Reset();
        foreach (var chunk in _rented)
            ArrayPool<byte>.Shared.Return(chunk);
        _rented.Clear();
        _chunk = [];
    }

    private Span<byte> Free => _chunk.AsSpan(_position);

    private Span<byte> GetSpan(int sizeHint)
    {
        if (_chunk.Length - _position < sizeHint)
        {
            // Earlier segments still point into the current chunk, so it stays rented until Reset.
            CloseRegion();
            _chunk = ArrayPool<byte>.Shared.Rent(Math.Max(sizeHint, ChunkBytes));
            _rented.Add(_chunk);
            _position = 0;
            _regionStart = 0;
        }
        return _chunk.AsSpan(_position);
    }

    private void Advance(int count)
    {
        _position += count;
        _copiedBytes += count;
        Length += count;
    }

    private void CloseRegion()
    {
        if (_position > _regionStart)
        {
            _segments.Add(new ArraySegment<byte>(_chunk, _regionStart, _position - _regionStart));
            _regionStart = _position;
        }
    }
}
