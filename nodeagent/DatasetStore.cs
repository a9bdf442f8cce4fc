using System.Collections.Concurrent;
using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace Hpc.NodeAgent;

/// <summary>
/// The node's local copies. Each version is fetched once however many ask at the same time, verified segment by
/// segment, decoded in place into a partial file, checked whole, and published read-only by an atomic rename.
/// Layout under the data directory: <c>complete/&lt;version&gt;.data</c>, <c>partial/&lt;version&gt;.data</c> with its
/// <c>.done</c> journal of finished segment indexes, <c>manifests/&lt;version&gt;.json</c>, and <c>pins.json</c>.
/// Paths are built only from version ids (32 hex digits), never from dataset names.
/// </summary>
public sealed class DatasetStore
{
    private readonly AgentOptions _options;
    private readonly CacheTierClient _tier;
    private readonly ILogger<DatasetStore> _log;
    private readonly object _lock = new();
    private readonly Dictionary<string, LocalCopy> _copies = new();
    private readonly ConcurrentDictionary<string, Lazy<Task<LocalCopy>>> _fetches = new();
    private readonly string _complete, _partial, _manifests, _pinsFile;

    public DatasetStore(IOptions<AgentOptions> options, CacheTierClient tier, ILogger<DatasetStore> log)
    {
        _options = options.Value;
        _tier = tier;
        _log = log;
        var root = Path.GetFullPath(_options.DataDirectory);
        _complete = Path.Combine(root, "complete");
        _partial = Path.Combine(root, "partial");
        _manifests = Path.Combine(root, "manifests");
        _pinsFile = Path.Combine(root, "pins.json");
        foreach (var d in new[] { _complete, _partial, _manifests }) Directory.CreateDirectory(d);
        Recover();
    }

    public string DataDirectory => Path.GetDirectoryName(_complete)!;

    /// <summary>
    /// Before the agent says it is ready: the segment codec must work (a missing native library stops the agent here,
    /// with the reason), and the cache tier's connections are opened, so the first fetch on a freshly started node
    /// neither pays for connection set-up nor learns only then that a host is misconfigured. Unreachable hosts are
    /// logged, not fatal.
    /// </summary>
    public async Task PrepareAsync(CancellationToken ct)
    {
        if (SegmentCodec.SelfCheck() is { } problem) throw new InvalidOperationException($"segment codec self-check failed: {problem}");
        WarmUpMessages();
        var unreachable = await _tier.ConnectAllAsync(ct);
        for (var h = 0; h < unreachable.Length; h++)
            if (unreachable[h] is { } why) _log.LogWarning("Cache host {Host} not reachable at start-up: {Error}", _tier.Hosts[h], why);
    }

    private sealed class LocalCopy(string version, Manifest manifest)
    {
        public string Version { get; } = version;
        public Manifest Manifest { get; } = manifest;
        public bool Complete { get; set; }
        public bool Verified { get; set; }
        public int Leases { get; set; }
        public HashSet<string> Pins { get; } = [];
        public DateTimeOffset LastAccess { get; set; } = DateTimeOffset.UtcNow;
    }

    /// <summary>Result of making a dataset local.</summary>
    public sealed record Ensured(LocalDataset Dataset, string Version);

    /// <summary>Rebuilds the index after a restart: complete copies are reused (re-verified on first use), partial ones resumed.</summary>
    private void Recover()
    {
        var pins = ReadPins();
        foreach (var file in Directory.EnumerateFiles(_complete, "*.data").Concat(Directory.EnumerateFiles(_partial, "*.data")))
        {
            var version = Path.GetFileNameWithoutExtension(file);
            var manifestPath = Path.Combine(_manifests, version + ".json");
            try
            {
                if (!SegmentId.TryParse(version, out _) || !File.Exists(manifestPath)) throw new InvalidDataException("no manifest");
                var bytes = File.ReadAllBytes(manifestPath);
                if (Manifest.VersionOf(bytes) != version) throw new InvalidDataException("manifest does not match its version id");
                var copy = new LocalCopy(version, Manifest.Parse(bytes)) { Complete = file.StartsWith(_complete, StringComparison.Ordinal) };
                if (pins.TryGetValue(version, out var p)) copy.Pins.UnionWith(p);
                _copies[version] = copy;
                _log.LogInformation("Found {State} copy of {Dataset} {Version}", copy.Complete ? "complete" : "partial", copy.Manifest.Name, version);
            }
            catch (Exception e) when (e is IOException or InvalidDataException or UnauthorizedAccessException)
            {
                _log.LogWarning("Discarding {File}: {Reason}", file, e.Message);
                TryDelete(file);
            }
        }
    }

