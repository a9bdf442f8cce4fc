using System.Buffers;
using System.Buffers.Binary;
using System.Runtime.ExceptionServices;
using System.Threading.Channels;
using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// Verifies, decodes and writes an ingest's segments on several threads while its connection (or the agent's own
/// exchange, <see cref="Hpc.NodeAgent.Fanout.StoreIngest"/>) goes on receiving. Each
/// data frame is copied once out of the pipe's buffers into a pooled buffer, split into its records on the receiving
/// thread (a malformed frame is refused there, before any of it is written), and its records are queued for the
/// workers, which hand each to <see cref="SegmentIngest.Accept"/>; the buffer goes back to the pool when its last record
/// is done. The queue is bounded, so a fast sender waits for the node's cores rather than filling its memory. The first
/// failure of a worker (a write that failed, an index out of range) ends the ingest: <see cref="PostAsync"/> and
/// <see cref="CompleteAsync"/> throw it.
/// </summary>
internal sealed class IngestWorkers : IAsyncDisposable
{
    /// <summary>One received data frame; <see cref="Pending"/> counts its records not yet done.</summary>
    private sealed class Frame(byte[] bytes, int records)
    {
        public readonly byte[] Bytes = bytes;
        public int Pending = records;
    }

    private readonly record struct Record(Frame Frame, int Index, int Offset, int Length);

    private readonly SegmentIngest _ingest;
    private readonly Channel<Record> _queue;
    private readonly Task[] _workers;
    private readonly List<(int Index, int Offset, int Length)> _split = [];
    private ExceptionDispatchInfo? _failure;
    private volatile bool _stopped;

    public IngestWorkers(SegmentIngest ingest, int threads)
    {
        _ingest = ingest;
        threads = Math.Max(1, threads);
        // Enough queued to keep every worker busy while the receiver copies the next frame (about 16 records a frame).
        _queue = Channel.CreateBounded<Record>(new BoundedChannelOptions(Math.Max(32, threads * 8))
            { SingleWriter = true, SingleReader = threads == 1, FullMode = BoundedChannelFullMode.Wait });
        _workers = new Task[threads];
        for (var i = 0; i < threads; i++) _workers[i] = Task.Run(WorkAsync);
    }

    /// <summary>
    /// Queues the records of one data frame (index, stored length, stored bytes each); waits while the queue is full.
    /// Throws <see cref="InvalidDataException"/> for a malformed frame, and a worker's failure once one failed.
    /// </summary>
    public async ValueTask PostAsync(ReadOnlySequence<byte> payload, CancellationToken ct)
    {
        _failure?.Throw();
        var length = (int)payload.Length;
        var bytes = ArrayPool<byte>.Shared.Rent(length);
        payload.CopyTo(bytes);
        try { Split(bytes.AsSpan(0, length), _split); }
        catch
        {
            ArrayPool<byte>.Shared.Return(bytes);
            throw;
        }
        if (_split.Count == 0) { ArrayPool<byte>.Shared.Return(bytes); return; }
        await QueueAsync(new Frame(bytes, _split.Count), ct);
    }

    /// <summary>Queues the records of <see cref="_split"/>, which lie in <paramref name="frame"/>.</summary>
    private async ValueTask QueueAsync(Frame frame, CancellationToken ct)
    {
        var bytes = frame.Bytes;
        for (var k = 0; k < _split.Count; k++)
        {
            var (index, offset, size) = _split[k];
            var record = new Record(frame, index, offset, size);
            if (!_queue.Writer.TryWrite(record))
            {
                try { await _queue.Writer.WriteAsync(record, ct); }
                catch
                {
                    // The records not queued are this frame's to give back; the queued ones are the workers'.
                    if (Interlocked.Add(ref frame.Pending, -(_split.Count - k)) == 0) ArrayPool<byte>.Shared.Return(bytes);
                    throw;
                }
            }
        }
        _failure?.Throw();
    }

    /// <summary>
    /// Queues segments that lie in a buffer the caller keeps (an exchange's block, in the agent's own process): the
    /// <paramref name="records"/> (index, offset, length in <paramref name="source"/>) are copied into one pooled buffer
    /// first, so the caller may reuse its buffer once this returns. Waits while the queue is full.
    /// </summary>
    public async ValueTask PostAsync(ReadOnlyMemory<byte> source, ReadOnlyMemory<(int Index, int Offset, int Length)> records, CancellationToken ct)
    {
        _failure?.Throw();
        if (records.Length == 0) return;
        var total = 0;
        foreach (var r in records.Span) total += r.Length;
        var bytes = ArrayPool<byte>.Shared.Rent(total);
        _split.Clear();
        var at = 0;
        foreach (var (index, offset, length) in records.Span)
        {
            source.Span.Slice(offset, length).CopyTo(bytes.AsSpan(at));
            _split.Add((index, at, length));
            at += length;
        }
        await QueueAsync(new Frame(bytes, _split.Count), ct);
    }

    /// <summary>Waits until every queued record is done; throws the first worker failure.</summary>
    public async Task CompleteAsync()
    {
        _queue.Writer.TryComplete();
        await Task.WhenAll(_workers);
        _failure?.Throw();
    }

    /// <summary>Stops taking records (those still queued are given back unwritten) and waits for the workers.</summary>
    public async ValueTask DisposeAsync()
    {
        _stopped = true;
        _queue.Writer.TryComplete();
        await Task.WhenAll(_workers);
    }

    /// <summary>Where each record of a frame lies; the frame must hold whole records and nothing else.</summary>
    private static void Split(ReadOnlySpan<byte> frame, List<(int, int, int)> records)
    {
        records.Clear();
        var at = 0;
        while (at < frame.Length)
        {
            if (frame.Length - at < IngestRecord.HeaderLength) throw new InvalidDataException("data frame ends inside a record header");
            var index = BinaryPrimitives.ReadInt32LittleEndian(frame[at..]);
            var length = BinaryPrimitives.ReadInt32LittleEndian(frame[(at + 4)..]);
            at += IngestRecord.HeaderLength;
            if (length <= 0 || length > frame.Length - at)
                throw new InvalidDataException($"record of segment {index} claims {length} bytes but {frame.Length - at} remain in its frame");
            records.Add((index, at, length));
            at += length;
        }
    }

    private async Task WorkAsync()
    {
        var reader = _queue.Reader;
        while (await reader.WaitToReadAsync())
        {
            while (reader.TryRead(out var r))
            {
                try
                {
                    if (!_stopped && _failure is null) _ingest.Accept(r.Index, r.Frame.Bytes.AsSpan(r.Offset, r.Length));
                }
                catch (Exception e)
                {
                    Interlocked.CompareExchange(ref _failure, ExceptionDispatchInfo.Capture(e), null);
                }
                finally
                {
                    if (Interlocked.Decrement(ref r.Frame.Pending) == 0) ArrayPool<byte>.Shared.Return(r.Frame.Bytes);
                }
            }
        }
    }
}
