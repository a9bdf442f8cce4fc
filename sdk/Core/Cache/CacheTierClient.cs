using System.Buffers;
using System.Collections.Concurrent;
using System.Text;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.CommonData.Cache;

/// <summary>
/// Accepts or rejects one stored segment. Returns null when accepted, otherwise why it was rejected (the client then
/// tries the next replica). <paramref name="stored"/> is only valid during the call.
/// </summary>
public delegate string? StoredSegmentHandler(int index, ReadOnlySpan<byte> stored);

/// <summary>
/// Client of the cache tier: rendezvous placement of segments over the configured hosts with R replicas, pipelined
/// batches to all hosts in parallel, timeouts, and jittered exponential-backoff retries. Thread-safe; keep one.
/// </summary>
public sealed class CacheTierClient : IAsyncDisposable
{
    private readonly CacheTierOptions _options;
    private readonly ILogger _logger;
    private readonly HostPool[] _pools;
    private readonly ulong[] _hostSeeds;

    public IReadOnlyList<CacheEndpoint> Hosts { get; }
    public int Replicas { get; }

    public CacheTierClient(CacheTierOptions options, ILogger? logger = null)
    {
        _options = options;
        _logger = logger ?? NullLogger.Instance;
        Hosts = options.Hosts.Select(CacheEndpoint.Parse).Distinct().ToArray();
        if (Hosts.Count == 0) throw new ArgumentException("no cache hosts configured (set HPCDATA_CACHE_HOSTS or CacheTier:Hosts)");
        Replicas = Math.Clamp(options.Replicas, 1, Hosts.Count);
        _pools = Hosts.Select(h => new HostPool(h, options)).ToArray();
        _hostSeeds = Hosts.Select(h => XxHash.Hash64Of(Encoding.UTF8.GetBytes(h.ToString()))).ToArray();
    }

    // ---------------- placement ----------------

    /// <summary>Fills <paramref name="hosts"/> with the R host indexes for a segment, best first (rendezvous hashing).</summary>
    public void Place(in SegmentId id, Span<int> hosts)
    {
        Span<byte> key = stackalloc byte[16];
        id.WriteBytes(key);
        Span<ulong> best = stackalloc ulong[hosts.Length];
        var n = 0;
        for (var h = 0; h < Hosts.Count; h++)
        {
            var score = XxHash.Hash64Of(key, _hostSeeds[h]);
            var pos = n < hosts.Length ? n++ : hosts.Length;
            while (pos > 0 && best[pos - 1] < score)
            {
                if (pos < hosts.Length) { best[pos] = best[pos - 1]; hosts[pos] = hosts[pos - 1]; }
                pos--;
            }
            if (pos < hosts.Length) { best[pos] = score; hosts[pos] = h; }
        }
    }

    // ---------------- segments ----------------

    /// <summary>Which of these segments are already stored on all of their replica hosts.</summary>
    public async Task<bool[]> ContainsSegmentsAsync(IReadOnlyList<SegmentId> ids, CancellationToken ct = default)
    {
        var present = new int[ids.Count];
        var byHost = GroupByReplicaHosts(ids, ids.Count, i => ids[i]);
        await Task.WhenAll(Enumerable.Range(0, Hosts.Count).Where(h => byHost[h] is not null).Select(h => RunAsync(h, async (c, token) =>
        {
            var key = new byte[CacheKeys.SegmentKeyLength];
            foreach (var i in byHost[h]!)
            {
                c.BeginCommand(2); c.Argument("EXISTS"u8);
                CacheKeys.WriteSegmentKey(ids[i], key); c.Argument(key);
            }
            await c.FlushAsync(token);
            foreach (var i in byHost[h]!)
            {
                var reply = await c.ReadReplyAsync(token);
                if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
                if (reply.Integer > 0) Interlocked.Increment(ref present[i]);
            }
            return 0;
        }, ct)));
        return present.Select(p => p == Replicas).ToArray();
    }

    /// <summary>For each host, the indexes of the items it holds a replica of (null when none).</summary>
    private List<int>?[] GroupByReplicaHosts(IReadOnlyList<SegmentId> ids, int count, Func<int, SegmentId> idOf, int? onlyReplica = null)
    {
        var byHost = new List<int>?[Hosts.Count];
        Span<int> place = stackalloc int[Replicas];
        for (var i = 0; i < count; i++)
        {
            Place(idOf(i), place);
            if (onlyReplica is { } r) (byHost[place[r]] ??= []).Add(i);
            else foreach (var h in place) (byHost[h] ??= []).Add(i);
        }
        return byHost;
    }

