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
    /// <summary>
    /// How long the flags live unless renewed. Renewed at a quarter of it while their process runs, so a killed
    /// collector or stager holds the others up for at most this long.
    /// </summary>
    private static readonly TimeSpan FlagLifetime = TimeSpan.FromSeconds(15);
    private readonly ILogger _log = logger ?? NullLogger.Instance;

    /// <summary>Before collecting, delete the staging leases of this account (<c>*</c>: every account's) instead of waiting for them.</summary>
    public string? BreakLeasesOf { get; init; }

    /// <summary>How many staging leases the last collection deleted (<see cref="BreakLeasesOf"/>).</summary>
    public int LeasesBroken { get; private set; }

    /// <summary>What a collection did. <paramref name="Unreadable"/>: manifest keys whose content is not a manifest, skipped (or dropped).</summary>
    public sealed record Collection(bool Ran, string? SkippedBecause, int Manifests, int SegmentsKept, long SegmentsDeleted, IReadOnlyList<string>? Unreadable = null);

    /// <summary>
    /// Deletes unreferenced segments on every host; skips (and says why) while a stager is running. A manifest key that
    /// holds no readable manifest references nothing: it is skipped with a warning (its key is in <see cref="Collection.Unreadable"/>),
    /// and deleted too when <paramref name="dropUnreadable"/>. Throws <see cref="ErrorCode.AccessDenied"/> before anything
    /// is changed when the account lacks the admin role.
    /// </summary>
    public async Task<Collection> CollectAsync(CancellationToken ct = default, bool dropUnreadable = false)
    {
        var designated = await tier.CoordinatorOfAsync(CacheKeys.Collection, ct);
        await RequireAdminAsync(ct);
        var token = Guid.NewGuid().ToString("n");
        var set = await tier.ExecuteForKeyAsync(CacheKeys.Collection, "SET"u8.ToArray(), [CacheKeys.Collection, token, "NX", "PX", ((long)FlagLifetime.TotalMilliseconds).ToString()], ct);
        if (set.Kind == RespKind.Error) throw Refused(designated, set.Text!);
        if (set.Kind != RespKind.SimpleString)
            return new Collection(false, $"another collection is running ({CacheKeys.Collection} is set on {designated})", 0, 0, 0);
        await using var flag = new Renewal(() => tier.ExecuteForKeyAsync(CacheKeys.Collection, "SET"u8.ToArray(), [CacheKeys.Collection, token, "XX", "PX", ((long)FlagLifetime.TotalMilliseconds).ToString()], CancellationToken.None),
            () => tier.ExecuteForKeyAsync(CacheKeys.Collection, "DEL"u8.ToArray(), [CacheKeys.Collection], CancellationToken.None), CacheKeys.Collection, _log);
        // Leases live on the designated host, or (a Redis Cluster) wherever their keys' slots are.
        var stagers = (await tier.KeysAsync(CacheKeys.StagingPrefix, ct)).SelectMany(k => k).ToList();
        if (BreakLeasesOf is { } whose)
        {
            // An administrator's way past leases that are renewed for ever: a stage that really runs finds, before it
            // publishes, whatever this collection frees and sends it again.
            var broken = stagers.Where(k => CacheKeys.TryParseStagingLease(k, out var account) && (whose == "*" || account == whose)).ToList();
            foreach (var key in broken) await tier.ExecuteForKeyAsync(key, "DEL"u8.ToArray(), [key], ct);
            if (broken.Count > 0) _log.LogWarning("Deleted {Count} staging lease(s) of {Account} before collecting: {Keys}", broken.Count, whose, string.Join(", ", broken));
            LeasesBroken = broken.Count;
            stagers = stagers.Except(broken).ToList();
        }
        if (stagers.Count > 0)
        {
            // Named by account, so an operator knows whose stage holds the collection (and whose lease to delete, as an
            // administrator, when it is not a stage at all).
            var accounts = stagers.Select(k => CacheKeys.TryParseStagingLease(k, out var account) ? account : "?").GroupBy(a => a, StringComparer.Ordinal)
                .Select(g => g.Count() == 1 ? g.Key : $"{g.Key} ×{g.Count()}");
            return new Collection(false, $"{stagers.Count} stager(s) running, as account(s) {string.Join(", ", accounts)} (their leases: {string.Join(", ", stagers.Take(3))}{(stagers.Count > 3 ? ", …" : "")})", 0, 0, 0);
        }

        var referenced = new HashSet<SegmentId>();
        var unreadable = new List<string>();
        var versions = (await tier.KeysAsync(CacheKeys.ManifestPrefix, ct)).SelectMany(k => k).Select(k => k[CacheKeys.ManifestPrefix.Length..]).Distinct().ToList();
        foreach (var version in versions)
        {
            var (manifest, problem) = SegmentId.TryParse(version, out var id)
                ? await ReadManifestAsync(version, id, ct)
                : (null, SegmentId.IsLegacy(version) ? Manifest.LegacyIds : "its key is not a version id");
            if (manifest is not null) { referenced.UnionWith(manifest.SegmentIds); continue; }
            if (problem is null) continue; // removed while we looked
            var key = CacheKeys.Manifest(version);
            unreadable.Add(key);
            _log.LogWarning("Manifest key {Key} holds no readable manifest ({Problem}); it references no segment{Action}", key, problem,
                dropUnreadable ? ", deleting it" : ": an administrator removes it with hpcdata gc --drop-unreadable");
        }
        if (dropUnreadable && unreadable.Count > 0)
            for (var h = 0; h < (tier.IsCluster ? 1 : tier.Hosts.Count); h++) await tier.DeleteAsync(h, unreadable, ct);

        long deleted = 0;
        var perHost = await tier.KeysAsync(CacheKeys.SegmentPrefix, ct);
        for (var h = 0; h < perHost.Length; h++)
        {
            var garbage = perHost[h].Where(k => !SegmentId.TryParse(k[CacheKeys.SegmentPrefix.Length..], out var id) || !referenced.Contains(id)).ToList();
            if (garbage.Count > 0) deleted += await tier.DeleteAsync(h, garbage, ct);
        }
        _log.LogInformation("Segment collection: {Manifests} manifests reference {Kept} segments; deleted {Deleted}", versions.Count, referenced.Count, deleted);
        return new Collection(true, null, versions.Count - unreadable.Count, referenced.Count, deleted, unreadable);
    }

    /// <summary>A manifest, or why the key holds none (null for both: no host has the key any more).</summary>
    private async Task<(Manifest? Manifest, string? Problem)> ReadManifestAsync(string version, SegmentId id, CancellationToken ct)
    {
        try
        {
            var (manifest, _, problem) = await tier.Catalog.GetManifestAsync(version, id, ct);
            return (manifest, problem);
        }
        catch (Exception e) when (e is InvalidDataException or FormatException or System.Text.Json.JsonException)
        {
            return (null, e.Message); // the bytes decode and match their id, but are not a manifest
        }
    }

    /// <summary>
    /// Asks the designated host whether this account may delete segments (<c>ACL DRYRUN</c> of a <c>DEL</c>), so an
    /// account without the admin role is told so before it sets the flag every stager waits for. A host that does not
    /// know the command (an older Redis) is asked nothing; deleting is then refused later, as the host decides.
    /// </summary>
    private async Task RequireAdminAsync(CancellationToken ct)
    {
        if (await MayCollectAsync(ct) is { } denial)
            throw Refused(tier.Hosts[0], denial);
    }

    /// <summary>Why this account may not collect segments (the designated host's refusal of a segment DEL), or null when it may.</summary>
    public Task<string?> MayCollectAsync(CancellationToken ct = default) => tier.DryRunAsync(0, ["DEL", CacheKeys.Segment(default)], ct);

    private static CommonDataException Refused(CacheEndpoint host, string why) =>
        new(ErrorCode.AccessDenied, $"segment collection needs an account with the admin role on the cache tier; {host} refused it: {why}");

    /// <summary>
    /// Marks a staging in progress until disposed (renewed while it runs), after waiting out a running collection.
    /// </summary>
    public async Task<IAsyncDisposable> BeginStagingAsync(TimeSpan? wait = null, CancellationToken ct = default)
    {
        var key = CacheKeys.Staging(tier.Account, Guid.NewGuid().ToString("n"));
        await SetLeaseAsync(key, ct);
        var lease = new Renewal(() => SetLeaseAsync(key, CancellationToken.None), () => tier.ExecuteForKeyAsync(key, "DEL"u8.ToArray(), [key], CancellationToken.None), key, _log);
        var deadline = DateTime.UtcNow + (wait ?? TimeSpan.FromMinutes(2));
        try
        {
            for (var delay = 50; ; delay = Math.Min(delay * 2, 2000))
            {
                var gc = await tier.ExecuteForKeyAsync(CacheKeys.Collection, "EXISTS"u8.ToArray(), [CacheKeys.Collection], ct);
                if (gc.Integer == 0) break;
                if (DateTime.UtcNow > deadline)
                    throw new TimeoutException($"a segment collection on {await tier.CoordinatorOfAsync(CacheKeys.Collection, ct)} did not finish in time; try again");
                await Task.Delay(delay + Random.Shared.Next(delay), ct);
            }
        }
        catch
        {
            await lease.DisposeAsync();
            throw;
        }
        return lease;
    }

    private Task<RespReply> SetLeaseAsync(string key, CancellationToken ct) =>
        tier.ExecuteForKeyAsync(key, "SET"u8.ToArray(), [key, Environment.MachineName, "PX", ((long)FlagLifetime.TotalMilliseconds).ToString()], ct);

    /// <summary>
    /// A flag kept alive while its process works: renewed at a quarter of its lifetime, deleted when disposed. If the
    /// process dies, the flag expires on its own within <see cref="FlagLifetime"/>.
    /// </summary>
    private sealed class Renewal : IAsyncDisposable
    {
        private readonly Func<Task<RespReply>> _release;
        private readonly string _key;
        private readonly ILogger _log;
        private readonly CancellationTokenSource _stop = new();
        private readonly Task _renewal;

        public Renewal(Func<Task<RespReply>> renew, Func<Task<RespReply>> release, string key, ILogger log)
        {
            (_release, _key, _log) = (release, key, log);
            _renewal = Task.Run(async () =>
            {
                while (!_stop.IsCancellationRequested)
                {
                    try
                    {
                        await Task.Delay(FlagLifetime / 4, _stop.Token);
                        var reply = await renew();
                        if (reply.Kind == RespKind.Error) log.LogWarning("Could not renew {Key}: {Error}", key, reply.Text);
                    }
                    catch (OperationCanceledException) { break; }
                    catch (Exception e) { log.LogWarning("Could not renew {Key}: {Error}", key, e.Message); }
                }
            });
        }

        public async ValueTask DisposeAsync()
        {
            _stop.Cancel();
            await _renewal;
            try
            {
                var reply = await _release();
                if (reply.Kind == RespKind.Error) _log.LogWarning("Could not delete {Key} ({Error}); it expires within {Lifetime} s", _key, reply.Text, FlagLifetime.TotalSeconds);
            }
            catch (Exception e) when (e is CacheHostUnavailableException or CommonDataException)
            {
                _log.LogWarning("Could not delete {Key} ({Error}); it expires within {Lifetime} s", _key, e.Message, FlagLifetime.TotalSeconds);
            }
            _stop.Dispose();
        }
    }
}
