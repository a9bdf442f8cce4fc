using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Threading.Channels;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Security;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent.Fanout;

/// <summary>
/// Node prep requested of the running agents (<c>--peer-listen</c>): takes a request from node prep or from the agent
/// above it in the tree (<see cref="AgentTree"/>), forwards it, runs this node's exchange with the others (the blocks go
/// straight into the store, <see cref="StoreIngest"/>), then has the copy completed, published and pinned for the job
/// through its own pipe, as node prep would, and tells the requester.
/// Without a job launch in between, a request reaches 10,000 agents in a few round trips.
/// </summary>
public sealed class PeerService(NodeAgentOptions options, CacheTierClient tier, DatasetStore store, ILogger<PeerService> log) : BackgroundService
{
    /// <summary>Requests worked on at once; a further one is refused, and the refusal goes to its requester as this
    /// node's outcome.</summary>
    private const int MaxRequests = 4;
    /// <summary>Connections open at once, in all and from one address: an agent holds one to its parent per request, a
    /// few adoptions and the requester's pings, so these are never reached but by a flood.</summary>
    internal const int MaxConnections = 1024, MaxConnectionsPerAddress = 64;
    private static readonly TimeSpan HandshakeLimit = TimeSpan.FromSeconds(5);
    /// <summary>What a connection may open with: a request (a few KB to a few MB), or a requester's ping (nothing).</summary>
    private static readonly PeerFrame[] FirstFrames = [PeerFrame.Prep, PeerFrame.Ping, PeerFrame.Withdraw];
    /// <summary>How long, and how many, called-off requests are remembered: a copy of one still on its way (from a root
    /// that went silent and woke) is refused within the longest a join can take.</summary>
    private static readonly TimeSpan WithdrawnKept = PrepRequest.MaxStallTimeout;
    private const int MostWithdrawnKept = 4096;
    private readonly ConcurrentDictionary<string, Active> _active = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<string, long> _withdrawn = new(StringComparer.Ordinal);
    private readonly ConcurrentDictionary<IPAddress, int> _perAddress = new();
    private int _connections;
    private readonly LogThrottle _throttle = new(TimeSpan.FromSeconds(10));
    private readonly AccessPolicy _access = AccessPolicy.ForThisProcess(options.AdminGroupId());

    /// <summary>A request this agent works on: later connections carrying its id are adoptions (<see cref="AgentTree.JoinAsync"/>).</summary>
    private sealed class Active
    {
        public readonly Channel<(PrepRequest Request, PeerLink Link)> Adoptions = Channel.CreateUnbounded<(PrepRequest, PeerLink)>();
        public readonly TaskCompletionSource Ended = new(TaskCreationOptions.RunContinuationsAsynchronously);
        /// <summary>Cancelled when the requester calls the request off before it started (<see cref="PeerFrame.Withdraw"/>).</summary>
        public readonly CancellationTokenSource Withdrawn = new();
    }
    private readonly TaskCompletionSource _listening = new(TaskCreationOptions.RunContinuationsAsynchronously);

    private PeerKey? _key;

