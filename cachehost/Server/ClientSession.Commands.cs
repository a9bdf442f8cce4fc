using System.Buffers;
using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CacheHost.Server.Commands;
using Hpc.CacheHost.Storage;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Server;

/// <summary>Dispatch, and what a command handler (Server/Commands/) may see of the session.</summary>
internal sealed partial class ClientSession
{
    /// <summary>The request being executed: the command name is argument 0.</summary>
    internal RespCommand Args => _command;

    /// <summary>Where the handler appends its one reply.</summary>
    internal ReplyBuffer Reply => _reply;

    internal ServerContext Server => _server;

    internal CacheStore Store => _server.Store;

    /// <summary>The account this connection acts as; null until it authenticates (when the host requires it).</summary>
    internal CacheUser? User
    {
        get => _user;
        set
        {
            _user = value;
            if (value is null || PendingAddress is not { } address) return;
            _server.Admission.LoggedIn(address);
            LeavePending();
        }
    }

    internal bool Authenticated => _user is not null;

    /// <summary>
    /// Makes this connection one of <paramref name="account"/>'s, within the account's share of connections
    /// (<see cref="AccountShares"/>), at AUTH once the password is right. Null when it may log in; otherwise the refusal
    /// to reply, and the connection closes after it: it would only hold a place until --auth-timeout.
    /// </summary>
    internal string? HoldShare(CacheUser account)
    {
        if (_shareAccount == account.Name)
            return null;
        if (_server.Shares.TryTake(account) is { } refused)
        {
            if (_server.LogGates.MaxClientsPerAccount.TryPass(out long heldBack))
                Log.MaxClientsPerAccountReached(_logger, Id, Remote, account.Name, refused, heldBack);
            _quitRequested = true;
            return refused;
        }
        // Logging in again as another account moves the connection to that account's share.
        ReleaseShare();
        if (AccountShares.Counts(account))
            (_shareAccount, _shareWriter) = (account.Name, account.Role == CacheRole.Writer);
        return null;
    }

    /// <summary>The connection no longer counts against its account's share (at close, or on logging in as another).</summary>
    private void ReleaseShare()
    {
        if (_shareAccount is { } held)
        {
            _shareAccount = null;
            _server.Shares.Release(held, _shareWriter);
        }
    }

    /// <summary>ACL LOAD from this connection, logged as the client that asked.</summary>
    internal (bool Loaded, string Message) LoadUsersAgain() => UsersReload.Reload(_server, _logger, $"ACL LOAD from client {Id} ({_user?.Name})");

    /// <summary>
    /// After the users file was loaded again, this connection's account as the file now defines it (its role and names
    /// may have changed). An account the file no longer defines loses its connection: the reply says why and the
    /// connection closes, as Redis does for the clients of a deleted user. False when the command must not run.
    /// </summary>
    private bool RefreshAccount()
    {
        if (_usersGeneration == _server.UsersGeneration)
            return true;
        _usersGeneration = _server.UsersGeneration;
        if (_user is null || ReferenceEquals(_user, ServerContext.OpenAccess))
            return true;
        if (_server.Users.Find(_user.Name) is { } now)
        {
            _user = now;
            return true;
        }
        Log.AccountRemoved(_logger, Id, _user.Name);
        _reply.WriteError(Encoding.UTF8.GetBytes($"NOAUTH account {_user.Name} is no longer in the users file; the connection closes"));
        _user = null;
        _quitRequested = true;
        return false;
    }

    internal byte[]? ClientName
    {
        get => _clientName;
        set => _clientName = value;
    }

    /// <summary>
    /// A wrong password on this connection: its reply, and everything after it on the connection, waits 20 ms, doubling
    /// with every further failure up to 2 s, so guessing costs seconds instead of microseconds; other connections are
    /// not slowed. A right password resets it.
    /// </summary>
    internal void AuthenticationFailed()
    {
        _failedAuths++;
        _authPenalty = TimeSpan.FromMilliseconds(Math.Min(2000, 20 << Math.Min(_failedAuths - 1, 10)));
        if ((_failedAuths == 3 || _failedAuths % 100 == 0) && _server.LogGates.RepeatedAuthFailures.TryPass(out long heldBack))
            Log.RepeatedAuthFailures(_logger, Id, Remote, _failedAuths, heldBack);
    }

    internal void AuthenticationSucceeded()
    {
        _failedAuths = 0;
        _authDeadline?.Dispose();
        _authDeadline = null;
    }

