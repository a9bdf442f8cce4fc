using System.IO.Pipelines;
using System.IO.Pipes;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Agent;

/// <summary>
/// A connection to the node agent over its named pipe (a Unix domain socket on Linux). While it stays open, every
/// dataset opened through it is leased: the agent will not evict it.
/// </summary>
public sealed class AgentClient : IAsyncDisposable
{
    /// <summary>The file system path of an agent's socket on Unix (.NET puts a relative pipe name in the temp directory).</summary>
    public static string SocketPath(string pipe) => Path.IsPathRooted(pipe) ? pipe : Path.Combine(Path.GetTempPath(), "CoreFxPipe_" + pipe);

    public const string PipeVariable = "HPCDATA_AGENT_PIPE";
    public const string DefaultPipe = "hpcdata-agent";

    private readonly NamedPipeClientStream _pipe;
    private readonly PipeReader _reader;
    private readonly PipeWriter _writer;
    private readonly SemaphoreSlim _gate = new(1, 1);
    /// <summary>Why the connection can no longer be used (an ingest broke off mid-stream), or null.</summary>
    private volatile string? _broken;

    public string PipeName { get; }

    private AgentClient(string pipeName, NamedPipeClientStream pipe)
    {
        PipeName = pipeName;
        _pipe = pipe;
        _reader = PipeReader.Create(pipe, new StreamPipeReaderOptions(bufferSize: AgentFrames.DataFrameSize + 64, leaveOpen: true));
        // A flush writes each of the writer's buffers to the socket in its own call: with the default 4 KB buffers an
        // ingest's megabyte frame took 256 sends and as many wake-ups of the agent's reader (the ingest ran at 0.4 of a
        // direct fetch). Buffers of a frame's size make it one send.
        _writer = PipeWriter.Create(pipe, new StreamPipeWriterOptions(minimumBufferSize: AgentFrames.DataFrameSize, leaveOpen: true));
    }

    public static string PipeFromEnvironment() =>
        Environment.GetEnvironmentVariable(PipeVariable) is { Length: > 0 } p ? p : DefaultPipe;

    /// <summary>
    /// Connects, or throws <see cref="TimeoutException"/> / <see cref="IOException"/> when no agent listens, and
    /// <see cref="CommonDataException"/> with <see cref="ErrorCode.AccessDenied"/> when the agent's socket does not let
    /// this user connect (an agent that left its socket to its own user).
    /// </summary>
    public static async Task<AgentClient> ConnectAsync(string? pipeName = null, TimeSpan? timeout = null, CancellationToken ct = default)
    {
        pipeName ??= PipeFromEnvironment();
        var pipe = new NamedPipeClientStream(".", pipeName, PipeDirection.InOut, System.IO.Pipes.PipeOptions.Asynchronous);
        try
        {
            await pipe.ConnectAsync(timeout ?? TimeSpan.FromSeconds(2), ct);
        }
        catch (Exception e) when (e is UnauthorizedAccessException or System.Net.Sockets.SocketException { SocketErrorCode: System.Net.Sockets.SocketError.AccessDenied })
        {
            await pipe.DisposeAsync();
            throw new CommonDataException(ErrorCode.AccessDenied,
                $"access denied: the node agent's socket for pipe '{pipeName}' does not admit {CurrentUser()} ({e.Message}); " +
                "the agent makes its socket connectable by every user, so this one is served by another program or an older agent", e);
        }
        catch
        {
            await pipe.DisposeAsync();
            throw;
        }
        return new AgentClient(pipeName, pipe);
    }

    /// <summary>
    /// The one line for a <see cref="ConnectAsync"/> that found no agent (a <see cref="TimeoutException"/> or
    /// <see cref="IOException"/>): it names the pipe and, on Unix, the socket file. The runtime keeps retrying a socket
    /// path that does not exist until the timeout and then says only "The operation has timed out."; here that reads as
    /// what it is: no socket at that path.
    /// </summary>
    public static string NotAnswering(string pipeName, Exception cause)
    {
        if (OperatingSystem.IsWindows()) return $"no node agent answers on pipe '{pipeName}' ({cause.Message})";
        var socket = SocketPath(pipeName);
        var reason = !File.Exists(socket) && !Directory.Exists(socket) ? $"no socket at {socket}"
            : cause.Message.Contains(socket, StringComparison.Ordinal) ? cause.Message : $"{socket}: {cause.Message}";
        return $"no node agent answers on pipe '{pipeName}' ({reason})";
    }

