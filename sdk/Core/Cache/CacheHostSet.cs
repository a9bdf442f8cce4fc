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

    /// <summary>Runs one exchange on a pooled connection to host <paramref name="h"/>, retried as the policy says.</summary>
    public async Task<T> RunAsync<T>(int h, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct)
    {
        var pool = _pools[h];
        for (var attempt = 1; ; attempt++)
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(ct);
            timeout.CancelAfter(_options.OperationTimeout);
            RespConnection? c = null;
            try
            {
                c = await pool.RentAsync(timeout.Token);
                c.Progress = () => timeout.CancelAfter(_options.OperationTimeout);
                return await op(c, timeout.Token);
            }
            catch (Exception e) when (IsTransient(e, ct) && attempt < _options.MaxAttempts)
            {
                c?.MarkBroken();
                var delay = Backoff(attempt);
                _logger.LogWarning("Cache host {Host}: {Error}; retry {Attempt}/{Max} in {Delay} ms", Hosts[h], Describe(e), attempt, _options.MaxAttempts - 1, (int)delay.TotalMilliseconds);
                await Task.Delay(delay, ct);
            }
            catch (Exception e) when (IsTransient(e, ct))
            {
                c?.MarkBroken();
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

    public async Task<T[]> ForAllAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct) =>
        await Task.WhenAll(Enumerable.Range(0, Hosts.Count).Select(h => RunAsync(h, op, ct)));

    /// <summary>Reads from every host that answers; fails only when none does (a read must survive one host being down).</summary>
    public async Task<T[]> AskAnswerableAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct)
    {
        var tasks = Enumerable.Range(0, Hosts.Count).Select(h => RunAsync(h, op, ct)).ToArray();
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
