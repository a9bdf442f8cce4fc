using System.Collections.Concurrent;
using Microsoft.Extensions.Logging;

namespace Hpc.CommonData.Cache;

/// <summary>
/// The configured cache hosts, each with a small pool of pipelined connections, and the one retry policy every
/// exchange goes through: a per-attempt timeout that restarts whenever reply bytes arrive (it catches a silent host,
/// not a busy link), and full-jitter exponential backoff between attempts. Server errors are answers, not retried.
/// </summary>
internal sealed class CacheHostSet : IAsyncDisposable
{
    private readonly CacheTierOptions _options;
    private readonly ILogger _logger;
    private readonly CacheTls? _tls;
    private readonly object _grow = new();
    // Copy-on-write: a Redis Cluster's nodes join as they are discovered; an index keeps its host for good.
    private volatile HostPool[] _pools;
    private volatile CacheEndpoint[] _hosts;

    public CacheHostSet(IReadOnlyList<CacheEndpoint> hosts, CacheTierOptions options, ILogger logger)
    {
        _options = options;
        _logger = logger;
        _hosts = hosts.ToArray();
        _tls = options.UsesTls ? CacheTls.Create(options.TlsCaFile) : null;
        // One bucket for the whole host set: every connection of the process to every host draws on the same budget.
        RateLimit = options.MaxRate.IsUnlimited ? null : new TokenBucket(options.MaxRate);
        _pools = _hosts.Select(NewPool).ToArray();
        Topology = options.Cluster ? new RedisClusterSlots(this, options, logger) : new IndependentHosts(this, new RendezvousPlacement(_hosts, options.Replicas));
    }

    private HostPool NewPool(CacheEndpoint h) => new(h, _options, _tls, RateLimit, readOnlyReplicas: _options.Cluster, _logger);

    /// <summary>
    /// Every host known: the configured ones, then (on a Redis Cluster) each node discovered, in the order found.
    /// </summary>
    public IReadOnlyList<CacheEndpoint> Hosts => _hosts;

    /// <summary>Where the tier keeps each key: independent hosts, or a Redis Cluster (<see cref="CacheTierOptions.Cluster"/>).</summary>
    public ITierTopology Topology { get; }

    /// <summary>The process's byte budget on the cache tier (<see cref="CacheTierOptions.MaxRate"/>), or null when unlimited.</summary>
    public TokenBucket? RateLimit { get; }

    /// <summary>The host index of an address, adding it (with its own connection pool) when it is new.</summary>
    public int IndexOf(CacheEndpoint endpoint)
    {
        var i = Array.IndexOf(_hosts, endpoint);
        if (i >= 0) return i;
        lock (_grow)
        {
            i = Array.IndexOf(_hosts, endpoint);
            if (i >= 0) return i;
            _pools = [.. _pools, NewPool(endpoint)];
            _hosts = [.. _hosts, endpoint];
            return _hosts.Length - 1;
        }
    }

    /// <summary>
    /// The host that every client picks for the tier's coordination keys on a plain tier (job lists, the collection
    /// flag, stagers' leases): the first in sorted order, whatever order each was configured in.
    /// </summary>
    /// <summary>The account this client logs in as (<c>default</c> without one), which its bookkeeping keys name.</summary>
    public string Account => string.IsNullOrEmpty(_options.User) ? "default" : _options.User;

    public int Designated => _hosts.Select((h, i) => (h, i)).OrderBy(x => x.h.ToString(), StringComparer.Ordinal).First().i;

