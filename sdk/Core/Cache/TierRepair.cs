using System.Buffers;
using System.Collections.Concurrent;
using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cache;

/// <summary>How one version's copies stand on the tier against its placement.</summary>
/// <param name="UnderReplicated">Segments held on fewer hosts than the tier's replica count, but on at least one.</param>
/// <param name="Misplaced">Segments held often enough, but not on a host the placement over today's hosts names (hosts were added): readers find them a round later.</param>
/// <param name="Lost">Segments no reachable host holds: only a re-stage from the source files brings them back.</param>
/// <param name="LackManifest">Reachable hosts without the version's manifest.</param>
public sealed record VersionCopies(string Name, string Version, int Segments, int UnderReplicated, int Misplaced, int Lost,
    IReadOnlyList<CacheEndpoint> LackManifest)
{
    public bool Healthy => UnderReplicated == 0 && Misplaced == 0 && Lost == 0 && LackManifest.Count == 0 && LackSegments.Count == 0;

    /// <summary>
    /// Reachable hosts that hold the manifest (so advertise the version) but lack segments placement puts on them, with
    /// how many: a host restarted empty and given the manifest again, or a repair cut short. Readers asking them look
    /// further, but they serve less than they seem to.
    /// </summary>
    public IReadOnlyList<(CacheEndpoint Host, int Missing)> LackSegments { get; init; } = [];
}

/// <summary>What a repair did; <paramref name="Failures"/> are the copies a host refused or could not take.</summary>
public sealed record RepairResult(int ManifestsCopied, int PointersSet, long SegmentsCopied, long BytesCopied, int SegmentsLost, IReadOnlyList<string> Failures);

/// <summary>
/// Audits a plain tier's copies of every version against where they should be, and repairs them from the tier's own
/// copies: a host restarted empty, hosts added or lost since a version was staged. Every write is a <c>SET NX</c> of
/// bytes the receiving host verifies against their id, with the life the source copy has left, so a repair is safe to
/// interrupt and to run again, and never lengthens what a version's lifetime allows. A Redis Cluster keeps its own
/// replicas: neither applies there.
/// </summary>
public sealed class TierRepair(CacheTierClient tier)
{
    private const int Batch = 64;

    /// <summary>A version's manifest and where each of its segments is.</summary>
    private sealed record Plan(string Name, string Version, IReadOnlyList<int> Segments, bool[] ManifestOn);

    private readonly List<Plan> _plans = [];
    private readonly List<SegmentId> _ids = [];
    // _lives[h][i]: segment i's remaining life on host h as PTTL answers it (-2 absent, -1 no expiry); null: unreachable.
    private long[]?[] _lives = [];

    /// <summary>The hosts that could not be asked in the last audit.</summary>
    public IReadOnlyList<CacheEndpoint> Unreachable { get; private set; } = [];

