using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Server;

/// <summary>The dataset of the version whose lock is <paramref name="lockKey"/>, from the manifest the host holds; null without one.</summary>
internal delegate string? DatasetOfLock(ReadOnlySpan<byte> lockKey);

/// <summary>
/// How long each writer account has held each version's lock (<c>hcd:lock:VERSION</c>). A lock serializes the job
/// references of one version across every account using it, so one account holding it keeps everyone else's job end
/// steps and the owner's removal waiting. A writer's lock lives at most <see cref="WriteRules.MaxLockMs"/> and is never
/// renewed; this ledger keeps it from being taken again and again: every millisecond held is a debt paid back over
/// <see cref="Payback"/> milliseconds, and an account whose debt on a version is over <see cref="BurstMs"/> may not take
/// that version's lock until it has paid it down. Job steps hold a lock for a round trip or two, so thousands of them
/// pass; an account taking it for the longest life each time holds it about a quarter of the time, and the others take
/// it in between. The ledger is the host's memory alone: a restart forgets it, as it forgets the locks.
/// <para>
/// Each account pays for its own holds, so several accounts taking turns could chain theirs without a gap. So the
/// version's owners (the accounts owning the dataset of the manifest the host holds) and administrators go first:
/// while one of them polls a lock another account holds, the next take is theirs, and the owner's job end step waits
/// only for the hold in progress (at most <see cref="WriteRules.MaxLockMs"/>). A host without the manifest cannot
/// tell the owners, so there only administrators go first.
/// </para>
/// </summary>
internal sealed class LockLedger(TimeProvider time, DatasetOfLock? datasetOf = null)
{
    /// <summary>Debt an account may carry and still take the lock: a burst of short holds.</summary>
    public const long BurstMs = 5_000;
    /// <summary>A held millisecond is paid back over this many.</summary>
    public const int Payback = 3;
    /// <summary>Entries kept before paid-off ones are dropped.</summary>
    private const int PruneAbove = 4_096;
    /// <summary>
    /// How long after an owner's or administrator's last poll that found the lock held the next take stays theirs. A
    /// job step polls every 10–50 ms, but a client on a busy node can stall between two polls for longer than a second
    /// (the owner's end step lost the lock so on a loaded 2-core machine, four other accounts polling without pause);
    /// one that gave up holds no one back for longer than this.
    /// </summary>
    public const long WaitWindowMs = 3_000;
    /// <summary>The longest lock key the waiting table looks up without allocating (a version's is 73 characters).</summary>
    private const int MaxKeyChars = 128;

    private sealed class Holding
    {
        public double DebtMs;
        public long SettledAt;
        public long HeldSince, HeldUntil;
        public bool Open;
    }

    /// <summary>Who waits for one version's lock; its dataset is kept, as a version's manifest never changes.</summary>
    private sealed class Waiters
    {
        public string? Dataset;
        public long OwnersUntil, AdminsUntil, PolledAt;
    }

    private readonly Dictionary<(string Account, string Key), Holding> _holdings = [];
    private readonly Dictionary<string, Waiters> _waiters = [];
    private readonly Lock _gate = new();

    private long Now => (long)time.GetElapsedTime(0).TotalMilliseconds;

    /// <summary>Null when <paramref name="account"/> may take the lock <paramref name="key"/> now, otherwise the refusal.</summary>
    public string? Refusal(string account, string key)
    {
        lock (_gate)
        {
            if (!_holdings.TryGetValue((account, key), out var h)) return null;
            var debt = Settle(h, Now);
            if (debt <= BurstMs) return null;
            var wait = (debt - BurstMs) * Payback / 1000;
            return $"NOPERM account {account} has held {key} too long of late ({debt / 1000:0.0} s not yet paid back): " +
                   $"it may take it again in {Math.Ceiling(wait):0} s; a lock is for a job step's moment, and other accounts wait on it";
        }
    }

    /// <summary><paramref name="account"/> took the lock <paramref name="key"/> for <paramref name="ttlMs"/>.</summary>
    public void Taken(string account, string key, long ttlMs)
    {
        var now = Now;
        lock (_gate)
        {
            if (!_holdings.TryGetValue((account, key), out var h))
            {
                if (_holdings.Count >= PruneAbove) Prune(now);
                _holdings[(account, key)] = h = new Holding { SettledAt = now };
            }
            Settle(h, now);
            // A hold the ledger still counts as open ended by now at the latest (an administrator deleted the lock, or
            // the store expired it first): it is owed, not forgotten by the new one.
            if (h.Open) h.DebtMs += now - h.HeldSince;
            (h.Open, h.HeldSince, h.HeldUntil) = (true, now, now + Math.Max(1, ttlMs));
        }
    }