    /// <summary>Stores segments on their replica hosts with SET NX (segments are immutable). Returns bytes sent.</summary>
    public async Task<long> PutSegmentsAsync(IReadOnlyList<(SegmentId Id, ReadOnlyMemory<byte> Stored)> segments, TimeSpan? ttl = null, CancellationToken ct = default)
    {
        var byHost = GroupByReplicaHosts([], segments.Count, i => segments[i].Id);
        long sent = 0;
        await Task.WhenAll(Enumerable.Range(0, Hosts.Count).Where(h => byHost[h] is not null).Select(h => RunAsync(h, async (c, token) =>
        {
            long bytes = 0;
            var key = new byte[CacheKeys.SegmentKeyLength];
            foreach (var i in byHost[h]!)
            {
                c.BeginCommand(ttl is null ? 4 : 6);
                c.Argument("SET"u8);
                CacheKeys.WriteSegmentKey(segments[i].Id, key);
                c.Argument(key);
                c.Argument(segments[i].Stored.Span);
                c.Argument("NX"u8);
                if (ttl is { } t) { c.Argument("PX"u8); c.Argument((long)t.TotalMilliseconds); }
                bytes += segments[i].Stored.Length;
            }
            await c.FlushAsync(token);
            foreach (var _ in byHost[h]!)
            {
                var reply = await c.ReadReplyAsync(token);
                if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
            }
            Interlocked.Add(ref sent, bytes);
            return 0;
        }, ct)));
        return sent;
    }

    /// <summary>
    /// Fetches the given segments (indexes into <paramref name="ids"/>) from all hosts in parallel, in MGET batches,
    /// handing each stored form to <paramref name="handler"/>. A segment missing or rejected on one replica is asked of
    /// the next; when none has a good copy the whole fetch fails naming the segment.
    /// </summary>
    public async Task FetchSegmentsAsync(IReadOnlyList<SegmentId> ids, IReadOnlyList<int> wanted, StoredSegmentHandler handler,
        string what, CancellationToken ct = default)
    {
        var pending = wanted.ToArray();
        var failures = new ConcurrentDictionary<int, string>();
        for (var replica = 0; replica < Replicas && pending.Length > 0; replica++)
        {
            var queues = new ConcurrentQueue<int[]>[Hosts.Count];
            var grouped = GroupByReplicaHosts(ids, pending.Length, k => ids[pending[k]], replica);
            var byHost = grouped.Select(g => g?.Select(k => pending[k]).ToList()).ToArray();
            var tasks = new List<Task>();
            var retry = new ConcurrentBag<int>();
            for (var h = 0; h < Hosts.Count; h++)
            {
                if (byHost[h] is null) continue;
                queues[h] = new ConcurrentQueue<int[]>(byHost[h]!.Chunk(_options.BatchSize));
                var host = h;
                for (var k = 0; k < Math.Min(_options.ConnectionsPerHost, queues[h].Count); k++)
                    tasks.Add(Task.Run(() => DrainAsync(host, queues[host], ids, handler, failures, retry, replica < Replicas - 1, ct), ct));
            }
            await Task.WhenAll(tasks);
            pending = retry.ToArray();
        }
        if (!failures.IsEmpty)
        {
            var first = failures.OrderBy(f => f.Key).Take(3).Select(f => $"#{f.Key}: {f.Value}");
            var message = $"{what}: {failures.Count} segment(s) could not be fetched intact from {string.Join(", ", Hosts)} — {string.Join("; ", first)}";
            if (failures.Values.All(v => v.StartsWith("missing", StringComparison.Ordinal))) throw new CommonDataException(ErrorCode.NotFound, message);
            throw new CommonDataException(ErrorCode.Integrity, message);
        }
    }

