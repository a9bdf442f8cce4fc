using System.Reflection;
using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.NodeAgent;

/// <summary>
/// The node's local copies, as the pipe server sees them: make a version local (<see cref="EnsureAsync"/>), lease,
/// pin, release, report. Put together from the data directory's layout (<see cref="NodeAgent.DataDirectory"/>), the
/// in-memory index with the budget (<see cref="CopyIndex"/>) and the fetches (<see cref="FetchCoordinator"/>) from a
/// <see cref="ISegmentSource"/>.
/// </summary>
public sealed class DatasetStore
{
    private readonly NodeAgentOptions _options;
    private readonly ISegmentSource _source;
    private readonly ILogger _log;
    private readonly DataDirectory _directory;
    private readonly CopyIndex _index;
    private readonly FetchCoordinator _fetches;
    private readonly VersionWriters _writers = new();

    public DatasetStore(NodeAgentOptions options, ISegmentSource source, ILoggerFactory? loggers = null)
    {
        loggers ??= NullLoggerFactory.Instance;
        _options = options;
        _source = source;
        _log = loggers.CreateLogger<DatasetStore>();
        var files = new AgentFiles(options.AdminGroupId(), _log);
        _directory = new DataDirectory(options.DataDirectory, _log, files);
        _index = new CopyIndex(options.Budget, Removed, _directory.SavePins, () => FreeBytes(_directory.Root), _directory.Root);
        var telemetry = new FetchTelemetry(FetchTelemetry.Resolve(options.TelemetryFile, _directory.Root), options.NodeName, source.Hosts.Count, _log, files);
        _fetches = new FetchCoordinator(_directory, _index, source, telemetry, loggers.CreateLogger<FetchCoordinator>(), _writers, IngestStall);
        Recover();
    }

    public string DataDirectory => _directory.Root;

    private TimeSpan IngestStall => _options.IngestStallTimeout;

    /// <summary>Result of making a dataset local.</summary>
    public sealed record Ensured(LocalDataset Dataset, string Version);

    /// <summary>
    /// Before the agent says it is ready: the segment codec must work (a missing native library stops the agent here,
    /// with the reason), and the source's connections are opened, so the first fetch on a freshly started node
    /// neither pays for connection set-up nor learns only then that a host is misconfigured. Unreachable hosts are
    /// logged, not fatal (the tier may come up later, and local copies are served meanwhile). Refused credentials stop
    /// the agent here when it holds no copy, since every fetch would be refused until they are corrected, and the first
    /// to hear of it would be a job's node prep, with the right password, told of this agent's wrong one; an agent that
    /// holds copies keeps serving them, with a warning.
    /// </summary>
    public async Task PrepareAsync(CancellationToken ct)
    {
        if (SegmentCodec.SelfCheck() is { } problem) throw new InvalidOperationException($"segment codec self-check failed: {problem}");
        WarmUpMessages();
        string?[] unreachable;
        try
        {
            unreachable = await _source.ConnectAsync(ct);
        }
        catch (CommonDataException e) when (e.Code == ErrorCode.AccessDenied)
        {
            // A node that holds copies keeps serving them (a rotated password must not take data away from running
            // jobs); one that holds none has nothing to serve, and says so at once.
            if (_index.CompleteCount == 0)
                throw new CommonDataException(ErrorCode.AccessDenied, $"the cache tier refuses this agent, so it would refuse every fetch: {e.Message}", e);
            _log.ServingLocalCopiesWhileRefused(e.Message, _index.CompleteCount);
            return;
        }
        for (var h = 0; h < unreachable.Length; h++)
            if (unreachable[h] is { } why) _log.CacheHostUnreachable(_source.Hosts[h], why);
    }

