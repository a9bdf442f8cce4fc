using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;

namespace Hpc.CommonData.Cache;

/// <summary>
/// Where the tier keeps each key, and so which host an exchange goes to: the one place where independent hosts and a
/// Redis Cluster differ. Transport (pooled connections, timeouts, the retry policy) is the host set's, alike for both.
/// </summary>
internal interface ITierTopology
{
    /// <summary>The tier keeps copies of each key itself (a Redis Cluster's replicas): a client writes one, reads any.</summary>
    bool KeepsItsOwnCopies { get; }

    /// <summary>One command may name keys that live in different places (MGET, multi-key DEL).</summary>
    bool MultiKeyCommands { get; }

    /// <summary>Copies of each segment a client writes.</summary>
    int Replicas { get; }

    /// <summary>Learns what it must before the first exchange (a cluster's slot map).</summary>
    Task ReadyAsync(CancellationToken ct);

    /// <summary>Fills <paramref name="hosts"/> with the host indexes that hold a segment, best first (-1: none known).</summary>
    void Place(in SegmentId id, Span<int> hosts);

    /// <summary>
    /// For each host, the items it holds: every copy of a write, or with <paramref name="copy"/> only that one (a
    /// fetch's round: independent hosts each replica once, a cluster its slot's nodes in turn).
    /// </summary>
    List<int>?[] GroupByHost(int count, Func<int, SegmentId> idOf, int? copy = null);

    /// <summary>The host that coordinates a key: job lists, flags, leases, and where a delete of it goes.</summary>
    int OwnerOf(string key);

    /// <summary>The parts that hold distinct keys, each as its hosts best first (a plain tier's hosts; a cluster's shards).</summary>
    IReadOnlyList<int[]> Shards { get; }

    /// <summary>
    /// Runs a batch exchange that is safe to repeat (EXISTS, SET NX, DEL) and, where the tier can move keys under it,
    /// again after learning where they went, until the exchange timeout.
    /// </summary>
    Task RoutedAsync(Func<Task> exchange, string what, CancellationToken ct);

    /// <summary>A failure another host, or the same key a moment later, may not have.</summary>
    bool IsRouting(Exception e);

    /// <summary>Before fetch round <paramref name="round"/> (0 first): whether to run it, and whether a failure in it may be retried in a later one.</summary>
    ValueTask<(bool Run, bool CanRetry)> FetchRoundAsync(int round, long deadline, CancellationToken ct);

    /// <summary>Writes what every reader needs first (manifests, "latest") wherever a reader may look for it.</summary>
    Task WriteEverywhereAsync(string key, Func<RespConnection, CancellationToken, ValueTask<int>> op, CancellationToken ct, bool bulk = false);

    /// <summary>Reads such a key from every place that answers (one answer on a cluster, which keeps its copies alike).</summary>
    Task<T[]> ReadAnywhereAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false);

    /// <summary>Runs an exchange about one key on the host that coordinates it.</summary>
    Task<T> RunOnOwnerAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false);
}

/// <summary>
/// Independent hosts: a segment on the R hosts rendezvous hashing picks, what readers need first on every host, and the
/// tier's coordination keys on one designated host (the first in sorted order, whatever order each client was given).
/// </summary>
internal sealed class IndependentHosts(CacheHostSet hosts, RendezvousPlacement placement) : ITierTopology
{
    public bool KeepsItsOwnCopies => false;
    public bool MultiKeyCommands => true;
    public int Replicas => placement.Replicas;

    public Task ReadyAsync(CancellationToken ct) => Task.CompletedTask;

    public void Place(in SegmentId id, Span<int> targets) => placement.Place(id, targets);

    public List<int>?[] GroupByHost(int count, Func<int, SegmentId> idOf, int? copy = null) => placement.GroupByHost(count, idOf, copy);

    public int OwnerOf(string key) => hosts.Designated;

    public IReadOnlyList<int[]> Shards => Enumerable.Range(0, hosts.Hosts.Count).Select(h => new[] { h }).ToList();

    public Task RoutedAsync(Func<Task> exchange, string what, CancellationToken ct) => exchange();

    public bool IsRouting(Exception e) => e is CacheHostUnavailableException;

    // Each placed replica once, then every other host in rank order: a copy missing or bad on one host is asked of the
    // next, and a copy the placement no longer points at (hosts added, the writer's --replicas higher than this
    // reader's) is still found. Only a segment no host holds intact costs every round.
    public ValueTask<(bool Run, bool CanRetry)> FetchRoundAsync(int round, long deadline, CancellationToken ct) =>
        ValueTask.FromResult((round < placement.HostCount, round < placement.HostCount - 1));

