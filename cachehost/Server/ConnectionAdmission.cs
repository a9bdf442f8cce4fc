using System.Collections.Concurrent;
using System.Net;

namespace Hpc.CacheHost.Server;

/// <summary>
/// Who gets a connection on a host that requires logging in, so connections that never log in cannot keep the
/// accounts' own clients out, however fast they reconnect: each client address holds at most a few connections that
/// have not logged in yet, and the last tenth of <c>--max-clients</c> is kept for addresses that have logged in before.
/// An attacker reconnecting as fast as the auth timeout closes its connections then holds at most its addresses times
/// the pending cap, and never the reserve, while a node that logged in once gets in on the next try.
/// </summary>
internal sealed class ConnectionAdmission(TimeProvider time)
{
    /// <summary>Addresses remembered as having logged in; past it, the half not seen longest is forgotten.</summary>
    public const int RememberedAddresses = 65_536;

    private readonly ConcurrentDictionary<IPAddress, int> _pending = new();
    private readonly ConcurrentDictionary<IPAddress, long> _loggedIn = new();

    /// <summary>The connections kept for addresses that have logged in before: a tenth of <paramref name="maxClients"/>, at least one.</summary>
    public static int Reserve(int maxClients) => maxClients < 2 ? 0 : Math.Max(1, maxClients / 10);

    /// <summary>
    /// What writer accounts may hold together (<see cref="AccountShares"/>): all but the last fifth of
    /// <paramref name="maxClients"/>, so that when writers hold all they may, addresses new to the host still find the
    /// tenth below <see cref="Reserve"/> open at accept, and readers and administrators a fifth in all.
    /// </summary>
    public static int WritersTogether(int maxClients) => Math.Max(1, maxClients - 2 * Reserve(maxClients));

    /// <summary>Connections from <paramref name="address"/> not yet logged in.</summary>
    public int Pending(IPAddress address) => _pending.TryGetValue(address, out var n) ? n : 0;

    public bool HasLoggedInBefore(IPAddress address) => _loggedIn.ContainsKey(address);

    /// <summary>Counts a new connection from <paramref name="address"/> as not logged in, unless the address has <paramref name="cap"/> such already.</summary>
    public bool TryBeginPending(IPAddress address, int cap)
    {
        while (true)
        {
            if (_pending.TryGetValue(address, out var count))
            {
                if (count >= cap) return false;
                if (_pending.TryUpdate(address, count + 1, count)) return true;
            }
            else if (_pending.TryAdd(address, 1))
            {
                return true;
            }
        }
    }

    /// <summary>A pending connection logged in or closed (call once per <see cref="TryBeginPending"/> that succeeded).</summary>
    public void EndPending(IPAddress address)
    {
        while (true)
        {
            if (!_pending.TryGetValue(address, out var count)) return;
            if (count == 1 ? _pending.TryRemove(new KeyValuePair<IPAddress, int>(address, 1)) : _pending.TryUpdate(address, count - 1, count))
                return;
        }
    }

    public void LoggedIn(IPAddress address)
    {
        _loggedIn[address] = time.GetTimestamp();
        if (_loggedIn.Count <= RememberedAddresses) return;
        var cutoff = _loggedIn.Values.Order().ElementAt(_loggedIn.Count / 2);
        foreach (var (a, seen) in _loggedIn)
            if (seen < cutoff) _loggedIn.TryRemove(new KeyValuePair<IPAddress, long>(a, seen));
    }
}
