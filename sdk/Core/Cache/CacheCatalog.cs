using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cache;

/// <summary>
/// What the cache tier knows about datasets: manifests (on every host, verified by their version id), the "latest"
/// pointer of each dataset, and the job references of versions whose lifetime is "the jobs that use them".
/// </summary>
public sealed class CacheCatalog
{
    private readonly CacheHostSet _hosts;
    private readonly CacheTierClient _tier;

    internal CacheCatalog(CacheHostSet hosts, CacheTierClient tier)
    {
        _hosts = hosts;
        _tier = tier;
    }

    private IReadOnlyList<CacheEndpoint> Hosts => _hosts.Hosts;

    /// <summary>Stores a manifest on every host (it is small and every reader needs it first).</summary>
    public Task PutManifestAsync(string version, ReadOnlyMemory<byte> encoded, TimeSpan? ttl = null, CancellationToken ct = default) =>
        _hosts.Topology.WriteEverywhereAsync(CacheKeys.Manifest(version), async (c, token) =>
        {
            c.BeginCommand(ttl is null ? 3 : 5);
            c.Argument("SET"u8);
            c.Argument(CacheKeys.Manifest(version));
            c.Argument(encoded.Span);
            if (ttl is { } t) { c.Argument("PX"u8); c.Argument((long)t.TotalMilliseconds); }
            Check(c, await c.FlushAndReadAsync(token));
            return 0;
        }, ct, bulk: true); // a tree's manifest may be megabytes

    /// <summary>
    /// Refuses, before anything is sent, a stage of a dataset name that belongs to another account (or that this
    /// account may not write at all) on some host: the host would otherwise take the segments and refuse the manifest.
    /// Hosts that cannot say (open, or without ACL DRYRUN) are not asked further.
    /// </summary>
    public async Task CheckMayPublishAsync(string name, CancellationToken ct = default)
    {
        for (var h = 0; h < Hosts.Count; h++)
        {
            var denial = await _tier.DryRunAsync(h, ["SET", CacheKeys.Latest(name), default(SegmentId).ToString()], ct);
            // Only who may write the name matters here; the placeholder version is refused for what it is.
            if (denial is not null && (denial.StartsWith("NOPERM dataset ", StringComparison.Ordinal) || denial.Contains("no permissions to run", StringComparison.Ordinal)))
                throw new CommonDataException(ErrorCode.AccessDenied, $"{Hosts[h]}: {denial}");
        }
    }

    /// <summary>
    /// Gives every host that lacks them a version's manifest (<paramref name="encoded"/>, stored only where absent) and
    /// "latest" pointer: a host that restarted empty, was added, or was down while the version was staged. Returns
    /// the hosts that needed it. Every host must answer, as for a stage.
    /// </summary>
    public async Task<IReadOnlyList<CacheEndpoint>> RepairAsync(string name, string version, ReadOnlyMemory<byte> encoded, TimeSpan? ttl = null, CancellationToken ct = default)
    {
        var (manifestKey, latestKey) = (CacheKeys.Manifest(version), CacheKeys.Latest(name));
        async ValueTask<bool> Manifest(RespConnection c, CancellationToken token)
        {
            if (Check(c, await c.FlushAndReadCommandAsync("EXISTS"u8, manifestKey, token)).Integer != 0) return false;
            c.BeginCommand(ttl is null ? 4 : 6);
            c.Argument("SET"u8);
            c.Argument(manifestKey);
            c.Argument(encoded.Span);
            c.Argument("NX"u8);
            if (ttl is { } t) { c.Argument("PX"u8); c.Argument((long)t.TotalMilliseconds); }
            Check(c, await c.FlushAndReadAsync(token));
            return true;
        }
        async ValueTask<bool> Pointer(RespConnection c, CancellationToken token)
        {
            var pointer = await GetAsync(c, latestKey, token);
            if (pointer.Kind == RespKind.Bulk && Encoding.UTF8.GetString(pointer.Bulk!) == version) return false;
            Check(c, await c.FlushAndReadCommandAsync("SET"u8, [latestKey, version], token));
            return true;
        }
        async ValueTask<bool> RepairOn(RespConnection c, CancellationToken token) => await Manifest(c, token) | await Pointer(c, token);
        if (_hosts.Topology.KeepsItsOwnCopies)
        {
            // A cluster's masters replicate each key themselves: the same writes, each at its key's master.
            await _hosts.Topology.RunOnOwnerAsync(manifestKey, Manifest, ct, bulk: true);
            await _hosts.Topology.RunOnOwnerAsync(latestKey, Pointer, ct);
            return [];
        }
        var answers = await Task.WhenAll(Enumerable.Range(0, Hosts.Count).Select(h => _hosts.RunAsync(h, RepairOn, ct, bulk: true)));
        return Enumerable.Range(0, Hosts.Count).Where(h => answers[h]).Select(h => Hosts[h]).ToList();
    }

