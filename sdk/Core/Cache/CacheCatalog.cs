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
        _hosts.WriteEverywhereAsync(CacheKeys.Manifest(version), async (c, token) =>
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

    /// <summary>Moves the "latest" pointer of a dataset, on every host. Call only after every segment and the manifest are stored.</summary>
    public Task SetLatestAsync(string name, string version, CancellationToken ct = default) =>
        _hosts.WriteEverywhereAsync(CacheKeys.Latest(name), async (c, token) =>
        {
            c.Command("SET"u8, CacheKeys.Latest(name), version);
            Check(c, await c.FlushAndReadAsync(token));
            return 0;
        }, ct);

    /// <summary>The version "latest" points to, or null when no host knows the dataset.</summary>
    public async Task<string?> GetLatestAsync(string name, CancellationToken ct = default)
    {
        var key = CacheKeys.Latest(name);
        foreach (var value in await _hosts.ReadAnywhereAsync(key, (c, token) => GetAsync(c, key, token), ct))
            if (value.Kind == RespKind.Bulk) return Encoding.UTF8.GetString(value.Bulk!);
        return null;
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
        if (SegmentId.IsLegacy(version))
            throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version '{version}': {Manifest.LegacyIds} ('hpcdata stage' it again)");
        if (!SegmentId.TryParse(version, out var versionId))
            throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' is not a valid version id");
        var (manifest, raw, problem) = await GetManifestAsync(version, versionId, ct);
        if (manifest is not null)
        {
            if (manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{manifest.Name}', not '{name}'");
            return (version, manifest, raw!);
        }
        if (problem is not null) throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version '{version}': {problem}");
        throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' not found on cache hosts {string.Join(", ", Hosts)}");
    }

    /// <summary>The verified manifest of a version from the first host with a good copy; else null and what was wrong.</summary>
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

    internal async Task<(Manifest? Manifest, byte[]? Raw, string? Problem)> GetManifestAsync(string version, SegmentId versionId, CancellationToken ct)
    {
        var key = CacheKeys.Manifest(version);
        string? problem = null;
        foreach (var reply in await _hosts.ReadAnywhereAsync(key, (c, token) => GetAsync(c, key, token), ct))
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
                .SelectMany(k => k.Answer).Select(k => k[CacheKeys.JobsPrefix.Length..]).ToList();
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
    // Each version's job list lives on one designated host (the first in sorted order, so every client picks the same
    // one) and changes under a short SET NX lock. When the last job lets go, the manifest goes everywhere, "latest"
    // too when it still points at it, and a segment collection frees what no remaining manifest references (it defers
    // to running stagers; a skipped pass leaves the segments for the next one).

    /// <summary>Adds a job to the version's reference list.</summary>
    public Task AddJobAsync(string version, string job, CancellationToken ct = default) => UpdateJobsAsync(version, job, jobs => jobs.Add(job), ct);

    /// <summary>Removes a job; returns the jobs still using the version.</summary>
    public Task<IReadOnlyList<string>> RemoveJobAsync(string version, string job, CancellationToken ct = default) =>
        UpdateJobsAsync(version, job, jobs => jobs.Remove(job), ct);

    public async Task<IReadOnlyList<string>> JobsAsync(string version, CancellationToken ct = default) =>
        ParseJobs(await _hosts.RunDesignatedAsync(CacheKeys.Jobs(version), (c, token) => c.FlushAndReadCommandAsync("GET"u8, CacheKeys.Jobs(version), token), ct));

    /// <summary>
    /// Deletes the manifest (and "latest" when it points here) on every host, then collects unreferenced segments.
    /// Returns whether "latest" was removed and what the collection did.
    /// </summary>
    public async Task<(bool LatestRemoved, SegmentCollector.Collection Collection)> RemoveVersionAsync(string name, string version, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        // A version staged with XXH3-128 ids cannot be read any more but can still be removed.
        if (!SegmentId.TryParse(version, out _) && !SegmentId.IsLegacy(version)) throw new ArgumentException($"'{version}' is not a version id");
        var latestRemoved = false;
        if (await GetLatestAsync(name, ct) == version)
        {
            await DeleteEverywhereAsync(CacheKeys.Latest(name), ct);
            latestRemoved = true;
        }
        // One key per command: a Redis Cluster keeps them in different slots.
        await DeleteEverywhereAsync(CacheKeys.Manifest(version), ct);
        await DeleteEverywhereAsync(CacheKeys.Jobs(version), ct);
        return (latestRemoved, await new SegmentCollector(_tier).CollectAsync(ct));
    }

    private Task DeleteEverywhereAsync(string key, CancellationToken ct) =>
        _hosts.WriteEverywhereAsync(key, async (c, token) => { Check(c, await c.FlushAndReadCommandAsync("DEL"u8, key, token)); return 0; }, ct);

    // The lock and the list are separate keys, each on its coordinating host (the same host on independent hosts; on
    // a Redis Cluster each key's master), so each step is its own exchange.
    private async Task<IReadOnlyList<string>> UpdateJobsAsync(string version, string job, Action<HashSet<string>> change, CancellationToken ct)
    {
        var (lockKey, jobsKey) = (CacheKeys.Lock(version), CacheKeys.Jobs(version));
        await LockAsync(lockKey, version, job, ct);
        try
        {
            return await _hosts.RunDesignatedAsync(jobsKey, async (c, token) =>
            {
                var jobs = ParseJobs(await c.FlushAndReadCommandAsync("GET"u8, jobsKey, token)).ToHashSet();
                change(jobs);
                Check(c, jobs.Count == 0
                    ? await c.FlushAndReadCommandAsync("DEL"u8, jobsKey, token)
                    : await c.FlushAndReadCommandAsync("SET"u8, [jobsKey, string.Join("\n", jobs.Order())], token));
                return (IReadOnlyList<string>)jobs.Order().ToList();
            }, ct);
        }
        finally
        {
            await _hosts.RunDesignatedAsync(lockKey, (c, token) => c.FlushAndReadCommandAsync("DEL"u8, lockKey, token), CancellationToken.None);
        }
    }

    /// <summary>A lock that expires on its own (10 s), so a crashed holder cannot wedge the version.</summary>
    private async Task LockAsync(string lockKey, string version, string job, CancellationToken ct)
    {
        for (var attempt = 0; attempt < 200; attempt++)
        {
            var taken = await _hosts.RunDesignatedAsync(lockKey, async (c, token) =>
                Check(c, await c.FlushAndReadCommandAsync("SET"u8, [lockKey, job, "NX", "PX", "10000"], token)).Kind == RespKind.SimpleString, ct);
            if (taken) return;
            await Task.Delay(TimeSpan.FromMilliseconds(10 + Random.Shared.Next(0, 40)), ct);
        }
        throw new CommonDataException(ErrorCode.Timeout, $"the job reference list of version {version} stayed locked on the cache tier");
    }

    private static IReadOnlyList<string> ParseJobs(RespReply reply) =>
        reply.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(reply.Bulk!).Split('\n', StringSplitOptions.RemoveEmptyEntries) : [];

    private static RespReply Check(RespConnection c, RespReply reply)
    {
        if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
        return reply;
    }
}
