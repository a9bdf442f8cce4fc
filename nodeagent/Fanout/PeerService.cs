using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net.Sockets;
using System.Threading.Channels;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
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
    /// <summary>Requests worked on at once; more are refused (their nodes fetch directly).</summary>
    private const int MaxRequests = 4;
    private static readonly TimeSpan HandshakeLimit = TimeSpan.FromSeconds(5);
    private readonly ConcurrentDictionary<string, Active> _active = new(StringComparer.Ordinal);

    /// <summary>A request this agent works on: later connections carrying its id are adoptions (<see cref="AgentTree.JoinAsync"/>).</summary>
    private sealed class Active
    {
        public readonly Channel<(PrepRequest Request, PeerLink Link)> Adoptions = Channel.CreateUnbounded<(PrepRequest, PeerLink)>();
        public readonly TaskCompletionSource Ended = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }
    private readonly TaskCompletionSource _listening = new(TaskCreationOptions.RunContinuationsAsynchronously);

    private PeerKey? _key;

    public override async Task StartAsync(CancellationToken cancellationToken)
    {
        if (options.PeerEndpoint() is not null)
        {
            // Read before serving: a key file that cannot be read stops the start with its reason, not a later request.
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
            running.Add(ServeAsync(accepted, key, stoppingToken));
        }
        await Task.WhenAll(running);
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
            log.LogWarning("refused a node prep connection: {Error}", e.Message);
            accepted.Dispose();
            return;
        }
        await using var _ = link;
        try
        {
            var (type, payload) = await link.ReadAnyAsync(stop).WaitAsync(HandshakeLimit, stop);
            if (type == PeerFrame.Ping) return;
            if (type != PeerFrame.Prep) throw new InvalidDataException($"a {type} frame where a request was expected");
            request = PrepRequest.Decode(payload);
            if (!DatasetName.TryValidate(request.Name, out var nameError)) throw new InvalidDataException(nameError);
        }
        catch (Exception e) when (e is InvalidDataException or IOException or EndOfStreamException or TimeoutException or ArgumentException)
        {
            log.LogWarning("a malformed node prep request from {Remote}: {Error}", link.Remote, e.Message);
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
            log.LogWarning("node prep {Id} of {Dataset} refused: {Count} requests are already being worked on; this node fetches on its own", request.Id, request.Name, MaxRequests);
            return;
        }
        var active = new Active();
        if (!_active.TryAdd(request.Id, active)) return;
        try { await PrepareAsync(request, link, key, active.Adoptions.Reader, stop); }
        finally
        {
            _active.TryRemove(request.Id, out Active? _);
            active.Adoptions.Writer.TryComplete();
            active.Ended.TrySetResult();
        }
    }

    private async Task PrepareAsync(PrepRequest request, PeerLink parent, PeerKey key, ChannelReader<(PrepRequest, PeerLink)> adoptions, CancellationToken stop)
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
        try
        {
            TreeRankGroup? group = null;
            try
            {
                if (request.Alone) throw new LeftOutException(request.Position);
                group = await AgentTree.JoinAsync(request, parent, (h, p, t, c) => PeerLink.ConnectAsync(h, p, key, t, c), ct, adoptions);
                var joined = clock.Elapsed.TotalSeconds;
                var (summary, s) = await NodeExchange.RunAsync(group, tier, options.CacheTier.Hosts, new StoreIngest(store, options.IngestThreadCount, request.PeerTimeout), request.Name, version,
                    new ExchangeSettings(request.StallTimeout, request.PeerTimeout, request.LinkProbe, request.RingGroups), ct);
                version = summary.Version;
                served = s;
                fanout = $"fanout=agents ranks={summary.Ranks} join-seconds={joined:0.000} {NodeExchange.Fields(summary)}";
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
            var fetched = await agent.PrefetchAsync(request.Name, version, pin: null, ct);
            var local = await agent.PrefetchAsync(request.Name, fetched.Version, pin: request.Job, ct);
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
        outcome = outcome with { Seconds = clock.Elapsed.TotalSeconds };
        if (!outcome.Ready) log.LogWarning("node prep {Id} of {Dataset} failed on this node: {Error}", request.Id, request.Name, outcome.Detail);
        await ReportAsync(request, key, outcome, stop);
        // The leaves still get this node's share before its links close.
        try { await served.WaitAsync(request.Timeout, stop); }
        catch (Exception e) when (e is not OperationCanceledException || !stop.IsCancellationRequested)
        {
            log.LogWarning("node prep {Id}: sending this node's share to the slow nodes stopped ({Error})", request.Id, e.Message);
        }
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