    private async Task DrainAsync(int host, ConcurrentQueue<int[]> queue, IReadOnlyList<SegmentId> ids, StoredSegmentHandler handler,
        ConcurrentDictionary<int, string> failures, ConcurrentBag<int> retry, bool canRetry, CancellationToken ct)
    {
        var keys = new byte[_options.BatchSize * CacheKeys.SegmentKeyLength];
        while (queue.TryDequeue(out var batch))
        {
            var outcome = new string?[batch.Length];
            try
            {
            await RunAsync(host, async (c, token) =>
            {
                Array.Clear(outcome);
                c.BeginCommand(1 + batch.Length);
                c.Argument("MGET"u8);
                for (var k = 0; k < batch.Length; k++)
                {
                    var key = keys.AsSpan(k * CacheKeys.SegmentKeyLength, CacheKeys.SegmentKeyLength);
                    CacheKeys.WriteSegmentKey(ids[batch[k]], key);
                    c.Argument(key);
                }
                await c.FlushAsync(token);
                await c.ReadBulkArrayAsync(batch.Length, (int k, in ReadOnlySequence<byte> value, bool isNull) =>
                {
                    if (isNull) { outcome[k] = $"missing on {Hosts[host]}"; return; }
                    outcome[k] = value.IsSingleSegment ? handler(batch[k], value.FirstSpan) : HandleCopied(batch[k], value, handler);
                }, token);
                return 0;
            }, ct);
            }
            catch (CacheHostUnavailableException e) when (canRetry)
            {
                // The host is down (its retries are spent): send this batch and everything still queued for it to the
                // next replica at once instead of retrying each batch. The last replica's failure propagates as it is.
                for (var k = 0; k < batch.Length; k++) outcome[k] ??= e.Message;
                while (queue.TryDequeue(out var rest))
                    foreach (var i in rest) { failures[i] = e.Message; retry.Add(i); }
            }
            for (var k = 0; k < batch.Length; k++)
            {
                if (outcome[k] is null) { failures.TryRemove(batch[k], out _); continue; }
                failures[batch[k]] = outcome[k]!;
                if (canRetry) retry.Add(batch[k]);
                _logger.LogWarning("Segment {Index} of {Id} rejected from {Host}: {Reason}", batch[k], ids[batch[k]], Hosts[host], outcome[k]);
            }
        }
    }

    private static string? HandleCopied(int index, in ReadOnlySequence<byte> value, StoredSegmentHandler handler)
    {
        var buffer = ArrayPool<byte>.Shared.Rent((int)value.Length);
        try
        {
            value.CopyTo(buffer);
            return handler(index, buffer.AsSpan(0, (int)value.Length));
        }
        finally { ArrayPool<byte>.Shared.Return(buffer); }
    }

    // ---------------- manifests and the latest pointer ----------------

    /// <summary>Stores a manifest on every host (it is small and every reader needs it first).</summary>
    public Task PutManifestAsync(string version, ReadOnlyMemory<byte> encoded, TimeSpan? ttl = null, CancellationToken ct = default) =>
        ForAllHostsAsync(async (c, token) =>
        {
            c.BeginCommand(ttl is null ? 3 : 5);
            c.Argument("SET"u8);
            c.Argument(CacheKeys.Manifest(version));
            c.Argument(encoded.Span);
            if (ttl is { } t) { c.Argument("PX"u8); c.Argument((long)t.TotalMilliseconds); }
            var reply = await c.FlushAndReadAsync(token);
            if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
            return 0;
        }, ct);

    /// <summary>Moves the "latest" pointer of a dataset, on every host. Call only after every segment and the manifest are stored.</summary>
    public Task SetLatestAsync(string name, string version, CancellationToken ct = default) =>
        ForAllHostsAsync(async (c, token) =>
        {
            c.Command("SET"u8, CacheKeys.Latest(name), version);
            var reply = await c.FlushAndReadAsync(token);
            if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
            return 0;
        }, ct);

    /// <summary>The version "latest" points to, or null when no host knows the dataset.</summary>
    public async Task<string?> GetLatestAsync(string name, CancellationToken ct = default)
    {
        var key = CacheKeys.Latest(name);
        foreach (var value in await AskAnswerableHostsAsync((c, token) => c.FlushAndReadCommandAsync("GET"u8, key, token), ct))
            if (value.Kind == RespKind.Bulk) return Encoding.UTF8.GetString(value.Bulk!);
        return null;
    }

