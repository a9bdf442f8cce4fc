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
    private readonly HostPool[] _pools;

    public CacheHostSet(IReadOnlyList<CacheEndpoint> hosts, CacheTierOptions options, ILogger logger)
    {
        _options = options;
        _logger = logger;
        Hosts = hosts;
        var tls = options.UsesTls ? CacheTls.Create(options.TlsCaFile) : null;
        // One bucket for the whole host set: every connection of the process to every host draws on the same budget.
        RateLimit = options.MaxRate.IsUnlimited ? null : new TokenBucket(options.MaxRate);
        _pools = hosts.Select(h => new HostPool(h, options, tls, RateLimit)).ToArray();
    }

    public IReadOnlyList<CacheEndpoint> Hosts { get; }

    /// <summary>The process's byte budget on the cache tier (<see cref="CacheTierOptions.MaxRate"/>), or null when unlimited.</summary>
    public TokenBucket? RateLimit { get; }

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
    public async Task<T> RunAsync<T>(int h, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false)
    {
        var pool = _pools[h];
        for (var attempt = 1; ; attempt++)
        {
            if (Volatile.Read(ref pool.SilentSince) is var since and > 0 && Environment.TickCount64 - since < SilenceMemory)
                throw new CacheHostUnavailableException(Hosts[h], $"did not answer {(Environment.TickCount64 - since) / 1000.0:0.0} s ago and is not tried again yet");
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(ct);
            // Waiting for one of our own busy connections is not the host's silence: the short deadline starts once rented.
            timeout.CancelAfter(_options.OperationTimeout);
            RespConnection? c = null;
            var firstByte = bulk ? _options.OperationTimeout : Min(_options.ResponseTimeout, _options.OperationTimeout);
            try
            {
                c = await pool.RentAsync(timeout.Token);
                timeout.CancelAfter(firstByte);
                c.Heard = false;
                // Sending restarts the wait for the first byte; once the answer has begun, each byte restarts the long one.
                var rented = c;
                c.Progress = () => timeout.CancelAfter(rented.Heard ? _options.OperationTimeout : firstByte);
                var result = await op(c, timeout.Token);
                Volatile.Write(ref pool.SilentSince, 0);
                return result;
            }
            catch (Exception e) when (IsTransient(e, ct) && !IsSilence(e, ct, c) && attempt < _options.MaxAttempts)
            {
                c?.MarkBroken();
                var delay = Backoff(attempt);
                _logger.LogWarning("Cache host {Host}: {Error}; retry {Attempt}/{Max} in {Delay} ms", Hosts[h], Describe(e), attempt, _options.MaxAttempts - 1, (int)delay.TotalMilliseconds);
                await Task.Delay(delay, ct);
            }
            catch (Exception e) when (IsTransient(e, ct))
            {
                c?.MarkBroken();
                if (IsSilence(e, ct, c))
                {
                    Volatile.Write(ref pool.SilentSince, Environment.TickCount64);
                    var waited = c is null ? _options.ConnectTimeout : firstByte;
                    throw new CacheHostUnavailableException(Hosts[h],
                        $"timed out: accepted the connection but sent no answer in {waited.TotalSeconds:0.#} s (stopped or hung); not retried", e);
                }
                throw new CacheHostUnavailableException(Hosts[h], $"{Describe(e)} (after {attempt} attempts)", e);
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
    /// A timeout with nothing heard: the caller did not cancel, no reply byte arrived, and the connect either completed
    /// (so the host is up but not answering) or timed out itself. A refused or reset connection is not silence.
    /// </summary>
    private static bool IsSilence(Exception e, CancellationToken ct, RespConnection? c) =>
        c is not { Heard: true } && !ct.IsCancellationRequested &&
        (e is OperationCanceledException || e is CacheHostUnavailableException { TimedOut: true });

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

    /// <summary>Opens every host's pooled connections and PINGs each once; per host, why it could not be reached, or null.</summary>
    public async Task<string?[]> ConnectAllAsync(CancellationToken ct) =>
        await Task.WhenAll(_pools.Select(async pool =>
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
                return (string?)null;
            }
            catch (Exception e) when (IsTransient(e, ct) || e is RespErrorException)
            {
                foreach (var c in open) c.MarkBroken();
                return Describe(e);
            }
            finally
            {
                foreach (var c in open) await pool.ReturnAsync(c);
            }
        }));

    private static bool IsTransient(Exception e, CancellationToken ct) =>
        e is CacheHostUnavailableException or RespProtocolException or IOException ||
        (e is OperationCanceledException && !ct.IsCancellationRequested);

    private static string Describe(Exception e) => e switch
    {
        OperationCanceledException => "timed out",
        CacheHostUnavailableException { InnerException: { } inner } => inner.Message,
        _ => e.Message,
    };

    /// <summary>Full-jitter exponential backoff: uniformly random in [0, min(max, base·2^attempt)].</summary>
    private TimeSpan Backoff(int attempt)
    {
        var cap = Math.Min(_options.RetryMaxDelay.TotalMilliseconds, _options.RetryBaseDelay.TotalMilliseconds * Math.Pow(2, attempt));
        return TimeSpan.FromMilliseconds(Random.Shared.NextDouble() * cap);
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var p in _pools) await p.DisposeAsync();
    }

    private sealed class HostPool(CacheEndpoint endpoint, CacheTierOptions options, CacheTls? tls, TokenBucket? rateLimit) : IAsyncDisposable
    {
        public CacheEndpoint Endpoint => endpoint;
        /// <summary>When (Environment.TickCount64) the host was last found silent; 0 once it answers again.</summary>
        public long SilentSince;
        private readonly ConcurrentBag<RespConnection> _idle = [];
        private readonly SemaphoreSlim _slots = new(Math.Max(1, options.ConnectionsPerHost));

        public async Task<RespConnection> RentAsync(CancellationToken ct)
        {
            await _slots.WaitAsync(ct);
            try
            {
                while (_idle.TryTake(out var c))
                    if (!c.IsBroken) return c;
                    else await c.DisposeAsync();
                return await RespConnection.ConnectAsync(endpoint, options.Password, options.ConnectTimeout, ct, options.User, tls, rateLimit);
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