    /// <param name="budget">"account NAME" or "address A", as <see cref="AuthBudget.Failed"/> says.</param>
    internal void BudgetSpent(string budget, string user)
    {
        var gate = budget.StartsWith("account ", StringComparison.Ordinal) ? _server.LogGates.AccountBudget(budget) : _server.LogGates.AddressBudgets;
        if (gate.TryPass(out long heldBack))
            Log.AuthBudgetSpent(_logger, budget, Id, Remote, user, heldBack);
    }

    /// <summary>Set by QUIT: the connection closes once the replies so far are sent.</summary>
    internal void RequestQuit() => _quitRequested = true;

    /// <summary>
    /// Whether <paramref name="user"/> may run <paramref name="command"/> with the arguments from <paramref name="first"/>
    /// on (the command name is at <paramref name="first"/> − 1): null when allowed, otherwise the refusal to reply.
    /// Deciding changes nothing, so ACL DRYRUN asks the same question. A writer re-sending bytes a
    /// content-addressed key already holds gets <see cref="WriteVerdict.AlreadyHeld"/> through <paramref name="verdict"/>.
    /// </summary>
    internal string? Authorize(CacheUser user, CommandInfo command, RespCommand args, int first, out WriteVerdict verdict)
    {
        verdict = WriteVerdict.Allowed;
        if (user.Role < command.Role)
            return $"NOPERM User {user.Name} has no permissions to run the '{command.Name}' command";
        // Administrators (and everyone on an open host) are not limited by key; readers cannot change anything.
        if (user.Role != CacheRole.Writer || (command.Flags & (CommandFlags.Write | CommandFlags.Delete)) == 0)
            return null;
        if ((command.Flags & CommandFlags.Delete) != 0)
        {
            for (int i = first; i < args.Count; i++)
                if (WriteRules.Delete(Store, user, args.Span(i)) is { } refused)
                    return refused;
            return null;
        }
        var key = args.Span(first);
        string? refusal;
        switch (command.Name)
        {
            case "set":
                WriteRules.ReadOptions(args, first + 2, out long ttlMs, out bool onlyIfAbsent);
                verdict = WriteRules.Set(Store, user, key, args[first + 1], onlyIfAbsent, ttlMs, _server.Options.ForeignKeyQuota.Bytes, out refusal);
                if (refusal is null && WriteRules.IsLock(key)) refusal = _server.Locks.Refusal(user.Name, Encoding.UTF8.GetString(key));
                return refusal;
            case "expire":
            case "pexpire":
                if (!RespParser.TryParseInt64(args.Span(first + 1), out long amount)) return null; // the handler says why
                var onlyLonger = args.Count > first + 2 && System.Text.Ascii.EqualsIgnoreCase(args.Span(first + 2), "GT"u8);
                return WriteRules.Expire(Store, user, key, command.Name == "expire" ? (amount > long.MaxValue / 1000 ? long.MaxValue : amount * 1000) : amount, onlyLonger);
            case "persist":
                return WriteRules.Expire(Store, user, key, null);
            default:
                return $"NOPERM User {user.Name} has no permissions to run the '{command.Name}' command";
        }
    }

    /// <summary>
    /// A <c>SET key value</c> whose value was received straight into <paramref name="value"/>: the same checks as any
    /// command, then the store keeps the array itself.
    /// </summary>
    private void ExecuteStreamedSet(byte[] key, byte[] value)
    {
        var set = CommandTable.Lookup("set"u8)!;
        if (!RefreshAccount())
        {
            ReleaseFrameCharge();
            return;
        }
        if (_user is null || _user.Role < set.Role)
        {
            ReleaseFrameCharge();
            _reply.WriteError(_user is null ? "NOAUTH Authentication required."u8
                : Encoding.UTF8.GetBytes($"NOPERM User {_user.Name} has no permissions to run the 'set' command"));
            return;
        }
        if (_user.Role == CacheRole.Writer)
        {
            var verdict = WriteRules.Set(Store, _user, key, new ReadOnlySequence<byte>(value), onlyIfAbsent: false, ttlMs: 0, _server.Options.ForeignKeyQuota.Bytes, out var refusal);
            if (verdict != WriteVerdict.Allowed)
            {
                ReleaseFrameCharge();
                if (refusal is not null)
                {
                    _reply.WriteError(Encoding.UTF8.GetBytes(refusal));
                    return;
                }
                // The same bytes again, with no expiry asked for: the key keeps them, and lives on.
                Store.Persist(key);
                _reply.WriteRaw(Replies.Ok);
                return;
            }
        }
        // The frame's charge ends as the store takes over the value's cost, as for any other command.
        ReleaseFrameCharge(buffersFreed: false);
        if (Store.SetOwned(key, value) == SetOutcome.Stored)
        {
            if (Publication.IsPointer(key)) Publication.KeepSegments(Store, key, new ReadOnlySequence<byte>(value));
            _reply.WriteRaw(Replies.Ok);
        }
        else
            _reply.WriteError(Replies.OutOfMemory);
    }

