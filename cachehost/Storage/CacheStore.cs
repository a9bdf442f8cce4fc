using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics.CodeAnalysis;

namespace Hpc.CacheHost.Storage;

internal enum SetCondition { Always, IfNotExists, IfExists }

internal enum SetOutcome { Stored, ConditionNotMet, OutOfMemory }

internal enum ExpireCondition { Always, IfNoExpiry, IfHasExpiry, IfGreater, IfLess }

/// <summary>
/// Binary key/value store for immutable segments under a hard byte budget.
/// </summary>
/// <remarks>
/// Every entry instance is added to the budget exactly once (when it enters the map) and released exactly once (by
/// whoever removes or replaces that very instance), so the accounting stays exact under concurrent SET, DEL and
/// overwrite without a lock. Stored arrays are never mutated after insertion, which lets the network layer send
/// them without copying even if the key is deleted meanwhile.
/// </remarks>
internal sealed class CacheStore
{
    /// <summary>Estimated bytes per entry beyond key and value: map node, entry object and two array headers.</summary>
    public const int EntryOverheadBytes = 128;

    private readonly ConcurrentDictionary<byte[], Entry> _map = new(ByteArrayComparer.Instance);
    private readonly ConcurrentDictionary<byte[], Entry>.AlternateLookup<ReadOnlySpan<byte>> _lookup;
    private readonly TimeProvider _time;
    private readonly Lock _sweepLock = new();

    // The keys that have (or recently had) a deadline, as Redis keeps its expires table: the sweep walks these instead
    // of the whole keyspace, which with a single staging lease among a million segments cost a core-percent for ever.
    // Entries may be stale (key persisted, removed or replaced); the sweep drops those as it meets them.
    private readonly ConcurrentDictionary<byte[], byte> _expiring = new(ByteArrayComparer.Instance);
    private IEnumerator<KeyValuePair<byte[], byte>>? _sweepCursor;

    private long _usedBytes;
    private long _frameBytes;
    private long _keyCount;
    private long _expiringCount;
    private long _hits;
    private long _misses;
    private long _rejectedWrites;
    private long _expiredKeys;