    /// <summary>
    /// Runs one exchange on a pooled connection to host <paramref name="h"/>, retried as the policy says. A
    /// <paramref name="bulk"/> exchange moves data (segment batches), and may wait <see cref="CacheTierOptions.OperationTimeout"/>
    /// for its first byte; any other gets <see cref="CacheTierOptions.ResponseTimeout"/>. Either way, once bytes arrive the
    /// deadline restarts with each of them.
    /// <para>A host that stayed silent (a connect, login or exchange timed out without a byte of answer) is not tried
    /// again: it accepted and hung, and every further attempt would wait the same. For a few seconds after, exchanges
    /// with it fail at once, so a node's other requests fall back to replicas or local copies without each waiting.
    /// Refused or reset connections are retried with backoff as before: a restarting host comes back.</para>
    /// </summary>
    /// <para>With <paramref name="once"/> a refused connection is not retried either: the caller (a Redis Cluster's
    /// routing) has a better next step than the same node again.</para>
    /// <para>With <paramref name="stall"/> (a batch another replica can answer too), that is how long the exchange may
    /// go without a byte, before its answer or in the middle of it; then the host counts as hung, as a silent one does:
    /// it is not retried and is failed at once for a few seconds, so the caller goes to the replica.</para>
    public async Task<T> RunAsync<T>(int h, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false, bool once = false,
        TimeSpan? stall = null)
    {
        var pool = _pools[h];
        var attempts = once ? 1 : _options.MaxAttempts;
        for (var attempt = 1; ; attempt++)
        {
            if (Volatile.Read(ref pool.SilentSince) is var since and > 0 && Environment.TickCount64 - since < SilenceMemory)
                throw new CacheHostUnavailableException(Hosts[h], $"did not answer {(Environment.TickCount64 - since) / 1000.0:0.0} s ago and is not tried again yet");
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(ct);
            // Waiting for one of our own busy connections is not the host's silence: the short deadline starts once rented.
            timeout.CancelAfter(_options.OperationTimeout);
            RespConnection? c = null;
            var firstByte = stall ?? (bulk ? _options.OperationTimeout : Min(_options.ResponseTimeout, _options.OperationTimeout));
            var between = stall ?? _options.OperationTimeout;
            try
            {
                c = await pool.RentAsync(timeout.Token);
                timeout.CancelAfter(firstByte);
                c.Heard = false;
                // Sending restarts the wait for the first byte; once the answer has begun, each byte restarts the long one.
                var rented = c;
                c.Progress = () => timeout.CancelAfter(rented.Heard ? between : firstByte);
                var result = await op(c, timeout.Token);
                Volatile.Write(ref pool.SilentSince, 0);
                return result;
            }
            catch (Exception e) when (IsTransient(e, ct) && !IsSilence(e, ct, c, stall is not null) && !IsUnknownName(e) && attempt < attempts)
            {
                c?.MarkBroken();
                var delay = Backoff(attempt);
                _logger.LogWarning("Cache host {Host}: {Error}; retry {Attempt}/{Max} in {Delay} ms", Hosts[h], Describe(e), attempt, _options.MaxAttempts - 1, (int)delay.TotalMilliseconds);
                await Task.Delay(delay, ct);
            }
            catch (Exception e) when (IsTransient(e, ct))
            {
                c?.MarkBroken();
                if (IsSilence(e, ct, c, stall is not null))
                {
                    Volatile.Write(ref pool.SilentSince, Environment.TickCount64);
                    var waited = c is null ? _options.ConnectTimeout : firstByte;
                    throw new CacheHostUnavailableException(Hosts[h], c switch
                    {
                        { Heard: true } => $"timed out: stopped answering in the middle of an exchange for {waited.TotalSeconds:0.#} s (stopped or hung); not retried",
                        // The connect itself got no answer: not a host that accepted and went quiet.
                        null when e is CacheHostUnavailableException { Reason: var reason } && reason.StartsWith("connect ", StringComparison.Ordinal) =>
                            $"timed out: {reason} (down, unreachable or filtered); not retried",
                        _ => $"timed out: accepted the connection but sent no answer in {waited.TotalSeconds:0.#} s (stopped or hung); not retried",
                    }, e);
                }
                if (IsUnknownName(e))
                    throw new CacheHostUnavailableException(Hosts[h], $"no such host name ({Describe(e)}; check --cache-hosts or {CacheTierOptions.HostsVariable}); not retried", e);
                // Where every command looks when it was given no cache hosts: say so, for that is the usual reason.
                var fallback = Hosts[h] is { Host: "127.0.0.1" or "localhost", Port: CacheEndpoint.DefaultPort }
                    ? $"; 127.0.0.1:{CacheEndpoint.DefaultPort} is only where commands look when given no cache hosts (--cache-hosts or {CacheTierOptions.HostsVariable})"
                    : "";
                throw new CacheHostUnavailableException(Hosts[h], $"{Describe(e)} (after {attempt} attempts{fallback})", e);
            }
            catch
            {
                c?.MarkBroken();
                throw;
            }
            finally
            {
                if (c is not null)
                {
                    c.Progress = null;
                    await pool.ReturnAsync(c);
                }
            }
        }
    }

