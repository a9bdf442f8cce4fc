using Hpc.CommonData.Cache;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;

namespace Hpc.NodeAgent;

/// <summary>
/// Where the agent's data comes from: "latest" pointers, manifests and segments. The cache tier in production
/// (<see cref="CacheTierSource"/>); an in-memory source in unit tests.
/// </summary>
public interface ISegmentSource
{
    /// <summary>The source's hosts, for messages and telemetry.</summary>
    IReadOnlyList<string> Hosts { get; }

    /// <summary>Opens connections ahead of the first request; per host, why it cannot be reached, or null. Throws
    /// <see cref="CommonDataException"/> with <see cref="ErrorCode.AccessDenied"/> when a host refuses the credentials.</summary>
    Task<string?[]> ConnectAsync(CancellationToken ct);

    /// <summary>
    /// The version "latest" names, or null when the dataset is unknown. Throws <see cref="CommonDataException"/> with
    /// <see cref="ErrorCode.Unavailable"/> when no host can answer.
    /// </summary>
    Task<string?> GetLatestAsync(string name, CancellationToken ct);

    /// <summary>
    /// The whole id of the version of <paramref name="name"/> that starts with <paramref name="prefix"/>
    /// (<see cref="VersionPrefix"/>): <see cref="ErrorCode.NotFound"/> when none does, <see cref="ErrorCode.BadRequest"/>
    /// naming them when several do.
    /// </summary>
    Task<string> ResolveVersionPrefixAsync(string name, string prefix, CancellationToken ct);

    /// <summary>The verified manifest of <paramref name="version"/>, which must belong to <paramref name="name"/>.</summary>
    Task<Manifest> GetManifestAsync(string name, string version, CancellationToken ct);

    /// <summary>
    /// Whether the source holds a manifest under <paramref name="version"/> (the id is the manifest's hash, so bytes that
    /// hash to it are that manifest): what an offered manifest is vouched for by. <see cref="ErrorCode.Unavailable"/>
    /// when no host answers.
    /// </summary>
    Task<bool> HoldsManifestAsync(string version, CancellationToken ct);

    /// <summary>Whether the source keeps a record that <paramref name="version"/> of <paramref name="name"/> was removed.</summary>
    Task<bool> WasRemovedAsync(string name, string version, CancellationToken ct);

    /// <summary>
    /// Fetches the <paramref name="wanted"/> segments (indexes into the manifest), verifies each against its id, writes
    /// its raw bytes at its offset in <paramref name="files"/>, then calls <paramref name="onSegment"/> (possibly from
    /// several threads at once). A segment no host has intact fails the fetch (<see cref="ErrorCode.Integrity"/> or
    /// <see cref="ErrorCode.NotFound"/>); a failure writing the file is thrown as it is (e.g. a full disk).
    /// </summary>
    Task FetchAsync(Manifest manifest, string version, DatasetFiles files, IReadOnlyList<int> wanted, Action<int> onSegment, CancellationToken ct);
}

/// <summary>The cache tier as the agent's segment source.</summary>
public sealed class CacheTierSource(CacheTierClient tier) : ISegmentSource
{
    public IReadOnlyList<string> Hosts { get; } = tier.Hosts.Select(h => h.ToString()).ToArray();

    public Task<string?[]> ConnectAsync(CancellationToken ct) => tier.ConnectAllAsync(ct);

    public Task<string?> GetLatestAsync(string name, CancellationToken ct) => tier.GetLatestAsync(name, ct);

    public Task<string> ResolveVersionPrefixAsync(string name, string prefix, CancellationToken ct) => tier.Catalog.ResolveVersionPrefixAsync(name, prefix, ct);

    public async Task<Manifest> GetManifestAsync(string name, string version, CancellationToken ct) => (await tier.ResolveAsync(name, version, ct)).Manifest;

    public Task<bool> HoldsManifestAsync(string version, CancellationToken ct) => tier.Catalog.HoldsManifestAsync(version, ct);

    public Task<bool> WasRemovedAsync(string name, string version, CancellationToken ct) => tier.Catalog.WasRemovedAsync(name, version, ct);

    public Task FetchAsync(Manifest manifest, string version, DatasetFiles files, IReadOnlyList<int> wanted, Action<int> onSegment, CancellationToken ct) =>
        SegmentFetcher.FetchToFileAsync(tier, manifest, version, files, wanted, onSegment, ct);
}