    /// <summary>Makes a version local (resolving "latest" through the cache tier) and returns its description.</summary>
    public async Task<Ensured> EnsureAsync(string name, string? version, bool lease, string? pin, CancellationToken ct)
    {
        DatasetName.Validate(name);
        if (string.IsNullOrEmpty(version) || version == "latest")
            version = await ResolveLatestAsync(name, ct);
        if (!SegmentId.TryParse(version, out _)) throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' is not a valid version id");

        var clock = Stopwatch.StartNew();
        var source = "local";
        LocalCopy? copy;
        lock (_lock) _copies.TryGetValue(version, out copy);
        if (copy is { Complete: true })
        {
            if (copy.Manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{copy.Manifest.Name}', not '{name}'");
            if (!copy.Verified) await Task.Run(() => VerifyComplete(copy), ct);
        }
        else
        {
            source = copy is null ? "fetched" : "resumed";
            var fetch = _fetches.GetOrAdd(version, v => new Lazy<Task<LocalCopy>>(() => FetchAsync(name, v)));
            try { copy = await fetch.Value.WaitAsync(ct); }
            finally { if (fetch.Value.IsCompleted) _fetches.TryRemove(new(version, fetch)); }
            if (copy.Manifest.Name != name) throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{copy.Manifest.Name}', not '{name}'");
        }
        lock (_lock)
        {
            // Taken under the same lock that eviction holds, so a copy handed out is never evicted before its lease.
            if (!_copies.ContainsKey(version)) throw new IOException($"local copy of {version} was evicted while being opened; ask again");
            copy.LastAccess = DateTimeOffset.UtcNow;
            if (lease) copy.Leases++;
            if (pin is not null && copy.Pins.Add(pin)) SavePins();
        }
        return new Ensured(Describe(copy, source, clock.Elapsed.TotalSeconds), version);
    }

    /// <summary>
    /// "latest" is the cache tier's answer. When no cache host answers, the newest complete local copy of the dataset
    /// is served instead (with a warning): a node that has the data keeps working through a cache-tier outage.
    /// </summary>
    private async Task<string> ResolveLatestAsync(string name, CancellationToken ct)
    {
        try
        {
            return await _tier.GetLatestAsync(name, ct)
                   ?? throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' not found on cache hosts {string.Join(", ", _tier.Hosts)}");
        }
        catch (CacheHostUnavailableException e)
        {
            LocalCopy? newest;
            lock (_lock)
                newest = _copies.Values.Where(c => c.Complete && c.Manifest.Name == name).MaxBy(c => c.Manifest.Created);
            if (newest is null) throw;
            _log.LogWarning("Cache tier unreachable ({Error}); serving the newest local copy of {Dataset}, {Version}", e.Message, name, newest.Version);
            return newest.Version;
        }
    }

    private LocalDataset Describe(LocalCopy c, string source, double seconds) => new()
    {
        Name = c.Manifest.Name, Version = c.Version, Path = CompletePath(c.Version), Length = c.Manifest.RawLength,
        StoredLength = c.Manifest.StoredLength, Hash = c.Manifest.Hash, Files = c.Manifest.Files, Source = source, FetchSeconds = seconds,
    };

    private string CompletePath(string v) => Path.Combine(_complete, v + ".data");
    private string PartialPath(string v) => Path.Combine(_partial, v + ".data");
    private string JournalPath(string v) => Path.Combine(_partial, v + ".done");
    private string ManifestPath(string v) => Path.Combine(_manifests, v + ".json");

    private void VerifyComplete(LocalCopy copy)
    {
        unsafe
        {
            using var map = MappedFile.Open(CompletePath(copy.Version), copy.Manifest.RawLength, writable: false);
            if (SegmentFetcher.HashMatches(copy.Manifest, map.Pointer, map.Length)) { copy.Verified = true; return; }
        }
        _log.LogError("Local copy of {Dataset} {Version} failed verification; discarding it", copy.Manifest.Name, copy.Version);
        lock (_lock) _copies.Remove(copy.Version);
        TryDelete(CompletePath(copy.Version));
        throw new CommonDataException(ErrorCode.Integrity, $"local copy of '{copy.Manifest.Name}' version {copy.Version} was damaged and has been discarded; ask again to refetch");
    }

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
        var manifest = new Manifest { Name = "warm/up", RawLength = 1, StoredLength = 1, Hash = new string('0', 32), Segments = [new ManifestSegment(new string('0', 32), 1, 1)] };
        _ = Manifest.Parse(manifest.Serialize()).SegmentIds;
    }

