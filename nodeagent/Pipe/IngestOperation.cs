using System.IO.Pipelines;
using Hpc.CommonData;
using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// ingest: the manifest frame, the first answer (complete, or the bitmap of missing segments), then data frames of
/// records until an empty frame, then the counts. A refusal before any data (bad manifest, no space) is one error reply
/// and the connection stays usable; a malformed frame, an index out of range or a failure while writing is one error
/// reply and the connection is closed. Only a reader of the version may ingest it, and each user runs at most its
/// share of ingests; an ingest abandoned by a waiting fetch (it delivered nothing or too little for the stall timeout,
/// or the fetch measured its own rate clearly faster) is one error reply and the connection is closed.
/// </summary>
internal static class IngestOperation
{
    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        var limits = connection.Limits;
        // Counted as a request too, so the per-user requests limit bounds everything a user has the agent work on.
        if (limits.TryEnter(connection.Uid, UserLimits.Kind.Request) is { } busy) return await RefuseAsync(connection, request, busy, ct);
        try
        {
            if (limits.TryEnter(connection.Uid, UserLimits.Kind.Ingest) is { } ingests) return await RefuseAsync(connection, request, ingests, ct);
            try { return await RunCountedAsync(connection, request, ct); }
            finally { limits.Leave(connection.Uid, UserLimits.Kind.Ingest); }
        }
        finally { limits.Leave(connection.Uid, UserLimits.Kind.Request); }
    }

    /// <summary>A refusal before the ingest begins: its manifest frame is read first, so the connection stays usable.</summary>
    private static async Task<bool> RefuseAsync(PipeConnection connection, AgentRequest request, CommonDataException refusal, CancellationToken ct)
    {
        try
        {
            if (await AgentFrames.ReadFrameAsync(connection.Reader, AgentFrames.MaxManifestFrame, ct) is null) return false;
        }
        catch (InvalidDataException e)
        {
            LogBrokenOff(connection, (suppressed, seconds) => connection.Log.BadIngestManifest(e.Message, suppressed, seconds));
            await connection.ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, e.Message)), ct);
            return false;
        }
        AgentMetrics.Instance.Refused(refusal.Code);
        LogRefused(connection, request, refusal.Message);
        await connection.ReplyAsync(AgentResponse.Failure(refusal), ct);
        return true;
    }

    private static void LogRefused(PipeConnection connection, AgentRequest request, string why)
    {
        if (connection.Throttle.Allow(LogThrottle.Kind.IngestRefused, out var suppressed))
            connection.Log.IngestRefused(request.Dataset, request.Version, connection.Peer.Value?.Pid, connection.Peer.Value?.Uid ?? connection.Uid, why,
                suppressed, connection.Throttle.Interval.TotalSeconds);
    }

    private static void LogBrokenOff(PipeConnection connection, Action<int, double> log)
    {
        if (connection.Throttle.Allow(LogThrottle.Kind.IngestBrokenOff, out var suppressed)) log(suppressed, connection.Throttle.Interval.TotalSeconds);
    }

    private static async Task<bool> RunCountedAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        byte[]? manifest;
        try
        {
            manifest = await AgentFrames.ReadFrameAsync(connection.Reader, AgentFrames.MaxManifestFrame, ct);
        }
        catch (InvalidDataException e)
        {
            LogBrokenOff(connection, (suppressed, seconds) => connection.Log.BadIngestManifest(e.Message, suppressed, seconds));
            await connection.ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, e.Message)), ct);
            return false;
        }
        if (manifest is null) return false;

        SegmentIngest ingest;
        try
        {
            ingest = await connection.Store.BeginIngestAsync(request.Dataset ?? throw new ArgumentException("request names no dataset"),
                request.Version ?? throw new ArgumentException("ingest needs a version"), manifest, ct,
                m => { if (m.Readers is not null) connection.Access.Check(m, connection.Peer.Value); });
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            var error = CommonDataException.From(e);
            if (error.Code == ErrorCode.Internal) connection.Log.IngestFailed(e, request.Dataset, request.Version);
            else
            {
                if (error.Code is ErrorCode.AccessDenied or ErrorCode.NoSpace) AgentMetrics.Instance.Refused(error.Code);
                LogRefused(connection, request, error.Message);
            }
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
                using var feeding = CancellationTokenSource.CreateLinkedTokenSource(ct, ingest.Abandoned);
                if (!await ReceiveSegmentsAsync(connection.Reader, ingest, connection.Options.IngestThreadCount, feeding.Token))
                {
                    LogBrokenOff(connection, (suppressed, seconds) => connection.Log.IngestBrokenOff(ingest.Version, suppressed, seconds));
                    return false;
                }
                var report = ingest.Finish();
                if (report.Rejected > 0 && connection.Throttle.Allow(LogThrottle.Kind.SegmentsRejected, out var suppressed))
                    connection.Log.SegmentsRejected(ingest.Manifest.Name, ingest.Version, report.Rejected, report.Rejections![0], suppressed, connection.Throttle.Interval.TotalSeconds);
                await connection.ReplyAsync(new AgentResponse { Ok = true, Ingest = report }, ct);
                return true;
            }
            catch (InvalidDataException e) { failure = new CommonDataException(ErrorCode.BadRequest, $"ingest of version {ingest.Version}: {e.Message}"); }
            catch (CommonDataException e) { failure = e; }
            catch (OperationCanceledException) when (ingest.Abandoned.IsCancellationRequested && !ct.IsCancellationRequested)
            {
                var stall = connection.Options.IngestStallTimeout.TotalSeconds;
                var least = connection.Options.IngestMinRate;
                if (ingest.Outpaced is { } outpaced) // the decision, with both rates, was logged when it was made
                    failure = new CommonDataException(ErrorCode.Timeout,
                        $"ingest of '{ingest.Manifest.Name}' version {ingest.Version} abandoned as slower than the reader's own fetch: {outpaced} " +
                        "(--ingest-stall-timeout, --ingest-min-rate); the reader's fetch completes it from the cache tier");
                else
                {
                    connection.Log.IngestAbandoned(ingest.Version, stall, least.ToExactString());
                    failure = new CommonDataException(ErrorCode.Timeout,
                        $"ingest of '{ingest.Manifest.Name}' version {ingest.Version} abandoned: it delivered nothing, or less than {least.ToExactString()}, over {stall:0.###} s " +
                        "while a reader waited for that version (--ingest-stall-timeout, --ingest-min-rate); the reader's fetch completes it from the cache tier");
                }
            }
            LogBrokenOff(connection, (suppressed, seconds) => connection.Log.IngestAborted(failure.Message, suppressed, seconds));
            await connection.ReplyAsync(AgentResponse.Failure(failure), ct);
            return false;
        }
    }

    /// <summary>
    /// Feeds the records of data frames to the ingest's workers until the empty frame (true, once every record is done)
    /// or the end of the connection (false).
    /// </summary>
    private static async Task<bool> ReceiveSegmentsAsync(PipeReader reader, SegmentIngest ingest, int threads, CancellationToken ct)
    {
        await using var workers = new IngestWorkers(ingest, threads);
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
                        await workers.CompleteAsync();
                        return true;
                    }
                    await workers.PostAsync(payload, ct);
                }
                if (result.IsCompleted) return false;
            }
            finally { reader.AdvanceTo(buffer.Start, examined); }
        }
    }
}