    /// <summary>
    /// Resolves a dataset name and optional version ("latest" or null for the current one) to a verified manifest.
    /// </summary>
    public async Task<(string Version, Manifest Manifest)> ResolveAsync(string name, string? version = null, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        if (string.IsNullOrEmpty(version) || version == "latest")
        {
            version = await GetLatestAsync(name, ct)
                ?? throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' not found on cache hosts {string.Join(", ", Hosts)}");
        }
        if (!SegmentId.TryParse(version, out var versionId))
            throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' is not a valid version id");
        var (manifest, problem) = await GetManifestAsync(version, versionId, ct);
        if (manifest is not null)
        {
            if (manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{manifest.Name}', not '{name}'");
            return (version, manifest);
        }
        if (problem is not null) throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version '{version}': {problem}");
        throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' not found on cache hosts {string.Join(", ", Hosts)}");
    }

    /// <summary>The verified manifest of a version from the first host with a good copy; else null and what was wrong.</summary>
    internal async Task<(Manifest? Manifest, string? Problem)> GetManifestAsync(string version, SegmentId versionId, CancellationToken ct)
    {
        var key = CacheKeys.Manifest(version);
        string? problem = null;
        foreach (var reply in await AskAnswerableHostsAsync((c, token) => c.FlushAndReadCommandAsync("GET"u8, key, token), ct))
        {
            if (reply.Kind != RespKind.Bulk) continue;
            var stored = reply.Bulk!;
            if (!SegmentCodec.TryReadRawLength(stored, out var rawLength)) { problem = "manifest header is damaged"; continue; }
            var raw = new byte[rawLength];
            problem = SegmentCodec.TryDecode(stored, versionId, raw);
            if (problem is null) return (Manifest.Parse(raw), null);
        }
        return (null, problem);
    }

    /// <summary>Keys starting with <paramref name="prefix"/>, per host (the cache host's KEYS with a "prefix*" pattern).</summary>
    public async Task<IReadOnlyList<string>[]> KeysAsync(string prefix, CancellationToken ct = default)
    {
        var replies = await ForAllHostsAsync((c, token) => c.FlushAndReadCommandAsync("KEYS"u8, prefix + "*", token), ct);
        return replies.Select((r, h) => r.Kind == RespKind.Array
            ? (IReadOnlyList<string>)r.Items!.Select(i => Encoding.UTF8.GetString(i.Bulk!)).ToList()
            : throw new RespErrorException(Hosts[h].ToString(), r.Text ?? "KEYS failed")).ToArray();
    }

    /// <summary>Deletes keys on one host, pipelined; returns how many existed.</summary>
    public Task<long> DeleteAsync(int host, IReadOnlyList<string> keys, CancellationToken ct = default) =>
        RunAsync(host, async (c, token) =>
        {
            long deleted = 0;
            foreach (var chunk in keys.Chunk(256))
            {
                c.BeginCommand(1 + chunk.Length);
                c.Argument("DEL"u8);
                foreach (var k in chunk) c.Argument(k);
                var reply = await c.FlushAndReadAsync(token);
                if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
                deleted += reply.Integer;
            }
            return deleted;
        }, ct);

    /// <summary>Runs a raw command on one host (by index into <see cref="Hosts"/>).</summary>
    public Task<RespReply> ExecuteOnAsync(int host, ReadOnlyMemory<byte> command, string[] args, CancellationToken ct = default) =>
        RunAsync(host, (c, token) => c.FlushAndReadCommandAsync(command.Span, args, token), ct);

    /// <summary>Runs a raw command on every host; used by admin tools and tests.</summary>
    public Task<RespReply[]> ExecuteOnAllAsync(ReadOnlyMemory<byte> command, string[] args, CancellationToken ct = default) =>
        ForAllHostsAsync((c, token) => c.FlushAndReadCommandAsync(command.Span, args, token), ct);

    private async Task<T[]> ForAllHostsAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct) =>
        await Task.WhenAll(Enumerable.Range(0, Hosts.Count).Select(h => RunAsync(h, op, ct)));

    /// <summary>Reads from every host that answers; fails only when none does (a read must survive one host being down).</summary>
    private async Task<T[]> AskAnswerableHostsAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct)
    {
        var tasks = Enumerable.Range(0, Hosts.Count).Select(h => RunAsync(h, op, ct)).ToArray();
        try { await Task.WhenAll(tasks); }
        catch (CacheHostUnavailableException) when (tasks.Any(t => t.IsCompletedSuccessfully)) { }
        return tasks.Where(t => t.IsCompletedSuccessfully).Select(t => t.Result).ToArray();
    }

    // ---------------- connections, timeouts and retries ----------------

    /// <summary>
    /// Opens every host's pooled connections and PINGs each once, so a daemon learns of an unreachable or misconfigured
    /// host when it starts rather than at its first fetch, and that fetch finds its connections open. Returns, per host
    /// (same order as <see cref="Hosts"/>), why it could not be reached, or null. An unreachable host is an answer, not
    /// an exception: a node keeps serving its local copies through a cache-tier outage.
    /// </summary>
    public async Task<string?[]> ConnectAllAsync(CancellationToken ct = default) =>
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

    /// <summary>
    /// Runs one exchange on a pooled connection to host <paramref name="h"/>, with a per-attempt timeout that restarts
    /// whenever reply bytes arrive (it catches a silent host, not a busy link), and jittered exponential backoff between
    /// attempts. Server errors (e.g. out of memory) are not retried: they are answers.
    /// </summary>
    private async Task<T> RunAsync<T>(int h, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct)
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
                var result = await op(c, timeout.Token);
                return result;
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

    private sealed class HostPool(CacheEndpoint endpoint, CacheTierOptions options) : IAsyncDisposable
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
                return await RespConnection.ConnectAsync(endpoint, options.Password, options.ConnectTimeout, ct);
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
