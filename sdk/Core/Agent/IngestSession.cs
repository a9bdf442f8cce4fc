using System.Buffers;
using System.Buffers.Binary;
using System.IO.Pipelines;

namespace Hpc.CommonData.Agent;

/// <summary>Where one stored segment lies in a block of bytes received from elsewhere (e.g. an MPI message).</summary>
/// <param name="Index">The segment's index in the version's manifest.</param>
/// <param name="Offset">Offset of its stored form (header and payload) in the block.</param>
/// <param name="Length">Length of its stored form.</param>
public readonly record struct StoredSegmentSlice(int Index, int Offset, int Length);

/// <summary>
/// An ingest on one agent connection: the agent has checked the manifest and said what the node lacks
/// (<see cref="Complete"/>, <see cref="IsMissing"/>); the caller sends stored segments and ends with
/// <see cref="CompleteAsync"/>, which returns what the agent made of them. The connection is held for the session:
/// other calls on the same <see cref="AgentClient"/> wait until it is completed or disposed.
/// <para>
/// Sending is cheap: <see cref="Write(int, ReadOnlySpan{byte})"/> and <see cref="Write(ReadOnlySpan{byte}, ReadOnlySpan{StoredSegmentSlice})"/>
/// copy the bytes straight into the pipe's buffers (no allocation per segment, no I/O); <see cref="FlushAsync"/> sends
/// them and waits while the pipe is full, which is the back-pressure a forwarding loop needs. <see cref="SendAsync(int, ReadOnlyMemory{byte}, CancellationToken)"/>
/// does both, flushing about every <see cref="AgentFrames.DataFrameSize"/> bytes.
/// </para>
/// Not thread-safe: one sender at a time.
/// </summary>
public sealed class IngestSession : IAsyncDisposable
{
    private static readonly int MaxStoredLength = AgentFrames.MaxIngestFrame - IngestRecord.HeaderLength;
    private const int FrameHeader = 4;

    private readonly AgentClient _client;
    private readonly PipeReader _reader;
    private readonly PipeWriter _writer;
    private readonly IngestReport _state;
    private long _unflushed;
    private bool _finished;

    internal IngestSession(AgentClient client, PipeReader reader, PipeWriter writer, string dataset, string version, IngestReport state)
    {
        (_client, _reader, _writer, Dataset, Version, _state) = (client, reader, writer, dataset, version, state);
        _finished = state.Complete; // nothing is sent for a complete version; the connection is already free
    }

    public string Dataset { get; }
    public string Version { get; }

    /// <summary>The version is already published on the node: send nothing (<see cref="CompleteAsync"/> returns at once).</summary>
    public bool Complete => _state.Complete;

    /// <summary>Segments of the version.</summary>
    public int Segments => _state.Segments;

    /// <summary>Segments the node lacked when the session began.</summary>
    public int MissingCount => _state.Missing;

    /// <summary>Whether the node lacked segment <paramref name="index"/> when the session began (sending others is harmless: they count as already had).</summary>
    public bool IsMissing(int index) => _state.IsMissing(index);

    /// <summary>The indexes the node lacked when the session began, in order.</summary>
    public IEnumerable<int> Missing()
    {
        for (var i = 0; i < Segments; i++) if (IsMissing(i)) yield return i;
    }

    /// <summary>Segments written into the pipe so far.</summary>
    public int SegmentsSent { get; private set; }

    /// <summary>Appends one frame holding one record: segment <paramref name="index"/> in its stored form. No I/O.</summary>
    public void Write(int index, ReadOnlySpan<byte> stored)
    {
        CheckRecord(index, stored.Length);
        WriteFrameHeader(IngestRecord.HeaderLength + stored.Length);
        WriteRecord(index, stored);
    }

    /// <summary>As <see cref="Write(int, ReadOnlySpan{byte})"/>, for a stored segment in pieces.</summary>
    public void Write(int index, in ReadOnlySequence<byte> stored)
    {
        if (stored.IsSingleSegment) { Write(index, stored.FirstSpan); return; }
        CheckRecord(index, stored.Length);
        var length = (int)stored.Length;
        WriteFrameHeader(IngestRecord.HeaderLength + length);
        var head = _writer.GetSpan(IngestRecord.HeaderLength);
        IngestRecord.WriteHeader(head, index, length);
        _writer.Advance(IngestRecord.HeaderLength);
        foreach (var piece in stored) _writer.Write(piece.Span);
        _unflushed += IngestRecord.HeaderLength + length;
        SegmentsSent++;
    }

    /// <summary>
    /// Appends the stored segments that <paramref name="slices"/> locate in <paramref name="block"/>, several records to a
    /// frame (frames of about <see cref="AgentFrames.DataFrameSize"/>). No I/O.
    /// </summary>
    public void Write(ReadOnlySpan<byte> block, ReadOnlySpan<StoredSegmentSlice> slices)
    {
        foreach (var s in slices)
        {
            CheckRecord(s.Index, s.Length);
            if (s.Offset < 0 || s.Offset > block.Length - s.Length)
                throw new ArgumentOutOfRangeException(nameof(slices), $"segment {s.Index} at {s.Offset}+{s.Length} lies outside the {block.Length}-byte block");
        }
        for (var first = 0; first < slices.Length;)
        {
            long frame = 0;
            var end = first;
            while (end < slices.Length && (end == first || frame + IngestRecord.HeaderLength + slices[end].Length <= AgentFrames.DataFrameSize))
                frame += IngestRecord.HeaderLength + slices[end++].Length;
            WriteFrameHeader((int)frame);
            for (var k = first; k < end; k++) WriteRecord(slices[k].Index, block.Slice(slices[k].Offset, slices[k].Length));
            first = end;
        }
    }