    public async Task WriteEverywhereAsync(string key, Func<RespConnection, CancellationToken, ValueTask<int>> op, CancellationToken ct, bool bulk = false) =>
        await hosts.ForAllAsync(op, ct, bulk);

    public Task<T[]> ReadAnywhereAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false) =>
        hosts.AskAnswerableAsync(op, ct, bulk);

    public Task<T> RunOnOwnerAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false) =>
        hosts.RunAsync(hosts.Designated, op, ct, bulk);
}

/// <summary>
/// A Redis Cluster: each key where its hash slot lives, learned from <c>CLUSTER SLOTS</c> and kept current by MOVED
/// and ASK; the cluster replicates each key itself, and a replica answers reads while its master fails over.
/// </summary>
internal sealed class RedisClusterSlots(CacheHostSet hosts, CacheTierOptions options, ILogger logger) : ITierTopology
{
    private readonly ClusterTopology _map = new();
    private readonly Lock _refreshing = new();
    private Task? _refresh;

    public bool KeepsItsOwnCopies => true;
    public bool MultiKeyCommands => false;
    public int Replicas => 1;

    public Task ReadyAsync(CancellationToken ct) => _map.Known ? Task.CompletedTask : RefreshAsync().WaitAsync(ct);

    public void Place(in SegmentId id, Span<int> targets) =>
        targets[0] = _map.NodesOf(ClusterTopology.SlotOf(id)) is { Length: > 0 } nodes ? nodes[0] : -1;

    public List<int>?[] GroupByHost(int count, Func<int, SegmentId> idOf, int? copy = null)
    {
        var host = new int[count];
        for (var i = 0; i < count; i++)
        {
            var nodes = _map.NodesOf(ClusterTopology.SlotOf(idOf(i)));
            if (nodes.Length == 0) throw new CommonDataException(ErrorCode.Unavailable, $"no node of the Redis Cluster ({string.Join(", ", hosts.Hosts)}) serves segment {idOf(i)}'s slot");
            host[i] = nodes[(copy ?? 0) % nodes.Length];
        }
        var byHost = new List<int>?[count == 0 ? 0 : host.Max() + 1];
        for (var i = 0; i < count; i++) (byHost[host[i]] ??= []).Add(i);
        return byHost;
    }

    public int OwnerOf(string key) => _map.NodesOf(ClusterTopology.SlotOf(key)) is { Length: > 0 } nodes ? nodes[0]
        : throw new CommonDataException(ErrorCode.Unavailable, $"no node of the Redis Cluster serves key {key}");

    public IReadOnlyList<int[]> Shards => _map.Shards;

    public async Task RoutedAsync(Func<Task> exchange, string what, CancellationToken ct)
    {
        await ReadyAsync(ct);
        var deadline = Environment.TickCount64 + (long)options.OperationTimeout.TotalMilliseconds;
        for (var attempt = 1; ; attempt++)
        {
            try { await exchange(); return; }
            catch (Exception e) when (IsRouting(e) && Environment.TickCount64 < deadline)
            {
                logger.LogWarning("Redis Cluster: {What}: {Error}; again on a fresh slot map", what, e.Message);
                await Task.Delay(hosts.Backoff(attempt), ct);
                await RefreshQuietlyAsync();
            }
        }
    }

    public bool IsRouting(Exception e) =>
        e is CacheHostUnavailableException || e is RespErrorException r && ClusterRedirect.IsRouting(r.ServerMessage);

    // The slot's nodes in turn (a replica reads while its master fails over), on a fresh map after each failed round,
    // until the exchange timeout.
    public async ValueTask<(bool Run, bool CanRetry)> FetchRoundAsync(int round, long deadline, CancellationToken ct)
    {
        await ReadyAsync(ct);
        if (round > 0)
        {
            await Task.Delay(hosts.Backoff(round), ct);
            await RefreshQuietlyAsync();
        }
        return (true, Environment.TickCount64 < deadline);
    }

    public async Task WriteEverywhereAsync(string key, Func<RespConnection, CancellationToken, ValueTask<int>> op, CancellationToken ct, bool bulk = false) =>
        await RunOnKeyAsync(key, op, ct, bulk);

