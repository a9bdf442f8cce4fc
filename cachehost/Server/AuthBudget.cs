using System.Collections.Concurrent;
using System.Net;

namespace Hpc.CacheHost.Server;

/// <summary>
/// How many passwords the host checks, across connections: a budget per client address and one per account, each a
/// bucket that refills over time (sshd's per-source penalties, fail2ban's ban). The per-connection back-off alone let a
/// guesser that opened a connection per guess try hundreds of passwords a second, and a budget per address alone let
/// one with many addresses try as many per second again. The account's budget is spent by every checked guess at it,
/// from wherever it comes; the addresses the account has logged in from before (its nodes) are not held to it, so a
/// guesser cannot lock the nodes out.
/// </summary>
internal sealed class AuthBudget(TimeProvider time, AuthBudget.Limits? limits = null)
{
    /// <param name="AddressBurst">Failures an address may have in a row.</param>
    /// <param name="AddressRefill">Time after which an address may fail once more.</param>
    /// <param name="AccountBurst">Checked attempts at an account, from addresses it has not logged in from, in a row.</param>
    /// <param name="AccountRefill">Time after which such an attempt may be checked once more.</param>
    /// <param name="KnownAddresses">Addresses remembered per account as its own (the least recently used are forgotten).</param>
    public sealed record Limits(int AddressBurst, TimeSpan AddressRefill, int AccountBurst, TimeSpan AccountRefill, int KnownAddresses)
    {
        public static readonly Limits Default = new(10, TimeSpan.FromSeconds(6), 30, TimeSpan.FromSeconds(10), 4096);
    }

    private const int MaxTracked = 4096;

    private readonly Limits _limits = limits ?? Limits.Default;
    private readonly ConcurrentDictionary<IPAddress, Bucket> _addresses = new();
    private readonly ConcurrentDictionary<string, Account> _accounts = new(StringComparer.Ordinal);

    /// <summary>What <see cref="Admit"/> took, given back by <see cref="Succeeded"/>.</summary>
    public readonly record struct Ticket(Bucket? Address, Account? Account);

    /// <summary>
    /// Whether the attempt may be checked. If so, one token of each budget that applies is taken (and given back by
    /// <see cref="Succeeded"/>), so concurrent guesses cannot all slip past an almost spent budget; otherwise how long
    /// until it may, and whose budget is spent. <paramref name="existingAccount"/> is the account named when it exists:
    /// names that do not exist have no budget of their own, so they cannot fill the table.
    /// </summary>
    public (TimeSpan RetryAfter, string Spent)? Admit(IPAddress? address, string? existingAccount, out Ticket ticket)
    {
        ticket = default;
        long now = time.GetTimestamp();
        Bucket? byAddress = null;
        if (address is not null)
        {
            Trim(_addresses, now, _limits.AddressBurst, _limits.AddressRefill);
            byAddress = _addresses.GetOrAdd(address, _ => new Bucket(now, _limits.AddressBurst));
        }
        Account? account = null;
        if (existingAccount is not null && (address is null || !AccountOf(existingAccount).Knows(address)))
        {
            account = AccountOf(existingAccount);
            if (!account.Budget.TryTake(now, _limits.AccountBurst, _limits.AccountRefill, time, out var accountWait))
                return (accountWait, $"account {existingAccount}");
        }
        if (byAddress is not null && !byAddress.TryTake(now, _limits.AddressBurst, _limits.AddressRefill, time, out var addressWait))
        {
            account?.Budget.GiveBack(_limits.AccountBurst);
            return (addressWait, $"address {address}");
        }
        ticket = new Ticket(byAddress, account);
        return null;
    }

    /// <summary>The password was right: what <see cref="Admit"/> took is given back, and the address is the account's own.</summary>
    public void Succeeded(IPAddress? address, string account, in Ticket ticket)
    {
        ticket.Address?.GiveBack(_limits.AddressBurst);
        ticket.Account?.Budget.GiveBack(_limits.AccountBurst);
        if (address is not null)
            AccountOf(account).Remember(address, time.GetTimestamp(), _limits.KnownAddresses);
    }

    /// <summary>
    /// The password was wrong (its tokens stay taken). Which budget is now spent, if one is (worth a log line; the
    /// refusals after it are not): "account NAME" or "address A".
    /// </summary>
    public string? Failed(IPAddress? address, in Ticket ticket)
    {
        long now = time.GetTimestamp();
        if (ticket.Account is { } account && account.Budget.Wait(now, _limits.AccountBurst, _limits.AccountRefill, time) is not null)
            return $"account {account.Name}";
        if (ticket.Address?.Wait(now, _limits.AddressBurst, _limits.AddressRefill, time) is not null)
            return $"address {address}";
        return null;
    }

    // Only accounts of the users file get here, so this table is as small as that file.
    private Account AccountOf(string name) => _accounts.GetOrAdd(name, n => new Account(n, time.GetTimestamp(), _limits.AccountBurst));

    /// <summary>Forgets addresses whose budgets have refilled, once many are tracked, so the table stays bounded.</summary>
    private void Trim(ConcurrentDictionary<IPAddress, Bucket> buckets, long now, int burst, TimeSpan refill)
    {
        if (buckets.Count < MaxTracked) return;
        foreach (var (key, bucket) in buckets)
            if (!bucket.HasFailed(now, burst, refill, time)) buckets.TryRemove(key, out _);
    }

    /// <summary>An account's budget and the addresses it has logged in from, each with when it last did.</summary>
    internal sealed class Account(string name, long now, int burst)
    {
        private readonly Dictionary<IPAddress, long> _known = [];

        public string Name { get; } = name;

        public Bucket Budget { get; } = new(now, burst);

        public bool Knows(IPAddress address)
        {
            lock (_known) return _known.ContainsKey(address);
        }

        public void Remember(IPAddress address, long now, int capacity)
        {
            lock (_known)
            {
                if (_known.Count >= capacity && !_known.ContainsKey(address))
                {
                    // Full: the address that has gone longest without logging in makes room. Rare (a new node once
                    // thousands are known), so a scan is cheap enough.
                    var oldest = _known.MinBy(k => k.Value).Key;
                    _known.Remove(oldest);
                }
                _known[address] = now;
            }
        }
    }

    /// <summary>A token bucket: full at <c>burst</c>, one token back per <c>refill</c>.</summary>
    internal sealed class Bucket(long now, int burst)
    {
        private double _tokens = burst;
        private long _updated = now;

        private void Refill(long now, int burst, TimeSpan refill, TimeProvider time)
        {
            var elapsed = time.GetElapsedTime(_updated, now);
            if (elapsed > TimeSpan.Zero)
            {
                _tokens = Math.Min(burst, _tokens + elapsed / refill);
                _updated = now;
            }
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
