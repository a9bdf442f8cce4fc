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
        set => _user = value;
    }

    internal bool Authenticated => _user is not null;

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
        if (_failedAuths == 3 || _failedAuths % 100 == 0) Log.RepeatedAuthFailures(_logger, Id, Remote, _failedAuths);
    }

    internal void AuthenticationSucceeded() => _failedAuths = 0;

    /// <summary>Set by QUIT: the connection closes once the replies so far are sent.</summary>
    internal void RequestQuit() => _quitRequested = true;

    private bool DeletesOnlyOwnKeys()
    {
        for (int i = 1; i < _command.Count; i++)
            if (!CommandInfo.WriterMayDelete(_command.Span(i))) return false;
        return true;
    }

    /// <summary>
    /// A <c>SET key value</c> whose value was received straight into <paramref name="value"/>: the same checks as any
    /// command, then the store keeps the array itself.
    /// </summary>
    private void ExecuteStreamedSet(byte[] key, byte[] value)
    {
        var set = CommandTable.Lookup("set"u8)!;
        if (_user is null || _user.Role < set.Role)
        {
            ReleaseFrameCharge();
            _reply.WriteError(_user is null ? "NOAUTH Authentication required."u8
                : Encoding.UTF8.GetBytes($"NOPERM User {_user.Name} has no permissions to run the 'set' command"));
            return;
        }
        // The frame's charge ends as the store takes over the value's cost, as for any other command.
        ReleaseFrameCharge(buffersFreed: false);
        if (Store.SetOwned(key, value) == SetOutcome.Stored)
            _reply.WriteRaw(Replies.Ok);
        else
            _reply.WriteError(Replies.OutOfMemory);
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
        if (_user is null)
        {
            if (!command.AllowedBeforeAuth)
            {
                _reply.WriteError("NOAUTH Authentication required."u8);
                return;
            }
        }
        else if (_user.Role < command.Role)
        {
            // Redis's wording; refusals are rare, so the message may allocate.
            _reply.WriteError(Encoding.UTF8.GetBytes($"NOPERM User {_user.Name} has no permissions to run the '{command.Name}' command"));
            return;
        }
        else if (_user.Role == CacheRole.Writer && (command.Flags & CommandFlags.Delete) != 0 && !DeletesOnlyOwnKeys())
        {
            _reply.WriteError(Encoding.UTF8.GetBytes($"NOPERM User {_user.Name} has no permissions to delete shared keys (segments, manifests, latest pointers): that takes the admin role"));
            return;
        }
        command.Handler(this);
    }
}
