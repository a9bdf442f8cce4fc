using System.Collections.Concurrent;
using System.Net;

namespace Hpc.CacheHost.Server;

/// <summary>
/// How many wrong passwords the host hears out, across connections: a budget per client address and one per account,
/// each a bucket that refills over time (sshd's per-source penalties, fail2ban's ban). The per-connection back-off alone
/// let a guesser that opened a connection per guess try hundreds of passwords a second. While an address's budget is
/// spent, its AUTH is refused without looking at the password; while an account's is spent, so is AUTH to it from any
/// address that has failed lately, so guessing one account from many places is bounded too, and a node that has not
/// been guessing from its address still logs in.
/// </summary>
internal sealed class AuthBudget(TimeProvider time, AuthBudget.Limits? limits = null)
{
    /// <param name="AddressBurst">Failures an address may have in a row.</param>
    /// <param name="AddressRefill">Time after which an address may fail once more.</param>
    public sealed record Limits(int AddressBurst, TimeSpan AddressRefill, int AccountBurst, TimeSpan AccountRefill)
    {
        public static readonly Limits Default = new(10, TimeSpan.FromSeconds(6), 30, TimeSpan.FromSeconds(10));
    }

    private const int MaxTracked = 4096;

    private readonly Limits _limits = limits ?? Limits.Default;
    private readonly ConcurrentDictionary<IPAddress, Bucket> _addresses = new();
    private readonly ConcurrentDictionary<string, Bucket> _accounts = new(StringComparer.Ordinal);

    /// <summary>
    /// Null when the attempt may be checked, having reserved one failure of the address's budget (given back by
    /// <see cref="Succeeded"/>), so concurrent guesses cannot all slip past an almost spent budget; otherwise how long
    /// until it may, and whose budget is spent.
    /// </summary>
    public (TimeSpan RetryAfter, string Spent)? Admit(IPAddress? address, string? account)
    {
        long now = time.GetTimestamp();
        Bucket? byAddress = null;
        if (address is not null)
        {
            Trim(_addresses, now, _limits.AddressBurst, _limits.AddressRefill);
            byAddress = _addresses.GetOrAdd(address, _ => new Bucket(now, _limits.AddressBurst));
        }
        if (account is not null && byAddress is not null && byAddress.HasFailed(now, _limits.AddressBurst, _limits.AddressRefill, time)
            && _accounts.GetValueOrDefault(account)?.Wait(now, _limits.AccountBurst, _limits.AccountRefill, time) is { } accountWait)
            return (accountWait, $"account {account}");
        if (byAddress is not null && !byAddress.TryTake(now, _limits.AddressBurst, _limits.AddressRefill, time, out var addressWait))
            return (addressWait, $"address {address}");
        return null;
    }

    /// <summary>The password was right: the failure reserved for the address is given back.</summary>
    public void Succeeded(IPAddress? address)
    {
        if (address is not null && _addresses.TryGetValue(address, out var bucket)) bucket.GiveBack(_limits.AddressBurst);
    }

    /// <summary>
    /// The password was wrong: charges the account too when it exists. True when the address's or the account's budget
    /// is now spent (worth a log line; the refusals after it are not).
    /// </summary>
    public bool Failed(IPAddress? address, string? existingAccount)
    {
        long now = time.GetTimestamp();
        bool spent = address is not null && _addresses.TryGetValue(address, out var byAddress)
            && byAddress.Wait(now, _limits.AddressBurst, _limits.AddressRefill, time) is not null;
        if (existingAccount is not null)
        {
            Trim(_accounts, now, _limits.AccountBurst, _limits.AccountRefill);
            var byAccount = _accounts.GetOrAdd(existingAccount, _ => new Bucket(now, _limits.AccountBurst));
            spent |= !byAccount.TryTake(now, _limits.AccountBurst, _limits.AccountRefill, time, out _)
                || byAccount.Wait(now, _limits.AccountBurst, _limits.AccountRefill, time) is not null;
        }
        return spent;
    }

    /// <summary>Forgets clients whose budgets have refilled, once many are tracked, so the tables stay bounded.</summary>
    private void Trim<TKey>(ConcurrentDictionary<TKey, Bucket> buckets, long now, int burst, TimeSpan refill) where TKey : notnull
    {
        if (buckets.Count < MaxTracked) return;
        foreach (var (key, bucket) in buckets)
            if (!bucket.HasFailed(now, burst, refill, time)) buckets.TryRemove(key, out _);
    }

    /// <summary>A token bucket: full at <c>burst</c>, one token back per <c>refill</c>.</summary>
    private sealed class Bucket(long now, int burst)
    {
        private double _tokens = burst;
        private long _updated = now;

        private void Refill(long now, int burst, TimeSpan refill, TimeProvider time)
        {
            var elapsed = time.GetElapsedTime(_updated, now);
            _tokens = Math.Min(burst, _tokens + elapsed / refill);
            _updated = now;
        }

        public TimeSpan? Wait(long now, int burst, TimeSpan refill, TimeProvider time)
        {
            lock (this)
            {
                Refill(now, burst, refill, time);
                return _tokens >= 1 ? null : refill * (1 - _tokens);
            }
        }

        public bool HasFailed(long now, int burst, TimeSpan refill, TimeProvider time)
        {
            lock (this)
            {
                Refill(now, burst, refill, time);
                return _tokens < burst;
            }
        }

        /// <summary>Takes a token if there is one; otherwise says how long until there is.</summary>
        public bool TryTake(long now, int burst, TimeSpan refill, TimeProvider time, out TimeSpan wait)
        {
            lock (this)
            {
                Refill(now, burst, refill, time);
                wait = _tokens >= 1 ? TimeSpan.Zero : refill * (1 - _tokens);
                if (_tokens < 1) return false;
                _tokens -= 1;
                return true;
            }
        }

        public void GiveBack(int burst)
        {
            lock (this) _tokens = Math.Min(burst, _tokens + 1);
        }
    }
}