    /// <summary>
    /// Rebuilds the index after a restart: complete copies are reused (re-verified on first use), partial ones are
    /// resumed by the next request for them, anything without a matching manifest is discarded. Copies count as last
    /// used when their file was last written.
    /// </summary>
    private void Recover()
    {
        var pins = _directory.ReadPins();
        foreach (var file in _directory.DataFiles().OrderBy(f => f.LastWriteUtc))
        {
            try
            {
                if (!SegmentId.TryParse(file.Name, out _)) throw new InvalidDataException(SegmentId.IsLegacy(file.Name) ? Manifest.LegacyIds : "not named by a version id");
                var manifest = _directory.ReadManifest(file.Name);
                var expected = file.Complete ? _directory.CompletePath(file.Name, manifest) : _directory.PartialPath(file.Name, manifest);
                if (file.Path != expected) throw new InvalidDataException($"its manifest lays the copy out as {expected}");
                var (segments, bytes) = file.Complete ? (0, 0L) : JournalProgress(file.Name, manifest);
                _index.Restore(file.Name, manifest, file.Complete, pins.GetValueOrDefault(file.Name) ?? [], segments, bytes, file.LastWriteUtc);
                _log.CopyFound(file.Complete ? "complete" : "partial", manifest.Name, file.Name);
            }
            catch (Exception e) when (e is IOException or InvalidDataException or UnauthorizedAccessException)
            {
                _log.DiscardingFile(file.Path, e.Message);
                _directory.TryDelete(file.Path);
            }
        }
    }

    /// <summary>The segments a partial copy's journal records (distinct, in range) and their raw bytes.</summary>
    private (int Segments, long Bytes) JournalProgress(string version, Manifest manifest)
    {
        var done = _directory.ReadJournal(version).Where(i => i >= 0 && i < manifest.Segments.Count).Distinct().ToArray();
        return (done.Length, done.Sum(i => (long)manifest.Segments[i].RawLength));
    }

