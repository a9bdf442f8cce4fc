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

/// <summary>A segment's stored form in two parts sent back to back (e.g. its header and a payload kept elsewhere); either may be empty.</summary>
public readonly record struct StoredSegmentParts(SegmentId Id, ReadOnlyMemory<byte> Head, ReadOnlyMemory<byte> Body)
{
    public int Length => Head.Length + Body.Length;
}

/// <summary>
/// Client of the cache tier, composed of three parts: <see cref="RendezvousPlacement"/> (which hosts hold a segment),
/// a host set with the retry policy (pooled pipelined connections, timeouts, jittered backoff), and the
/// <see cref="Catalog"/> (manifests, "latest", job references). This class moves segments: pipelined batches to all
/// hosts in parallel, replicas tried in turn. Thread-safe; keep one.
/// </summary>
public sealed class CacheTierClient : IAsyncDisposable
{
    private readonly CacheTierOptions _options;
    private readonly ILogger _logger;
    private readonly CacheHostSet _hosts;
    private ITierTopology Topology => _hosts.Topology;
    internal CacheHostSet HostSet => _hosts;

    /// <summary>The hosts: as configured, and on a Redis Cluster every node learned from it since.</summary>
    public IReadOnlyList<CacheEndpoint> Hosts => _hosts.Hosts;
    /// <summary>Copies of each segment this client writes: R on independent hosts; 1 on a Redis Cluster, which keeps its own replicas.</summary>
    public int Replicas => Topology.Replicas;
    /// <summary>The tier is a Redis Cluster (<see cref="CacheTierOptions.Cluster"/>).</summary>
    public bool IsCluster => Topology.KeepsItsOwnCopies;

    /// <summary>The account this client logs in as (<c>default</c> without one).</summary>
    public string Account => _hosts.Account;
    public CacheCatalog Catalog { get; }

    /// <summary>Where segment traffic is counted (the owning component's meter), or null.</summary>
    private readonly Hosting.ComponentMetrics? _metrics;

    public CacheTierClient(CacheTierOptions options, ILogger? logger = null, Hosting.ComponentMetrics? metrics = null)
    {
        _metrics = metrics;
        _options = options;
        _logger = logger ?? NullLogger.Instance;
        var hosts = options.Hosts.Select(CacheEndpoint.Parse).Distinct().ToArray();
        if (hosts.Length == 0) throw new ArgumentException("no cache hosts configured (set HPCDATA_CACHE_HOSTS or CacheTier:Hosts)");
        _hosts = new CacheHostSet(hosts, options, _logger);
        Catalog = new CacheCatalog(_hosts, this);
    }

    /// <summary>Fills <paramref name="hosts"/> with the R host indexes for a segment, best first (rendezvous hashing; on a Redis Cluster, its slot's master).</summary>
    public void Place(in SegmentId id, Span<int> hosts) => Topology.Place(id, hosts);

    // ---------------- segments ----------------

    /// <summary>Which of these segments are already stored on all of their replica hosts.</summary>
    public async Task<bool[]> ContainsSegmentsAsync(IReadOnlyList<SegmentId> ids, CancellationToken ct = default)
    {
        var present = new bool[ids.Count];
        await ContainsSegmentsAsync(ids, present, ct);
        return present;
    }

    /// <summary>Sets <paramref name="present"/>[i] when segment i is already stored on all of its replica hosts (one pipelined EXISTS batch per host).</summary>
    public Task ContainsSegmentsAsync(IReadOnlyList<SegmentId> ids, bool[] present, CancellationToken ct = default) =>
        Topology.RoutedAsync(() => ContainsOnceAsync(ids, present, null, ct), "looking up segments", ct);

    /// <summary>
    /// As <see cref="ContainsSegmentsAsync(IReadOnlyList{SegmentId}, bool[], CancellationToken)"/>, and sets
    /// <paramref name="storedLengths"/>[i] to the bytes a host holds for segment i (0 when none does): a segment is named
    /// by its raw bytes, so the one on the tier may be stored in another codec than the caller would use. Same cost: one
    /// STRLEN instead of each EXISTS.
    /// </summary>
    public Task StoredSegmentLengthsAsync(IReadOnlyList<SegmentId> ids, bool[] present, long[] storedLengths, CancellationToken ct = default) =>
        Topology.RoutedAsync(() => ContainsOnceAsync(ids, present, storedLengths, ct), "looking up segments", ct);