    /// <summary>Moves the "latest" pointer of a dataset, on every host. Call only after every segment and the manifest are stored.</summary>
    public Task SetLatestAsync(string name, string version, CancellationToken ct = default) =>
        _hosts.Topology.WriteEverywhereAsync(CacheKeys.Latest(name), async (c, token) =>
        {
            c.Command("SET"u8, CacheKeys.Latest(name), version);
            Check(c, await c.FlushAndReadAsync(token));
            return 0;
        }, ct);

    /// <summary>
    /// The version "latest" points to, or null when no host knows the dataset. Hosts can disagree — one restarted
    /// empty, or missed a stage while it was down — and the answer is then never simply the first host's: of the
    /// versions the hosts name, the newest whose verified manifest is of this dataset.
    /// </summary>
    public async Task<string?> GetLatestAsync(string name, CancellationToken ct = default)
    {
        var answers = await LatestByHostAsync(name, ct);
        var versions = answers.Select(a => a.Version).OfType<string>().Distinct(StringComparer.Ordinal).ToList();
        if (versions.Count <= 1) return versions.FirstOrDefault();
        (string Version, DateTimeOffset Created)? newest = null;
        foreach (var version in versions)
        {
            if (!SegmentId.TryParse(version, out var id)) continue;
            var (manifest, _, _) = await GetManifestAsync(version, id, ct);
            if (manifest is null || manifest.Name != name) continue;
            if (newest is null || manifest.Created > newest.Value.Created
                || (manifest.Created == newest.Value.Created && string.CompareOrdinal(version, newest.Value.Version) > 0))
                newest = (version, manifest.Created);
        }
        return newest?.Version ?? versions[0];
    }