    /// <summary>Sends what was written; waits while the pipe is full.</summary>
    public async ValueTask FlushAsync(CancellationToken ct = default)
    {
        CheckOpen();
        if (_unflushed == 0) return;
        try
        {
            var result = await _writer.FlushAsync(ct);
            _unflushed = 0;
            if (result.IsCompleted) throw new IOException($"node agent on pipe '{_client.PipeName}' stopped reading the ingest");
        }
        catch (Exception e) when (e is not CommonDataException)
        {
            throw await FailAsync(e);
        }
    }

    /// <summary>Writes one segment and sends the pending frames once about a megabyte has gathered.</summary>
    public async ValueTask SendAsync(int index, ReadOnlyMemory<byte> stored, CancellationToken ct = default)
    {
        Write(index, stored.Span);
        if (_unflushed >= AgentFrames.DataFrameSize) await FlushAsync(ct);
    }

    /// <summary>Writes the segments of a received block and sends them.</summary>
    public async ValueTask SendAsync(ReadOnlyMemory<byte> block, ReadOnlyMemory<StoredSegmentSlice> slices, CancellationToken ct = default)
    {
        Write(block.Span, slices.Span);
        await FlushAsync(ct);
    }

    /// <summary>
    /// Ends the ingest (an empty frame) and returns the agent's counts: accepted, already had, rejected (with the first
    /// reasons) and still missing. For a complete version, returns at once without sending anything.
    /// </summary>
    public async Task<IngestReport> CompleteAsync(CancellationToken ct = default)
    {
        if (Complete) return _state;
        CheckOpen();
        AgentResponse? reply;
        try
        {
            WriteFrameHeader(0);
            await _writer.FlushAsync(ct);
            _unflushed = 0;
            reply = await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, ct, AgentFrames.MaxReplyFrame);
        }
        catch (Exception e) when (e is not CommonDataException)
        {
            throw await FailAsync(e);
        }
        if (reply is null)
        {
            Finish(broken: "the agent closed the connection during an ingest");
            throw new CommonDataException(ErrorCode.Unavailable, $"node agent on pipe '{_client.PipeName}' closed the connection during an ingest");
        }
        if (!reply.Ok || reply.Ingest is null)
        {
            // Once data frames flowed, the agent answers a failure once and closes the connection.
            Finish(broken: $"the agent ended an ingest on this connection with an error ({reply.Error})");
            throw reply.ToException("ingest failed");
        }
        Finish();
        return reply.Ingest;
    }

    /// <summary>Ends an ingest that was not completed: the agent keeps what it accepted so far.</summary>
    public async ValueTask DisposeAsync()
    {
        if (_finished) return;
        try { await CompleteAsync(CancellationToken.None); }
        catch (Exception e) when (e is CommonDataException or IOException or InvalidDataException) { }
    }

    private void CheckRecord(int index, long storedLength)
    {
        CheckOpen();
        ArgumentOutOfRangeException.ThrowIfNegative(index);
        if (storedLength <= 0 || storedLength > MaxStoredLength)
            throw new ArgumentOutOfRangeException(nameof(storedLength), $"segment {index}: a stored segment of {storedLength} bytes cannot be sent");
    }

    private void CheckOpen()
    {
        if (_finished) throw new InvalidOperationException("this ingest session has ended");
    }

    private void WriteFrameHeader(int length)
    {
        var span = _writer.GetSpan(FrameHeader);
        BinaryPrimitives.WriteUInt32LittleEndian(span, (uint)length);
        _writer.Advance(FrameHeader);
        _unflushed += FrameHeader;
    }

    private void WriteRecord(int index, ReadOnlySpan<byte> stored)
    {
        var head = _writer.GetSpan(IngestRecord.HeaderLength);
        IngestRecord.WriteHeader(head, index, stored.Length);
        _writer.Advance(IngestRecord.HeaderLength);
        _writer.Write(stored);
        _unflushed += IngestRecord.HeaderLength + stored.Length;
        SegmentsSent++;
    }

    /// <summary>
    /// The connection broke mid-ingest. The agent answers a bad frame or a failure (a full disk) with one error reply
    /// and closes the connection, so the reply, if there is one, says why; that is what is thrown.
    /// </summary>
    private async Task<CommonDataException> FailAsync(Exception e)
    {
        try
        {
            if (e is OperationCanceledException) return new CommonDataException(ErrorCode.Unavailable, "ingest cancelled: " + e.Message, e);
            try
            {
                using var wait = new CancellationTokenSource(TimeSpan.FromSeconds(2));
                var reply = await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, wait.Token, AgentFrames.MaxReplyFrame);
                if (reply is { Ok: false }) return reply.ToException("ingest failed");
            }
            catch (Exception) { /* no reply: report the original failure */ }
        }
        finally { Finish(broken: $"an ingest on this connection failed ({e.Message}); connect again"); }
        return e is InvalidDataException
            ? new CommonDataException(ErrorCode.Protocol, e.Message, e)
            : new CommonDataException(ErrorCode.Unavailable, $"node agent on pipe '{_client.PipeName}': ingest interrupted: {e.Message}", e);
    }

    private void Finish(string? broken = null)
    {
        if (_finished) return;
        _finished = true;
        _client.EndIngest(broken);
    }
}
