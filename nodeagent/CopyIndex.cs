using Hpc.CommonData.Agent;
using Hpc.CommonData.Format;

namespace Hpc.NodeAgent;

/// <summary>
/// A pin on a copy: its name (the job id node preparation pins with) and the uid of the process that pinned it. Two
/// users pinning under the same name hold two pins, so nobody can take over or drop a pin by guessing its name.
/// </summary>
public readonly record struct Pin(string Name, uint Owner);

/// <summary>One version's local copy as the index knows it. Mutated only by <see cref="CopyIndex"/>, under its lock.</summary>
public sealed class LocalCopy(string version, Manifest manifest)
{
    public string Version { get; } = version;
    public Manifest Manifest { get; } = manifest;
    public bool Complete { get; internal set; }
    /// <summary>The whole-dataset hash was checked since the agent started (complete copies found at start-up are not).</summary>
    public bool Verified { get; internal set; }
    public bool Fetching { get; internal set; }
    /// <summary>A process on the node is handing the agent segments of this version (an ingest is its writer now).</summary>
    public bool Ingesting { get; internal set; }
    public int Leases { get; internal set; }
    /// <summary>Who holds the copy on the node and for whom: a pin name (a job id) and the user who pinned it.</summary>
    public HashSet<Pin> Pins { get; } = [];
    public DateTimeOffset LastAccess { get; internal set; }
    /// <summary>Order of last use (higher is more recent); eviction takes the lowest first.</summary>
    internal long Recency { get; set; }
    public int SegmentsDone { get; internal set; }
    public long BytesDone { get; internal set; }

    /// <summary>
    /// Segments of this partial copy that this agent process verified and wrote itself (an ingest that ended): the fetch
    /// that completes the copy takes their journal entries without reading and hashing them again. Entries from before
    /// a restart are not in it and are re-verified.
    /// </summary>
    internal bool[]? VerifiedHere { get; set; }

    private Dictionary<SegmentId, int>? _segmentIndex;

    /// <summary>Where each content id lies in this version (its first occurrence): what a delta fetch looks segments up in.</summary>
    public Dictionary<SegmentId, int> SegmentIndex => LazyInitializer.EnsureInitialized(ref _segmentIndex, () =>
    {
        var index = new Dictionary<SegmentId, int>(Manifest.Segments.Count);
        var ids = Manifest.SegmentIds;
        for (var i = 0; i < ids.Count; i++) index.TryAdd(ids[i], i);
        return index;
    });
}