    /// <summary>Looks at every version's manifest and every segment on every reachable host (one pipelined PTTL per segment and host).</summary>
    public async Task<IReadOnlyList<VersionCopies>> AuditAsync(CancellationToken ct = default)
    {
        if (tier.IsCluster) throw new CommonDataException(ErrorCode.BadRequest, "a Redis Cluster keeps its own replicas of every key; there is nothing for hpcdata to repair");
        var hosts = tier.Hosts;
        _plans.Clear(); _ids.Clear();
        var manifestKeys = new HashSet<string>?[hosts.Count];
        await Task.WhenAll(Enumerable.Range(0, hosts.Count).Select(async h =>
        {
            try
            {
                var reply = await tier.ExecuteOnAsync(h, "KEYS"u8.ToArray(), [CacheKeys.ManifestPrefix + "*"], ct);
                if (reply.Kind != RespKind.Array) throw new RespErrorException(hosts[h].ToString(), reply.Text ?? "KEYS failed");
                manifestKeys[h] = reply.Items!.Select(i => Encoding.UTF8.GetString(i.Bulk!)).ToHashSet(StringComparer.Ordinal);
            }
            catch (CacheHostUnavailableException) { manifestKeys[h] = null; }
        }));
        Unreachable = hosts.Where((_, h) => manifestKeys[h] is null).ToList();
        if (Unreachable.Count == hosts.Count) throw new CacheHostUnavailableException(hosts[0], "no cache host answers");

        var index = new Dictionary<SegmentId, int>();
        foreach (var key in manifestKeys.OfType<HashSet<string>>().SelectMany(k => k).Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal))
        {
            var version = key[CacheKeys.ManifestPrefix.Length..];
            if (!SegmentId.TryParse(version, out var versionId)) continue;
            var (manifest, _, _) = await tier.Catalog.GetManifestAsync(version, versionId, ct);
            if (manifest is null || await tier.Catalog.WasRemovedAsync(manifest.Name, version, ct)) continue;
            var segments = new int[manifest.SegmentIds.Count];
            for (var s = 0; s < segments.Length; s++)
            {
                var id = manifest.SegmentIds[s];
                if (!index.TryGetValue(id, out var i)) { index[id] = i = _ids.Count; _ids.Add(id); }
                segments[s] = i;
            }
            _plans.Add(new Plan(manifest.Name, version, segments, [.. manifestKeys.Select(k => k?.Contains(key) ?? false)]));
        }

        _lives = new long[]?[hosts.Count];
        await Task.WhenAll(Enumerable.Range(0, hosts.Count).Where(h => manifestKeys[h] is not null).Select(async h =>
        {
            try { _lives[h] = await LivesOnAsync(h, ct); }
            catch (CacheHostUnavailableException) { _lives[h] = null; }
        }));
        Unreachable = hosts.Where((_, h) => _lives[h] is null).ToList();