    public CacheStore(long maxBytes, TimeProvider time)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(maxBytes);
        MaxBytes = maxBytes;
        _time = time;
        _lookup = _map.GetAlternateLookup<ReadOnlySpan<byte>>();
    }

    public long MaxBytes { get; }

    /// <summary>Budget in use: stored entries and the large request frames connections are still receiving.</summary>
    public long UsedBytes => Volatile.Read(ref _usedBytes);

    /// <summary>Of <see cref="UsedBytes"/>, what keys outside this system's <c>hcd:</c> namespace hold (what writers' quota counts).</summary>
    public long ForeignBytes => Volatile.Read(ref _foreignBytes);
    private long _foreignBytes;

    private static bool IsForeign(ReadOnlySpan<byte> key) => !key.StartsWith("hcd:"u8);

    /// <summary>The part of <see cref="UsedBytes"/> held for request frames still being received.</summary>
    public long FrameBytes => Volatile.Read(ref _frameBytes);
    public long Count => Volatile.Read(ref _keyCount);

    /// <summary>Live keys starting with <paramref name="prefix"/> (a snapshot; concurrent writes may or may not appear).</summary>
    public List<byte[]> KeysWithPrefix(ReadOnlySpan<byte> prefix)
    {
        var now = _time.GetTimestamp();
        var keys = new List<byte[]>();
        foreach (var (key, entry) in _map)
            if (key.AsSpan().StartsWith(prefix) && !entry.IsExpired(now)) keys.Add(key);
        return keys;
    }
    public long ExpiringCount => Volatile.Read(ref _expiringCount);
    public long Hits => Volatile.Read(ref _hits);
    public long Misses => Volatile.Read(ref _misses);
    public long RejectedWrites => Volatile.Read(ref _rejectedWrites);
    public long ExpiredKeys => Volatile.Read(ref _expiredKeys);

    /// <summary>Starts the counters over (CONFIG RESETSTAT); what is stored and its cost are not counters and stay.</summary>
    public void ResetStats()
    {
        Interlocked.Exchange(ref _hits, 0);
        Interlocked.Exchange(ref _misses, 0);
        Interlocked.Exchange(ref _rejectedWrites, 0);
        Interlocked.Exchange(ref _expiredKeys, 0);
    }

    public static long EstimateCost(int keyLength, long valueLength) => keyLength + valueLength + EntryOverheadBytes;

    /// <summary>Looks a key up for a read; counts a keyspace hit or miss.</summary>
    public bool TryGet(ReadOnlySpan<byte> key, [NotNullWhen(true)] out byte[]? value)
    {
        if (TryGetLive(key, out _, out var entry))
        {
            Interlocked.Increment(ref _hits);
            value = entry.Value;
            return true;
        }
        Interlocked.Increment(ref _misses);
        value = null;
        return false;
    }

    public bool Exists(ReadOnlySpan<byte> key) => TryGetLive(key, out _, out _);

    /// <summary>Looks a key up for the host's own checks: not counted as a client's hit or miss.</summary>
    public bool TryPeek(ReadOnlySpan<byte> key, [NotNullWhen(true)] out byte[]? value)
    {
        value = TryGetLive(key, out _, out var entry) ? entry.Value : null;
        return value is not null;
    }

    public SetOutcome Set(ReadOnlySpan<byte> key, byte[] value, SetCondition condition = SetCondition.Always, long ttlMs = 0) =>
        Set(key, new ReadOnlySequence<byte>(value), condition, ttlMs);

    /// <summary>
    /// Stores a copy of <paramref name="value"/>. The new entry's full cost is reserved before the old one is
    /// released, so an overwrite needs headroom for both for a moment; a refused write changes nothing.
    /// </summary>
    public SetOutcome Set(ReadOnlySpan<byte> key, in ReadOnlySequence<byte> value, SetCondition condition = SetCondition.Always, long ttlMs = 0) =>
        Set(key, value, owned: null, condition, ttlMs);

    /// <summary>Stores <paramref name="value"/> itself, without a copy: the caller received it into this array and gives it up.</summary>
    public SetOutcome SetOwned(ReadOnlySpan<byte> key, byte[] value, SetCondition condition = SetCondition.Always, long ttlMs = 0) =>
        Set(key, new ReadOnlySequence<byte>(value), value, condition, ttlMs);

    private SetOutcome Set(ReadOnlySpan<byte> key, in ReadOnlySequence<byte> value, byte[]? owned, SetCondition condition, long ttlMs)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(ttlMs);
        long cost = EstimateCost(key.Length, value.Length);
        if (!TryReserve(cost))
        {
            Interlocked.Increment(ref _rejectedWrites);
            return SetOutcome.OutOfMemory;
        }

        Entry? created = null;
        byte[]? newKey = null;
        while (true)
        {
            long now = _time.GetTimestamp();
            if (_lookup.TryGetValue(key, out var storedKey, out var old))
            {
                bool live = !old.IsExpired(now);
                if ((condition == SetCondition.IfNotExists && live) || (condition == SetCondition.IfExists && !live))
                {
                    Release(cost);
                    return SetOutcome.ConditionNotMet;
                }
                created ??= CreateEntry(value, owned, ttlMs, now);
                if (_map.TryUpdate(storedKey, created, old))
                {
                    Release(EstimateCost(storedKey.Length, old.Value.Length));
                    if (IsForeign(storedKey)) Interlocked.Add(ref _foreignBytes, cost - EstimateCost(storedKey.Length, old.Value.Length));
                    AdjustExpiring(storedKey, old, created);
                    if (!live)
                        Interlocked.Increment(ref _expiredKeys);
                    return SetOutcome.Stored;
                }
            }
            else
            {
                if (condition == SetCondition.IfExists)
                {
                    Release(cost);
                    return SetOutcome.ConditionNotMet;
                }
                created ??= CreateEntry(value, owned, ttlMs, now);
                newKey ??= key.ToArray();
                if (_map.TryAdd(newKey, created))
                {
                    Interlocked.Increment(ref _keyCount);
                    if (IsForeign(newKey)) Interlocked.Add(ref _foreignBytes, cost);
                    AdjustExpiring(newKey, null, created);
                    return SetOutcome.Stored;
                }
            }
            // Another writer changed this key between our read and our write; decide again on what is there now.
        }
    }

    /// <summary>Removes a key; true only if it held a live value.</summary>
    public bool Delete(ReadOnlySpan<byte> key)
    {
        if (!_lookup.TryRemove(key, out var storedKey, out var old))
            return false;
        bool expired = old.IsExpired(_time.GetTimestamp());
        OnRemoved(storedKey, old, expired);
        return !expired;
    }

    /// <summary>Sets a time to live; a non-positive <paramref name="ttlMs"/> deletes the key at once, as in Redis.</summary>
    public bool SetExpiry(ReadOnlySpan<byte> key, long ttlMs, ExpireCondition condition = ExpireCondition.Always)
    {
        while (true)
        {
            long now = _time.GetTimestamp();
            if (!TryGetLive(key, out var storedKey, out var old))
                return false;

            long deadline = ttlMs <= 0 ? now : Deadline(now, ttlMs);
            bool allowed = condition switch
            {
                ExpireCondition.IfNoExpiry => old.ExpiresAt == 0,
                ExpireCondition.IfHasExpiry => old.ExpiresAt != 0,
                // A key without expiry has an infinite time to live: never less, always greater.
                ExpireCondition.IfGreater => old.ExpiresAt != 0 && deadline > old.ExpiresAt,
                ExpireCondition.IfLess => old.ExpiresAt == 0 || deadline < old.ExpiresAt,
                _ => true,
            };
            if (!allowed)
                return false;

            if (ttlMs <= 0)
            {
                if (TryRemoveExact(storedKey, old, expired: false))
                    return true;
                continue;
            }

            var updated = new Entry(old.Value, deadline);
            if (_map.TryUpdate(storedKey, updated, old))
            {
                AdjustExpiring(storedKey, old, updated);
                return true;
            }
        }
    }

    public bool Persist(ReadOnlySpan<byte> key)
    {
        while (true)
        {
            if (!TryGetLive(key, out var storedKey, out var old) || old.ExpiresAt == 0)
                return false;
            var updated = new Entry(old.Value, 0);
            if (_map.TryUpdate(storedKey, updated, old))
            {
                AdjustExpiring(storedKey, old, updated);
                return true;
            }
        }
    }

    /// <summary>Remaining time to live in milliseconds; -2 when the key is missing, -1 when it never expires.</summary>
    public long GetTimeToLiveMs(ReadOnlySpan<byte> key)
    {
        if (!TryGetLive(key, out _, out var entry))
            return -2;
        if (entry.ExpiresAt == 0)
            return -1;
        long remaining = entry.ExpiresAt - _time.GetTimestamp();
        return Math.Max(0, (long)((Int128)remaining * 1000 / _time.TimestampFrequency));
    }

    /// <summary>Removes every entry present when the call starts; returns how many.</summary>
    public long Flush()
    {
        long removed = 0;
        foreach (var pair in _map)
        {
            if (TryRemoveExact(pair.Key, pair.Value, expired: false))
                removed++;
        }
        return removed;
    }

    /// <summary>
    /// Examines at most <paramref name="maxExamined"/> keys that have a deadline, continuing where the previous call
    /// stopped, and removes the expired ones; lazy expiry alone would keep unread expired segments in the budget forever.
    /// </summary>
    public int SweepExpired(int maxExamined)
    {
        lock (_sweepLock)
        {
            if (_expiring.IsEmpty)
                return 0;
            long now = _time.GetTimestamp();
            int removed = 0;
            _sweepCursor ??= _expiring.GetEnumerator();
            for (int i = 0; i < maxExamined; i++)
            {
                if (!_sweepCursor.MoveNext())
                {
                    _sweepCursor.Dispose();
                    _sweepCursor = null;
                    break;
                }
                var key = _sweepCursor.Current.Key;
                if (_map.TryGetValue(key, out var entry) && entry.ExpiresAt != 0)
                {
                    if (!entry.IsExpired(now) || !TryRemoveExact(key, entry, expired: true))
                        continue;
                    removed++;
                }
                // Gone or without a deadline: forget it, then look again, since a writer may have given the key a
                // deadline in between (it adds to this index only after its entry is in the map, so one of the two
                // of us sees the other).
                _expiring.TryRemove(key, out _);
                if (_map.TryGetValue(key, out entry) && entry.ExpiresAt != 0)
                    _expiring.TryAdd(key, 0);
            }
            return removed;
        }
    }

    private bool TryGetLive(ReadOnlySpan<byte> key, [NotNullWhen(true)] out byte[]? storedKey, [NotNullWhen(true)] out Entry? entry)
    {
        if (_lookup.TryGetValue(key, out storedKey, out entry))
        {
            if (entry.ExpiresAt == 0 || !entry.IsExpired(_time.GetTimestamp()))
                return true;
            TryRemoveExact(storedKey, entry, expired: true);
        }
        storedKey = null;
        entry = null;
        return false;
    }

    // Removes the key only while it still maps to this very entry, so a concurrent overwrite is never lost.
    private bool TryRemoveExact(byte[] key, Entry entry, bool expired)
    {
        if (!_map.TryRemove(KeyValuePair.Create(key, entry)))
            return false;
        OnRemoved(key, entry, expired);
        return true;
    }

    private void OnRemoved(byte[] key, Entry entry, bool expired)
    {
        Release(EstimateCost(key.Length, entry.Value.Length));
        if (IsForeign(key)) Interlocked.Add(ref _foreignBytes, -EstimateCost(key.Length, entry.Value.Length));
        Interlocked.Decrement(ref _keyCount);
        if (entry.ExpiresAt != 0)
            Interlocked.Decrement(ref _expiringCount);
        if (expired)
            Interlocked.Increment(ref _expiredKeys);
    }

    /// <summary>Called once <paramref name="updated"/> is in the map under <paramref name="key"/>.</summary>
    private void AdjustExpiring(byte[] key, Entry? old, Entry updated)
    {
        int delta = (updated.ExpiresAt != 0 ? 1 : 0) - (old is { ExpiresAt: not 0 } ? 1 : 0);
        if (delta != 0)
            Interlocked.Add(ref _expiringCount, delta);
        if (updated.ExpiresAt != 0)
            _expiring.TryAdd(key, 0);
    }

    /// <summary>
    /// Charges bytes a connection is about to buffer for a request frame to the same budget as stored values, so
    /// what all connections hold in flight can never push the process past it; refused (nothing charged) when it would.
    /// </summary>
    public bool TryReserveFrame(long bytes)
    {
        if (!TryReserve(bytes))
        {
            Interlocked.Increment(ref _rejectedWrites);
            return false;
        }
        Interlocked.Add(ref _frameBytes, bytes);
        return true;
    }

    public void ReleaseFrame(long bytes)
    {
        Interlocked.Add(ref _frameBytes, -bytes);
        Release(bytes);
    }

    private bool TryReserve(long bytes)
    {
        long current = Volatile.Read(ref _usedBytes);
        while (true)
        {
            if (bytes > MaxBytes - current)
                return false;
            long seen = Interlocked.CompareExchange(ref _usedBytes, current + bytes, current);
            if (seen == current)
                return true;
            current = seen;
        }
    }

    private void Release(long bytes) => Interlocked.Add(ref _usedBytes, -bytes);

    private Entry CreateEntry(in ReadOnlySequence<byte> value, byte[]? owned, long ttlMs, long now)
    {
        if (owned is not null)
            return new Entry(owned, ttlMs == 0 ? 0 : Deadline(now, ttlMs));
        // Ordinary (not pinned) arrays: measured cheaper than the pinned heap under redis-benchmark's SET churn,
        // since dead gen0 values cost nothing while pinned ones wait for a full collection. Sends pin only per call.
        var data = FreshPages.NewValue(checked((int)value.Length));
        value.CopyTo(data);
        return new Entry(data, ttlMs == 0 ? 0 : Deadline(now, ttlMs));
    }

    // Saturates instead of overflowing: a time to live past the clock's range simply never expires in practice.
    private long Deadline(long now, long ttlMs)
    {
        Int128 ticks = (Int128)ttlMs * _time.TimestampFrequency / 1000;
        long headroom = long.MaxValue - now;
        return now + (long)Int128.Clamp(ticks, 1, headroom);
    }

    private sealed class Entry(byte[] value, long expiresAt)
    {
        public readonly byte[] Value = value;

        /// <summary>Deadline as a <see cref="TimeProvider"/> timestamp; 0 means the entry never expires.</summary>
        public readonly long ExpiresAt = expiresAt;

        public bool IsExpired(long now) => ExpiresAt != 0 && ExpiresAt <= now;
    }
}