    private Task ContainsOnceAsync(IReadOnlyList<SegmentId> ids, bool[] present, long[]? storedLengths, CancellationToken ct)
    {
        var held = new int[ids.Count];
        return PipelinePerHostAsync(ids.Count, i => ids[i], 1, (c, i, key) =>
        {
            c.BeginCommand(2); c.Argument(storedLengths is null ? "EXISTS"u8 : "STRLEN"u8);
            c.Argument(SegmentKey(ids[i], key));
        }, (i, replies) =>
        {
            if (replies[0] <= 0) return;
            Interlocked.Increment(ref held[i]);
            if (storedLengths is not null) Interlocked.Exchange(ref storedLengths[i], replies[0]);
        }, () =>
        {
            for (var i = 0; i < held.Length; i++) present[i] = held[i] == Replicas;
        }, ct);
    }

    /// <summary>Stores segments on their replica hosts with SET NX (segments are immutable). Returns bytes sent.</summary>
    public Task<long> PutSegmentsAsync(IReadOnlyList<(SegmentId Id, ReadOnlyMemory<byte> Stored)> segments, TimeSpan? ttl = null, CancellationToken ct = default) =>
        PutSegmentsAsync(segments.Select(s => new StoredSegmentParts(s.Id, s.Stored, default)).ToArray(), ttl, null, ct);

    /// <summary>
    /// Stores segments on their replica hosts with SET NX (segments are immutable), one pipelined batch per host. The
    /// stored forms are sent from where they are (a gathered write on a plain connection), so they must stay unchanged
    /// until this completes. When given, <paramref name="alreadyHeld"/>[i] is set when every replica host answered that
    /// it held segment i already (SET NX stored nothing): a batch sent without looking up first still learns what the
    /// tier had. Returns bytes sent.
    /// </summary>
    public async Task<long> PutSegmentsAsync(IReadOnlyList<StoredSegmentParts> segments, TimeSpan? ttl, bool[]? alreadyHeld, CancellationToken ct = default)
    {
        long sent = 0;
        // Sent again on a Redis Cluster's new map, a segment the first try stored reads as held: counted once, as held.
        await Topology.RoutedAsync(async () => sent = await PutOnceAsync(segments, ttl, alreadyHeld, ct), "storing segments", ct);
        return sent;
    }

    private async Task<long> PutOnceAsync(IReadOnlyList<StoredSegmentParts> segments, TimeSpan? ttl, bool[]? alreadyHeld, CancellationToken ct)
    {
        var held = new int[segments.Count];
        long sent = 0;
        await PipelinePerHostAsync(segments.Count, i => segments[i].Id, 1, (c, i, key) =>
        {
            var segment = segments[i];
            c.BeginCommand(ttl is null ? 4 : 6);
            c.Argument("SET"u8);
            c.Argument(SegmentKey(segment.Id, key));
            c.ArgumentByReference(segment.Head, segment.Body);
            c.Argument("NX"u8);
            if (ttl is { } t) { c.Argument("PX"u8); c.Argument((long)t.TotalMilliseconds); }
        }, (i, replies) =>
        {
            Interlocked.Add(ref sent, segments[i].Length);
            _metrics?.BytesSent.Add(segments[i].Length);
            if (replies[0] == 0) Interlocked.Increment(ref held[i]);
            else _metrics?.Segments.Add(1);
        }, () =>
        {
            if (alreadyHeld is not null)
                for (var i = 0; i < held.Length; i++) alreadyHeld[i] = held[i] == Replicas;
        }, ct);
        return sent;
    }

    /// <summary>
    /// Gives segments a life on every replica host, one pipelined batch per host: kept until removed
    /// (<paramref name="lifetime"/> null, PERSIST) or at least <paramref name="lifetime"/> (PEXPIRE … GT, which never
    /// shortens a longer or unlimited life another version gave them). Sets <paramref name="missing"/>[i] when a replica
    /// host no longer holds segment i (an unpublished stage's segment that expired): the caller sends it again.
    /// </summary>
    public Task KeepSegmentsAsync(IReadOnlyList<SegmentId> ids, TimeSpan? lifetime, bool[] missing, CancellationToken ct = default) =>
        Topology.RoutedAsync(() => KeepOnceAsync(ids, lifetime, missing, ct), "keeping segments", ct);

