using System.Buffers;
using System.IO.Pipelines;
using System.IO.Pipes;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent;

/// <summary>
/// Serves local workers over a named pipe (a Unix domain socket on Linux). Each connection is a sequence of
/// framed requests; datasets opened on a connection stay leased until it closes. A malformed or oversized frame
/// closes that connection only.
/// </summary>
/// <para>The socket admits every user of the node; what a connection may do is decided from the credentials the
/// kernel recorded for it (<see cref="PeerCredentials"/>, <see cref="AccessPolicy"/>): open, stream and prefetch of a
/// version whose readers do not include the worker are refused with <see cref="ErrorCode.AccessDenied"/>; a pin is
/// recorded with the uid that made it and only that user, root, the agent's user or a member of its admin group may
/// release it or evict its copy; status lists only the copies the caller may read (all to those administrators).</para>
public sealed class PipeServer(NodeAgentOptions options, DatasetStore store, ILogger<PipeServer> log) : BackgroundService
{
    private readonly NodeAgentOptions _options = options;
    private readonly AccessPolicy _access = AccessPolicy.ForThisProcess(options.AdminGroupId());
    private int _connections;
    private readonly TaskCompletionSource _serving = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>
    /// Returns once the pipe is listening, not when serving merely began: the host announces itself started (to a
    /// service manager, READY=1) after every StartAsync returned, and workers connecting before the socket exists fail.
    /// A start-up failure (pipe taken, data directory unusable) is thrown here, so the host never reports started.
    /// </summary>
    public override async Task StartAsync(CancellationToken cancellationToken)
    {
        await base.StartAsync(cancellationToken);
        var execution = ExecuteTask ?? Task.CompletedTask;
        await Task.WhenAny(_serving.Task, execution).WaitAsync(cancellationToken);
        if (!_serving.Task.IsCompleted)
        {
            await execution; // rethrows why the pipe could not be served
            throw new IOException($"the node agent stopped before serving pipe '{_options.Pipe}'");
        }
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        try
        {
            await ServeAllAsync(stoppingToken);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            log.LogCritical("Node agent cannot serve pipe {Pipe}: {Error}", _options.Pipe, e.Message);
            Environment.ExitCode = 1; // the host stops on a failed service; launchers must see a failure
            throw;
        }
    }

    /// <summary>
    /// A Unix socket file outlives an agent that was killed; it would block the next one. Probe it: if an agent
    /// answers, refuse to start; if nobody does, it is stale and is removed.
    /// </summary>
    private void RemoveStaleSocket()
    {
        if (OperatingSystem.IsWindows()) return;
        var path = NodeAgentOptions.SocketPath(_options.Pipe);
        if (!File.Exists(path)) return;
        using (var probe = new NamedPipeClientStream(".", _options.Pipe, PipeDirection.InOut))
        {
            try
            {
                probe.Connect(300);
            }
            catch (Exception e) when (e is TimeoutException or IOException)
            {
                log.LogWarning("Removing stale pipe socket {Path} left by an agent that did not shut down", path);
                File.Delete(path);
                return;
            }
        }
        throw new IOException($"pipe '{_options.Pipe}' ({path}) is already served by a running agent");
    }

    private async Task ServeAllAsync(CancellationToken stoppingToken)
    {
        RemoveStaleSocket();
        await store.PrepareAsync(stoppingToken);
        var handlers = new List<Task>();
        // One instance is always waiting, also while the last connection closes: on Unix the pipe is a socket that
        // exists only while some server instance does, so a gap between instances makes connects fail with ENOENT.
        var server = CreateInstance(first: true);
        OpenSocketToAllUsers();
        // The listening socket exists once the first instance is created: announce readiness to launchers.
        Console.Out.WriteLine($"READY {_options.Pipe}");
        Console.Out.Flush();
        _serving.TrySetResult();
        log.LogInformation("Node agent {Node} serving pipe {Pipe}, data in {Dir}, budget {Budget}",
            _options.NodeName, _options.Pipe, store.DataDirectory, _options.Budget);
        while (!stoppingToken.IsCancellationRequested)
        {
            try
            {
                await server.WaitForConnectionAsync(stoppingToken);
            }
            catch (OperationCanceledException)
            {
                await server.DisposeAsync();
                break;
            }
            catch (IOException e)
            {
                log.LogWarning("Accept failed: {Error}", e.Message);
                var replacement = CreateInstance(first: false);
                await server.DisposeAsync();
                server = replacement;
                continue;
            }
            var accepted = server;
            server = CreateInstance(first: false);
            handlers.RemoveAll(t => t.IsCompleted);
            if (Interlocked.Increment(ref _connections) > _options.MaxConnections)
            {
                log.LogWarning("Refusing connection: {Max} already open", _options.MaxConnections);
                Interlocked.Decrement(ref _connections);
                await accepted.DisposeAsync();
                continue;
            }
            handlers.Add(Task.Run(() => ServeAsync(accepted, stoppingToken), CancellationToken.None));
        }
        await server.DisposeAsync();
        await Task.WhenAll(handlers);
    }