    /// <summary><paramref name="account"/> deleted the lock <paramref name="key"/> (its own, or one that had expired).</summary>
    public void Released(string account, string key)
    {
        var now = Now;
        lock (_gate)
        {
            if (!_holdings.TryGetValue((account, key), out var h) || !h.Open) return;
            Settle(h, now);
            if (!h.Open) return; // it had expired already and was counted whole
            h.DebtMs += now - h.HeldSince;
            h.Open = false;
        }
    }

    /// <summary>
    /// Whether <paramref name="writer"/>'s take of the free lock <paramref name="key"/> is held back: a version's owner
    /// or an administrator is waiting for it, and the writer is neither.
    /// </summary>
    public bool HeldBack(CacheUser writer, ReadOnlySpan<byte> key)
    {
        Span<char> chars = stackalloc char[MaxKeyChars];
        if (key.Length > MaxKeyChars) return false;
        chars = chars[..Encoding.Latin1.GetChars(key, chars)];
        lock (_gate)
        {
            if (_waiters.Count == 0 || !_waiters.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(chars, out var w)) return false;
            var now = Now;
            return now < w.AdminsUntil || (now < w.OwnersUntil && w.Dataset is { } dataset && !writer.Owns(dataset));
        }
    }

    /// <summary>
    /// <paramref name="user"/>'s SET NX found the lock <paramref name="key"/> held: an owner of the version or an
    /// administrator is waiting for it now.
    /// </summary>
    public void Polled(CacheUser user, ReadOnlySpan<byte> key)
    {
        Span<char> chars = stackalloc char[MaxKeyChars];
        if (key.Length > MaxKeyChars) return;
        chars = chars[..Encoding.Latin1.GetChars(key, chars)];
        var admin = user.Role == CacheRole.Admin;
        string? dataset;
        lock (_gate)
            dataset = _waiters.GetAlternateLookup<ReadOnlySpan<char>>().TryGetValue(chars, out var known) ? known.Dataset : null;
        // Decoding the manifest is the costly part, done once per version and outside the gate; other accounts polling
        // a version create its entry too, so their polls find the dataset here and decode nothing.
        if (dataset is null && !admin) dataset = datasetOf?.Invoke(key);
        if (dataset is null && !admin) return;
        var now = Now;
        lock (_gate)
        {
            var waiting = _waiters.GetAlternateLookup<ReadOnlySpan<char>>();
            if (!waiting.TryGetValue(chars, out var w))
            {
                if (_waiters.Count >= PruneAbove) PruneWaiters(now);
                waiting[chars] = w = new Waiters();
            }
            w.Dataset ??= dataset;
            w.PolledAt = now;
            if (admin) w.AdminsUntil = now + WaitWindowMs;
            else if (w.Dataset is { } d && user.Owns(d)) w.OwnersUntil = now + WaitWindowMs;
        }
    }

    /// <summary>Brings a holding's debt up to <paramref name="now"/>: paid back over time, a hold that expired added whole.</summary>
    private static double Settle(Holding h, long now)
    {
        if (h.Open && h.HeldUntil <= now)
        {
            PayBack(h, h.HeldUntil);
            h.DebtMs += h.HeldUntil - h.HeldSince;
            h.Open = false;
        }
        PayBack(h, now);
        return h.DebtMs + (h.Open ? now - h.HeldSince : 0);
    }

    private static void PayBack(Holding h, long until)
    {
        if (until <= h.SettledAt) return;
        h.DebtMs = Math.Max(0, h.DebtMs - (double)(until - h.SettledAt) / Payback);
        h.SettledAt = until;
    }

    private void PruneWaiters(long now)
    {
        foreach (var (key, w) in _waiters.ToList())
            if (now - w.PolledAt > 10 * WaitWindowMs) _waiters.Remove(key);
    }

    private void Prune(long now)
    {
        foreach (var (who, h) in _holdings.ToList())
            if (Settle(h, now) <= 0 && !h.Open) _holdings.Remove(who);
    }
}
