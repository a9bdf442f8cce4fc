using System.Text;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Jobs.Scheduling;

/// <summary>
/// Versions whose lifetime is "the jobs that use them". Each version has a reference list of job ids kept on one
/// designated cache host (the first in sorted order, so every client picks the same one), changed under a short
/// SET NX lock. When the last job lets go, the version's manifest is deleted everywhere, and "latest" too when it
/// still points at it.
/// <para>
/// Segments are content-addressed and may be shared with other versions and datasets: after the manifest goes, a
/// <see cref="SegmentCollector"/> pass frees the segments no remaining manifest references (it defers to running
/// stagers; skipped passes leave the segments for the next one).
/// </para>
/// </summary>
public sealed class DatasetLifetime(CacheTierClient tier, CacheTierOptions options)
{
    public static string ReferencesKey(string version) => "hcd:jobs:" + version;
    private static string LockKey(string version) => "hcd:lock:" + version;

    /// <summary>Adds a job to the version's reference list.</summary>
    public Task AddJobAsync(string version, string job, CancellationToken ct = default) =>
        UpdateAsync(version, job, jobs => jobs.Add(job), ct);

    /// <summary>Removes a job; returns the jobs still using the version.</summary>
    public Task<IReadOnlyList<string>> RemoveJobAsync(string version, string job, CancellationToken ct = default) =>
        UpdateAsync(version, job, jobs => jobs.Remove(job), ct);

    public async Task<IReadOnlyList<string>> JobsAsync(string version, CancellationToken ct = default)
    {
        await using var c = await ConnectAsync(ct);
        return Parse(await c.FlushAndReadCommandAsync("GET"u8, ReferencesKey(version), ct));
    }

    /// <summary>Deletes the manifest (and "latest" when it points here) on every host. Returns whether "latest" was removed.</summary>
    public async Task<bool> RemoveVersionAsync(string name, string version, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        if (!SegmentId.TryParse(version, out _)) throw new ArgumentException($"'{version}' is not a version id");
        var latestRemoved = false;
        if (await tier.GetLatestAsync(name, ct) == version)
        {
            await tier.ExecuteOnAllAsync("DEL"u8.ToArray(), [CacheKeys.Latest(name)], ct);
            latestRemoved = true;
        }
        await tier.ExecuteOnAllAsync("DEL"u8.ToArray(), [CacheKeys.Manifest(version), ReferencesKey(version)], ct);
        LastCollection = await new SegmentCollector(tier).CollectAsync(ct);
        return latestRemoved;
    }

    /// <summary>What the segment collection after the last removal did.</summary>
    public SegmentCollector.Collection? LastCollection { get; private set; }

    private async Task<IReadOnlyList<string>> UpdateAsync(string version, string job, Action<HashSet<string>> change, CancellationToken ct)
    {
        await using var c = await ConnectAsync(ct);
        await LockAsync(c, version, job, ct);
        try
        {
            var jobs = Parse(await c.FlushAndReadCommandAsync("GET"u8, ReferencesKey(version), ct)).ToHashSet();
            change(jobs);
            var reply = jobs.Count == 0
                ? await c.FlushAndReadCommandAsync("DEL"u8, ReferencesKey(version), ct)
                : await c.FlushAndReadCommandAsync("SET"u8, [ReferencesKey(version), string.Join("\n", jobs.Order())], ct);
            if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
            return jobs.Order().ToList();
        }
        finally
        {
            await c.FlushAndReadCommandAsync("DEL"u8, LockKey(version), CancellationToken.None);
        }
    }

    /// <summary>A lock that expires on its own (10 s), so a crashed holder cannot wedge the version.</summary>
    private static async Task LockAsync(RespConnection c, string version, string job, CancellationToken ct)
    {
        for (var attempt = 0; attempt < 200; attempt++)
        {
            var reply = await c.FlushAndReadCommandAsync("SET"u8, [LockKey(version), job, "NX", "PX", "10000"], ct);
            if (reply.Kind == RespKind.SimpleString) return;
            if (reply.Kind == RespKind.Error) throw new RespErrorException(c.Endpoint.ToString(), reply.Text!);
            await Task.Delay(TimeSpan.FromMilliseconds(10 + Random.Shared.Next(0, 40)), ct);
        }
        throw new TimeoutException($"the job reference list of version {version} stayed locked on {c.Endpoint}");
    }

    private async Task<RespConnection> ConnectAsync(CancellationToken ct)
    {
        var host = tier.Hosts.OrderBy(h => h.ToString(), StringComparer.Ordinal).First();
        return await RespConnection.ConnectAsync(host, options.Password, options.ConnectTimeout, ct);
    }

    private static IReadOnlyList<string> Parse(RespReply reply) =>
        reply.Kind == RespKind.Bulk ? Encoding.UTF8.GetString(reply.Bulk!).Split('\n', StringSplitOptions.RemoveEmptyEntries) : [];
}