    public async Task<T[]> ReadAnywhereAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false) =>
        [await RunOnKeyAsync(key, op, ct, bulk, replicaOk: true)];

    public Task<T> RunOnOwnerAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false) =>
        RunOnKeyAsync(key, op, ct, bulk);

    /// <summary>
    /// Learns the slot map again from whichever known node answers <c>CLUSTER SLOTS</c> first (all are asked at once:
    /// after a failover some are gone). Callers at the same moment share one refresh.
    /// </summary>
    public Task RefreshAsync()
    {
        lock (_refreshing)
        {
            if (_refresh is { IsCompleted: false } running) return running;
            return _refresh = RefreshCoreAsync();
        }
    }

    private async Task RefreshCoreAsync()
    {
        var known = hosts.Hosts;
        var asks = known.Select((_, h) => hosts.RunAsync(h, (c, token) => c.FlushAndReadCommandAsync("CLUSTER"u8, "SLOTS", token), CancellationToken.None, once: true)).ToList();
        var problems = new List<string>();
        while (asks.Count > 0)
        {
            var done = await Task.WhenAny(asks);
            asks.Remove(done);
            if (done.IsCompletedSuccessfully)
            {
                var problem = _map.Load(done.Result, hosts.IndexOf);
                if (problem is null)
                {
                    foreach (var rest in asks) _ = rest.ContinueWith(static t => t.Exception, TaskScheduler.Default);
                    return;
                }
                problems.Add(problem);
            }
            else problems.Add(done.Exception!.GetBaseException().Message);
        }
        if (problems.Any(p => p.Contains("cluster support disabled", StringComparison.OrdinalIgnoreCase)))
            throw new CommonDataException(ErrorCode.BadRequest,
                $"--cache-cluster: the cache hosts {string.Join(", ", known.AsEnumerable())} are not Redis Cluster nodes ({problems[0]}); leave out --cache-cluster for independent hosts");
        throw new CommonDataException(ErrorCode.Unavailable, $"no node of the Redis Cluster ({string.Join(", ", known.AsEnumerable())}) told its slot map: {string.Join("; ", problems.Distinct())}");
    }

    /// <summary>
    /// Runs an exchange about one key on the node serving its slot: follows MOVED (and learns the map again) and ASK
    /// (once, after ASKING), and waits out a failover (CLUSTERDOWN, TRYAGAIN, an owner that stopped answering) for up
    /// to <see cref="CacheTierOptions.OperationTimeout"/>. With <paramref name="replicaOk"/> a read turns to the slot's
    /// replicas when its master does not answer (connections to a cluster are READONLY).
    /// </summary>
    private async Task<T> RunOnKeyAsync<T>(string key, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct,
        bool bulk = false, bool replicaOk = false)
    {
        await ReadyAsync(ct);
        var slot = ClusterTopology.SlotOf(key);
        var deadline = Environment.TickCount64 + (long)options.OperationTimeout.TotalMilliseconds;
        CacheEndpoint? asked = null;
        var turn = 0;
        for (var attempt = 1; ; attempt++)
        {
            int host;
            if (asked is not null) host = hosts.IndexOf(asked);
            else if (_map.NodesOf(slot) is { Length: > 0 } nodes) host = nodes[replicaOk ? turn % nodes.Length : 0];
            else throw new CommonDataException(ErrorCode.Unavailable, $"no node of the Redis Cluster serves slot {slot} (key {key})");
            var asking = asked is not null;
            asked = null;
            try
            {
                return await hosts.RunAsync(host, asking ? Asking(op) : op, ct, bulk, once: true);
            }
            catch (RespErrorException e) when (ClusterRedirect.TryParse(e.ServerMessage, out var redirect) && attempt < MaxRedirects)
            {
                if (redirect.Ask) asked = redirect.Target;
                else
                {
                    _map.Move(redirect.Slot, hosts.IndexOf(redirect.Target));
                    _ = RefreshQuietlyAsync();
                }
            }
            catch (Exception e) when (Environment.TickCount64 < deadline &&
                                      (e is CacheHostUnavailableException || e is RespErrorException r && ClusterRedirect.IsTransient(r.ServerMessage)))
            {
                turn++;
                if (!replicaOk || turn % Math.Max(1, _map.NodesOf(slot).Length) == 0)
                {
                    logger.LogWarning("Redis Cluster slot {Slot} on {Host}: {Error}; waiting for the cluster", slot, hosts.Hosts[host], e.Message);
                    await Task.Delay(hosts.Backoff(attempt), ct);
                    await RefreshQuietlyAsync();
                }
            }
        }
    }

    /// <summary>More redirects than a migration and a failover together cause means nodes disagree about the map.</summary>
    private const int MaxRedirects = 16;

    private static Func<RespConnection, CancellationToken, ValueTask<T>> Asking<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op) =>
        async (c, token) =>
        {
            var ok = await c.FlushAndReadCommandAsync("ASKING"u8, [], token);
            if (ok.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), ok.Text!);
            return await op(c, token);
        };

    /// <summary>Learns the map again; a cluster that cannot tell it now leaves the old one in use.</summary>
    public async Task RefreshQuietlyAsync()
    {
        try { await RefreshAsync(); }
        catch (CommonDataException e) { logger.LogWarning("Redis Cluster map not refreshed: {Error}", e.Message); }
    }
}