        var result = new List<VersionCopies>(_plans.Count);
        Span<int> placed = stackalloc int[tier.Replicas];
        foreach (var plan in _plans)
        {
            int under = 0, misplaced = 0, lost = 0;
            var lacking = new int[hosts.Count];
            foreach (var i in plan.Segments.Distinct())
            {
                var held = Holders(i);
                if (held == 0) { lost++; continue; }
                tier.Place(_ids[i], placed);
                foreach (var h in placed) if (plan.ManifestOn[h] && _lives[h] is { } l && l[i] == -2) lacking[h]++;
                if (held < tier.Replicas) { under++; continue; }
                foreach (var h in placed) if (_lives[h] is { } l && l[i] == -2) { misplaced++; break; }
            }
            result.Add(new VersionCopies(plan.Name, plan.Version, plan.Segments.Count, under, misplaced, lost,
                hosts.Where((_, h) => _lives[h] is not null && !plan.ManifestOn[h]).ToList())
            {
                LackSegments = [.. Enumerable.Range(0, hosts.Count).Where(h => lacking[h] > 0).Select(h => (hosts[h], lacking[h]))],
            });
        }
        return result;
    }

    private int Holders(int segment)
    {
        var n = 0;
        foreach (var lives in _lives) if (lives is not null && lives[segment] != -2) n++;
        return n;
    }

    private Task<long[]> LivesOnAsync(int h, CancellationToken ct) =>
        tier.HostSet.RunAsync(h, async (c, token) =>
        {
            var lives = new long[_ids.Count];
            var key = new byte[CacheKeys.SegmentKeyLength];
            for (var start = 0; start < _ids.Count; start += 1024)
            {
                var n = Math.Min(1024, _ids.Count - start);
                for (var i = start; i < start + n; i++)
                {
                    CacheKeys.WriteSegmentKey(_ids[i], key);
                    c.BeginCommand(2); c.Argument("PTTL"u8); c.Argument(key);
                }
                await c.FlushAsync(token);
                await c.ReadStatusRepliesAsync(lives.AsMemory(start, n), token);
            }
            return lives;
        }, ct, bulk: true);

    /// <summary>
    /// Puts right what the last <see cref="AuditAsync"/> found: each manifest onto every reachable host that lacks it,
    /// each dataset's "latest" pointer where hosts lack it or name another, and each segment onto every host its
    /// placement names that lacks it, read from a host that holds it. <paramref name="progress"/> is told
    /// (copied, to copy, bytes) after each batch.
    /// </summary>
    public async Task<RepairResult> RepairAsync(Action<long, long, long>? progress = null, CancellationToken ct = default)
    {
        var hosts = tier.Hosts;
        var failures = new ConcurrentQueue<string>();
        var manifests = 0;
        foreach (var plan in _plans)
        {
            var source = Enumerable.Range(0, hosts.Count).FirstOrDefault(h => plan.ManifestOn[h], -1);
            if (source < 0) continue;
            var key = CacheKeys.Manifest(plan.Version);
            for (var h = 0; h < hosts.Count; h++)
            {
                if (plan.ManifestOn[h] || _lives[h] is null) continue;
                try { if (await CopyKeyAsync(key, source, h, ct)) manifests++; }
                catch (Exception e) when (e is CommonDataException or IOException) { failures.Enqueue($"{key} to {hosts[h]}: {e.Message}"); }
            }
        }

        var pointers = 0;
        foreach (var (name, answers) in await tier.Catalog.DisagreementsAsync(ct))
        {
            if (await tier.Catalog.GetLatestAsync(name, ct) is not { } latest) continue;
            foreach (var (host, version) in answers)
            {
                var h = IndexOf(host);
                if (version == latest || h < 0 || _lives[h] is null) continue;
                var reply = await tier.ExecuteOnAsync(h, "SET"u8.ToArray(), [CacheKeys.Latest(name), latest], ct);
                if (reply.Kind == RespKind.Error) failures.Enqueue($"{CacheKeys.Latest(name)} on {host}: {reply.Text}");
                else pointers++;
            }
        }

        // Copies grouped by the host they are read from: one pipelined MGET per batch, then SET NX on each target.
        var bySource = new List<(int Segment, int[] Targets)>?[hosts.Count];
        var lost = 0;
        long toCopy = 0;
        Span<int> placed = stackalloc int[tier.Replicas];
        for (var i = 0; i < _ids.Count; i++)
        {
            var source = -1;
            long life = -2;
            for (var h = 0; h < hosts.Count; h++)
                if (_lives[h] is { } l && l[i] != -2 && (source < 0 || l[i] == -1 || (life != -1 && l[i] > life))) { source = h; life = l[i]; }
            if (source < 0) { lost++; continue; }
            tier.Place(_ids[i], placed);
            var segment = i;
            var targets = placed.ToArray().Where(h => _lives[h] is { } l && l[segment] == -2).ToArray();
            if (targets.Length == 0) continue;
            (bySource[source] ??= []).Add((i, targets));
            toCopy += targets.Length;
        }
        long copied = 0, bytes = 0;
        await Task.WhenAll(Enumerable.Range(0, hosts.Count).Where(h => bySource[h] is not null).Select(async source =>
        {
            foreach (var batch in bySource[source]!.Chunk(Batch))
            {
                try
                {
                    var (n, b) = await CopySegmentsAsync(source, batch, failures, ct);
                    progress?.Invoke(Interlocked.Add(ref copied, n), toCopy, Interlocked.Add(ref bytes, b));
                }
                catch (CacheHostUnavailableException e)
                {
                    failures.Enqueue($"{batch.Length} segment(s) from {hosts[source]}: {e.Message}");
                }
            }
        }));
        return new RepairResult(manifests, pointers, copied, bytes, lost, failures.ToList());
    }

    private int IndexOf(CacheEndpoint host)
    {
        for (var h = 0; h < tier.Hosts.Count; h++) if (tier.Hosts[h].Equals(host)) return h;
        return -1;
    }

    /// <summary>Copies one small key (a manifest) with the life it has left, where the target lacks it.</summary>
    private async Task<bool> CopyKeyAsync(string key, int source, int target, CancellationToken ct)
    {
        var value = await tier.ExecuteOnAsync(source, "GET"u8.ToArray(), [key], ct);
        var life = await tier.ExecuteOnAsync(source, "PTTL"u8.ToArray(), [key], ct);
        if (value.Kind != RespKind.Bulk || life.Kind != RespKind.Integer || life.Integer == -2) return false;
        var stored = await tier.HostSet.RunAsync(target, async (c, token) =>
        {
            c.BeginCommand(life.Integer > 0 ? 6 : 4);
            c.Argument("SET"u8); c.Argument(key); c.Argument(value.Bulk!); c.Argument("NX"u8);
            if (life.Integer > 0) { c.Argument("PX"u8); c.Argument(life.Integer); }
            return await c.FlushAndReadAsync(token);
        }, ct, bulk: true);
        if (stored.Kind == RespKind.Error) throw new RespErrorException(tier.Hosts[target].ToString(), stored.Text!);
        return stored.Kind == RespKind.SimpleString;
    }

    /// <summary>One batch: read from <paramref name="source"/>, written to each segment's targets. Returns copies made and their bytes.</summary>
    private async Task<(long Copies, long Bytes)> CopySegmentsAsync(int source, (int Segment, int[] Targets)[] batch, ConcurrentQueue<string> failures, CancellationToken ct)
    {
        var values = new byte[]?[batch.Length];
        var lives = new long[batch.Length];
        {
            await tier.HostSet.RunAsync(source, async (c, token) =>
            {
                var key = new byte[CacheKeys.SegmentKeyLength];
                foreach (var (i, _) in batch)
                {
                    CacheKeys.WriteSegmentKey(_ids[i], key);
                    c.BeginCommand(2); c.Argument("PTTL"u8); c.Argument(key);
                }
                c.BeginCommand(1 + batch.Length); c.Argument("MGET"u8);
                foreach (var (i, _) in batch) { CacheKeys.WriteSegmentKey(_ids[i], key); c.Argument(key); }
                await c.FlushAsync(token);
                await c.ReadStatusRepliesAsync(lives, token);
                await c.ReadBulkArrayAsync(batch.Length, (int k, in ReadOnlySequence<byte> value, bool isNull) =>
                {
                    if (!isNull) values[k] = value.ToArray();
                }, token);
                return 0;
            }, ct, bulk: true);

            long copies = 0, bytes = 0;
            foreach (var target in batch.SelectMany(b => b.Targets).Distinct())
            {
                var mine = Enumerable.Range(0, batch.Length).Where(k => values[k] is not null && lives[k] != -2 && batch[k].Targets.Contains(target)).ToArray();
                if (mine.Length == 0) continue;
                var replies = new RespReply[mine.Length];
                try
                {
                    await tier.HostSet.RunAsync(target, async (c, token) =>
                    {
                        var key = new byte[CacheKeys.SegmentKeyLength];
                        foreach (var k in mine)
                        {
                            CacheKeys.WriteSegmentKey(_ids[batch[k].Segment], key);
                            c.BeginCommand(lives[k] > 0 ? 6 : 4);
                            c.Argument("SET"u8); c.Argument(key); c.Argument(values[k]); c.Argument("NX"u8);
                            if (lives[k] > 0) { c.Argument("PX"u8); c.Argument(lives[k]); }
                        }
                        await c.FlushAsync(token);
                        for (var r = 0; r < mine.Length; r++) replies[r] = await c.ReadReplyAsync(token);
                        return 0;
                    }, ct, bulk: true);
                }
                catch (CacheHostUnavailableException e)
                {
                    failures.Enqueue($"{mine.Length} segment(s) to {tier.Hosts[target]}: {e.Message}");
                    continue;
                }
                for (var r = 0; r < mine.Length; r++)
                {
                    var k = mine[r];
                    if (replies[r].Kind == RespKind.Error) { failures.Enqueue($"segment {_ids[batch[k].Segment]} to {tier.Hosts[target]}: {replies[r].Text}"); continue; }
                    copies++;
                    bytes += values[k]!.Length;
                }
            }
            return (copies, bytes);
        }
    }
}