    /// <summary>
    /// A writer's SET of bytes a content-addressed key holds already: nothing is stored; the key keeps whichever life is
    /// longer, so staging a dataset again never shortens that of another dataset sharing its segments.
    /// </summary>
    private void KeepLongerLife()
    {
        var key = _command.Span(1);
        WriteRules.ReadOptions(_command, 3, out long ttlMs, out bool onlyIfAbsent);
        if (onlyIfAbsent)
        {
            _reply.WriteNullBulk();
            return;
        }
        if (ttlMs == 0) Store.Persist(key);
        else Store.SetExpiry(key, ttlMs, ExpireCondition.IfGreater);
        _reply.WriteRaw(Replies.Ok);
    }

    /// <summary>Executes the parsed command and appends its reply; never throws for anything a client sends.</summary>
    private void Execute()
    {
        var name = _command.Span(0);
        var command = CommandTable.Lookup(name);
        if (command is null)
        {
            Replies.UnknownCommand(this, name);
            return;
        }
        if (!command.AcceptsArgumentCount(_command.Count))
        {
            _reply.WriteError("ERR wrong number of arguments for '"u8, command.LowerName, "' command"u8);
            return;
        }
        if (!RefreshAccount())
            return;
        if (_user is null)
        {
            if (!command.AllowedBeforeAuth)
            {
                _reply.WriteError("NOAUTH Authentication required."u8);
                return;
            }
        }
        else if (Authorize(_user, command, _command, 1, out var verdict) is { } refusal)
        {
            // Refusals are rare, so the message may allocate.
            _reply.WriteError(Encoding.UTF8.GetBytes(refusal));
            return;
        }
        else if (verdict == WriteVerdict.AlreadyHeld)
        {
            KeepLongerLife();
            return;
        }
        // Whether a writer's lock was free is known only before the command runs: afterwards a refused SET NX and a
        // take look alike when the poller sends the value the lock holds.
        var locks = command.Name is "set" or "del" && _command.Count >= 2 && WriteRules.IsLock(_command.Span(1));
        var writer = locks && _user is { Role: CacheRole.Writer } w ? w : null;
        var lockWasFree = locks && command.Name == "set" && !Store.Exists(_command.Span(1));
        if (writer is not null && command.Name == "set" && (!lockWasFree || _server.Locks.HeldBack(writer, _command.Span(1))))
        {
            // A writer's SET of a lock is always NX, and what it finds is decided here, not again by the handler: a
            // lock that expires between the two would be stored as a take that neither the ledger nor the waiters saw.
            // When the version's owner or an administrator is waiting for a free lock, the next take is theirs: the
            // writer finds it held, as it was a moment ago, and a job step of its own polls on rather than failing.
            _reply.WriteNullBulk();
            if (!lockWasFree) _server.Locks.Polled(writer, _command.Span(1));
            return;
        }
        command.Handler(this);
        // An administrator's SET NX that found the lock held: it waits for it. A plain SET took it over instead.
        if (locks && command.Name == "set" && !lockWasFree && _user is { Role: CacheRole.Admin } admin && IsSetNx())
            _server.Locks.Polled(admin, _command.Span(1));
        if (writer is not null) AccountLock(writer, command, lockWasFree);
    }

    private bool IsSetNx()
    {
        WriteRules.ReadOptions(_command, 3, out _, out bool onlyIfAbsent);
        return onlyIfAbsent;
    }

    /// <summary>
    /// A writer's SET of a version's lock that stored it, or DEL of one that is gone now, goes in the lock ledger. A
    /// SET NX that found the lock held took nothing, whatever it sent: were each refused poll a new take, a writer
    /// polling with the holder's value would restart its own hold every time, never accrue it, and never be stopped.
    /// </summary>
    private void AccountLock(CacheUser writer, CommandInfo command, bool lockWasFree)
    {
        var key = _command.Span(1);
        if (command.Name == "set" && lockWasFree && _command.Count >= 3 && Store.TryPeek(key, out var held) && held.AsSpan().SequenceEqual(_command.Span(2)))
        {
            WriteRules.ReadOptions(_command, 3, out long ttlMs, out _);
            _server.Locks.Taken(writer.Name, Encoding.UTF8.GetString(key), ttlMs);
        }
        else if (command.Name == "del")
        {
            for (int i = 1; i < _command.Count; i++)
                if (WriteRules.IsLock(_command.Span(i)) && !Store.Exists(_command.Span(i)))
                    _server.Locks.Released(writer.Name, Encoding.UTF8.GetString(_command.Span(i)));
        }
    }
}