    /// <summary>
    /// The socket file is created with the agent's umask (typically srwxr-xr-x), and connecting needs write permission
    /// on it: other users' workers would be turned away before saying what they want. Every user may connect; the
    /// per-dataset check on each request is the gate.
    /// </summary>
    private void OpenSocketToAllUsers()
    {
        if (OperatingSystem.IsWindows()) return;
        var path = NodeAgentOptions.SocketPath(_options.Pipe);
        try
        {
            File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.GroupWrite |
                                       UnixFileMode.OtherRead | UnixFileMode.OtherWrite);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            log.LogWarning("Cannot open socket {Path} to all users ({Reason}); only the agent's user can connect", path, e.Message);
        }
    }

    private NamedPipeServerStream CreateInstance(bool first)
    {
        var flags = System.IO.Pipes.PipeOptions.Asynchronous | (first ? System.IO.Pipes.PipeOptions.FirstPipeInstance : 0);
        try
        {
            return new NamedPipeServerStream(_options.Pipe, PipeDirection.InOut, NamedPipeServerStream.MaxAllowedServerInstances,
                PipeTransmissionMode.Byte, flags, 1 << 20, 1 << 20);
        }
        catch (IOException e) when (first)
        {
            throw new IOException($"pipe '{_options.Pipe}' is already served by another agent on this node ({e.Message})", e);
        }
    }

    private async Task ServeAsync(NamedPipeServerStream pipe, CancellationToken stoppingToken)
    {
        // Buffers of 128 KB: an ingest's 64 KB segments then mostly arrive in one piece and in few reads.
        var reader = PipeReader.Create(pipe, new StreamPipeReaderOptions(bufferSize: 1 << 17, leaveOpen: true));
        var writer = PipeWriter.Create(pipe, new StreamPipeWriterOptions(minimumBufferSize: AgentFrames.DataFrameSize + 8, leaveOpen: true));
        var leases = new List<string>();
        // Read when a restricted version is asked for: most connections (status, ingest, open datasets) never need it.
        var peer = new Lazy<PeerCredentials?>(() => PeerCredentials.Of(pipe));
        try
        {
            while (true)
            {
                AgentRequest? request;
                try
                {
                    request = await AgentFrames.ReadMessageAsync(reader, () => AgentJson.Default.AgentRequest, stoppingToken);
                }
                catch (InvalidDataException e)
                {
                    log.LogWarning("Closing pipe connection after a bad frame: {Error}", e.Message);
                    await Reply(writer, AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, e.Message)), stoppingToken);
                    return;
                }
                if (request is null) return;
                if (request.Op == AgentOps.Ingest)
                {
                    if (!await IngestAsync(request, reader, writer, peer, stoppingToken)) return;
                    continue;
                }
                await HandleAsync(request, writer, leases, peer, stoppingToken);
            }
        }
        catch (Exception e) when (e is IOException or OperationCanceledException or ObjectDisposedException)
        {
            // The worker went away or we are stopping: its leases end below.
        }
        catch (Exception e)
        {
            log.LogError(e, "Pipe connection failed");
        }
        finally
        {
            foreach (var v in leases) store.Lease(v, -1);
            await reader.CompleteAsync();
            await writer.CompleteAsync();
            await pipe.DisposeAsync();
            Interlocked.Decrement(ref _connections);
        }
    }

    private async Task HandleAsync(AgentRequest request, PipeWriter writer, List<string> leases, Lazy<PeerCredentials?> peer, CancellationToken ct)
    {
        AgentResponse response;
        try
        {
            switch (request.Op)
            {
                case AgentOps.Open or AgentOps.Prefetch or AgentOps.Stream:
                {
                    var name = request.Dataset ?? throw new ArgumentException("request names no dataset");
                    var lease = request.Op != AgentOps.Prefetch; // prefetch warms the node; only open and stream lease
                    var pin = request.Op == AgentOps.Prefetch ? request.Pin : null;
                    var ensured = await store.EnsureAsync(name, request.Version, lease, pin, ct,
                        manifest => { if (manifest.Readers is not null) _access.Check(manifest, peer.Value); },
                        pin is null ? AccessPolicy.NoOwner : AccessPolicy.OwnerOf(peer.Value));
                    if (lease) leases.Add(ensured.Version);
                    response = new AgentResponse { Ok = true, Dataset = ensured.Dataset };
                    if (request.Op == AgentOps.Stream)
                    {
                        await Reply(writer, response, ct);
                        await StreamAsync(ensured.Dataset, writer, ct);
                        return;
                    }
                    break;
                }
                case AgentOps.Release:
                {
                    var name = request.Dataset ?? throw new ArgumentException("request names no dataset");
                    var evicted = store.Release(name, request.Version, request.Pin ?? throw new ArgumentException("release needs a pin"), request.Evict,
                        _access, peer.Value);
                    response = new AgentResponse { Ok = true };
                    if (evicted) log.LogInformation("Released pin {Pin} and evicted {Dataset} for uid {Uid}", request.Pin, name, peer.Value?.Uid);
                    break;
                }
                case AgentOps.Status:
                    // Names, versions, sizes and pins of datasets the caller may not read are not the caller's to know.
                    response = new AgentResponse { Ok = true, Status = store.Status(manifest => _access.MaySee(manifest, peer.Value)) };
                    break;
                default:
                    response = AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, $"unknown operation '{request.Op}'"));
                    break;
            }
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            var error = CommonDataException.From(e);
            if (error.Code is ErrorCode.NoSpace or ErrorCode.AccessDenied) AgentMetrics.Instance.Refused(error.Code);
            if (error.Code == ErrorCode.Internal) log.LogError(e, "Request {Op} {Dataset} failed", request.Op, request.Dataset);
            else if (error.Code == ErrorCode.AccessDenied)
                log.LogWarning("Refused {Op} of {Dataset} to pid {Pid} (uid {Uid}): {Error}", request.Op, request.Dataset, peer.Value?.Pid, peer.Value?.Uid, error.Message);
            response = AgentResponse.Failure(error);
        }
        await Reply(writer, response, ct);
    }

    /// <summary>
    /// An ingest: the manifest frame, the first answer (complete, or the bitmap of missing segments), then data frames
    /// of records until an empty frame, then the counts. A refusal before any data (bad manifest, no space) is one error
    /// reply and the connection stays usable; a malformed frame, an index out of range or a failure while writing is
    /// one error reply and the connection is closed. Returns whether the connection stays open.
    /// </summary>
    private async Task<bool> IngestAsync(AgentRequest request, PipeReader reader, PipeWriter writer, Lazy<PeerCredentials?> peer, CancellationToken ct)
    {
        byte[]? manifest;
        try
        {
            manifest = await AgentFrames.ReadFrameAsync(reader, AgentFrames.MaxManifestFrame, ct);
        }
        catch (InvalidDataException e)
        {
            log.LogWarning("Closing pipe connection after a bad ingest manifest frame: {Error}", e.Message);
            await Reply(writer, AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, e.Message)), ct);
            return false;
        }
        if (manifest is null) return false;

        SegmentIngest ingest;
        try
        {
            ingest = await store.BeginIngestAsync(request.Dataset ?? throw new ArgumentException("request names no dataset"),
                request.Version ?? throw new ArgumentException("ingest needs a version"), manifest, ct);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            var error = CommonDataException.From(e);
            if (error.Code == ErrorCode.Internal) log.LogError(e, "Ingest of {Dataset} {Version} refused", request.Dataset, request.Version);
            else log.LogWarning("Ingest of {Dataset} {Version} from pid {Pid} (uid {Uid}) refused: {Error}", request.Dataset, request.Version,
                peer.Value?.Pid, peer.Value?.Uid, error.Message);
            await Reply(writer, AgentResponse.Failure(error), ct);
            return true;
        }
        using (ingest)
        {
            await Reply(writer, new AgentResponse { Ok = true, Ingest = ingest.Begun() }, ct);
            if (ingest.Complete) return true;
            CommonDataException? failure = null;
            try
            {
                if (!await ReceiveSegmentsAsync(reader, ingest, ct))
                {
                    log.LogWarning("Ingest of {Version} broken off: the connection ended before its last frame", ingest.Version);
                    return false;
                }
                await Reply(writer, new AgentResponse { Ok = true, Ingest = ingest.Finish() }, ct);
                return true;
            }
            catch (InvalidDataException e) { failure = new CommonDataException(ErrorCode.BadRequest, $"ingest of version {ingest.Version}: {e.Message}"); }
            catch (CommonDataException e) { failure = e; }
            log.LogWarning("Closing pipe connection after a failed ingest: {Error}", failure.Message);
            await Reply(writer, AgentResponse.Failure(failure), ct);
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

    private static async ValueTask Reply(PipeWriter writer, AgentResponse response, CancellationToken ct) =>
        await AgentFrames.WriteMessageAsync(writer, response, () => AgentJson.Default.AgentResponse, ct);

    /// <summary>Stream mode: the verified copy (file or tree, in dataset order) in 1 MB frames, then an empty frame.</summary>
    private static async Task StreamAsync(LocalDataset dataset, PipeWriter writer, CancellationToken ct)
    {
        using var files = DatasetFiles.Open(dataset.Path, dataset.Files, dataset.Length, writable: false);
        for (long offset = 0; offset < dataset.Length;)
        {
            var n = (int)Math.Min(AgentFrames.DataFrameSize, dataset.Length - offset);
            var memory = writer.GetMemory(4 + n);
            files.Read(memory.Span.Slice(4, n), offset);
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32LittleEndian(memory.Span, (uint)n);
            writer.Advance(4 + n);
            offset += n;
            await writer.FlushAsync(ct);
        }
        AgentFrames.Write(writer, ReadOnlySpan<byte>.Empty);
        await writer.FlushAsync(ct);
    }
}