    public override async Task StartAsync(CancellationToken cancellationToken)
    {
        if (options.PeerEndpoint() is not null)
        {
            // Read before serving: a key file that cannot be read stops the start with its reason, not a later request.
            if (SecretFiles.Exposure("the cluster's peer key", (options.PeerKeyFile, "--peer-key-file")) is { } exposed) log.LogWarning("{Exposure}", exposed);
            try { _key = PeerKey.Load(options.PeerKeyFile!, "--peer-key-file"); }
            catch (ArgumentException e)
            {
                log.LogError("{Error}", e.Message);
                Environment.ExitCode = 1;
                throw new IOException(e.Message);
            }
        }
        await base.StartAsync(cancellationToken);
        await Task.WhenAny(_listening.Task, ExecuteTask ?? Task.CompletedTask).WaitAsync(cancellationToken);
        if (!_listening.Task.IsCompleted) await (ExecuteTask ?? Task.CompletedTask);
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var endpoint = options.PeerEndpoint();
        if (endpoint is null) { _listening.TrySetResult(); return; }
        var key = _key!;
        using var listener = new Socket(endpoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        if (endpoint.AddressFamily == AddressFamily.InterNetworkV6) listener.DualMode = true;
        // Not ReuseAddress: on Unix .NET sets SO_REUSEPORT with it, and a second agent could then listen on this port
        // beside this one, the kernel splitting requests between the two without a word. Bind sets SO_REUSEADDR itself,
        // which is what a restarted agent needs to bind past its old connections in TIME_WAIT.
        try
        {
            listener.Bind(endpoint);
            listener.Listen(512);
        }
        catch (SocketException e)
        {
            log.LogError("cannot listen for node prep requests on {Endpoint} (--peer-listen): {Error}", options.PeerListen, e.Message);
            Environment.ExitCode = 1;
            throw new IOException($"--peer-listen {options.PeerListen}: {e.Message}");
        }
        log.LogInformation("taking node prep requests on {Endpoint}", listener.LocalEndPoint);
        _listening.TrySetResult();
        var running = new List<Task>();
        while (!stoppingToken.IsCancellationRequested)
        {
            Socket accepted;
            try { accepted = await listener.AcceptAsync(stoppingToken); }
            catch (OperationCanceledException) { break; }
            running.RemoveAll(t => t.IsCompleted);
            var address = (accepted.RemoteEndPoint as IPEndPoint)?.Address.MapToIPv6() ?? IPAddress.IPv6None;
            if (!TryAdmit(address, out var refusal))
            {
                Warn(LogThrottle.Kind.PeerRefused, "refused a node prep connection from {Remote}: {Reason}", address, refusal);
                accepted.Dispose();
                continue;
            }
            running.Add(ServeCountedAsync(accepted, address, key, stoppingToken));
        }
        await Task.WhenAll(running);
    }

    private bool TryAdmit(IPAddress address, out string refusal)
    {
        refusal = "";
        if (Interlocked.Increment(ref _connections) > MaxConnections)
        {
            Interlocked.Decrement(ref _connections);
            refusal = $"{MaxConnections} connections are open";
            return false;
        }
        if (_perAddress.AddOrUpdate(address, 1, (_, n) => n + 1) > MaxConnectionsPerAddress)
        {
            Release(address);
            refusal = $"{MaxConnectionsPerAddress} connections from that address are open";
            return false;
        }
        return true;
    }

    private void Release(IPAddress address)
    {
        Interlocked.Decrement(ref _connections);
        while (_perAddress.TryGetValue(address, out var n))
            if (n == 1 ? _perAddress.TryRemove(new KeyValuePair<IPAddress, int>(address, 1)) : _perAddress.TryUpdate(address, n - 1, n)) return;
    }

    private async Task ServeCountedAsync(Socket accepted, IPAddress address, PeerKey key, CancellationToken stop)
    {
        try { await ServeAsync(accepted, key, stop); }
        finally { Release(address); }
    }

    /// <summary>A warning someone else can cause at will: once per kind per interval, with how many were held back.</summary>
    private void Warn(LogThrottle.Kind kind, string message, IPAddress remote, string reason)
    {
        if (!_throttle.Allow(kind, out var suppressed)) return;
        if (suppressed == 0) log.LogWarning(message, remote, reason);
        else log.LogWarning(message + " ({Suppressed} more of this kind in the last {Interval} s)", remote, reason, suppressed, _throttle.Interval.TotalSeconds);
    }

    private async Task ServeAsync(Socket accepted, PeerKey key, CancellationToken stop)
    {
        PeerLink link;
        PrepRequest request;
        try
        {
            link = await PeerLink.AcceptAsync(accepted, key, HandshakeLimit, stop);
        }
        catch (Exception e) when (e is not OperationCanceledException || !stop.IsCancellationRequested)
        {
            var reason = e is OperationCanceledException or TimeoutException ? $"no proof of the key within {HandshakeLimit.TotalSeconds:0} s" : e.Message;
            Warn(LogThrottle.Kind.PeerRefused, "refused a node prep connection from {Remote}: {Reason}", RemoteOf(accepted), reason);
            accepted.Dispose();
            return;
        }
        await using var _ = link;
        try
        {
            var (type, payload) = await link.ReadAnyAsync(stop, FirstFrames).WaitAsync(HandshakeLimit, stop);
            if (type == PeerFrame.Ping) return;
            if (type == PeerFrame.Withdraw)
            {
                Withdraw(System.Text.Encoding.UTF8.GetString(payload));
                return;
            }
            if (type != PeerFrame.Prep) throw new InvalidDataException($"a {type} frame where a request was expected");
            request = PrepRequest.Decode(payload);
            if (!DatasetName.TryValidate(request.Name, out var nameError)) throw new InvalidDataException(nameError);
        }
        catch (Exception e) when (e is InvalidDataException or IOException or EndOfStreamException or TimeoutException or ArgumentException)
        {
            Warn(LogThrottle.Kind.PeerBadRequest, "a malformed node prep request from {Remote}: {Reason}", RemoteOf(accepted), e.Message);
            return;
        }
        if (IsWithdrawn(request.Id))
        {
            log.LogInformation("node prep {Id} was called off by its requester; a copy of it from {Remote} is refused", request.Id, RemoteOf(accepted));
            return;
        }
        // The same request again: an ancestor adopting this node around a parent that went silent, or a late copy. The
        // join decides which; the connection stays open while the request is worked on, since it may become the parent.
        if (_active.TryGetValue(request.Id, out var running))
        {
            if (running.Adoptions.Writer.TryWrite((request, link))) await running.Ended.Task.WaitAsync(stop);
            return;
        }
        if (_active.Count >= MaxRequests)
        {
            // Its parent passes over this node once the link closes; the requester learns why from this node's outcome.
            var busy = $"node {options.NodeName} refused node prep {request.Id}: it is already working on {MaxRequests} requests; run it again once they end";
            Warn(LogThrottle.Kind.PeerBusy, "{Remote}: {Reason}", RemoteOf(accepted), busy);
            var refusal = new NodeOutcome(request.Position, options.NodeName, (int)ErrorCode.Unavailable, "", 0, busy);
            // The parent reads it as this node gone and passes over it at once; the requester, where it is the parent,
            // reads the reason.
            try { await link.WriteAsync(PeerFrame.Outcome, refusal.Encode(), stop); }
            catch (Exception e) when (e is IOException or SocketException) { }
            if (request.Position != 0) await ReportAsync(request, key, refusal, stop);
            return;
        }
        var active = new Active();
        if (!_active.TryAdd(request.Id, active)) return;
        // A withdrawal that came between the check above and now found nothing to call off.
        if (IsWithdrawn(request.Id)) active.Withdrawn.Cancel();
        try { await PrepareAsync(request, link, key, active, stop); }
        finally
        {
            _active.TryRemove(request.Id, out Active? _);
            active.Adoptions.Writer.TryComplete();
            active.Ended.TrySetResult();
            active.Withdrawn.Dispose();
        }
    }

    /// <summary>The requester called the request off: the join waiting for its start ends, and later copies are refused.</summary>
    private void Withdraw(string id)
    {
        _withdrawn[id] = Environment.TickCount64;
        if (_withdrawn.Count > MostWithdrawnKept)
            foreach (var (old, _) in _withdrawn.OrderBy(w => w.Value).Take(_withdrawn.Count - MostWithdrawnKept / 2).ToList()) _withdrawn.TryRemove(old, out _);
        if (!_active.TryGetValue(id, out var running)) return;
        log.LogInformation("node prep {Id} was called off by its requester before it started (its first agent went silent)", id);
        try { running.Withdrawn.Cancel(); }
        catch (ObjectDisposedException) { } // it ended meanwhile
    }

    private bool IsWithdrawn(string id) => _withdrawn.TryGetValue(id, out var at) && Environment.TickCount64 - at < WithdrawnKept.TotalMilliseconds;

    private async Task PrepareAsync(PrepRequest request, PeerLink parent, PeerKey key, Active active, CancellationToken stop)
    {
        var clock = Stopwatch.StartNew();
        // The agent's CPU over the request (the exchange and the ingest both run in it), for the line and the lab.
        var cpu = Environment.CpuUsage.TotalTime;
        var outcome = new NodeOutcome(request.Position, options.NodeName, (int)ErrorCode.Internal, "", 0, "");
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(stop);
        limit.CancelAfter(request.Timeout);
        var ct = limit.Token;
        Task served = Task.CompletedTask;
        string? version = request.Version.Length == 0 ? null : request.Version;
        var fanout = "fanout=failed";
        IReadOnlyList<int>? lost = null;
        var lostSince = 0L;
        try
        {
            // The user the copy is for, as this node knows them: its readers are checked against that user before a byte
            // of data is fetched (the ingest begins only with the manifest admitted), and the pin is that user's.
            var user = request.User.Length == 0 ? null : _access.ActingFor(PeerCredentials.Agent, request.User, AgentOps.Prefetch);
            Action<Manifest>? admit = user is null ? null : manifest => _access.Check(manifest, user);
            TreeRankGroup? group = null;
            try
            {
                if (request.Alone) throw new LeftOutException(request.Position);
                group = await AgentTree.JoinAsync(request, parent, (h, p, t, c) => PeerLink.ConnectAsync(h, p, key, t, c), ct, active.Adoptions.Reader,
                    active.Withdrawn.Token);
                var joined = clock.Elapsed.TotalSeconds;
                var (summary, s) = await NodeExchange.RunAsync(group, tier, options.CacheTier.Hosts, new StoreIngest(store, options.IngestThreadCount, request.PeerTimeout, admit), request.Name, version,
                    new ExchangeSettings(request.StallTimeout, request.PeerTimeout, request.LinkProbe, request.RingGroups, RingSilence: request.SuspectAfter), ct);
                version = summary.Version;
                served = s;
                fanout = $"fanout=agents ranks={summary.Ranks} join-seconds={joined:0.000} {NodeExchange.Fields(summary)}";
                var positions = group.Positions;
                if (summary.Ring.RoutedAround is { Count: > 0 } gone)
                {
                    lost = [.. gone.Select(r => positions[r]).Distinct()];
                    lostSince = summary.Ring.RoutedAroundAt;
                }
                foreach (var warning in NodeExchange.Warnings(summary, r => $"position {positions[r]} ({request.Members[positions[r]]})"))
                    log.LogWarning("node prep {Id}: {Warning}", request.Id, warning);
            }
            catch (RequestWithdrawnException e) when (!stop.IsCancellationRequested)
            {
                // Called off before it started: the requester sends the request again under another id, with another root.
                log.LogInformation("{Reason}", e.Message);
                return;
            }
            catch (LeftOutException e) when (!stop.IsCancellationRequested)
            {
                fanout = "fanout=left-out";
                log.LogWarning("node prep {Id}: {Reason}", request.Id, e.Message);
            }
            catch (Exception e) when (!stop.IsCancellationRequested && e is not OperationCanceledException)
            {
                // The copy is still made: what the exchange did not bring, the agent fetches from the tier.
                log.LogWarning("node prep {Id}: the exchange stopped on position {Position} ({Error}); completing by direct fetch", request.Id, request.Position, e.Message);
            }
            finally
            {
                if (group is not null)
                    _ = served.ContinueWith(_ => group.DisposeAsync().AsTask(), TaskScheduler.Default);
            }

            // Verified and published by the agent's ordinary fetch, which takes whatever the exchange missed from the tier.
            await using var agent = await AgentClient.ConnectAsync(options.Pipe, TimeSpan.FromSeconds(5), ct);
            var fetched = request.User.Length == 0 ? await agent.PrefetchAsync(request.Name, version, pin: null, ct)
                : await agent.PrefetchForAsync(request.Name, version, pin: null, request.User, ct);
            var local = request.User.Length == 0 ? await agent.PrefetchAsync(request.Name, fetched.Version, pin: request.Job, ct)
                : await agent.PrefetchForAsync(request.Name, fetched.Version, pin: request.Job, request.User, ct);
            var source = fanout.StartsWith("fanout=agents", StringComparison.Ordinal) && fetched.Source == "resumed" ? "fanout" : fetched.Source;
            outcome = outcome with { Code = 0, Version = local.Version, Detail = $"bytes={local.Length} source={source} {fanout} agent-cpu-seconds={(Environment.CpuUsage.TotalTime - cpu).TotalSeconds:0.000} path={local.Path}" };
        }
        catch (CommonDataException e) { outcome = outcome with { Code = (int)e.Code, Detail = e.Message }; }
        catch (OperationCanceledException) when (!stop.IsCancellationRequested)
        {
            outcome = outcome with { Code = (int)ErrorCode.Timeout, Detail = $"not done within {request.Timeout.TotalMinutes:0.#} min" };
        }
        catch (Exception e) when (e is IOException or TimeoutException or UnauthorizedAccessException or InvalidDataException)
        {
            outcome = outcome with { Code = (int)ErrorCode.Unavailable, Detail = e.Message };
        }
        outcome = outcome with
        {
            Seconds = clock.Elapsed.TotalSeconds, Lost = lost, LostFor = lostSince == 0 ? 0 : Stopwatch.GetElapsedTime(lostSince).TotalSeconds,
        };
        if (!outcome.Ready) log.LogWarning("node prep {Id} of {Dataset} failed on this node: {Error}", request.Id, request.Name, outcome.Detail);
        await ReportAsync(request, key, outcome, stop);
        // The leaves still get this node's share before its links close.
        try { await served.WaitAsync(request.Timeout, stop); }
        catch (Exception e) when (e is not OperationCanceledException || !stop.IsCancellationRequested)
        {
            log.LogWarning("node prep {Id}: sending this node's share to the slow nodes stopped ({Error})", request.Id, e.Message);
        }
    }

    private static IPAddress RemoteOf(Socket socket)
    {
        try { return (socket.RemoteEndPoint as IPEndPoint)?.Address ?? IPAddress.None; }
        catch (ObjectDisposedException) { return IPAddress.None; }
    }

    private async Task ReportAsync(PrepRequest request, PeerKey key, NodeOutcome outcome, CancellationToken stop)
    {
        var (host, port) = AgentTree.Endpoint(request.Requester);
        for (var attempt = 0; attempt < 3; attempt++)
        {
            try
            {
                await using var link = await PeerLink.ConnectAsync(host, port, key, TimeSpan.FromSeconds(5), stop);
                await link.WriteAsync(PeerFrame.Outcome, outcome.Encode(), stop);
                return;
            }
            catch (Exception e) when (e is IOException or SocketException or TimeoutException or UnauthorizedAccessException)
            {
                if (attempt == 2) log.LogWarning("node prep {Id}: the requester at {Requester} took no outcome: {Error}", request.Id, request.Requester, e.Message);
                else await Task.Delay(TimeSpan.FromMilliseconds(200 << attempt), stop);
            }
        }
    }
}