    /// <summary>
    /// As <see cref="ConnectAsync"/>, but fails at once with an <see cref="IOException"/> when no agent can be listening
    /// (its socket file is absent): what a command run by a person or a job script wants, instead of waiting out the
    /// timeout for an agent that is not starting. <see cref="ConnectAsync"/> waits, for callers that start the agent.
    /// </summary>
    public static Task<AgentClient> ConnectIfListeningAsync(string pipeName, TimeSpan timeout, CancellationToken ct = default) =>
        SocketMissing(pipeName) ? Task.FromException<AgentClient>(new IOException($"no socket at {SocketPath(pipeName)}"))
        : SocketStale(pipeName) ? Task.FromException<AgentClient>(new IOException(
            $"stale socket {SocketPath(pipeName)}: nothing listens on it (an agent that stopped without removing it); an agent started on this pipe replaces it"))
        : ConnectAsync(pipeName, timeout, ct);

    /// <summary>
    /// True when <paramref name="pipeName"/>'s socket file exists on Unix but nothing listens on it: a connect is refused
    /// at once, where the runtime's pipe connect would go on retrying until its timeout and say only that it timed out.
    /// Anything else (a listener, a full backlog, a socket this user may not open) is false: a connect says what it is.
    /// </summary>
    public static bool SocketStale(string pipeName)
    {
        if (OperatingSystem.IsWindows() || SocketPath(pipeName) is var path && !File.Exists(path)) return false;
        using var probe = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.Unix, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Unspecified);
        // Not blocking: a listener whose backlog is full answers EAGAIN instead of holding this thread.
        probe.Blocking = false;
        try { probe.Connect(new System.Net.Sockets.UnixDomainSocketEndPoint(path)); }
        catch (System.Net.Sockets.SocketException e) { return e.SocketErrorCode == System.Net.Sockets.SocketError.ConnectionRefused; }
        return false;
    }

    /// <summary>
    /// True when no agent can be listening on <paramref name="pipeName"/>: on Unix its socket file does not exist (a
    /// connect would wait out its whole timeout there). Always false on Windows, where only a connect can tell.
    /// </summary>
    public static bool SocketMissing(string pipeName) =>
        !OperatingSystem.IsWindows() && SocketPath(pipeName) is var socket && !File.Exists(socket) && !Directory.Exists(socket);

    private static string CurrentUser()
    {
        if (!OperatingSystem.IsLinux()) return $"user '{Environment.UserName}'";
        var uid = Access.UnixAccounts.EffectiveUserId;
        return $"user '{Access.UnixAccounts.UserName(uid) ?? uid.ToString()}' (uid {uid})";
    }

    public async Task<AgentResponse> SendAsync(AgentRequest request, CancellationToken ct = default)
    {
        await _gate.WaitAsync(ct);
        try
        {
            ThrowIfBroken();
            try
            {
                await AgentFrames.WriteMessageAsync(_writer, request, () => AgentJson.Default.AgentRequest, ct);
            }
            catch (IOException e)
            {
                // An agent that does not serve this connection (a limit reached, an idle one closed) says why and closes;
                // the request then finds the socket shut, and the reason is what is still to be read.
                if (await RefusalWaitingAsync() is { } refusal) throw refusal.ToException(e.Message);
                throw;
            }
            return await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, ct, AgentFrames.MaxReplyFrame)
                   ?? throw new IOException($"node agent on pipe '{PipeName}' closed the connection");
        }
        finally { _gate.Release(); }
    }

    /// <summary>An error reply the agent sent before it closed this connection, or null.</summary>
    private async Task<AgentResponse?> RefusalWaitingAsync()
    {
        using var wait = new CancellationTokenSource(TimeSpan.FromSeconds(1));
        try
        {
            return await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, wait.Token) is { Ok: false } refusal ? refusal : null;
        }
        catch (Exception e) when (e is IOException or InvalidDataException or OperationCanceledException or ObjectDisposedException)
        {
            return null;
        }
    }

    private async Task<LocalDataset> DatasetCallAsync(AgentRequest request, CancellationToken ct)
    {
        var response = await SendAsync(request, ct);
        if (!response.Ok || response.Dataset is null) throw response.ToException("agent returned no dataset");
        return response.Dataset;
    }

    /// <summary>Makes the dataset local (fetching it once if needed) and leases it for this connection.</summary>
    public Task<LocalDataset> OpenAsync(string name, string? version = null, CancellationToken ct = default) =>
        DatasetCallAsync(new AgentRequest { Op = AgentOps.Open, Dataset = DatasetName.Validate(name), Version = version }, ct);

    /// <summary>Makes the dataset local; with a pin it stays until <see cref="ReleaseAsync"/> with the same pin.</summary>
    public Task<LocalDataset> PrefetchAsync(string name, string? version = null, string? pin = null, CancellationToken ct = default) =>
        DatasetCallAsync(new AgentRequest { Op = AgentOps.Prefetch, Dataset = DatasetName.Validate(name), Version = version, Pin = pin }, ct);

    /// <summary>A prefetch pinned as <paramref name="user"/>'s, with that user's read access checked (root and the
    /// agent's own user only: <see cref="AgentRequest.For"/>).</summary>
    public Task<LocalDataset> PrefetchForAsync(string name, string? version, string? pin, string user, CancellationToken ct = default) =>
        DatasetCallAsync(new AgentRequest { Op = AgentOps.Prefetch, Dataset = DatasetName.Validate(name), Version = version, Pin = pin, For = user }, ct);

    /// <summary>Asks this node's agent to have the running agents of <paramref name="agents"/> exchange the dataset among
    /// themselves, pinned for <paramref name="pin"/> as this user's (<see cref="AgentOps.Exchange"/>).</summary>
    public async Task<ExchangeReport> ExchangeAsync(string name, string? version, string pin, IReadOnlyList<string> agents, ExchangeRequestSettings? settings = null,
        CancellationToken ct = default)
    {
        var response = await SendAsync(new AgentRequest
        {
            Op = AgentOps.Exchange, Dataset = DatasetName.Validate(name), Version = version, Pin = pin, Agents = [.. agents], Exchange = settings,
        }, ct);
        if (!response.Ok) throw response.ToException("the agent refused the exchange");
        return response.Exchange ?? throw new CommonDataException(ErrorCode.Protocol, "the agent answered an exchange without its report");
    }

    public Task ReleaseAsync(string name, string? version, string pin, bool evict = false, CancellationToken ct = default) =>
        ReleasePinAsync(name, version, pin, evict, ct);

    /// <summary>
    /// Drops this user's pin <paramref name="pin"/> (every one of that name for the agent's administrators) and returns
    /// how many pins were dropped: 0 when this user holds no such pin there. Null from an agent that does not say.
    /// </summary>
    public async Task<int?> ReleasePinAsync(string name, string? version, string pin, bool evict = false, CancellationToken ct = default)
    {
        var response = await SendAsync(new AgentRequest { Op = AgentOps.Release, Dataset = DatasetName.Validate(name), Version = version, Pin = pin, Evict = evict }, ct);
        if (!response.Ok) throw response.ToException("release failed");
        return response.Released;
    }

    public async Task<AgentStatus> StatusAsync(CancellationToken ct = default)
    {
        var response = await SendAsync(new AgentRequest { Op = AgentOps.Status }, ct);
        return response.Status ?? throw response.ToException("no status");
    }

    /// <summary>
    /// Stream mode, for workers that cannot map the file: the agent sends the bytes over the pipe. Each chunk is
    /// handed to <paramref name="onData"/> with its offset; the span is valid only during the call.
    /// </summary>
    public async Task<LocalDataset> StreamAsync(string name, string? version, SpanAction onData, CancellationToken ct = default, Action<long>? onHeader = null)
    {
        await _gate.WaitAsync(ct);
        try
        {
            ThrowIfBroken();
            await AgentFrames.WriteMessageAsync(_writer, new AgentRequest { Op = AgentOps.Stream, Dataset = DatasetName.Validate(name), Version = version },
                () => AgentJson.Default.AgentRequest, ct);
            var header = await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, ct, AgentFrames.MaxReplyFrame)
                         ?? throw new IOException($"node agent on pipe '{PipeName}' closed the connection");
            if (!header.Ok || header.Dataset is null) throw header.ToException("stream refused");
            onHeader?.Invoke(header.Dataset.Length);
            long offset = 0;
            while (true)
            {
                var result = await _reader.ReadAsync(ct);
                var buffer = result.Buffer;
                var ended = false;
                while (AgentFrames.TryParse(ref buffer, AgentFrames.DataFrameSize, out var payload))
                {
                    if (payload.Length == 0) { ended = true; break; }
                    foreach (var piece in payload)
                    {
                        if (offset + piece.Length > header.Dataset.Length) throw new InvalidDataException("agent sent more bytes than the dataset holds");
                        onData(offset, piece.Span);
                        offset += piece.Length;
                    }
                }
                _reader.AdvanceTo(buffer.Start, buffer.End);
                if (ended) break;
                if (result.IsCompleted) throw new IOException("node agent closed the stream before the end of the data");
            }
            if (offset != header.Dataset.Length) throw new InvalidDataException($"agent streamed {offset} of {header.Dataset.Length} bytes");
            return header.Dataset;
        }
        finally { _gate.Release(); }
    }

    public delegate void SpanAction(long offset, ReadOnlySpan<byte> data);

    /// <summary>
    /// Begins handing the agent stored segments of <paramref name="version"/>, obtained elsewhere (another node). Sends
    /// the request and <paramref name="manifest"/> — the version's manifest exactly as stored, whose XXH3-128 is the
    /// version id — and returns once the agent has answered what the node lacks. The session holds this connection until
    /// it is completed or disposed. Throws the agent's error: <see cref="ErrorCode.Integrity"/> when the manifest does not
    /// hash to the version, <see cref="ErrorCode.NotFound"/> when it names another dataset, <see cref="ErrorCode.NoSpace"/>
    /// when the node's budget cannot hold the version.
    /// </summary>
    public async Task<IngestSession> BeginIngestAsync(string name, string version, ReadOnlyMemory<byte> manifest, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        if (manifest.Length is 0 || manifest.Length > AgentFrames.MaxManifestFrame)
            throw new ArgumentOutOfRangeException(nameof(manifest), $"a manifest of {manifest.Length} bytes cannot be sent");
        await _gate.WaitAsync(ct);
        var held = false;
        try
        {
            ThrowIfBroken();
            var request = System.Text.Json.JsonSerializer.SerializeToUtf8Bytes(
                new AgentRequest { Op = AgentOps.Ingest, Dataset = name, Version = version }, AgentJson.Default.AgentRequest);
            AgentFrames.Write(_writer, request);
            var head = _writer.GetSpan(4);
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32LittleEndian(head, (uint)manifest.Length);
            _writer.Advance(4);
            System.Buffers.BuffersExtensions.Write(_writer, manifest.Span);
            AgentResponse? reply;
            try
            {
                await _writer.FlushAsync(ct);
                reply = await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, ct, AgentFrames.MaxReplyFrame);
            }
            catch (Exception e) when (e is OperationCanceledException or IOException or InvalidDataException)
            {
                _broken = $"an ingest request on this connection was interrupted ({e.Message}); connect again";
                throw;
            }
            if (reply is null) throw new IOException($"node agent on pipe '{PipeName}' closed the connection");
            if (!reply.Ok || reply.Ingest is null) throw reply.ToException("ingest refused");
            var session = new IngestSession(this, _reader, _writer, name, version, reply.Ingest);
            held = !reply.Ingest.Complete; // a complete version needs no more frames: the connection is free again
            return session;
        }
        finally
        {
            if (!held) _gate.Release();
        }
    }

    /// <summary>
    /// One-shot ingest: begins, sends those of <paramref name="segments"/> the node lacks, completes. Returns the agent's
    /// counts (<see cref="IngestReport.Complete"/> when the node already had the version).
    /// </summary>
    public async Task<IngestReport> IngestAsync(string name, string version, ReadOnlyMemory<byte> manifest,
        IEnumerable<(int Index, ReadOnlyMemory<byte> Stored)> segments, CancellationToken ct = default)
    {
        await using var session = await BeginIngestAsync(name, version, manifest, ct);
        if (session.Complete) return await session.CompleteAsync(ct);
        foreach (var (index, stored) in segments)
            if (session.IsMissing(index)) await session.SendAsync(index, stored, ct);
        return await session.CompleteAsync(ct);
    }

    /// <summary>Called by the ingest session when it ends: frees the connection, or marks it unusable.</summary>
    internal void EndIngest(string? broken)
    {
        if (broken is not null) _broken = broken;
        _gate.Release();
    }

    private void ThrowIfBroken()
    {
        if (_broken is { } why) throw new CommonDataException(ErrorCode.Unavailable, $"node agent connection on pipe '{PipeName}' cannot be used: {why}");
    }

    public async ValueTask DisposeAsync()
    {
        await _reader.CompleteAsync();
        try { await _writer.CompleteAsync(); }
        catch (IOException) { } // the agent went away (or closed the connection after an error): nothing left to send
        await _pipe.DisposeAsync();
    }
}