    private async Task<LocalCopy> FetchAsync(string name, string version)
    {
        var clock = Stopwatch.StartNew();
        var (_, manifest) = await _tier.ResolveAsync(name, version);
        var raw = manifest.Serialize();
        LocalCopy copy;
        lock (_lock)
        {
            if (!_copies.TryGetValue(version, out copy!))
            {
                MakeRoom(manifest.RawLength);
                copy = new LocalCopy(version, manifest);
                _copies[version] = copy;
            }
        }
        await File.WriteAllBytesAsync(ManifestPath(version), raw);
        var partial = PartialPath(version);
        var done = new bool[manifest.Segments.Count];
        try
        {
            await using (var f = new FileStream(partial, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.ReadWrite))
                if (f.Length != manifest.RawLength) f.SetLength(manifest.RawLength);
            var resumed = 0;
            using (var map = MappedFile.Open(partial, manifest.RawLength, writable: true))
            using (var file = File.OpenHandle(partial, FileMode.Open, FileAccess.ReadWrite, FileShare.ReadWrite))
            {
                resumed = LoadJournal(version, manifest, map, done);
                var wanted = Enumerable.Range(0, done.Length).Where(i => !done[i]).ToArray();
                _log.LogInformation("Fetching {Dataset} {Version}: {Wanted} of {Total} segments ({Resumed} already on the node)",
                    name, version, wanted.Length, done.Length, resumed);
                await using (var journal = new FileStream(JournalPath(version), FileMode.Append, FileAccess.Write, FileShare.Read, 4096))
                {
                    var gate = new object();
                    await SegmentFetcher.FetchToFileAsync(_tier, manifest, version, file, wanted, index =>
                    {
                        Span<byte> entry = stackalloc byte[4];
                        System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(entry, index);
                        lock (gate) journal.Write(entry);
                    }, CancellationToken.None);
                }
                // On a disk data directory the bytes must be durable before the copy is published under its final name.
                RandomAccess.FlushToDisk(file);
                if (!HashMatches(manifest, map))
                {
                    TryDelete(JournalPath(version));
                    throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version {version}: whole-dataset hash mismatch after fetch");
                }
            }
            if (OperatingSystem.IsWindows()) File.SetAttributes(partial, FileAttributes.ReadOnly);
            else File.SetUnixFileMode(partial, UnixFileMode.UserRead | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
            File.Move(partial, CompletePath(version), overwrite: true);
            TryDelete(JournalPath(version));
            lock (_lock) { copy.Complete = true; copy.Verified = true; }
            _log.LogInformation("Published {Dataset} {Version}: {Bytes} bytes in {Seconds:0.00} s ({Rate:0} MB/s)",
                name, version, manifest.RawLength, clock.Elapsed.TotalSeconds, manifest.RawLength / 1e6 / Math.Max(1e-9, clock.Elapsed.TotalSeconds));
            WriteTelemetry(manifest, version, clock.Elapsed.TotalSeconds, resumed > 0 ? "resumed" : "fetched");
            return copy;
        }
        catch (Exception e)
        {
            _log.LogError("Fetch of {Dataset} {Version} failed: {Error}", name, version, e.Message);
            if (e is CommonDataException { Code: ErrorCode.Integrity }) lock (_lock) { _copies.Remove(version); TryDelete(partial); TryDelete(JournalPath(version)); }
            throw;
        }
    }

    private readonly object _telemetryLock = new();

    /// <summary>One "fetch" line per completed fetch, so a cluster's fetch times can be reported like a bench run.</summary>
    private void WriteTelemetry(Manifest manifest, string version, double seconds, string source)
    {
        var path = _options.TelemetryFile switch
        {
            "none" => null,
            "" => Path.Combine(DataDirectory, "telemetry.jsonl"),
            var p => p,
        };
        if (path is null) return;
        var line = JsonSerializer.Serialize(new Dictionary<string, object>
        {
            ["kind"] = "fetch", ["schema"] = 1, ["time"] = DateTimeOffset.UtcNow, ["node"] = _options.NodeName,
            ["dataset"] = manifest.Name, ["version"] = version, ["rawBytes"] = manifest.RawLength,
            ["storedBytes"] = manifest.StoredLength, ["seconds"] = Math.Round(seconds, 4), ["source"] = source, ["hosts"] = _tier.Hosts.Count,
        });
        try
        {
            lock (_telemetryLock) File.AppendAllText(path, line + "\n");
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _log.LogWarning("Could not write telemetry to {Path}: {Error}", path, e.Message);
        }
    }

    private static unsafe bool HashMatches(Manifest m, MappedFile map) => SegmentFetcher.HashMatches(m, map.Pointer, map.Length);

    /// <summary>
    /// Reads the journal of a partial copy. Entries are re-verified against their content ids, because the journal
    /// may have reached the disk before the data did.
    /// </summary>
    private unsafe int LoadJournal(string version, Manifest manifest, MappedFile map, bool[] done)
    {
        var path = JournalPath(version);
        if (!File.Exists(path)) return 0;
        var bytes = File.ReadAllBytes(path);
        var count = 0;
        for (var i = 0; i + 4 <= bytes.Length; i += 4)
        {
            var index = System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(bytes.AsSpan(i));
            if (index < 0 || index >= done.Length || done[index]) continue;
            var s = manifest.Segments[index];
            var span = new ReadOnlySpan<byte>(map.Pointer + manifest.Offsets[index], s.RawLength);
            if (SegmentId.Of(span) == manifest.SegmentIds[index]) { done[index] = true; count++; }
        }
        return count;
    }

    /// <summary>Evicts unleased, unpinned copies, least recently used first, until <paramref name="needed"/> fits.</summary>
    private void MakeRoom(long needed)
    {
        var used = _copies.Values.Sum(c => c.Manifest.RawLength);
        if (used + needed <= _options.BudgetBytes) return;
        // Abandoned partial copies (a fetch that failed and was not asked for again) serve nobody: they go first.
        var candidates = _copies.Values
            .Where(c => c.Leases == 0 && c.Pins.Count == 0 && (c.Complete || !_fetches.ContainsKey(c.Version)))
            .OrderBy(c => c.Complete).ThenBy(c => c.LastAccess).ToList();
        foreach (var victim in candidates)
        {
            _log.LogInformation("Evicting {Dataset} {Version} ({Bytes} bytes, last used {Last:u})", victim.Manifest.Name, victim.Version, victim.Manifest.RawLength, victim.LastAccess);
            Remove(victim);
            used -= victim.Manifest.RawLength;
            if (used + needed <= _options.BudgetBytes) return;
        }
        throw new CommonDataException(ErrorCode.NoSpace, 
            $"node data budget of {_options.BudgetBytes} bytes cannot hold {needed} more: {used} bytes are leased, pinned or being fetched");
    }

    private void Remove(LocalCopy c)
    {
        _copies.Remove(c.Version);
        TryDelete(CompletePath(c.Version));
        TryDelete(PartialPath(c.Version));
        TryDelete(JournalPath(c.Version));
        TryDelete(ManifestPath(c.Version));
    }

    public void Lease(string version, int delta)
    {
        lock (_lock)
            if (_copies.TryGetValue(version, out var c)) { c.Leases = Math.Max(0, c.Leases + delta); c.LastAccess = DateTimeOffset.UtcNow; }
    }

    /// <summary>Drops a pin; never fails because the data is already gone. Returns whether the copy was evicted.</summary>
    public bool Release(string name, string? version, string pin, bool evict)
    {
        lock (_lock)
        {
            var matches = _copies.Values.Where(c => c.Manifest.Name == name && (string.IsNullOrEmpty(version) || version == "latest" || c.Version == version)).ToList();
            var evicted = false;
            foreach (var c in matches)
            {
                c.Pins.Remove(pin);
                if (evict && c.Complete && c.Leases == 0 && c.Pins.Count == 0) { Remove(c); evicted = true; }
            }
            SavePins();
            return evicted;
        }
    }

    public AgentStatus Status()
    {
        lock (_lock)
        {
            return new AgentStatus
            {
                Node = _options.NodeName, DataDirectory = DataDirectory, BudgetBytes = _options.BudgetBytes,
                UsedBytes = _copies.Values.Sum(c => c.Manifest.RawLength),
                Copies = _copies.Values.OrderBy(c => c.Manifest.Name).Select(c => new CopyStatus
                {
                    Name = c.Manifest.Name, Version = c.Version, Length = c.Manifest.RawLength,
                    State = c.Complete ? "complete" : _fetches.ContainsKey(c.Version) ? "fetching" : "partial",
                    Leases = c.Leases, Pins = c.Pins.Order().ToList(), LastAccess = c.LastAccess,
                }).ToList(),
            };
        }
    }

    private Dictionary<string, string[]> ReadPins()
    {
        try
        {
            return File.Exists(_pinsFile) ? JsonSerializer.Deserialize<Dictionary<string, string[]>>(File.ReadAllBytes(_pinsFile)) ?? [] : [];
        }
        catch (JsonException e)
        {
            _log.LogWarning("Ignoring unreadable {File}: {Reason}", _pinsFile, e.Message);
            return [];
        }
    }

    private void SavePins()
    {
        var pins = _copies.Values.Where(c => c.Pins.Count > 0).ToDictionary(c => c.Version, c => c.Pins.Order().ToArray());
        var tmp = _pinsFile + ".tmp";
        File.WriteAllBytes(tmp, JsonSerializer.SerializeToUtf8Bytes(pins));
        File.Move(tmp, _pinsFile, overwrite: true);
    }

    private void TryDelete(string path)
    {
        try { File.Delete(path); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { _log.LogWarning("Could not delete {Path}: {Reason}", path, e.Message); }
    }
}