    /// <summary>
    /// The datasets whose "latest" pointer the answering hosts of a plain tier do not agree on (one lacks it, or names
    /// another version), with what each host says; empty on a Redis Cluster, whose replicas are the cluster's to keep.
    /// A re-stage by the owner, or <c>hpcdata stage</c> of the same data, repairs each.
    /// </summary>
    public async Task<IReadOnlyList<(string Name, IReadOnlyList<(CacheEndpoint Host, string? Version)> Hosts)>> DisagreementsAsync(CancellationToken ct = default)
    {
        if (_hosts.Topology.KeepsItsOwnCopies) return [];
        var names = (await _hosts.AskEveryShardAsync((c, token) => KeysAsync(c, CacheKeys.LatestPrefix, token), ct, bulk: true))
            .SelectMany(k => k.Answer).Select(k => k[CacheKeys.LatestPrefix.Length..]).Where(n => DatasetName.TryValidate(n, out _))
            .Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal).ToList();
        var disagreements = new List<(string, IReadOnlyList<(CacheEndpoint, string?)>)>();
        foreach (var name in names)
        {
            var answers = await LatestByHostAsync(name, ct);
            if (answers.Count < Hosts.Count || answers.Select(a => a.Version).Distinct().Count() > 1)
                disagreements.Add((name, Hosts.Select(h => (h, answers.FirstOrDefault(a => a.Host.Equals(h)).Version)).ToList()));
        }
        return disagreements;
    }

    /// <summary>What each answering host's "latest" pointer of <paramref name="name"/> says (null: it has none).</summary>
    public async Task<IReadOnlyList<(CacheEndpoint Host, string? Version)>> LatestByHostAsync(string name, CancellationToken ct = default)
    {
        var key = CacheKeys.Latest(name);
        var answers = await _hosts.Topology.ReadAnywhereAsync(key, async (c, token) => (c.Endpoint, await GetAsync(c, key, token)), ct);
        return answers.Select(a => (a.Endpoint, a.Item2.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(a.Item2.Bulk!) : (string?)null)).ToList();
    }

    /// <summary>Resolves a dataset name and optional version ("latest" or null for the current one) to a verified manifest.</summary>
    public async Task<(string Version, Manifest Manifest)> ResolveAsync(string name, string? version = null, CancellationToken ct = default)
    {
        var (v, manifest, _) = await ResolveWithBytesAsync(name, version, ct);
        return (v, manifest);
    }

    /// <summary>
    /// As <see cref="ResolveAsync"/>, with the manifest's bytes exactly as staged (their hash is the version id), for
    /// handing the manifest on to another node that checks it against the version itself.
    /// </summary>
    public async Task<(string Version, Manifest Manifest, byte[] Bytes)> ResolveWithBytesAsync(string name, string? version = null, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        if (string.IsNullOrEmpty(version) || version == "latest")
        {
            version = await GetLatestAsync(name, ct)
                ?? throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' not found on cache hosts {string.Join(", ", Hosts)}");
        }
        if (VersionPrefix.IsPrefix(version)) version = await ResolveVersionPrefixAsync(name, version, ct);
        if (SegmentId.IsLegacy(version))
            throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version '{version}': {Manifest.LegacyIds} ('hpcdata stage' it again)");
        if (!SegmentId.TryParse(version, out var versionId))
            throw new CommonDataException(ErrorCode.NotFound, VersionPrefix.NotAVersion(name, version));
        var (manifest, raw, problem) = await GetManifestAsync(version, versionId, ct);
        if (manifest is not null)
        {
            if (manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{manifest.Name}', not '{name}'");
            return (version, manifest, raw!);
        }
        if (problem is not null) throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version '{version}': {problem}");
        throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' not found on cache hosts {string.Join(", ", Hosts)}");
    }

    /// <summary>
    /// The whole id of the version of <paramref name="name"/> whose id starts with <paramref name="prefix"/> (see
    /// <see cref="VersionPrefix"/>), among the manifests the answering hosts hold. Versions of other datasets that start
    /// the same do not count: a prefix is only ever resolved within its dataset.
    /// </summary>
    public async Task<string> ResolveVersionPrefixAsync(string name, string prefix, CancellationToken ct = default)
    {
        prefix = prefix.ToLowerInvariant();
        var keys = await _hosts.AskEveryShardAsync((c, token) => KeysAsync(c, CacheKeys.Manifest(prefix), token), ct, bulk: true);
        var ofName = new List<string>();
        foreach (var version in keys.SelectMany(k => k.Answer).Select(k => k[CacheKeys.ManifestPrefix.Length..]).Distinct(StringComparer.Ordinal))
            if (SegmentId.TryParse(version, out var id) && (await GetManifestAsync(version, id, ct)).Manifest?.Name == name)
                ofName.Add(version);
        return VersionPrefix.Choose(name, prefix, ofName, $"on cache hosts {string.Join(", ", Hosts)}");
    }

    /// <summary>
    /// Whether some answering host holds a manifest under <paramref name="version"/>: one EXISTS per host, where reading
    /// the manifest moves it whole from every host (at 10,000 nodes asking at once, a 650 KB manifest from 8 hosts is
    /// 52 GB). The version id is the manifest's hash, so a caller holding bytes that hash to it learns the tier holds
    /// exactly those. Throws <see cref="CacheHostUnavailableException"/> when no host answers.
    /// </summary>
    public async Task<bool> HoldsManifestAsync(string version, CancellationToken ct = default)
    {
        var key = CacheKeys.Manifest(version);
        var answers = await _hosts.Topology.ReadAnywhereAsync(key, async (c, token) => Check(c, await c.FlushAndReadCommandAsync("EXISTS"u8, key, token)).Integer != 0, ct);
        return answers.Any(held => held);
    }

    /// <summary>
    /// A GET whose refusal for want of credentials (NOAUTH, WRONGPASS, NOPERM) is an error of its own, access denied
    /// naming the host: read as "no such key" it would tell a worker its dataset was never staged.
    /// </summary>
    private static async ValueTask<RespReply> GetAsync(RespConnection c, string key, CancellationToken ct)
    {
        var reply = await c.FlushAndReadCommandAsync("GET"u8, key, ct);
        if (reply.Kind == RespKind.Error && reply.Text is { } text && new RespErrorException(c.Endpoint.ToString(), text) is { Code: ErrorCode.AccessDenied } refused)
            throw refused;
        return reply;
    }

    /// <summary>The verified manifest of a version from the first host with a good copy; else null and what was wrong.</summary>
    internal async Task<(Manifest? Manifest, byte[]? Raw, string? Problem)> GetManifestAsync(string version, SegmentId versionId, CancellationToken ct)
    {
        var key = CacheKeys.Manifest(version);
        string? problem = null;
        foreach (var reply in await _hosts.Topology.ReadAnywhereAsync(key, (c, token) => GetAsync(c, key, token), ct))
        {
            if (reply.Kind != RespKind.Bulk) continue;
            var stored = reply.Bulk!;
            if (!SegmentCodec.TryReadRawLength(stored, out var rawLength)) { problem = "manifest header is damaged"; continue; }
            var raw = new byte[rawLength];
            problem = SegmentCodec.TryDecode(stored, versionId, raw);
            if (problem is null) return (Manifest.Parse(raw), raw, null);
        }
        return (null, null, problem);
    }

    /// <summary>
    /// Every version whose manifest some answering host holds, with its sizes, lifetime, job references and whether it
    /// is its dataset's latest; ordered by name, then newest first. A host that does not answer is left out, not fatal.
    /// </summary>
    public async Task<IReadOnlyList<CatalogEntry>> ListAsync(CancellationToken ct = default)
    {
        var manifestKeys = await _hosts.AskEveryShardAsync((c, token) => KeysAsync(c, CacheKeys.ManifestPrefix, token), ct, bulk: true);
        var holders = manifestKeys.SelectMany(k => k.Answer).Select(k => k[CacheKeys.ManifestPrefix.Length..])
            .GroupBy(v => v, StringComparer.Ordinal).ToDictionary(g => g.Key, g => g.Count(), StringComparer.Ordinal);
        var latestNames = (await _hosts.AskEveryShardAsync((c, token) => KeysAsync(c, CacheKeys.LatestPrefix, token), ct, bulk: true))
            .SelectMany(k => k.Answer).Select(k => k[CacheKeys.LatestPrefix.Length..]).Distinct(StringComparer.Ordinal).ToArray();
        var latest = new HashSet<string>(StringComparer.Ordinal);
        foreach (var name in latestNames)
            if (DatasetName.TryValidate(name, out _) && await GetLatestAsync(name, ct) is { } v) latest.Add(v);
        IReadOnlyList<string> withJobs = [];
        try
        {
            withJobs = (await _hosts.AskEveryShardAsync((c, token) => KeysAsync(c, CacheKeys.JobsPrefix, token), ct, bulk: true))
                .SelectMany(k => k.Answer).Select(k => CacheKeys.TryParseJobReference(k, out var v, out _, out _) ? v : "").ToList();
        }
        catch (CacheHostUnavailableException) { /* the job lists' host is down: versions are listed without them */ }

        var entries = new List<CatalogEntry>();
        foreach (var (version, hosts) in holders)
        {
            if (SegmentId.IsLegacy(version))
            {
                entries.Add(new CatalogEntry { Name = "?", Version = version, Hosts = hosts, Problem = Manifest.LegacyIds });
                continue;
            }
            if (!SegmentId.TryParse(version, out var id)) continue;
            var (manifest, _, problem) = await GetManifestAsync(version, id, ct);
            var jobs = withJobs.Contains(version) ? await JobsAsync(version, ct) : [];
            entries.Add(manifest is null
                ? new CatalogEntry { Name = "?", Version = version, Hosts = hosts, Jobs = jobs, Problem = problem ?? "manifest vanished while listing" }
                : new CatalogEntry
                {
                    Name = manifest.Name, Version = version, Latest = latest.Contains(version), RawBytes = manifest.RawLength,
                    StoredBytes = manifest.StoredLength, Segments = manifest.Segments.Count, Files = manifest.Files?.Count ?? 0,
                    Created = manifest.Created, LifetimeSeconds = manifest.LifetimeSeconds, Jobs = jobs, Hosts = hosts,
                });
        }
        return entries.OrderBy(e => e.Name, StringComparer.Ordinal).ThenByDescending(e => e.Created).ToList();
    }

    private static async ValueTask<IReadOnlyList<string>> KeysAsync(RespConnection c, string prefix, CancellationToken ct)
    {
        var reply = await c.FlushAndReadCommandAsync("KEYS"u8, prefix + "*", ct);
        if (reply.Kind != RespKind.Array) throw new RespErrorException(c.Endpoint.ToString(), reply.Text ?? "KEYS failed");
        return reply.Items!.Select(i => Encoding.UTF8.GetString(i.Bulk!)).ToList();
    }

    // ---------------- versions kept for jobs ----------------
    // Each job's reference is a key of its own, named with the account that made it, so the hosts let nobody else
    // change it, and it expires (RecordLifetime) so a job that never ran its end step cannot keep a version forever.
    // A version's references live on one designated host (the first in sorted order, so every client picks the same
    // one; on a Redis Cluster one slot) and change under a short SET NX lock. When the last job lets go, the version is
    // removed: a removal record first, then the manifest everywhere, "latest" too when it still points at it, and —
    // for an administrator — a segment collection frees what no remaining manifest references.

    /// <summary>Adds this account's reference of <paramref name="job"/> to the version.</summary>
    public Task AddJobAsync(string version, string job, CancellationToken ct = default) => UpdateJobsAsync(version, job, add: true, ct);

    /// <summary>Removes this account's reference of <paramref name="job"/>; returns the jobs still using the version (see <see cref="JobsAsync"/>).</summary>
    public Task<IReadOnlyList<string>> RemoveJobAsync(string version, string job, CancellationToken ct = default) =>
        UpdateJobsAsync(version, job, add: false, ct);

    /// <summary>The jobs the version is kept for: this account's by their ids, other accounts' as <c>account:job</c>.</summary>
    public Task<IReadOnlyList<string>> JobsAsync(string version, CancellationToken ct = default) =>
        _hosts.Topology.RunOnOwnerAsync(CacheKeys.JobReferences(version), (c, token) => JobsOnAsync(c, version, token), ct);

    private async ValueTask<IReadOnlyList<string>> JobsOnAsync(RespConnection c, string version, CancellationToken ct)
    {
        var mine = _hosts.Account + ":";
        var prefix = CacheKeys.JobReferences(version);
        return (await KeysAsync(c, prefix, ct)).Select(k => k[prefix.Length..]).Select(j => j.StartsWith(mine, StringComparison.Ordinal) ? j[mine.Length..] : j)
            .Order(StringComparer.Ordinal).ToList();
    }

    /// <summary>
    /// Removes a version: records the removal (nodes holding a copy then stop serving it), deletes the manifest (and
    /// "latest" when it points here) on every host, then — with an administrator's account — collects unreferenced
    /// segments. A writer may remove versions of the datasets it owns; their segments stay for the next collection.
    /// Returns whether "latest" was removed and what the collection did (null when this account may not collect).
    /// </summary>
    public async Task<(bool LatestRemoved, SegmentCollector.Collection? Collection)> RemoveVersionAsync(string name, string version, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        if (VersionPrefix.IsPrefix(version)) version = await ResolveVersionPrefixAsync(name, version, ct);
        // A version staged with XXH3-128 ids cannot be read any more but can still be removed.
        if (!SegmentId.TryParse(version, out _) && !SegmentId.IsLegacy(version)) throw new ArgumentException($"'{version}' is not a version id");
        await RecordRemovalAsync(name, version, ct);
        var latestRemoved = false;
        if (await GetLatestAsync(name, ct) == version)
        {
            await DeleteEverywhereAsync(CacheKeys.Latest(name), ct);
            latestRemoved = true;
        }
        // One key per command: a Redis Cluster keeps them in different slots.
        await DeleteEverywhereAsync(CacheKeys.Manifest(version), ct);
        var collector = new SegmentCollector(_tier);
        if (await collector.MayCollectAsync(ct) is not null) return (latestRemoved, null);
        return (latestRemoved, await collector.CollectAsync(ct));
    }

    /// <summary>
    /// Leaves the removal record on every host. A host without the version's manifest (restarted empty, added since)
    /// cannot tell whose version it is and takes no record until it holds the manifest, so it is given the manifest
    /// from a host that has it — with a short life: the removal deletes it everywhere next — and the record again.
    /// </summary>
    private async Task RecordRemovalAsync(string name, string version, CancellationToken ct)
    {
        var removed = CacheKeys.Removed(version);
        var life = ((long)CacheKeys.RecordLifetime.TotalMilliseconds).ToString();
        var unsure = new System.Collections.Concurrent.ConcurrentBag<CacheEndpoint>();
        var recorded = 0;
        await _hosts.Topology.WriteEverywhereAsync(removed, async (c, token) =>
        {
            var reply = await c.FlushAndReadCommandAsync("SET"u8, [removed, name, "PX", life], token);
            if (reply is { Kind: RespKind.Error, Text: { } text } && text.Contains(CacheKeys.RemovalOwnerUnknown, StringComparison.Ordinal)) unsure.Add(c.Endpoint);
            else { Check(c, reply); Interlocked.Increment(ref recorded); }
            return 0;
        }, ct);
        if (unsure.IsEmpty) return;
        var manifest = SegmentId.TryParse(version, out var id) ? await GetStoredManifestAsync(version, id, ct) : null;
        if (manifest is null)
        {
            // Nothing of the version is on those hosts, so there is nothing there to stop serving; but with no record
            // anywhere, nodes holding a copy would go on serving it.
            if (recorded > 0) return;
            throw new CommonDataException(ErrorCode.NotFound, $"no cache host holds the manifest of {name} version {version}, so none can tell its owner and none took its removal record " +
                "(hosts restarted empty since it was staged): an administrator's hpcdata remove records it without one");
        }
        var manifestKey = CacheKeys.Manifest(version);
        foreach (var host in unsure)
            await _hosts.RunAsync(_hosts.IndexOf(host), async (c, token) =>
            {
                c.BeginCommand(6);
                c.Argument("SET"u8); c.Argument(manifestKey); c.Argument(manifest); c.Argument("NX"u8); c.Argument("PX"u8); c.Argument(ManifestForRemovalMs);
                Check(c, await c.FlushAndReadAsync(token));
                Check(c, await c.FlushAndReadCommandAsync("SET"u8, [removed, name, "PX", life], token));
                return 0;
            }, ct, bulk: true);
    }

    /// <summary>How long a manifest given to a host only so that it takes a removal record lives, should the removal stop before deleting it.</summary>
    private const long ManifestForRemovalMs = 10 * 60_000;

    /// <summary>A version's manifest as stored (the bytes whose hash is its id), from the first host with a good copy.</summary>
    private async Task<byte[]?> GetStoredManifestAsync(string version, SegmentId versionId, CancellationToken ct)
    {
        var key = CacheKeys.Manifest(version);
        foreach (var reply in await _hosts.Topology.ReadAnywhereAsync(key, (c, token) => GetAsync(c, key, token), ct))
        {
            if (reply.Kind != RespKind.Bulk || !SegmentCodec.TryReadRawLength(reply.Bulk!, out var rawLength)) continue;
            if (SegmentCodec.TryDecode(reply.Bulk!, versionId, new byte[rawLength]) is null) return reply.Bulk;
        }
        return null;
    }

    /// <summary>Whether some host holds a removal record of <paramref name="version"/> of dataset <paramref name="name"/>.</summary>
    public async Task<bool> WasRemovedAsync(string name, string version, CancellationToken ct = default)
    {
        var key = CacheKeys.Removed(version);
        foreach (var reply in await _hosts.Topology.ReadAnywhereAsync(key, (c, token) => GetAsync(c, key, token), ct))
            if (reply.Kind == RespKind.Bulk && Encoding.UTF8.GetString(reply.Bulk!) == name) return true;
        return false;
    }

    private Task DeleteEverywhereAsync(string key, CancellationToken ct) =>
        _hosts.Topology.WriteEverywhereAsync(key, async (c, token) => { Check(c, await c.FlushAndReadCommandAsync("DEL"u8, key, token)); return 0; }, ct);

    // The lock and the references are separate keys, each on its coordinating host (the same host on independent
    // hosts; on a Redis Cluster each key's master), so each step is its own exchange.
    private async Task<IReadOnlyList<string>> UpdateJobsAsync(string version, string job, bool add, CancellationToken ct)
    {
        var lockKey = CacheKeys.Lock(version);
        var reference = CacheKeys.JobReference(version, _hosts.Account, job);
        var holder = _hosts.Account + ":" + job;
        await LockAsync(lockKey, version, holder, ct);
        try
        {
            return await _hosts.Topology.RunOnOwnerAsync(reference, async (c, token) =>
            {
                Check(c, add
                    ? await c.FlushAndReadCommandAsync("SET"u8, [reference, job, "PX", ((long)CacheKeys.RecordLifetime.TotalMilliseconds).ToString()], token)
                    : await c.FlushAndReadCommandAsync("DEL"u8, reference, token));
                return await JobsOnAsync(c, version, token);
            }, ct);
        }
        finally
        {
            await _hosts.Topology.RunOnOwnerAsync(lockKey, (c, token) => c.FlushAndReadCommandAsync("DEL"u8, lockKey, token), CancellationToken.None);
        }
    }

    /// <summary>
    /// A lock that expires on its own (10 s), so a crashed holder cannot wedge the version. Tried for 30 s: a host lets a
    /// writer hold a lock at most 15 s and not again at once, and gives it next to the version's owner or an
    /// administrator while one polls for it, so other accounts holding it delay, never stop, the owner's job step; the
    /// failure names whoever held it.
    /// </summary>
    private async Task LockAsync(string lockKey, string version, string holder, CancellationToken ct)
    {
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (true)
        {
            var taken = await _hosts.Topology.RunOnOwnerAsync(lockKey, async (c, token) =>
                Check(c, await c.FlushAndReadCommandAsync("SET"u8, [lockKey, holder, "NX", "PX", "10000"], token)).Kind == RespKind.SimpleString, ct);
            if (taken) return;
            if (clock.Elapsed > LockPatience) break;
            await Task.Delay(TimeSpan.FromMilliseconds(10 + Random.Shared.Next(0, 40)), ct);
        }
        var held = await _hosts.Topology.RunOnOwnerAsync(lockKey, (c, token) => GetAsync(c, lockKey, token), ct);
        var by = held.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(held.Bulk!) : null;
        var account = by is null ? null : by[..Math.Max(0, by.IndexOf(':'))];
        throw new CommonDataException(ErrorCode.Timeout, $"the job references of version {version} stayed locked on the cache tier for {LockPatience.TotalSeconds:0} s" +
            (account is { Length: > 0 } ? $", held by account {account} ({lockKey} = {by}); an administrator can free it with DEL {lockKey}" : ""));
    }

    private static readonly TimeSpan LockPatience = TimeSpan.FromSeconds(30);

    private static RespReply Check(RespConnection c, RespReply reply)
    {
        if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
        return reply;
    }
}