    private Task KeepOnceAsync(IReadOnlyList<SegmentId> ids, TimeSpan? lifetime, bool[] missing, CancellationToken ct)
    {
        Array.Clear(missing, 0, ids.Count);
        // PERSIST and PEXPIRE answer 0 both for a key that is gone and for one they left as it was, so each is followed
        // by an EXISTS that tells the two apart.
        return PipelinePerHostAsync(ids.Count, i => ids[i], 2, (c, i, key) =>
        {
            var segmentKey = SegmentKey(ids[i], key);
            if (lifetime is { } life)
            {
                c.BeginCommand(4); c.Argument("PEXPIRE"u8); c.Argument(segmentKey); c.Argument((long)life.TotalMilliseconds); c.Argument("GT"u8);
            }
            else
            {
                c.BeginCommand(2); c.Argument("PERSIST"u8); c.Argument(segmentKey);
            }
            c.BeginCommand(2); c.Argument("EXISTS"u8); c.Argument(segmentKey);
        }, (i, replies) =>
        {
            if (replies[1] == 0) Volatile.Write(ref missing[i], true);
        }, null, ct);
    }

    private static ReadOnlySpan<byte> SegmentKey(in SegmentId id, byte[] key)
    {
        CacheKeys.WriteSegmentKey(id, key);
        return key.AsSpan(0, CacheKeys.SegmentKeyLength);
    }

    private delegate void SegmentCommands(RespConnection connection, int index, byte[] key);
    private delegate void SegmentReplies(int index, ReadOnlySpan<long> replies);

    /// <summary>
    /// One pipelined batch per cache host over the segments <paramref name="count"/> names, each sent to all of its
    /// replica hosts: <paramref name="write"/> writes a segment's commands (a buffer for its key at hand), then
    /// <paramref name="read"/> is given that segment's <paramref name="repliesEach"/> integer replies from each host
    /// (from several threads), and <paramref name="done"/> runs once every host has answered.
    /// </summary>
    private async Task PipelinePerHostAsync(int count, Func<int, SegmentId> idOf, int repliesEach, SegmentCommands write,
        SegmentReplies read, Action? done, CancellationToken ct)
    {
        var byHost = Topology.GroupByHost(count, idOf);
        var tasks = new List<Task>(byHost.Length);
        for (var h = 0; h < byHost.Length; h++)
        {
            if (byHost[h] is not { } mine) continue;
            tasks.Add(RunAsync(h, async (c, token) =>
            {
                var key = ArrayPool<byte>.Shared.Rent(CacheKeys.SegmentKeyLength);
                var replies = ArrayPool<long>.Shared.Rent(repliesEach * mine.Count);
                try
                {
                    foreach (var i in mine) write(c, i, key);
                    await c.FlushAsync(token);
                    await c.ReadStatusRepliesAsync(replies.AsMemory(0, repliesEach * mine.Count), token);
                    for (var k = 0; k < mine.Count; k++) read(mine[k], replies.AsSpan(k * repliesEach, repliesEach));
                }
                finally
                {
                    ArrayPool<byte>.Shared.Return(key);
                    ArrayPool<long>.Shared.Return(replies);
                }
                return 0;
            }, ct, bulk: true, stall: WriteStall()));
        }
        await Task.WhenAll(tasks);
        done?.Invoke();
    }

    /// <summary>
    /// Fetches the given segments (indexes into <paramref name="ids"/>) from all hosts in parallel, in MGET batches,
    /// handing each stored form to <paramref name="handler"/>. A segment missing or rejected on one replica is asked of
    /// the next; when none has a good copy the whole fetch fails naming the segment.
    /// </summary>
    public Task FetchSegmentsAsync(IReadOnlyList<SegmentId> ids, IReadOnlyList<int> wanted, StoredSegmentHandler handler,
        string what, CancellationToken ct = default) => FetchSegmentsAsync(ids, wanted, handler, what, onBatch: null, ct);

