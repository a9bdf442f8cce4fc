using System.Net.Security;
using System.Reflection;
using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CacheHost.Storage;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Options;

namespace Hpc.CacheHost.Server;

/// <summary>What every connection shares: settings, the store, counters and facts learned at startup.</summary>
internal sealed class ServerContext
{
    public ServerContext(IOptions<CacheHostOptions> options, CacheStore store, CacheUsers users, TimeProvider time, ServerTls? tls = null)
    {
        Tls = tls?.Options;
        Options = options.Value;
        Store = store;
        Time = time;
        Limits = RespLimits.ForFrameSize((int)Options.MaxFrameBytes.Bytes);
        _users = users;
        AuthBudget = new AuthBudget(time);
        Admission = new ConnectionAdmission(time);
        Shares = new AccountShares(Options.MaxClients, Options.AccountShare, ConnectionAdmission.WritersTogether(Options.MaxClients));
        LogGates = new LogGates(time);
        Locks = new LockLedger(time, key => WriteRules.DatasetOfLock(store, key));
        StartTimestamp = time.GetTimestamp();
        Version = typeof(ServerContext).Assembly.GetCustomAttribute<AssemblyInformationalVersionAttribute>()?.InformationalVersion
            ?? typeof(ServerContext).Assembly.GetName().Version?.ToString() ?? "0.0.0";
    }

    public CacheHostOptions Options { get; }

    /// <summary>Connections not yet logged in, per address, and the addresses that have logged in (<see cref="ConnectionAdmission"/>).</summary>
    public ConnectionAdmission Admission { get; }

    /// <summary>The logged-in connections each account holds, against its share of --max-clients (<see cref="AccountShares"/>).</summary>
    public AccountShares Shares { get; }
    public CacheStore Store { get; }
    public TimeProvider Time { get; }

    /// <summary>How long writer accounts have held versions' locks (<see cref="LockLedger"/>).</summary>
    public LockLedger Locks { get; }
    public RespLimits Limits { get; }
    private CacheUsers _users;
    private int _usersGeneration;

    /// <summary>The accounts as the users file last loaded them (<see cref="ReloadUsers"/>).</summary>
    public CacheUsers Users => Volatile.Read(ref _users);

    /// <summary>Counts loads of the users file, so a connection sees a change at its next command without a lock.</summary>
    public int UsersGeneration => Volatile.Read(ref _usersGeneration);

    private readonly Lock _reloading = new();

    /// <summary>
    /// Reads the users file (and password file) again and puts it in force, all or nothing: a file that does not load
    /// leaves the accounts as they were. Returns a line for the log and the client that asked.
    /// </summary>
    public (bool Loaded, string Message) ReloadUsers()
    {
        lock (_reloading)
        {
            if (string.IsNullOrEmpty(Options.UsersFile) && string.IsNullOrEmpty(Options.PasswordFile))
                return (false, "no --users-file or --password-file to load again; the accounts are unchanged");
            CacheUsers next;
            try
            {
                next = CacheUsers.Load(Options);
            }
            catch (FormatException e)
            {
                return (false, $"{e.Message}; the accounts in force are unchanged");
            }
            if (Users.Required && !next.Required)
                return (false, "the new files define no account, which would open the host to everyone; the accounts in force are unchanged");
            var (added, removed, changed) = Users.Compare(next);
            Replace(next);
            var dropped = DropBookkeepingOfRemovedAccounts(next);
            return (true, $"accounts loaded again: {next.Count} in force ({added} added, {removed} removed, {changed} changed)" +
                          (dropped > 0 ? $"; {dropped} staging lease(s) and lock(s) of removed accounts dropped" : ""));
        }
    }

    /// <summary>
    /// Deletes the staging leases and locks held by accounts the files no longer define: nobody can renew or release
    /// them any more, and they would hold every collection and job end step until they expired.
    /// </summary>
    private int DropBookkeepingOfRemovedAccounts(CacheUsers users)
    {
        if (!users.Required) return 0;
        var dropped = 0;
        foreach (var key in Store.KeysWithPrefix(System.Text.Encoding.ASCII.GetBytes(CacheKeys.StagingPrefix)))
            if (CacheKeys.TryParseStagingLease(System.Text.Encoding.UTF8.GetString(key), out var account) && users.Find(account) is null && Store.Delete(key))
                dropped++;
        foreach (var key in Store.KeysWithPrefix(System.Text.Encoding.ASCII.GetBytes(CacheKeys.LockPrefix)))
        {
            if (!Store.TryPeek(key, out var value)) continue;
            var colon = value.AsSpan().IndexOf((byte)':');
            if (colon > 0 && users.Find(System.Text.Encoding.UTF8.GetString(value.AsSpan(0, colon))) is null && Store.Delete(key)) dropped++;
        }
        return dropped;
    }

    // Connections act under the new roles and names from their next command; those of accounts the files no longer
    // define are closed (ClientSession.RefreshAccount).
    private void Replace(CacheUsers users)
    {
        Volatile.Write(ref _users, users);
        Interlocked.Increment(ref _usersGeneration);
    }

    /// <summary>Wrong passwords across connections, per address and per account.</summary>
    public AuthBudget AuthBudget { get; }

    /// <summary>One line per minute for each event a client can repeat at will.</summary>
    public LogGates LogGates { get; }

    /// <summary>Set when the host serves TLS only (--tls-cert and --tls-key).</summary>
    public SslServerAuthenticationOptions? Tls { get; }

