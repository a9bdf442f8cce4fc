using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.CommonData.Cache;

/// <summary>
/// Frees segments that no manifest on the cache tier references any more (after versions were removed).
/// <para>
/// Segments are shared across versions and datasets, and a stager decides to skip a segment because it is already
/// there; deleting it under a running stager would publish a version with a hole. So collection and staging exclude
/// each other through two flags on one designated host (the first in sorted order): the collector sets
/// <see cref="CacheKeys.Collection"/> and then looks for <see cref="CacheKeys.StagingPrefix"/> leases; a stager sets its lease and then waits while
/// the collection flag exists. Each writes its own flag before reading the other's, so at least one of them sees the other.
/// </para>
/// </summary>
public sealed class SegmentCollector(CacheTierClient tier, ILogger? logger = null)
{
    private static readonly TimeSpan FlagLifetime = TimeSpan.FromSeconds(60);
    private readonly ILogger _log = logger ?? NullLogger.Instance;

    public sealed record Collection(bool Ran, string? SkippedBecause, int Manifests, int SegmentsKept, long SegmentsDeleted);

    private int Designated => tier.Hosts.Select((h, i) => (h, i)).OrderBy(x => x.h.ToString(), StringComparer.Ordinal).First().i;

    /// <summary>Deletes unreferenced segments on every host; skips (and says why) while a stager is running.</summary>
    public async Task<Collection> CollectAsync(CancellationToken ct = default)
    {
        var designated = tier.Hosts[Designated];
        var token = Guid.NewGuid().ToString("n");
        var set = await tier.ExecuteOnAsync(Designated, "SET"u8.ToArray(), [CacheKeys.Collection, token, "NX", "PX", ((long)FlagLifetime.TotalMilliseconds).ToString()], ct);
        if (set.Kind != RespKind.SimpleString)
            return new Collection(false, $"another collection is running ({CacheKeys.Collection} is set on {designated})", 0, 0, 0);
        try
        {
            var stagers = (await tier.KeysAsync(CacheKeys.StagingPrefix, ct))[Designated];
            if (stagers.Count > 0) return new Collection(false, $"{stagers.Count} stager(s) running", 0, 0, 0);

            var referenced = new HashSet<SegmentId>();
            var versions = (await tier.KeysAsync(CacheKeys.ManifestPrefix, ct)).SelectMany(k => k).Select(k => k[CacheKeys.ManifestPrefix.Length..]).Distinct().ToList();
            foreach (var version in versions)
            {
                if (!SegmentId.TryParse(version, out var id)) continue;
                var (manifest, _, problem) = await tier.Catalog.GetManifestAsync(version, id, ct);
                if (manifest is null)
                    return new Collection(false, $"manifest {version} is unreadable ({problem ?? "vanished"}): cannot prove any segment unused", versions.Count, 0, 0);
                referenced.UnionWith(manifest.SegmentIds);
            }

            long deleted = 0;
            var perHost = await tier.KeysAsync(CacheKeys.SegmentPrefix, ct);
            for (var h = 0; h < perHost.Length; h++)
            {
                var garbage = perHost[h].Where(k => !SegmentId.TryParse(k[CacheKeys.SegmentPrefix.Length..], out var id) || !referenced.Contains(id)).ToList();
                if (garbage.Count > 0) deleted += await tier.DeleteAsync(h, garbage, ct);
            }
            _log.LogInformation("Segment collection: {Manifests} manifests reference {Kept} segments; deleted {Deleted}", versions.Count, referenced.Count, deleted);
            return new Collection(true, null, versions.Count, referenced.Count, deleted);
        }
        finally
        {
            await tier.ExecuteOnAsync(Designated, "DEL"u8.ToArray(), [CacheKeys.Collection], CancellationToken.None);
        }
    }

    /// <summary>
    /// Marks a staging in progress until disposed (renewed while it runs), after waiting out a running collection.
    /// </summary>
    public async Task<IAsyncDisposable> BeginStagingAsync(TimeSpan? wait = null, CancellationToken ct = default)
    {
        var key = CacheKeys.Staging(Guid.NewGuid().ToString("n"));
        var designated = Designated;
        await SetLeaseAsync(key, ct);
        var deadline = DateTime.UtcNow + (wait ?? TimeSpan.FromMinutes(2));
        for (var delay = 50; ; delay = Math.Min(delay * 2, 2000))
        {
            var gc = await tier.ExecuteOnAsync(designated, "EXISTS"u8.ToArray(), [CacheKeys.Collection], ct);
            if (gc.Integer == 0) break;
            if (DateTime.UtcNow > deadline)
            {
                await ReleaseLeaseAsync(key);
                throw new TimeoutException($"a segment collection on {tier.Hosts[designated]} did not finish in time; try again");
            }
            await Task.Delay(delay + Random.Shared.Next(delay), ct);
        }
        return new Lease(this, key);
    }

    private Task SetLeaseAsync(string key, CancellationToken ct) =>
        tier.ExecuteOnAsync(Designated, "SET"u8.ToArray(), [key, Environment.MachineName, "PX", ((long)FlagLifetime.TotalMilliseconds).ToString()], ct);

    private async Task ReleaseLeaseAsync(string key)
    {
        try { await tier.ExecuteOnAsync(Designated, "DEL"u8.ToArray(), [key], CancellationToken.None); }
        catch (Exception e) when (e is CacheHostUnavailableException or RespErrorException) { /* it expires on its own */ }
    }

    private sealed class Lease : IAsyncDisposable
    {
        private readonly SegmentCollector _owner;
        private readonly string _key;
        private readonly CancellationTokenSource _stop = new();
        private readonly Task _renewal;

        public Lease(SegmentCollector owner, string key)
        {
            _owner = owner;
            _key = key;
            _renewal = Task.Run(async () =>
            {
                while (!_stop.IsCancellationRequested)
                {
                    try
                    {
                        await Task.Delay(FlagLifetime / 4, _stop.Token);
                        await owner.SetLeaseAsync(key, _stop.Token);
                    }
                    catch (OperationCanceledException) { break; }
                    catch (Exception e) { owner._log.LogWarning("Could not renew staging lease {Key}: {Error}", key, e.Message); }
                }
            });
        }

        public async ValueTask DisposeAsync()
        {
            _stop.Cancel();
            await _renewal;
            await _owner.ReleaseLeaseAsync(_key);
            _stop.Dispose();
        }
    }
}
