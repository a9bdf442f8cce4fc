using System.Collections.Concurrent;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Server;

/// <summary>
/// The logged-in connections each account holds, so that no one account can fill the host: a connection becomes its
/// account's at AUTH and stops being at close. A reader or writer account holds at most <see cref="PerAccount"/>, and
/// writers together at most <see cref="WritersTogether"/>, so the rest of <c>--max-clients</c> stays open to the node
/// (reader) accounts and administrators whichever accounts flood. Administrators are not counted: they are the
/// operators, and with <c>--password</c> alone every client of the host is the administrator <c>default</c>.
/// </summary>
internal sealed class AccountShares(int maxClients, int perAccount, int writersTogether)
{
    private readonly ConcurrentDictionary<string, int> _held = new(StringComparer.Ordinal);
    private int _writers;

    /// <summary>The share of one reader or writer account (<c>--max-clients-per-account</c>).</summary>
    public int PerAccount { get; } = perAccount;

    /// <summary>What writer accounts may hold together: all of <c>--max-clients</c> but the reserve for readers and administrators.</summary>
    public int WritersTogether { get; } = writersTogether;

    /// <summary>Connections logged in as <paramref name="account"/> and counted now.</summary>
    public int Held(string account) => _held.TryGetValue(account, out var n) ? n : 0;

    /// <summary>Connections logged in as writers and counted now.</summary>
    public int Writers => Volatile.Read(ref _writers);

    /// <summary>Whether <paramref name="user"/>'s connections are counted at all.</summary>
    public static bool Counts(CacheUser user) => user.Role != CacheRole.Admin;

    /// <summary>
    /// Counts one more connection of <paramref name="user"/> unless that passes its share, or (for a writer) the writers'
    /// together. Null when counted (or not counted at all: an administrator); otherwise the refusal to reply.
    /// </summary>
    public string? TryTake(CacheUser user)
    {
        if (!Counts(user)) return null;
        bool writer = user.Role == CacheRole.Writer;
        if (writer && Interlocked.Increment(ref _writers) > WritersTogether)
        {
            Interlocked.Decrement(ref _writers);
            return $"ERR max number of clients of writer accounts reached ({WritersTogether} of --max-clients {maxClients}, all writers together; the rest is kept for readers and administrators)";
        }
        while (true)
        {
            if (_held.TryGetValue(user.Name, out var count))
            {
                if (count >= PerAccount) break;
                if (_held.TryUpdate(user.Name, count + 1, count)) return null;
            }
            else if (_held.TryAdd(user.Name, 1))
            {
                return null;
            }
        }
        if (writer) Interlocked.Decrement(ref _writers);
        return $"ERR max number of clients per account reached ({PerAccount} of account {user.Name}; --max-clients-per-account)";
    }

    /// <summary>One connection counted by <see cref="TryTake"/> is no longer the account's (call once per one that succeeded).</summary>
    public void Release(string account, bool writer)
    {
        if (writer) Interlocked.Decrement(ref _writers);
        while (true)
        {
            if (!_held.TryGetValue(account, out var count)) return;
            // The last one out removes the entry, so the table holds only accounts with connections.
            if (count == 1 ? _held.TryRemove(new KeyValuePair<string, int>(account, 1)) : _held.TryUpdate(account, count - 1, count))
                return;
        }
    }
}