    /// <summary>Who every connection is on a host with no accounts: it may do everything.</summary>
    public static readonly CacheUser OpenAccess = new(CacheUsers.DefaultUser, CacheRole.Admin, []);
    public string Version { get; }
    public long StartTimestamp { get; }
    public ServerStats Stats { get; } = new();

    // Receive buffers of large frames are pooled arrays that the pool mostly drops when they come back; without a
    // collection nothing else would run one (a quiet host allocates nothing), and the process would keep a spike's
    // peak for good. So after a spike of at least this much, once no large frame is pending, collect and give the
    // memory back to the system.
    private const long ReturnAfterBytes = 64L << 20;
    private static readonly TimeSpan ReturnDelay = TimeSpan.FromMilliseconds(500);
    private long _releasedSinceReturn;
    private int _returnScheduled;

    /// <summary>A large request frame's buffers were let go (executed, refused or abandoned).</summary>
    public void FrameReleased(long bytes)
    {
        if (Interlocked.Add(ref _releasedSinceReturn, bytes) < ReturnAfterBytes || Interlocked.Exchange(ref _returnScheduled, 1) != 0)
            return;
        _ = Task.Run(async () =>
        {
            // Frames still arriving would be collected into the middle of their own transfer; wait them out.
            do await Task.Delay(ReturnDelay, Time);
            while (Store.FrameBytes > 0);
            Interlocked.Exchange(ref _releasedSinceReturn, 0);
            Volatile.Write(ref _returnScheduled, 0);
            GC.Collect(2, GCCollectionMode.Aggressive, blocking: true, compacting: true);
        });
    }

    /// <summary>The port actually bound, known once listening (differs from the option when that is 0).</summary>
    public int Port { get; set; }
}

internal sealed class ServerStats
{
    private long _connectedClients;
    private long _totalConnections;
    private long _rejectedConnections;
    private long _commandsProcessed;
    private long _netInputBytes;
    private long _netOutputBytes;
    private long _nextClientId;

    public long ConnectedClients => Volatile.Read(ref _connectedClients);
    public long TotalConnections => Volatile.Read(ref _totalConnections);
    public long RejectedConnections => Volatile.Read(ref _rejectedConnections);
    public long CommandsProcessed => Volatile.Read(ref _commandsProcessed);
    public long NetInputBytes => Volatile.Read(ref _netInputBytes);
    public long NetOutputBytes => Volatile.Read(ref _netOutputBytes);

    /// <summary>Admits a client unless <paramref name="maxClients"/> are already connected; returns its id, or 0 if refused.</summary>
    public long TryAdmit(int maxClients)
    {
        if (Interlocked.Increment(ref _connectedClients) > maxClients)
        {
            Interlocked.Decrement(ref _connectedClients);
            Interlocked.Increment(ref _rejectedConnections);
            return 0;
        }
        Interlocked.Increment(ref _totalConnections);
        return Interlocked.Increment(ref _nextClientId);
    }

    public void ClientLeft() => Interlocked.Decrement(ref _connectedClients);

    /// <summary>
    /// CONFIG RESETSTAT: the running totals start over, as Redis's do; what describes the present (clients connected
    /// now) and client ids (which stay unique for the host's life) are kept.
    /// </summary>
    public void Reset()
    {
        Interlocked.Exchange(ref _totalConnections, 0);
        Interlocked.Exchange(ref _rejectedConnections, 0);
        Interlocked.Exchange(ref _commandsProcessed, 0);
        Interlocked.Exchange(ref _netInputBytes, 0);
        Interlocked.Exchange(ref _netOutputBytes, 0);
    }

    // Sessions add per batch rather than per command, to keep shared cache lines quiet.
    public void AddCommands(long count) => Interlocked.Add(ref _commandsProcessed, count);
    public void AddInput(long bytes) => Interlocked.Add(ref _netInputBytes, bytes);
    public void AddOutput(long bytes) => Interlocked.Add(ref _netOutputBytes, bytes);
}

/// <summary>The gates of the log lines a client can cause as often as it likes: one for each kind, one per account.</summary>
internal sealed class LogGates(TimeProvider time)
{
    private readonly System.Collections.Concurrent.ConcurrentDictionary<string, LogGate> _accountBudgets = new(StringComparer.Ordinal);

    public LogGate AddressBudgets { get; } = new(time, LogGate.DefaultInterval);
    public LogGate RepeatedAuthFailures { get; } = new(time, LogGate.DefaultInterval);
    public LogGate MaxClients { get; } = new(time, LogGate.DefaultInterval);
    public LogGate MaxClientsPerAddress { get; } = new(time, LogGate.DefaultInterval);
    public LogGate AuthTimeouts { get; } = new(time, LogGate.DefaultInterval);
    public LogGate MaxClientsPerAccount { get; } = new(time, LogGate.DefaultInterval);
    public LogGate IdleTimeouts { get; } = new(time, LogGate.DefaultInterval);
    public LogGate ProtocolErrors { get; } = new(time, LogGate.DefaultInterval);
    public LogGate PlainClients { get; } = new(time, LogGate.DefaultInterval);
    public LogGate TlsHandshakes { get; } = new(time, LogGate.DefaultInterval);

    /// <summary>Only accounts of the users file are asked for, so this table is as small as that file.</summary>
    public LogGate AccountBudget(string account) => _accountBudgets.GetOrAdd(account, _ => new LogGate(time, LogGate.DefaultInterval));
}

/// <summary>The host's certificate, loaded and checked at start.</summary>
internal sealed record ServerTls(SslServerAuthenticationOptions Options);