    /// <summary>A copy left the index (evicted, released, damaged, failed): its files go with it.</summary>
    /// <summary>Bytes the data directory's file system still has for this process (statvfs f_bavail).</summary>
    private static long FreeBytes(string root)
    {
        try { return new DriveInfo(root).AvailableFreeSpace; }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException) { return long.MaxValue; }
    }

    private void Removed(LocalCopy c)
    {
        _log.RemovingCopy(c.Complete ? "complete" : "partial", c.Manifest.Name, c.Version, c.Manifest.RawLength, c.LastAccess);
        _directory.Delete(c.Version);
        AgentMetrics.Instance.Evictions.Add(1);
    }

    /// <summary>
    /// Makes a version local (resolving "latest" through the source) and returns its description. <paramref name="authorize"/>
    /// sees the version's manifest before the copy is leased, pinned or described, and throws to refuse it: a local copy is
    /// checked before anything else is done for the caller; for one that is not yet local the manifest alone is fetched
    /// and checked first, so a refused caller moves no data and takes no room on the node.
    /// </summary>
    /// <param name="pinOwner">The uid of the caller pinning it: only that user (or root, or the agent's) may drop the pin.</param>
    /// <param name="pinQuota">Bytes <paramref name="pinOwner"/> may hold pinned (<see cref="CopyIndex.Acquire"/>); null: none.</param>
    public async Task<Ensured> EnsureAsync(string name, string? version, bool lease, string? pin, CancellationToken ct, Action<Manifest>? authorize = null,
        uint pinOwner = AccessPolicy.NoOwner, long? pinQuota = null)
    {
        DatasetName.Validate(name);
        if (string.IsNullOrEmpty(version) || version == "latest")
            version = await ResolveLatestAsync(name, ct);
        else if (VersionPrefix.IsPrefix(version))
            version = await ResolvePrefixAsync(name, version, ct);
        if (SegmentId.IsLegacy(version)) throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version '{version}': {Manifest.LegacyIds} ('hpcdata stage' it again)");
        if (!SegmentId.TryParse(version, out _)) throw new CommonDataException(ErrorCode.NotFound, VersionPrefix.NotAVersion(name, version));

        var clock = Stopwatch.StartNew();
        var source = "local";
        long reusedBytes = 0, resumedBytes = 0;
        var copy = _index.Find(version);
        if (copy is { Complete: true })
        {
            CheckBelongs(copy, name);
            authorize?.Invoke(copy.Manifest);
            if (!copy.Verified) await Task.Run(() => VerifyComplete(copy), ct);
        }
        else
        {
            if (copy is not null && copy.Manifest.Name == name) authorize?.Invoke(copy.Manifest); // partial: its manifest is known
            // Otherwise the manifest alone first: a caller who may not read the version costs the tier and the node
            // one manifest, not the data, and evicts nobody's copy to make room for it.
            else if (authorize is not null || (pin is not null && pinQuota is not null))
            {
                var manifest = await _source.GetManifestAsync(name, version, ct);
                authorize?.Invoke(manifest);
                if (pin is not null && pinQuota is { } quota) _index.CheckPinQuota(manifest, version, pinOwner, quota);
            }
            var fetched = await _fetches.FetchAsync(name, version, ct);
            (copy, source, reusedBytes, resumedBytes) = (fetched.Copy, fetched.Resumed ? "resumed" : "fetched", fetched.ReusedBytes, fetched.ResumedBytes);
            CheckBelongs(copy, name);
            authorize?.Invoke(copy.Manifest);
        }
        _index.Acquire(version, lease, pin, pinOwner, pinQuota);
        var described = Describe(copy, source, clock.Elapsed.TotalSeconds);
        (described.ReusedBytes, described.ResumedBytes) = (reusedBytes, resumedBytes);
        return new Ensured(described, version);
    }

    /// <summary>
    /// Begins an ingest of stored segments of <paramref name="version"/> that a process on the node obtained elsewhere
    /// (see <see cref="SegmentIngest"/>). <paramref name="serializedManifest"/> is the manifest as stored: it must hash
    /// to the version and name the dataset, and the agent's own cache tier must hold exactly that manifest
    /// (<see cref="VouchAsync"/>) unless the node already has the version. Waits while a fetch or another ingest of the
    /// version writes it (abandoning one that has stalled). <paramref name="authorize"/> sees the manifest first and
    /// throws to refuse the ingest. Dispose the result to end the ingest.
    /// </summary>
    /// <param name="vouched">The manifest came from another agent of the cluster (over links authenticated by the
    /// cluster's peer key), which resolved it from its own cache tier: the tier is not asked again. At 10,000 nodes that
    /// question would have the tier send every node the manifest (0.6 MB per GB of data), many times the data itself.</param>
    public Task<SegmentIngest> BeginIngestAsync(string name, string version, ReadOnlyMemory<byte> serializedManifest, CancellationToken ct,
        Action<Manifest>? authorize = null, bool vouched = false) =>
        SegmentIngest.BeginAsync(_directory, _index, _writers, name, version, serializedManifest, _log, ct,
            vouched ? null : token => VouchAsync(name, version, serializedManifest, token), authorize, IngestStall, _options.IngestMinRate.BytesPerSecond);

    /// <summary>
    /// Checks an offered manifest against the agent's own cache tier: anyone on the node can run a fan-out against a
    /// cache host of their own, and what the agent ingests it later serves under the dataset's name — to readers who
    /// trust the agent's tier, even while that tier is down. The tier must hold the version; a version it does not have
    /// or a tier that cannot be asked is refused. The ingest has checked that the offered bytes hash to the version and
    /// name the dataset, and the version id is that hash, so the tier holding a manifest under the id is the tier
    /// holding these bytes: it is asked whether it does, not for the manifest, which at 10,000 nodes offered one at
    /// once would be every node reading the whole manifest from every host.
    /// </summary>
    private async Task VouchAsync(string name, string version, ReadOnlyMemory<byte> offered, CancellationToken ct)
    {
        var tier = string.Join(", ", _source.Hosts);
        if (Manifest.VersionOf(offered.Span) != version)
            throw new CommonDataException(ErrorCode.AccessDenied, $"ingest of '{name}' version {version} refused: the manifest sent does not hash to the version");
        bool held;
        try
        {
            held = await _source.HoldsManifestAsync(version, ct);
        }
        catch (CommonDataException e) when (e.Code is ErrorCode.Unavailable or ErrorCode.Timeout)
        {
            throw new CommonDataException(ErrorCode.Unavailable,
                $"ingest of '{name}' version {version} refused: the agent's cache tier ({tier}) cannot be reached to vouch for it ({e.Message})", e);
        }
        catch (CommonDataException e)
        {
            throw new CommonDataException(ErrorCode.AccessDenied,
                $"ingest of '{name}' version {version} refused: the agent's cache tier ({tier}) does not vouch for that version ({e.Message})", e);
        }
        if (!held)
            throw new CommonDataException(ErrorCode.AccessDenied,
                $"ingest of '{name}' version {version} refused: the agent's cache tier ({tier}) does not vouch for that version (it holds no such version)");
    }

    private static void CheckBelongs(LocalCopy copy, string name)
    {
        if (copy.Manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version '{copy.Version}' belongs to dataset '{copy.Manifest.Name}', not '{name}'");
    }

    /// <summary>
    /// "latest" is the source's answer. When no cache host answers, the newest complete local copy of the dataset is
    /// served instead (with a warning): a node that has the data keeps working through a cache-tier outage. So it is
    /// when the hosts answer but none knows the dataset — they restarted empty, or lost it — unless the tier keeps a
    /// record that the copy's version was removed: only a removal takes a dataset away from a node that holds it.
    /// </summary>
    private async Task<string> ResolveLatestAsync(string name, CancellationToken ct)
    {
        try
        {
            if (await _source.GetLatestAsync(name, ct) is { } latest) return latest;
            var held = _index.NewestComplete(name);
            if (held is null || await _source.WasRemovedAsync(name, held.Version, ct))
                throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' not found on cache hosts {string.Join(", ", _source.Hosts)}");
            _log.ServingLocalCopyTheTierLost(name, held.Version);
            return held.Version;
        }
        catch (CommonDataException e) when (e.Code == ErrorCode.Unavailable)
        {
            var newest = _index.NewestComplete(name);
            if (newest is null) throw;
            _log.ServingNewestLocalCopy(e.Message, name, newest.Version);
            return newest.Version;
        }
        catch (CommonDataException e) when (e.Code == ErrorCode.AccessDenied)
        {
            // Only the tier answers here, so this is the agent's own credentials refused: like an outage, it cannot
            // show a removal either, and the verified copy is served with a warning that says what to fix.
            var newest = _index.NewestComplete(name);
            if (newest is null) throw new CommonDataException(ErrorCode.AccessDenied, $"the cache tier refuses this agent: {e.Message}", e);
            _log.ServingLocalCopyWhileRefused(e.Message, name, newest.Version);
            return newest.Version;
        }
    }

    private LocalDataset Describe(LocalCopy c, string source, double seconds) => new()
    {
        Name = c.Manifest.Name, Version = c.Version, Path = _directory.CompletePath(c.Version, c.Manifest), Length = c.Manifest.RawLength,
        StoredLength = c.Manifest.StoredLength, Hash = c.Manifest.Hash, Files = c.Manifest.Files, Source = source, FetchSeconds = seconds,
    };

    /// <summary>A complete copy found at start-up is checked whole on first use; a damaged one is discarded.</summary>
    private void VerifyComplete(LocalCopy copy)
    {
        try
        {
            using var files = _directory.OpenComplete(copy.Version, copy.Manifest);
            if (files.HashMatches(copy.Manifest.Hash)) { _index.Verified(copy.Version); return; }
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or InvalidDataException)
        {
            _log.LocalCopyUnreadable(copy.Manifest.Name, copy.Version, e.Message);
        }
        _log.LocalCopyDamaged(copy.Manifest.Name, copy.Version);
        _index.Remove(copy.Version);
        throw new CommonDataException(ErrorCode.Integrity, $"local copy of '{copy.Manifest.Name}' version {copy.Version} was damaged and has been discarded; ask again to refetch");
    }

    public void Lease(string version, int delta) => _index.Lease(version, delta);

    /// <summary>
    /// A version given by the start of its id: a copy of it on this node answers without asking the tier (so a node
    /// serves it through a tier outage, as it does a whole id); otherwise the tier resolves it.
    /// </summary>
    private async Task<string> ResolvePrefixAsync(string name, string prefix, CancellationToken ct)
    {
        var local = _index.VersionsOf(name).Where(v => v.StartsWith(prefix, StringComparison.OrdinalIgnoreCase)).ToList();
        if (local.Count > 0) return VersionPrefix.Choose(name, prefix, local, "on this node");
        return await _source.ResolveVersionPrefixAsync(name, prefix, ct);
    }

    /// <summary>For a release: only the node's copies can be released, so a prefix is resolved among them; none is no error.</summary>
    private string? LocalVersion(string name, string? version) =>
        VersionPrefix.IsPrefix(version) && _index.VersionsOf(name).Where(v => v.StartsWith(version!, StringComparison.OrdinalIgnoreCase)).ToList() is { Count: > 0 } local
            ? VersionPrefix.Choose(name, version!, local, "on this node")
            : version;

    /// <summary>
    /// Drops a pin; never fails because the data is already gone. Returns whether a copy was evicted. With
    /// <paramref name="access"/>, it is <paramref name="caller"/>'s release and checked (<see cref="CopyIndex.Release"/>).
    /// </summary>
    public bool Release(string name, string? version, string pin, bool evict, AccessPolicy? access = null, PeerCredentials? caller = null) =>
        _index.Release(name, LocalVersion(name, version), pin, evict, access, caller);

    /// <inheritdoc cref="CopyIndex.Release(string, string?, string, bool, AccessPolicy?, PeerCredentials?, out int)"/>
    public bool Release(string name, string? version, string pin, bool evict, AccessPolicy? access, PeerCredentials? caller, out int released) =>
        _index.Release(name, LocalVersion(name, version), pin, evict, access, caller, out released);

    /// <summary>The node's state; its copies only those whose manifest <paramref name="visible"/> admits (all when null).</summary>
    /// <param name="mayRelease">Given a pin's owner, whether the caller may release it (each copy then lists those pins).</param>
    public AgentStatus Status(Func<Manifest, bool>? visible = null, Func<uint, bool>? mayRelease = null) => new()
    {
        Node = _options.NodeName, DataDirectory = DataDirectory, BudgetBytes = _options.Budget.Bytes,
        UsedBytes = _index.UsedBytes, Copies = _index.Snapshot(visible, mayRelease), CpuSeconds = Environment.CpuUsage.TotalTime.TotalSeconds,
        Version = ProgramVersion,
    };

    private static readonly string ProgramVersion =
        typeof(DatasetStore).Assembly.GetCustomAttribute<AssemblyInformationalVersionAttribute>()?.InformationalVersion ?? "unknown";

    /// <summary>
    /// One JSON round trip of each message the first request involves. Every agent of a job gets that request at the
    /// same moment, and each first use of a message type costs type loading and compilation; done here, before the agent
    /// is ready, it does not delay the first fetch.
    /// </summary>
    private static void WarmUpMessages()
    {
        var request = JsonSerializer.SerializeToUtf8Bytes(new AgentRequest { Op = AgentOps.Prefetch, Dataset = "warm/up" }, AgentJson.Default.AgentRequest);
        JsonSerializer.Deserialize(request, AgentJson.Default.AgentRequest);
        var response = JsonSerializer.SerializeToUtf8Bytes(new AgentResponse { Ok = true, Dataset = new LocalDataset { Name = "warm/up", Version = "0", Path = "/" } },
            AgentJson.Default.AgentResponse);
        JsonSerializer.Deserialize(response, AgentJson.Default.AgentResponse);
        var manifest = new Manifest { Name = "warm/up", RawLength = 1, StoredLength = 1, Hash = new string('0', 32), Segments = [new ManifestSegment(new string('0', SegmentId.HexLength), 1, 1)] };
        _ = Manifest.Parse(manifest.Serialize()).SegmentIds;
    }
}