    /// <summary>As <see cref="FetchSegmentsAsync(IReadOnlyList{SegmentId}, IReadOnlyList{int}, StoredSegmentHandler, string, CancellationToken)"/>, telling <paramref name="onBatch"/> as each batch is done.</summary>
    /// <param name="onBatch">
    /// Called once per batch a host answered, with how many of its segments <paramref name="handler"/> took (from
    /// several threads): what a progress report is made from, at a batch's pace rather than a segment's.
    /// </param>
    internal async Task FetchSegmentsAsync(IReadOnlyList<SegmentId> ids, IReadOnlyList<int> wanted, StoredSegmentHandler handler,
        string what, Action<int>? onBatch, CancellationToken ct)
    {
        var pending = wanted.ToArray();
        var failures = new ConcurrentDictionary<int, string>();
        // A segment whose host could not be reached and that no later host held is not known to be missing: the
        // fetch fails as that host's outage, not as data the tier lacks.
        var unreachable = new ConcurrentDictionary<int, CommonDataException>();
        // Rounds as the topology says: independent hosts each replica once; a cluster its slot's nodes in turn.
        var deadline = Environment.TickCount64 + (long)_options.OperationTimeout.TotalMilliseconds;
        for (var round = 0; pending.Length > 0; round++)
        {
            var (run, canRetry) = await Topology.FetchRoundAsync(round, deadline, ct);
            if (!run) break;
            var grouped = Topology.GroupByHost(pending.Length, k => ids[pending[k]], round);
            // A host stopped or hung in the middle of a fetch would hold every batch it has for the long exchange
            // timeout; while another placed replica can answer them, they are left for it after a short stall. A host
            // past the placed ones is asked only for what the placed ones lacked, so a slow placed copy is waited for
            // rather than traded for a likely miss. (A cluster node's copies are the cluster's to fail over: its
            // routing waits for that instead.)
            var leaveStalled = canRetry && !Topology.KeepsItsOwnCopies && round < Replicas - 1;
            var byHost = grouped.Select(g => g?.Select(k => pending[k]).ToList()).ToArray();
            var queues = new ConcurrentQueue<int[]>[byHost.Length];
            var tasks = new List<Task>();
            var retry = new ConcurrentBag<int>();
            for (var h = 0; h < byHost.Length; h++)
            {
                if (byHost[h] is null) continue;
                queues[h] = new ConcurrentQueue<int[]>(byHost[h]!.Chunk(_options.BatchSize));
                var host = h;
                for (var k = 0; k < Math.Min(_options.ConnectionsPerHost, queues[h].Count); k++)
                    tasks.Add(Task.Run(() => DrainAsync(host, queues[host], ids, handler, failures, unreachable, retry, canRetry, leaveStalled, onBatch, ct), ct));
            }
            await Task.WhenAll(tasks);
            pending = retry.ToArray();
        }
        if (!failures.IsEmpty)
        {
            if (failures.Keys.Order().Select(i => unreachable.GetValueOrDefault(i)).FirstOrDefault(e => e is not null) is { } outage) throw outage;
            var first = failures.OrderBy(f => f.Key).Take(3).Select(f => $"#{f.Key}: {f.Value}");
            var message = $"{what}: {failures.Count} segment(s) could not be fetched intact from {string.Join(", ", Hosts)} — {string.Join("; ", first)}";
            if (failures.Values.All(v => v.StartsWith("missing", StringComparison.Ordinal))) throw new CommonDataException(ErrorCode.NotFound, message);
            throw new CommonDataException(ErrorCode.Integrity, message);
        }
    }

