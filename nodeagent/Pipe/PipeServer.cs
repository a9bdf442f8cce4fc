using System.IO.Pipes;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// Listens on the agent's named pipe (a Unix domain socket on Linux) and hands each accepted connection to a
/// <see cref="PipeConnection"/>, which answers its requests with the <see cref="AgentOperations"/>.
/// </summary>
/// <para>The socket admits every user of the node; what a connection may do is decided from the credentials the
/// kernel recorded for it (<see cref="PeerCredentials"/>, <see cref="AccessPolicy"/>): open, stream and prefetch of a
/// version whose readers do not include the worker are refused with <see cref="ErrorCode.AccessDenied"/>; a pin is
/// recorded with the uid that made it and only that user, root, the agent's user or a member of its admin group may
/// release it or evict its copy; status lists only the copies the caller may read (all to those administrators).</para>
public sealed class PipeServer(NodeAgentOptions options, DatasetStore store, IHostApplicationLifetime lifetime, ILogger<PipeServer> log) : BackgroundService
{
    private readonly NodeAgentOptions _options = options;
    private readonly AccessPolicy _access = AccessPolicy.ForThisProcess(options.AdminGroupId());
    private readonly UserLimits _limits = new(options, AccessPolicy.ForThisProcess().AgentUid);
    /// <summary>One line per kind every 10 s for warnings any local user can provoke.</summary>
    private readonly LogThrottle _throttle = new(TimeSpan.FromSeconds(10));
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
            // An operator's mistake (pipe taken, data directory unusable) is one line; anything else keeps its trace.
            var expected = e is IOException or UnauthorizedAccessException or CommonDataException or System.Net.Sockets.SocketException;
            if (expected) log.CannotServe(_options.Pipe, e.Message);
            else log.FailedServing(_options.Pipe, e);
            // The host stops on a failed service; launchers see the class of a failure that has one (the tier refused
            // this agent: 77, not something a prolog would requeue on), 1 for the rest (the pipe taken, a fault).
            Environment.ExitCode = e is CommonDataException or UnauthorizedAccessException ? ExitCodes.Of(e) : ExitCodes.Failed;
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
        if (Hpc.CommonData.Agent.AgentClient.SocketStale(_options.Pipe))
        {
            log.StaleSocket(path);
            File.Delete(path);
            return;
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
        // The listening socket exists once the first instance is created. Launchers are told the agent is ready only
        // once every service started, so the peer port (--peer-listen) already listens too when they hear it.
        lifetime.ApplicationStarted.Register(() =>
        {
            Console.Out.WriteLine($"READY {_options.Pipe}");
            Console.Out.Flush();
        });
        _serving.TrySetResult();
        log.Serving(_options.NodeName, _options.Pipe, store.DataDirectory, _options.Budget.ToString());
        if (Hpc.CommonData.Security.SecretFiles.Exposure((_options.CacheTier.PasswordFile, "--cache-password-file")) is { } exposed) log.SecretsExposed(exposed);
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
                log.AcceptFailed(e.Message);
                var replacement = CreateInstance(first: false);
                await server.DisposeAsync();
                server = replacement;
                continue;
            }
            var accepted = server;
            server = CreateInstance(first: false);
            handlers.RemoveAll(t => t.IsCompleted);
            var uid = PeerCredentials.UidOf(accepted);
            if (Admit(uid) is { } refusal)
            {
                Refuse(accepted, refusal, uid);
                continue;
            }
            handlers.Add(Task.Run(() => ServeAsync(accepted, uid, stoppingToken), CancellationToken.None));
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
            log.SocketNotOpenToAll(path, e.Message);
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

    /// <summary>
    /// Counts a new connection of <paramref name="uid"/> against its user's share and the node's total; null when it is
    /// served, else why not. The per-user share is below the total, so one user alone never fills it.
    /// </summary>
    private CommonDataException? Admit(uint? uid)
    {
        if (_limits.TryEnter(uid, UserLimits.Kind.Connection) is { } refusal) return refusal;
        if (Interlocked.Increment(ref _connections) <= _options.MaxConnections) return null;
        Interlocked.Decrement(ref _connections);
        _limits.Leave(uid, UserLimits.Kind.Connection);
        return new CommonDataException(ErrorCode.Limit,
            $"limit reached: this node's agent already serves {_options.MaxConnections} connections, its limit for all users together " +
            $"(--max-connections {_options.MaxConnections}); try again shortly, or have the node's administrator raise it");
    }

    /// <summary>
    /// Answers a connection that is not served with its refusal, unasked, and closes it: the client reads that line
    /// where it expected its reply (or, if its request then finds the socket closed, just after) instead of a bare broken
    /// pipe. A fresh socket's buffer takes the line without waiting, so the accept loop is not held up.
    /// </summary>
    private void Refuse(NamedPipeServerStream pipe, CommonDataException refusal, uint? uid)
    {
        AgentMetrics.Instance.Refused(refusal.Code);
        if (_throttle.Allow(LogThrottle.Kind.ConnectionRefused, out var suppressed))
            log.ConnectionRefused(uid, refusal.Message, suppressed, _throttle.Interval.TotalSeconds);
        try
        {
            var reply = new System.Buffers.ArrayBufferWriter<byte>(512);
            AgentFrames.Write(reply, System.Text.Json.JsonSerializer.SerializeToUtf8Bytes(AgentResponse.Failure(refusal), AgentJson.Default.AgentResponse));
            pipe.Write(reply.WrittenSpan);
        }
        catch (Exception e) when (e is IOException or ObjectDisposedException or InvalidOperationException) { }
        finally { pipe.Dispose(); }
    }

    private async Task ServeAsync(NamedPipeServerStream pipe, uint? uid, CancellationToken stoppingToken)
    {
        try { await new PipeConnection(pipe, store, _access, log, _options, _limits, _throttle, uid).RunAsync(stoppingToken); }
        finally
        {
            Interlocked.Decrement(ref _connections);
            _limits.Leave(uid, UserLimits.Kind.Connection);
        }
    }
}