/// <summary>
/// The node's copies in memory: which versions are here, complete or partial, who leases or pins them, how far their
/// fetch got, and what the budget allows. Thread-safe (one lock); touches no files. What must happen on disk is told
/// through two hooks, called under the lock so no other request sees the index ahead of the disk: a copy removed (its
/// files go) and the pins changed (pins.json is rewritten).
/// </summary>
/// <param name="freeBytes">The data directory's real free space (statvfs), asked before a new copy is admitted, so a fetch
/// that cannot fit fails at once instead of filling the disk; null to trust the budget alone.</param>
public sealed class CopyIndex(ByteSize budget, Action<LocalCopy>? removed = null, Action<IReadOnlyDictionary<string, Pin[]>>? pinsChanged = null,
    Func<long>? freeBytes = null, string? directory = null)
{
    private readonly object _lock = new();
    private readonly Dictionary<string, LocalCopy> _copies = new();
    private long _clock;

    public ByteSize Budget { get; } = budget;

    public long UsedBytes { get { lock (_lock) return _copies.Values.Sum(c => c.Manifest.RawLength); } }

    public LocalCopy? Find(string version) { lock (_lock) return _copies.GetValueOrDefault(version); }

    /// <summary>The versions of <paramref name="name"/> the node has, complete or partial.</summary>
    public List<string> VersionsOf(string name) { lock (_lock) return _copies.Values.Where(c => c.Manifest.Name == name).Select(c => c.Version).ToList(); }

    /// <summary>
    /// Leases every complete copy for which <paramref name="useful"/> holds (a delta fetch reads segments from them), so
    /// none is evicted while it is read; give each back with <see cref="Lease"/>(version, -1).
    /// </summary>
    public List<LocalCopy> LeaseComplete(Func<LocalCopy, bool> useful)
    {
        List<LocalCopy> candidates;
        lock (_lock) candidates = _copies.Values.Where(c => c.Complete).ToList();
        var leased = new List<LocalCopy>();
        foreach (var c in candidates.Where(useful))
            lock (_lock)
                if (_copies.TryGetValue(c.Version, out var still) && still == c && c.Complete) { c.Leases++; leased.Add(c); }
        return leased;
    }

    /// <summary>Adds a copy found on disk at start-up (no budget check: it is already there).</summary>
    public void Restore(string version, Manifest manifest, bool complete, IEnumerable<Pin> pins, int segmentsDone, long bytesDone, DateTimeOffset lastAccess)
    {
        lock (_lock)
        {
            var copy = new LocalCopy(version, manifest) { Complete = complete, LastAccess = lastAccess, Recency = ++_clock };
            copy.Pins.UnionWith(pins);
            (copy.SegmentsDone, copy.BytesDone) = complete ? (manifest.Segments.Count, manifest.RawLength) : (segmentsDone, bytesDone);
            _copies[version] = copy;
        }
    }

    /// <summary>
    /// The copy a fetch writes into, marked as fetching: the existing partial copy, or a new one once the budget has room
    /// for it (evicting unleased, unpinned copies, least recently used first). Throws <see cref="ErrorCode.NoSpace"/>
    /// when leased, pinned and in-flight copies leave no room.
    /// </summary>
    public LocalCopy BeginFetch(string version, Manifest manifest)
    {
        lock (_lock)
        {
            var copy = GetOrAdd(version, manifest, out _);
            copy.Fetching = true;
            return copy;
        }
    }

    /// <summary>The copy of a version, or a new one once the budget has room for it. Call under the lock.</summary>
    private LocalCopy GetOrAdd(string version, Manifest manifest, out bool existed)
    {
        existed = _copies.TryGetValue(version, out var copy);
        if (existed) return copy!;
        MakeRoom(manifest.RawLength);
        copy = new LocalCopy(version, manifest) { LastAccess = DateTimeOffset.UtcNow, Recency = ++_clock };
        _copies[version] = copy;
        return copy;
    }

    /// <summary>
    /// The copy an ingest writes into, marked as ingesting: the existing partial copy, or a new one once the budget has
    /// room for it, exactly as for a fetch (<see cref="BeginFetch"/>; <see cref="ErrorCode.NoSpace"/> when it has not).
    /// An ingesting copy is never evicted.
    /// </summary>
    public LocalCopy BeginIngest(string version, Manifest manifest)
    {
        lock (_lock)
        {
            var copy = GetOrAdd(version, manifest, out var existed);
            if (existed) Touch(copy);
            copy.Ingesting = true;
            return copy;
        }
    }

    /// <summary>
    /// Ends an ingest; the partial copy stays (marked used now) for the fetch that completes it, with the segments the
    /// ingest verified and wrote (<see cref="LocalCopy.VerifiedHere"/>).
    /// </summary>
    public void EndIngest(string version, bool[]? verified = null)
    {
        lock (_lock)
            if (_copies.TryGetValue(version, out var c))
            {
                c.Ingesting = false;
                c.VerifiedHere = verified;
                Touch(c);
            }
    }

    /// <summary>Takes what <see cref="EndIngest"/> left: the next writer of the copy owns that knowledge now.</summary>
    public bool[]? TakeVerifiedHere(string version)
    {
        lock (_lock)
        {
            if (!_copies.TryGetValue(version, out var c)) return null;
            var verified = c.VerifiedHere;
            c.VerifiedHere = null;
            return verified;
        }
    }

    /// <summary>Ends a fetch that did not publish (it failed); the partial copy stays for a later resume unless removed.</summary>
    public void EndFetch(string version)
    {
        lock (_lock) if (_copies.TryGetValue(version, out var c)) c.Fetching = false;
    }

    /// <summary>Sets a fetch's progress (segments found intact when it resumed).</summary>
    public void SetProgress(string version, int segments, long bytes)
    {
        lock (_lock) if (_copies.TryGetValue(version, out var c)) (c.SegmentsDone, c.BytesDone) = (segments, bytes);
    }

    /// <summary>Counts one more segment of <paramref name="bytes"/> raw bytes as written and verified.</summary>
    public void SegmentDone(string version, long bytes)
    {
        lock (_lock) if (_copies.TryGetValue(version, out var c)) { c.SegmentsDone++; c.BytesDone += bytes; }
    }

    /// <summary>The copy is published and verified.</summary>
    public void Completed(string version)
    {
        lock (_lock)
        {
            if (!_copies.TryGetValue(version, out var c)) return;
            c.Complete = c.Verified = true;
            c.Fetching = false;
            (c.SegmentsDone, c.BytesDone) = (c.Manifest.Segments.Count, c.Manifest.RawLength);
        }
    }

    public void Verified(string version)
    {
        lock (_lock) if (_copies.TryGetValue(version, out var c)) c.Verified = true;
    }

    /// <summary>
    /// Marks a copy as used (and optionally leases or pins it for <paramref name="pinOwner"/>) before it is handed out.
    /// Under the lock eviction holds, so a copy handed out is never evicted before its lease. Throws when the copy was
    /// evicted in the meantime.
    /// </summary>
    /// <param name="pinQuota">Bytes of copies <paramref name="pinOwner"/> may hold pinned (each copy it pins counted once);
    /// a pin past it is refused with <see cref="ErrorCode.Limit"/> and nothing changes. Null: no quota (administrators).</param>
    public void Acquire(string version, bool lease, string? pin, uint pinOwner = AccessPolicy.NoOwner, long? pinQuota = null)
    {
        lock (_lock)
        {
            if (!_copies.TryGetValue(version, out var copy)) throw new IOException($"local copy of {version} was evicted while being opened; ask again");
            if (pin is not null && pinQuota is { } quota && !copy.Pins.Any(p => p.Owner == pinOwner))
            {
                var pinned = _copies.Values.Where(c => c.Pins.Any(p => p.Owner == pinOwner)).Sum(c => c.Manifest.RawLength);
                if (pinned + copy.Manifest.RawLength > quota) throw PinQuotaReached(copy.Manifest, copy.Version, pinOwner, pinned, quota);
            }
            Touch(copy);
            if (lease) copy.Leases++;
            if (pin is not null && copy.Pins.Add(new Pin(pin, pinOwner))) PinsChanged();
        }
    }

    /// <summary>
    /// Refuses, before a version is fetched, the pin <see cref="Acquire"/> would refuse once it is here: a node prep
    /// past its user's quota moves no data.
    /// </summary>
    public void CheckPinQuota(Manifest manifest, string version, uint pinOwner, long quota)
    {
        lock (_lock)
        {
            if (_copies.TryGetValue(version, out var held) && held.Pins.Any(p => p.Owner == pinOwner)) return;
            var pinned = _copies.Values.Where(c => c.Pins.Any(p => p.Owner == pinOwner)).Sum(c => c.Manifest.RawLength);
            if (pinned + manifest.RawLength > quota) throw PinQuotaReached(manifest, version, pinOwner, pinned, quota);
        }
    }

    private static CommonDataException PinQuotaReached(Manifest manifest, string version, uint owner, long pinned, long quota)
    {
        var copy = (Manifest: manifest, Version: version);
        var user = $"user '{(OperatingSystem.IsLinux() ? Hpc.CommonData.Access.UnixAccounts.UserName(owner) : null) ?? owner.ToString()}' (uid {owner})";
        return new CommonDataException(ErrorCode.Limit,
            $"pin quota reached: {user} has {pinned} bytes pinned on this node; pinning '{copy.Manifest.Name}' version {copy.Version} " +
            $"({copy.Manifest.RawLength} bytes) would pass its pin quota of {new ByteSize(quota)} (--pin-quota {new ByteSize(quota).ToExactString()}); " +
            "release pins with `hpcdata noderelease`, or have the node's administrator raise the agent's --pin-quota");
    }

    /// <summary>Adds <paramref name="delta"/> leases (a worker's connection closing gives its leases back with -1).</summary>
    public void Lease(string version, int delta)
    {
        lock (_lock)
            if (_copies.TryGetValue(version, out var c)) { c.Leases = Math.Max(0, c.Leases + delta); Touch(c); }
    }

    /// <summary>
    /// Drops a pin from the copies of a dataset (one version, or every version for null or "latest"); never fails because
    /// the data is already gone. With <paramref name="evict"/>, complete copies nothing else holds are removed. Returns
    /// whether any was.
    /// <para>With <paramref name="access"/>, the release is <paramref name="caller"/>'s and is checked before anything
    /// changes: of the pins of that name it drops only those <paramref name="caller"/> may (<see cref="AccessPolicy.MayRelease"/>),
    /// and is refused (<see cref="ErrorCode.AccessDenied"/>) when the pin is held only by others; an eviction is refused
    /// when <paramref name="caller"/> may not read a copy it would remove. Without, it is the agent's own and unchecked.</para>
    /// </summary>
    public bool Release(string name, string? version, string pin, bool evict, AccessPolicy? access = null, PeerCredentials? caller = null) =>
        Release(name, version, pin, evict, access, caller, out _);

    /// <inheritdoc cref="Release(string, string?, string, bool, AccessPolicy?, PeerCredentials?)"/>
    /// <param name="released">How many pins were dropped: 0 when <paramref name="caller"/> held none of that name there.</param>
    public bool Release(string name, string? version, string pin, bool evict, AccessPolicy? access, PeerCredentials? caller, out int released)
    {
        released = 0;
        lock (_lock)
        {
            var matches = _copies.Values.Where(c => c.Manifest.Name == name && (string.IsNullOrEmpty(version) || version == "latest" || c.Version == version)).ToList();
            bool MayDrop(Pin p) => p.Name == pin && (access is null || access.MayRelease(p.Owner, caller));
            if (access is not null)
            {
                var held = matches.SelectMany(c => c.Pins).Where(p => p.Name == pin).ToList();
                if (held.Count > 0 && !held.Any(MayDrop)) throw access.ReleaseRefused(pin, name, held.Select(p => p.Owner), caller);
                if (evict)
                    foreach (var c in matches.Where(c => c.Complete && c.Leases == 0 && c.Pins.All(MayDrop)))
                        access.CheckEvict(c.Manifest, caller);
            }
            var evicted = false;
            foreach (var c in matches)
            {
                released += c.Pins.RemoveWhere(MayDrop);
                if (evict && c.Complete && c.Leases == 0 && c.Pins.Count == 0) { RemoveLocked(c); evicted = true; }
            }
            PinsChanged();
            return evicted;
        }
    }

    /// <summary>Forgets a copy (its files go through the removal hook).</summary>
    public void Remove(string version)
    {
        lock (_lock) if (_copies.TryGetValue(version, out var c)) RemoveLocked(c);
    }

    /// <summary>The newest complete copy of a dataset by manifest creation time, or null.</summary>
    /// <summary>How many complete copies the node holds.</summary>
    public int CompleteCount
    {
        get { lock (_lock) return _copies.Values.Count(c => c.Complete); }
    }

    public LocalCopy? NewestComplete(string name)
    {
        lock (_lock) return _copies.Values.Where(c => c.Complete && c.Manifest.Name == name).MaxBy(c => c.Manifest.Created);
    }

    /// <summary>
    /// The copies as the agent's status reports them, by dataset name; only those whose manifest <paramref name="visible"/>
    /// admits. With <paramref name="mayRelease"/> (given a pin's owner), each copy also lists the pin names the caller may release.
    /// </summary>
    public List<CopyStatus> Snapshot(Func<Manifest, bool>? visible = null, Func<uint, bool>? mayRelease = null)
    {
        lock (_lock)
            return _copies.Values.Where(c => visible is null || visible(c.Manifest)).OrderBy(c => c.Manifest.Name, StringComparer.Ordinal).ThenBy(c => c.Version, StringComparer.Ordinal).Select(c => new CopyStatus
            {
                Name = c.Manifest.Name, Version = c.Version, Length = c.Manifest.RawLength,
                State = c.Complete ? "complete" : c.Fetching ? "fetching" : c.Ingesting ? "ingesting" : "partial",
                Segments = c.Manifest.Segments.Count, SegmentsDone = c.SegmentsDone, BytesDone = c.BytesDone,
                Leases = c.Leases, Pins = c.Pins.Select(p => p.Name).Distinct().Order(StringComparer.Ordinal).ToList(), LastAccess = c.LastAccess,
                Releasable = mayRelease is null ? null : c.Pins.Where(p => mayRelease(p.Owner)).Select(p => p.Name).Distinct().Order(StringComparer.Ordinal).ToList(),
            }).ToList();
    }

    private void Touch(LocalCopy c)
    {
        c.LastAccess = DateTimeOffset.UtcNow;
        c.Recency = ++_clock;
    }

    /// <summary>
    /// Evicts unleased, unpinned copies, least recently used first, until <paramref name="needed"/> fits both the budget
    /// and the file system's free space.
    /// </summary>
    private void MakeRoom(long needed)
    {
        var used = _copies.Values.Sum(c => c.Manifest.RawLength);
        bool Fits() => used + needed <= Budget.Bytes && (freeBytes is null || freeBytes() >= needed);
        if (Fits()) return;
        // Abandoned partial copies (a fetch that failed and was not asked for again) serve nobody: they go first.
        var candidates = _copies.Values
            .Where(c => c.Leases == 0 && c.Pins.Count == 0 && !c.Fetching && !c.Ingesting)
            .OrderBy(c => c.Complete).ThenBy(c => c.Recency).ToList();
        foreach (var victim in candidates)
        {
            RemoveLocked(victim);
            used -= victim.Manifest.RawLength;
            if (Fits()) return;
        }
        if (used + needed > Budget.Bytes)
            throw new CommonDataException(ErrorCode.NoSpace,
                $"node data budget of {Budget} ({Budget.Bytes} bytes) cannot hold {needed} more: {used} bytes are leased, pinned, being fetched or being ingested");
        throw new CommonDataException(ErrorCode.NoSpace,
            $"no space in the data directory{(directory is null ? "" : $" {directory}")}: {needed} bytes needed, {freeBytes!()} free " +
            $"({used} bytes of copies are leased, pinned, being fetched or being ingested)");
    }

    private void RemoveLocked(LocalCopy c)
    {
        _copies.Remove(c.Version);
        removed?.Invoke(c);
        if (c.Pins.Count > 0) PinsChanged();
    }

    private void PinsChanged() =>
        pinsChanged?.Invoke(_copies.Values.Where(c => c.Pins.Count > 0)
            .ToDictionary(c => c.Version, c => c.Pins.OrderBy(p => p.Name, StringComparer.Ordinal).ThenBy(p => p.Owner).ToArray()));
}