    private async Task DrainAsync(int host, ConcurrentQueue<int[]> queue, IReadOnlyList<SegmentId> ids, StoredSegmentHandler handler,
        ConcurrentDictionary<int, string> failures, ConcurrentDictionary<int, CommonDataException> unreachable, ConcurrentBag<int> retry, bool canRetry, bool leaveStalled, Action<int>? onBatch, CancellationToken ct)
    {
        var keys = new byte[_options.BatchSize * CacheKeys.SegmentKeyLength];
        var multiKey = Topology.MultiKeyCommands;
        TimeSpan? stall = leaveStalled ? BatchStall() : null;
        while (queue.TryDequeue(out var batch))
        {
            var outcome = new string?[batch.Length];
            var saidAlready = false;
            try
            {
            await RunAsync(host, async (c, token) =>
            {
                Array.Clear(outcome);
                // A Redis Cluster refuses MGET across hash slots: one pipelined GET per key instead.
                if (multiKey) { c.BeginCommand(1 + batch.Length); c.Argument("MGET"u8); }
                for (var k = 0; k < batch.Length; k++)
                {
                    var key = keys.AsSpan(k * CacheKeys.SegmentKeyLength, CacheKeys.SegmentKeyLength);
                    CacheKeys.WriteSegmentKey(ids[batch[k]], key);
                    if (!multiKey) { c.BeginCommand(2); c.Argument("GET"u8); }
                    c.Argument(key);
                }
                await c.FlushAsync(token);
                await (multiKey ? c.ReadBulkArrayAsync(batch.Length, Handle, token) : c.ReadBulkRepliesAsync(batch.Length, Handle, token));
                return 0;

                void Handle(int k, in ReadOnlySequence<byte> value, bool isNull)
                {
                    if (isNull) { outcome[k] = $"missing on {Hosts[host]}"; return; }
                    outcome[k] = value.IsSingleSegment ? handler(batch[k], value.FirstSpan) : HandleCopied(batch[k], value, handler);
                    if (_metrics is null) return;
                    _metrics.BytesReceived.Add(value.Length);
                    if (outcome[k] is null) _metrics.Segments.Add(1);
                    else _metrics.VerificationFailures.Add(1);
                }
            }, ct, bulk: true, once: Topology.KeepsItsOwnCopies, stall: stall);
            }
            catch (Exception e) when (canRetry && Topology.IsRouting(e))
            {
                // The host is down (its retries are spent): send this batch and everything still queued for it to the
                // next replica at once instead of retrying each batch. The last replica's failure propagates as it is.
                var outage = e as CacheHostUnavailableException;
                // Refused connections were retried, each retry logged; a silent host was not, and is logged below.
                saidAlready = outage is not null && _options.MaxAttempts > 1 && !outage.Message.Contains("(stopped or hung)", StringComparison.Ordinal);
                for (var k = 0; k < batch.Length; k++) { outcome[k] ??= e.Message; if (outage is not null) unreachable.TryAdd(batch[k], outage); }
                while (queue.TryDequeue(out var rest))
                    foreach (var i in rest) { failures[i] = e.Message; if (outage is not null) unreachable.TryAdd(i, outage); retry.Add(i); }
            }
            string? shared = null;
            var failed = 0;
            for (var k = 0; k < batch.Length; k++)
            {
                if (outcome[k] is null) { failures.TryRemove(batch[k], out _); continue; }
                failures[batch[k]] = outcome[k]!;
                if (canRetry) retry.Add(batch[k]);
                shared = failed++ == 0 || shared == outcome[k] ? outcome[k] : null;
                if (shared is null) _logger.LogWarning("Segment {Index} of {Id} rejected from {Host}: {Reason}", batch[k], ids[batch[k]], Hosts[host], outcome[k]);
            }
            // A host that is down or a cluster between masters fails the whole batch for one reason: one line, not one per
            // segment; none for an independent host whose retried connection attempts have said so already (a cluster
            // node is tried once, so this line is the only word of it).
            if (failed > 0 && shared is not null && !(saidAlready && !Topology.KeepsItsOwnCopies))
                _logger.LogWarning("{Count} segment(s) from #{First} rejected from {Host}: {Reason}", failed, batch[0], Hosts[host], shared);
            if (failed < batch.Length) onBatch?.Invoke(batch.Length - failed);
        }
    }

    /// <summary>
    /// The stall timeout, lengthened under a rate limit to four times what every connection's next read (64 KB) takes
    /// at the rate, since the limit itself holds reads back.
    /// </summary>
    /// <summary>
    /// How long a batch of writes (a stage's segments, their lives, a look-up) may go with nothing sent and nothing heard
    /// before its host counts as stopped or hung: twice the read stall, lengthened under a rate limit to four times what
    /// every connection's next piece (<see cref="RespConnection.SendPiece"/>) takes at the rate. A stager then leaves a
    /// frozen host within seconds (it waited out the 30 s exchange timeout), and a slow link, which keeps reading, is
    /// never taken for one.
    /// </summary>
    private TimeSpan WriteStall()
    {
        var stall = _options.StallTimeout + _options.StallTimeout;
        if (_hosts.RateLimit is not { } limit) return stall;
        var pieces = TimeSpan.FromSeconds(4.0 * _options.ConnectionsPerHost * Hosts.Count * RespConnection.SendPiece / limit.Rate.BytesPerSecond);
        return pieces > stall ? pieces : stall;
    }

