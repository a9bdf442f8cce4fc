using System.IO.Pipelines;
using System.IO.Pipes;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// One worker's connection: a sequence of framed requests, each answered by the operation it names. Datasets opened on
/// it stay leased until it closes. A malformed or oversized frame is answered with one error and closes this connection
/// only. A connection must send its first request within the idle timeout, or it is closed: otherwise sockets that send
/// nothing would hold the places of the connections that do. Later silences are a client's own (a worker reading a
/// leased copy, node preparation holding its connection through a fan-out) and are not cut short.
/// </summary>
internal sealed class PipeConnection(NamedPipeServerStream pipe, DatasetStore store, AccessPolicy access, ILogger log, NodeAgentOptions options,
    UserLimits limits, LogThrottle throttle, uint? uid)
{
    // Buffers of 128 KB: an ingest's 64 KB segments then mostly arrive in one piece and in few reads.
    public PipeReader Reader { get; } = PipeReader.Create(pipe, new StreamPipeReaderOptions(bufferSize: 1 << 17, leaveOpen: true));
    public PipeWriter Writer { get; } = PipeWriter.Create(pipe, new StreamPipeWriterOptions(minimumBufferSize: AgentFrames.DataFrameSize + 8, leaveOpen: true));
    public DatasetStore Store { get; } = store;
    public AccessPolicy Access { get; } = access;
    public ILogger Log { get; } = log;
    public NodeAgentOptions Options { get; } = options;
    /// <summary>Each user's share of connections, requests and ingests.</summary>
    public UserLimits Limits { get; } = limits;
    public LogThrottle Throttle { get; } = throttle;
    /// <summary>The connected user as the kernel recorded it when the connection was accepted (null where it cannot be read).</summary>
    public uint? Uid { get; } = uid;
    /// <summary>Versions this connection holds open; their leases end with it.</summary>
    public List<string> Leases { get; } = [];
    /// <summary>Read when a restricted version is asked for: most connections (status, ingest, open datasets) never need it.</summary>
    public Lazy<PeerCredentials?> Peer { get; } = new(() => PeerCredentials.Of(pipe));

    public async Task RunAsync(CancellationToken stoppingToken)
    {
        var idleTimeout = Options.IdleTimeout;
        var idle = CancellationTokenSource.CreateLinkedTokenSource(stoppingToken);
        var spoken = false;
        try
        {
            while (true)
            {
                AgentRequest? request;
                var bounded = !spoken;
                if (bounded) idle.CancelAfter(idleTimeout);
                try
                {
                    request = await AgentFrames.ReadMessageAsync(Reader, () => AgentJson.Default.AgentRequest, idle.Token);
                }
                catch (InvalidDataException e)
                {
                    if (Throttle.Allow(LogThrottle.Kind.BadFrame, out var suppressed)) Log.BadFrame(e.Message, suppressed, Throttle.Interval.TotalSeconds);
                    await ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, e.Message)), stoppingToken);
                    return;
                }
                catch (OperationCanceledException) when (!stoppingToken.IsCancellationRequested)
                {
                    if (Throttle.Allow(LogThrottle.Kind.IdleClosed, out var suppressed)) Log.IdleClosed(Uid, Options.IdleTimeout.TotalSeconds, suppressed, Throttle.Interval.TotalSeconds);
                    await ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.Timeout,
                        $"the node agent closed this connection: no request within {Options.IdleTimeout.TotalSeconds:0.###} s of connecting (--idle-timeout)")), stoppingToken);
                    return;
                }
                if (bounded && !idle.TryReset())
                {
                    // The timer fired just as the request arrived: the request counts, the spent source does not.
                    idle.Dispose();
                    idle = CancellationTokenSource.CreateLinkedTokenSource(stoppingToken);
                }
                if (request is null) return;
                spoken = true;
                if (!await AgentOperations.RunAsync(this, request, stoppingToken)) return;
            }
        }
        catch (Exception e) when (e is IOException or OperationCanceledException or ObjectDisposedException)
        {
            // The worker went away or we are stopping: its leases end below.
        }
        catch (Exception e)
        {
            Log.ConnectionFailed(e);
        }
        finally
        {
            idle.Dispose();
            foreach (var v in Leases) Store.Lease(v, -1);
            // A worker that went away leaves a broken pipe: completing the writer flushes into it and fails. The pipe is
            // disposed whatever happens, for an undisposed instance keeps the socket file after the agent stops.
            try
            {
                await Reader.CompleteAsync();
                await Writer.CompleteAsync();
            }
            catch (Exception e) when (e is IOException or ObjectDisposedException or OperationCanceledException) { }
            finally
            {
                try { await pipe.DisposeAsync(); }
                catch (IOException) { /* the worker's end is gone already */ }
            }
        }
    }

    /// <summary>
    /// Answers <paramref name="request"/> with what <paramref name="answer"/> returns, or with its failure as the worker's
    /// SDK will raise it; the connection stays open either way.
    /// </summary>
    public async Task<bool> AnswerAsync(AgentRequest request, Func<Task<AgentResponse>> answer, CancellationToken ct)
    {
        AgentResponse response;
        try
        {
            response = await answer();
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            response = Failed(request, e);
        }
        await ReplyAsync(response, ct);
        return true;
    }

    public ValueTask ReplyAsync(AgentResponse response, CancellationToken ct) =>
        AgentFrames.WriteMessageAsync(Writer, response, () => AgentJson.Default.AgentResponse, ct);

    /// <summary>
    /// The reply for a request that failed: its error as the worker's SDK will raise it. Refusals are counted and logged
    /// with who asked; an internal error is logged with its stack.
    /// </summary>
    private AgentResponse Failed(AgentRequest request, Exception e)
    {
        var error = CommonDataException.From(e);
        if (error.Code is ErrorCode.NoSpace or ErrorCode.AccessDenied or ErrorCode.Limit) AgentMetrics.Instance.Refused(error.Code);
        if (error.Code == ErrorCode.Internal) Log.RequestFailed(e, request.Op, request.Dataset);
        else if (error.Code is ErrorCode.AccessDenied or ErrorCode.Limit) LogRefused(request, error);
        return AgentResponse.Failure(error);
    }

    /// <summary>A refusal in the log, at most one line per interval whoever provokes them.</summary>
    public void LogRefused(AgentRequest request, CommonDataException error)
    {
        if (Throttle.Allow(LogThrottle.Kind.RequestRefused, out var suppressed))
            Log.Refused(request.Op, request.Dataset, Peer.Value?.Pid, Peer.Value?.Uid ?? Uid, error.Message, suppressed, Throttle.Interval.TotalSeconds);
    }
}
