using System.Buffers;
using System.IO.Pipelines;
using Hpc.CommonData;
using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// ingest: the manifest frame, the first answer (complete, or the bitmap of missing segments), then data frames of
/// records until an empty frame, then the counts. A refusal before any data (bad manifest, no space) is one error reply
/// and the connection stays usable; a malformed frame, an index out of range or a failure while writing is one error
/// reply and the connection is closed.
/// </summary>
internal static class IngestOperation
{
    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        byte[]? manifest;
        try
        {
            manifest = await AgentFrames.ReadFrameAsync(connection.Reader, AgentFrames.MaxManifestFrame, ct);
        }
        catch (InvalidDataException e)
        {
            connection.Log.BadIngestManifest(e.Message);
            await connection.ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, e.Message)), ct);
            return false;
        }
        if (manifest is null) return false;

        SegmentIngest ingest;
        try
        {
            ingest = await connection.Store.BeginIngestAsync(request.Dataset ?? throw new ArgumentException("request names no dataset"),
                request.Version ?? throw new ArgumentException("ingest needs a version"), manifest, ct);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            var error = CommonDataException.From(e);
            if (error.Code == ErrorCode.Internal) connection.Log.IngestFailed(e, request.Dataset, request.Version);
            else connection.Log.IngestRefused(request.Dataset, request.Version, connection.Peer.Value?.Pid, connection.Peer.Value?.Uid, error.Message);
            await connection.ReplyAsync(AgentResponse.Failure(error), ct);
            return true;
        }
        using (ingest)
        {
            await connection.ReplyAsync(new AgentResponse { Ok = true, Ingest = ingest.Begun() }, ct);
            if (ingest.Complete) return true;
            CommonDataException? failure;
            try
            {
                if (!await ReceiveSegmentsAsync(connection.Reader, ingest, ct))
                {
                    connection.Log.IngestBrokenOff(ingest.Version);
                    return false;
                }
                await connection.ReplyAsync(new AgentResponse { Ok = true, Ingest = ingest.Finish() }, ct);
                return true;
            }
            catch (InvalidDataException e) { failure = new CommonDataException(ErrorCode.BadRequest, $"ingest of version {ingest.Version}: {e.Message}"); }
            catch (CommonDataException e) { failure = e; }
            connection.Log.IngestAborted(failure.Message);
            await connection.ReplyAsync(AgentResponse.Failure(failure), ct);
            return false;
        }
    }

    /// <summary>Feeds the records of data frames to the ingest until the empty frame (true) or the end of the connection (false).</summary>
    private static async Task<bool> ReceiveSegmentsAsync(PipeReader reader, SegmentIngest ingest, CancellationToken ct)
    {
        while (true)
        {
            var result = await reader.ReadAsync(ct);
            var buffer = result.Buffer;
            var examined = buffer.End;
            try
            {
                while (AgentFrames.TryParse(ref buffer, AgentFrames.MaxIngestFrame, out var payload))
                {
                    if (payload.Length == 0)
                    {
                        examined = buffer.Start;
                        return true;
                    }
                    AcceptRecords(payload, ingest);
                }
                if (result.IsCompleted) return false;
            }
            finally { reader.AdvanceTo(buffer.Start, examined); }
        }
    }

    /// <summary>Splits a data frame into its records (index, stored length, stored bytes) and hands each to the ingest.</summary>
    private static void AcceptRecords(ReadOnlySequence<byte> payload, SegmentIngest ingest)
    {
        var records = new SequenceReader<byte>(payload);
        byte[]? pieced = null;
        try
        {
            while (!records.End)
            {
                if (!records.TryReadLittleEndian(out int index) || !records.TryReadLittleEndian(out int length))
                    throw new InvalidDataException("data frame ends inside a record header");
                if (length <= 0 || length > records.Remaining)
                    throw new InvalidDataException($"record of segment {index} claims {length} bytes but {records.Remaining} remain in its frame");
                if (records.UnreadSpan.Length >= length)
                {
                    ingest.Accept(index, records.UnreadSpan[..length]);
                }
                else
                {
                    // The record straddles two of the pipe's buffers: piece it together once.
                    if (pieced is null || pieced.Length < length)
                    {
                        if (pieced is not null) ArrayPool<byte>.Shared.Return(pieced);
                        pieced = ArrayPool<byte>.Shared.Rent(length);
                    }
                    records.UnreadSequence.Slice(0, length).CopyTo(pieced);
                    ingest.Accept(index, pieced.AsSpan(0, length));
                }
                records.Advance(length);
            }
        }
        finally
        {
            if (pieced is not null) ArrayPool<byte>.Shared.Return(pieced);
        }
    }
}