    private TimeSpan BatchStall()
    {
        if (_hosts.RateLimit is not { } limit) return _options.StallTimeout;
        var reads = TimeSpan.FromSeconds(4.0 * _options.ConnectionsPerHost * Hosts.Count * (64 << 10) / limit.Rate.BytesPerSecond);
        return reads > _options.StallTimeout ? reads : _options.StallTimeout;
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

    // ---------------- the catalog, for callers that hold only the client ----------------

    public Task PutManifestAsync(string version, ReadOnlyMemory<byte> encoded, TimeSpan? ttl = null, CancellationToken ct = default) =>
        Catalog.PutManifestAsync(version, encoded, ttl, ct);
    public Task SetLatestAsync(string name, string version, CancellationToken ct = default) => Catalog.SetLatestAsync(name, version, ct);
    public Task<string?> GetLatestAsync(string name, CancellationToken ct = default) => Catalog.GetLatestAsync(name, ct);
    public Task<(string Version, Manifest Manifest)> ResolveAsync(string name, string? version = null, CancellationToken ct = default) =>
        Catalog.ResolveAsync(name, version, ct);

    // ---------------- administration ----------------

    /// <summary>
    /// Keys starting with <paramref name="prefix"/>, per host (the cache host's KEYS with a "prefix*" pattern). On a
    /// Redis Cluster each shard is asked once (its master, or a replica when the master is down); other nodes' lists
    /// are empty.
    /// </summary>
    public async Task<IReadOnlyList<string>[]> KeysAsync(string prefix, CancellationToken ct = default)
    {
        // A scan of every key may take the host a while before its first byte.
        var replies = Topology.KeepsItsOwnCopies
            ? await _hosts.AskEveryShardAsync((c, token) => c.FlushAndReadCommandAsync("KEYS"u8, prefix + "*", token), ct, bulk: true)
            : (await _hosts.ForAllAsync((c, token) => c.FlushAndReadCommandAsync("KEYS"u8, prefix + "*", token), ct, bulk: true)).Select((r, h) => (h, r)).ToArray();
        var keys = new IReadOnlyList<string>[Hosts.Count];
        Array.Fill(keys, []);
        foreach (var (h, r) in replies)
            keys[h] = r.Kind == RespKind.Array
                ? r.Items!.Select(i => Encoding.UTF8.GetString(i.Bulk!)).ToList()
                : throw new RespErrorException(Hosts[h].ToString(), r.Text ?? "KEYS failed");
        return keys;
    }

    /// <summary>
    /// Deletes keys on one host, pipelined; returns how many existed. On a Redis Cluster the keys are deleted wherever
    /// their slots live (one DEL per key: the cluster refuses one across slots), whichever host was named.
    /// </summary>
    public async Task<long> DeleteAsync(int host, IReadOnlyList<string> keys, CancellationToken ct = default)
    {
        if (Topology.MultiKeyCommands) return await DeleteOnAsync(host, keys, perKey: false, ct);
        long deleted = 0;
        await Topology.RoutedAsync(async () =>
        {
            var byOwner = keys.GroupBy(Topology.OwnerOf);
            deleted = (await Task.WhenAll(byOwner.Select(g => DeleteOnAsync(g.Key, g.ToList(), perKey: true, ct)))).Sum();
        }, "deleting keys", ct);
        return deleted;
    }

    private Task<long> DeleteOnAsync(int host, IReadOnlyList<string> keys, bool perKey, CancellationToken ct) =>
        RunAsync(host, async (c, token) =>
        {
            long deleted = 0;
            var counts = new long[256];
            foreach (var chunk in keys.Chunk(256))
            {
                if (perKey)
                {
                    foreach (var k in chunk) c.Command("DEL"u8, k);
                    await c.FlushAsync(token);
                    await c.ReadStatusRepliesAsync(counts.AsMemory(0, chunk.Length), token);
                    deleted += counts.AsSpan(0, chunk.Length).ToArray().Sum();
                    continue;
                }
                c.BeginCommand(1 + chunk.Length);
                c.Argument("DEL"u8);
                foreach (var k in chunk) c.Argument(k);
                var reply = await c.FlushAndReadAsync(token);
                if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
                deleted += reply.Integer;
            }
            return deleted;
        }, ct);

    /// <summary>
    /// Runs a raw command about one key where the tier coordinates it: on independent hosts the designated one (the
    /// first in sorted order), on a Redis Cluster the key's master.
    /// </summary>
    public Task<RespReply> ExecuteForKeyAsync(string key, ReadOnlyMemory<byte> command, string[] args, CancellationToken ct = default) =>
        Topology.RunOnOwnerAsync(key, (c, token) => c.FlushAndReadCommandAsync(command.Span, args, token), ct);

    /// <summary>The host that coordinates <paramref name="key"/> (see <see cref="ExecuteForKeyAsync"/>), for messages.</summary>
    public async Task<CacheEndpoint> CoordinatorOfAsync(string key, CancellationToken ct = default)
    {
        await Topology.ReadyAsync(ct);
        return Hosts[Topology.OwnerOf(key)];
    }

    /// <summary>Runs a raw command on one host (by index into <see cref="Hosts"/>).</summary>
    /// <summary>Each host's budget as its INFO reports it: bytes in use and the limit (0 when the host has none, as a Redis may).</summary>
    public async Task<(CacheEndpoint Host, long Used, long Max)[]> GetMemoryAsync(CancellationToken ct = default)
    {
        await Topology.ReadyAsync(ct);
        // A Redis Cluster's replicas hold copies of their masters' keys: the budget is the masters'.
        var holders = Topology.Shards.Select(n => n[0]).ToArray();
        return await Task.WhenAll(holders.Select(async i =>
        {
            var h = Hosts[i];
            var reply = await ExecuteOnAsync(i, "INFO"u8.ToArray(), ["memory"], ct);
            if (reply.Kind == RespKind.Error) throw new RespErrorException(h.ToString(), reply.Text!);
            long Field(string name) =>
                (reply.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(reply.Bulk!) : "").Split("\r\n")
                    .Select(l => l.Split(':', 2)).Where(f => f.Length == 2 && f[0] == name)
                    .Select(f => long.TryParse(f[1], out var v) ? v : 0).FirstOrDefault();
            return (h, Field("used_memory"), Field("maxmemory"));
        }));
    }

    /// <summary>
    /// Whether every host gives a version's segments the version's life as it takes the version's "latest" pointer (an
    /// hpc-cachehost that says so in INFO, <see cref="CacheKeys.PublishKeepsSegmentsInfoField"/>). False on a Redis
    /// Cluster, whose pointer lives on one master while the segments are spread over all, and when any host does not
    /// say so (redis-server, an older cache host) or cannot be asked: a stager then gives them that life itself.
    /// </summary>
    public async Task<bool> PublishKeepsSegmentsAsync(CancellationToken ct = default)
    {
        await Topology.ReadyAsync(ct);
        if (Topology.KeepsItsOwnCopies) return false;
        var field = CacheKeys.PublishKeepsSegmentsInfoField + ":1";
        var answers = await Task.WhenAll(Hosts.Select(async (h, i) =>
        {
            try
            {
                var reply = await ExecuteOnAsync(i, "INFO"u8.ToArray(), ["server"], ct);
                return reply.Kind == RespKind.Bulk && Encoding.UTF8.GetString(reply.Bulk!).Split('\n').Any(l => l.TrimEnd('\r') == field);
            }
            catch (Exception e) when (e is CacheHostUnavailableException or CommonDataException or IOException)
            {
                return false;
            }
        }));
        return answers.All(a => a);
    }

    /// <summary>Every host's INFO, read into a <see cref="CacheHostStatus"/>; a host that cannot be read is reported with its error, not thrown.</summary>
    public async Task<CacheHostStatus[]> GetHostStatusAsync(CancellationToken ct = default)
    {
        await Topology.ReadyAsync(ct);
        return await Task.WhenAll(Hosts.Select(async (h, i) =>
        {
            try
            {
                var reply = await ExecuteOnAsync(i, "INFO"u8.ToArray(), [], ct);
                if (reply.Kind == RespKind.Error) return Failed(h.ToString(), new RespErrorException(h.ToString(), reply.Text!));
                return CacheHostStatus.FromInfo(h.ToString(), reply.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(reply.Bulk!) : "");
            }
            catch (Exception e) when (e is CacheHostUnavailableException or CommonDataException or IOException)
            {
                return Failed(h.ToString(), e);
            }
        }));
    }

    /// <summary>A host's row that says why it could not be read: the row names the host, so the reason does not again.</summary>
    private static CacheHostStatus Failed(string host, Exception e) => new()
    {
        Host = host,
        Error = e.Message.StartsWith(host + ": ", StringComparison.Ordinal) ? e.Message[(host.Length + 2)..] : e.Message,
        ErrorKind = e is CommonDataException c ? c.Code : CommonDataException.From(e).Code,
    };

    public Task<RespReply> ExecuteOnAsync(int host, ReadOnlyMemory<byte> command, string[] args, CancellationToken ct = default) =>
        RunAsync(host, (c, token) => c.FlushAndReadCommandAsync(command.Span, args, token), ct);

    /// <summary>
    /// Asks a host whether this connection's account may run <paramref name="command"/> (<c>ACL WHOAMI</c>, then
    /// <c>ACL DRYRUN</c>), without running it: null when it may, or when the host cannot say (an open or older server
    /// without ACL); otherwise the host's reason. Lets a program refuse up front what the host would refuse half-way.
    /// </summary>
    public async Task<string?> DryRunAsync(int host, string[] command, CancellationToken ct = default)
    {
        var who = await ExecuteOnAsync(host, "ACL"u8.ToArray(), ["WHOAMI"], ct);
        if (who.Kind == RespKind.Error && new RespErrorException(Hosts[host].ToString(), who.Text!).Code == ErrorCode.AccessDenied) return who.Text;
        if (who.Kind is not (RespKind.Bulk or RespKind.SimpleString)) return null;
        var user = who.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(who.Bulk!) : who.Text!;
        var dry = await ExecuteOnAsync(host, "ACL"u8.ToArray(), ["DRYRUN", user, .. command], ct);
        return dry.Kind switch
        {
            RespKind.Bulk => Encoding.UTF8.GetString(dry.Bulk!),
            RespKind.Error when dry.Text is { } text && !text.StartsWith("ERR unknown", StringComparison.OrdinalIgnoreCase) => text,
            _ => null,
        };
    }

    /// <summary>Runs a raw command on every host; used by admin tools and tests.</summary>
    public Task<RespReply[]> ExecuteOnAllAsync(ReadOnlyMemory<byte> command, string[] args, CancellationToken ct = default) =>
        ForAllHostsAsync((c, token) => c.FlushAndReadCommandAsync(command.Span, args, token), ct);

    // ---------------- connections ----------------

    /// <summary>
    /// Opens every host's pooled connections and PINGs each once, so a daemon learns of an unreachable or misconfigured
    /// host when it starts rather than at its first fetch, and that fetch finds its connections open. Returns, per host
    /// (same order as <see cref="Hosts"/>), why it could not be reached, or null. An unreachable host is an answer, not
    /// an exception: a node keeps serving its local copies through a cache-tier outage. Credentials a host refuses
    /// (NOAUTH, WRONGPASS) are thrown as <see cref="CommonDataException"/> with <see cref="ErrorCode.AccessDenied"/>:
    /// no outage ends that, only a corrected setting.
    /// </summary>
    public async Task<string?[]> ConnectAllAsync(CancellationToken ct = default)
    {
        try { await Topology.ReadyAsync(ct); }
        catch (CommonDataException e) when (e.Code == ErrorCode.Unavailable) { return Hosts.Select(_ => (string?)e.Message).ToArray(); }
        return await _hosts.ConnectAllAsync(ct);
    }

    private Task<T> RunAsync<T>(int h, Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct, bool bulk = false, bool once = false,
        TimeSpan? stall = null) =>
        _hosts.RunAsync(h, op, ct, bulk, once, stall);

    private Task<T[]> ForAllHostsAsync<T>(Func<RespConnection, CancellationToken, ValueTask<T>> op, CancellationToken ct) => _hosts.ForAllAsync(op, ct);

    public ValueTask DisposeAsync() => _hosts.DisposeAsync();
}