    /// <summary>How long a host found silent is failed at once instead of waited for again.</summary>
    private const long SilenceMemory = 5_000;

    private static TimeSpan Min(TimeSpan a, TimeSpan b) => a < b ? a : b;

    /// <summary>
    /// A timeout with nothing heard: the caller did not cancel, no reply byte arrived (or, with <paramref name="stalled"/>,
    /// none for the stall timeout, even after some had), and the connect either completed (so the host is up but not
    /// answering) or timed out itself. A refused or reset connection is not silence.
    /// </summary>
    private static bool IsSilence(Exception e, CancellationToken ct, RespConnection? c, bool stalled) =>
        (stalled || c is not { Heard: true }) && !ct.IsCancellationRequested &&
        (e is OperationCanceledException || e is CacheHostUnavailableException { TimedOut: true });

    /// <summary>
    /// Asks every part of the tier that holds distinct keys (a plain tier's hosts; a cluster's shards, each at its master
    /// or, when that is down, a replica); fails only when none answers. Returns the answers and the hosts that gave them.
    /// </summary>
    public async Task<(int Host, T Answer)[]> AskEveryShardAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false)
    {
        await Topology.ReadyAsync(ct);
        var parts = Topology.Shards;
        var tasks = parts.Select(async nodes =>
        {
            for (var i = 0; ; i++)
            {
                try { return (nodes[i], await RunAsync(nodes[i], op, ct, bulk, once: i < nodes.Length - 1)); }
                catch (CacheHostUnavailableException) when (i < nodes.Length - 1) { }
            }
        }).ToArray();
        try { await Task.WhenAll(tasks); }
        catch (CacheHostUnavailableException) when (tasks.Any(t => t.IsCompletedSuccessfully)) { }
        return tasks.Where(t => t.IsCompletedSuccessfully).Select(t => t.Result).ToArray();
    }

    public async Task<T[]> ForAllAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false) =>
        await Task.WhenAll(Enumerable.Range(0, Hosts.Count).Select(h => RunAsync(h, op, ct, bulk)));

    /// <summary>Reads from every host that answers; fails only when none does (a read must survive one host being down).</summary>
    public async Task<T[]> AskAnswerableAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false)
    {
        var tasks = Enumerable.Range(0, Hosts.Count).Select(h => RunAsync(h, op, ct, bulk)).ToArray();
        try { await Task.WhenAll(tasks); }
        catch (CacheHostUnavailableException) when (tasks.Any(t => t.IsCompletedSuccessfully)) { }
        return tasks.Where(t => t.IsCompletedSuccessfully).Select(t => t.Result).ToArray();
    }

    /// <summary>Opens every host's pooled connections and PINGs each once; per host, why it could not be reached, or null.
    /// Refused credentials are thrown instead.</summary>
    public async Task<string?[]> ConnectAllAsync(CancellationToken ct)
    {
        var results = await Task.WhenAll(_pools.Select(async Task<(string? Why, RespErrorException? Refused)> (pool) =>
        {
            var open = new List<RespConnection>();
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(ct);
            timeout.CancelAfter(_options.ConnectTimeout + _options.ConnectTimeout);
            try
            {
                for (var i = 0; i < Math.Max(1, _options.ConnectionsPerHost); i++) open.Add(await pool.RentAsync(timeout.Token));
                foreach (var c in open) c.Command("PING"u8);
                foreach (var reply in await Task.WhenAll(open.Select(c => c.FlushAndReadAsync(timeout.Token).AsTask())))
                    if (reply.Kind == RespKind.Error) throw new RespErrorException(pool.Endpoint.ToString(), reply.Text!);
                return (null, null);
            }
            catch (RespErrorException e) when (e.Code == ErrorCode.AccessDenied)
            {
                foreach (var c in open) c.MarkBroken();
                return (Describe(e), e);
            }
            catch (Exception e) when (IsTransient(e, ct) || e is RespErrorException || e is CommonDataException { Code: ErrorCode.Protocol })
            {
                foreach (var c in open) c.MarkBroken();
                return (Describe(e), null);
            }
            finally
            {
                foreach (var c in open) await pool.ReturnAsync(c);
            }
        }));
        // A host that is down may come back; one that refuses the credentials will refuse them on every request until
        // someone changes a setting, so that is thrown, for the caller to stop on rather than serve refusals.
        var refused = results.Select(r => r.Refused).OfType<RespErrorException>().ToList();
        if (refused.Count == 1) throw refused[0];
        if (refused.Count > 1)
            throw new CommonDataException(ErrorCode.AccessDenied, $"{refused[0].Message}; {string.Join(", ", refused.Skip(1).Select(r => r.Host))} refused it too", refused[0]);
        return results.Select(r => r.Why).ToArray();
    }

    /// <summary>A name the resolver says does not exist: asking again gets the same answer (a resolver that is down says TryAgain).</summary>
    private static bool IsUnknownName(Exception e) =>
        e is CacheHostUnavailableException { InnerException: System.Net.Sockets.SocketException { SocketErrorCode: System.Net.Sockets.SocketError.HostNotFound or System.Net.Sockets.SocketError.NoData } };

    private static bool IsTransient(Exception e, CancellationToken ct) =>
        e is CacheHostUnavailableException or RespProtocolException or IOException ||
        (e is OperationCanceledException && !ct.IsCancellationRequested);

    private static string Describe(Exception e) => e switch
    {
        OperationCanceledException => "timed out",
        CacheHostUnavailableException { InnerException: { } inner } => inner.Message,
        _ => e.Message,
    };

    /// <summary>
    /// The one backoff between attempts, whatever is retried (a host's exchange, a cluster's routing, a fetch round):
    /// full jitter, uniformly random in [0, min(max, base·2^attempt)].
    /// </summary>
    public TimeSpan Backoff(int attempt)
    {
        var cap = Math.Min(_options.RetryMaxDelay.TotalMilliseconds, _options.RetryBaseDelay.TotalMilliseconds * Math.Pow(2, Math.Min(attempt, 30)));
        return TimeSpan.FromMilliseconds(Random.Shared.NextDouble() * cap);
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var p in _pools) await p.DisposeAsync();
    }

    private sealed class HostPool(CacheEndpoint endpoint, CacheTierOptions options, CacheTls? tls, TokenBucket? rateLimit, bool readOnlyReplicas, ILogger logger) : IAsyncDisposable
    {
        public CacheEndpoint Endpoint => endpoint;
        /// <summary>When (Environment.TickCount64) the host was last found silent; 0 once it answers again.</summary>
        public long SilentSince;
        private readonly ConcurrentBag<RespConnection> _idle = [];
        private readonly SemaphoreSlim _slots = new(Math.Max(1, options.ConnectionsPerHost));
        private readonly System.Net.IPAddress? _source = options.SourceIPAddress;

        public async Task<RespConnection> RentAsync(CancellationToken ct)
        {
            await _slots.WaitAsync(ct);
            try
            {
                while (_idle.TryTake(out var c))
                    if (!c.IsBroken && !c.IsClosedByPeer()) return c;
                    else await c.DisposeAsync();
                var started = System.Diagnostics.Stopwatch.GetTimestamp();
                var fresh = await RespConnection.ConnectAsync(endpoint, options.Password, options.ConnectTimeout, ct, options.User, tls, rateLimit, _source);
                // What an operator asks first when a command is slow or refused (hpcdata -v): where, how long, as whom.
                if (logger.IsEnabled(LogLevel.Debug))
                    logger.LogDebug("Connected to {Host} in {Ms:0.0} ms{Tls}{Account}", endpoint, System.Diagnostics.Stopwatch.GetElapsedTime(started).TotalMilliseconds,
                        tls is null ? "" : " over TLS", options.User is { } user ? $" as {user}" : "");
                if (!readOnlyReplicas) return fresh;
                // A cluster node serves reads of its master's slots only after READONLY; a master ignores it.
                fresh.ThrowsRoutingErrors = true;
                var ok = await fresh.FlushAndReadCommandAsync("READONLY"u8, [], ct);
                if (ok.Kind != RespKind.Error) return fresh;
                await fresh.DisposeAsync();
                throw new RespErrorException(endpoint.ToString(), ok.Text!);
            }
            catch
            {
                _slots.Release();
                throw;
            }
        }

        public async ValueTask ReturnAsync(RespConnection c)
        {
            if (c.IsBroken) await c.DisposeAsync();
            else _idle.Add(c);
            _slots.Release();
        }

        public async ValueTask DisposeAsync()
        {
            while (_idle.TryTake(out var c)) await c.DisposeAsync();
        }
    }
}
