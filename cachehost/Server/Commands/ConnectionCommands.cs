using System.Net;
using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Server.Commands;

/// <summary>The connection's own state: PING, ECHO, AUTH, HELLO, SELECT, QUIT, CLIENT.</summary>
internal static class ConnectionCommands
{
    public static void Ping(ClientSession s)
    {
        if (s.Args.Count == 1)
            s.Reply.WriteRaw("+PONG\r\n"u8);
        else if (s.Args.Count == 2)
            s.Reply.WriteBulk(s.Args.Span(1));
        else
            s.Reply.WriteError("ERR wrong number of arguments for 'ping' command"u8);
    }

    public static void Echo(ClientSession s) => s.Reply.WriteBulk(s.Args.Span(1));

    public static void Quit(ClientSession s)
    {
        s.RequestQuit();
        s.Reply.WriteRaw(Replies.Ok);
    }

    /// <summary>AUTH password, or AUTH default password.</summary>
    public static void Auth(ClientSession s)
    {
        var args = s.Args;
        if (args.Count > 3)
        {
            s.Reply.WriteError(Replies.SyntaxError);
            return;
        }
        if (!s.Server.Users.Required)
        {
            s.Reply.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"u8);
            return;
        }
        if (Authenticate(s, args.Count == 3 ? args.Span(1) : "default"u8, args.Span(args.Count - 1)) is { } refusal)
            s.Reply.WriteError(refusal);
        else
            s.Reply.WriteRaw(Replies.Ok);
    }

    /// <summary>Logs the connection in; null on success, otherwise the error to reply.</summary>
    private static byte[]? Authenticate(ClientSession s, ReadOnlySpan<byte> user, ReadOnlySpan<byte> password)
    {
        var users = s.Server.Users;
        if (!users.Required)
            return null;
        var name = user.Length <= 256 ? Encoding.UTF8.GetString(user) : null;
        var existing = name is not null && users.Find(name) is not null ? name : null;
        var address = (s.Remote as IPEndPoint)?.Address;
        if (s.Server.AuthBudget.Admit(address, existing, out var ticket) is { } spent)
        {
            s.AuthenticationFailed();
            return Encoding.UTF8.GetBytes($"WRONGPASS too many failed AUTH attempts ({spent.Spent}): try again in {Math.Ceiling(spent.RetryAfter.TotalSeconds)} s; {Hpc.CommonData.Cache.RespErrorException.Unchecked}");
        }
        if (users.Authenticate(user, password) is not { } account)
        {
            s.AuthenticationFailed();
            if (s.Server.AuthBudget.Failed(address, ticket) is { } nowSpent)
                s.BudgetSpent(nowSpent, name ?? "");
            return WrongPass;
        }
        s.Server.AuthBudget.Succeeded(address, account.Name, ticket);
        // The password was right; whether the account may hold one more connection is decided only now, so nobody
        // without it learns how many the account holds.
        if (s.HoldShare(account) is { } full)
            return Encoding.UTF8.GetBytes(full);
        s.User = account;
        s.AuthenticationSucceeded();
        return null;
    }

    private static readonly byte[] WrongPass = Replies.WrongPass.ToArray();

    /// <summary>ACL WHOAMI: the account this connection acts as (what redis-cli --user shows).</summary>
    public static void Acl(ClientSession s)
    {
        var sub = s.Args.Span(1);
        if (Ascii.EqualsIgnoreCase(sub, "WHOAMI"u8) && s.Args.Count == 2)
            s.Reply.WriteBulk(s.User!.NameBytes);
        else if (Ascii.EqualsIgnoreCase(sub, "DRYRUN"u8) && s.Args.Count >= 4)
            DryRun(s);
        else if (Ascii.EqualsIgnoreCase(sub, "GETUSER"u8) && s.Args.Count == 3)
            GetUser(s);
        else if (Ascii.EqualsIgnoreCase(sub, "LOAD"u8) && s.Args.Count == 2)
            Load(s);
        else
            Replies.UnknownSubcommand(s, sub, "ACL"u8);
    }

    /// <summary>
    /// The account named, as a connection sees it: itself always, anyone else only for an administrator (whose ACL
    /// commands these are in Redis). Replies and returns null otherwise.
    /// </summary>
    private static CacheUser? TargetUser(ClientSession s)
    {
        var name = Encoding.UTF8.GetString(s.Args.Span(2));
        var self = s.User!;
        if (name == self.Name) return self;
        if (self.Role < CacheRole.Admin)
        {
            s.Reply.WriteError(Encoding.UTF8.GetBytes($"NOPERM User {self.Name} may ask only about itself: that takes the admin role"));
            return null;
        }
        var user = s.Server.Users.Find(name);
        if (user is null) s.Reply.WriteError(Encoding.UTF8.GetBytes($"ERR User '{Encoding.UTF8.GetString(Replies.Sanitize(s.Args.Span(2)))}' not found"));
        return user;
    }

    /// <summary>
    /// ACL DRYRUN user command [arg ...]: whether that account may run that command on those keys now, decided by the
    /// same checks as a real request, without running it: +OK, or the reason as a bulk string (Redis's form).
    /// </summary>
    private static void DryRun(ClientSession s)
    {
        if (TargetUser(s) is not { } user) return;
        var name = s.Args.Span(3);
        var command = CommandTable.Lookup(name);
        if (command is null || !command.AcceptsArgumentCount(s.Args.Count - 3))
        {
            s.Reply.WriteError(Encoding.UTF8.GetBytes($"ERR Command '{Encoding.UTF8.GetString(Replies.Sanitize(name))}' not found or wrong number of arguments"));
            return;
        }
        if (s.Authorize(user, command, s.Args, 4, out _) is { } refusal)
            s.Reply.WriteBulk(Encoding.UTF8.GetBytes(refusal));
        else
            s.Reply.WriteRaw(Replies.Ok);
    }

    /// <summary>ACL GETUSER name: the account's role and the dataset names it may stage (as the users file gives them).</summary>
    private static void GetUser(ClientSession s)
    {
        if (TargetUser(s) is not { } user) return;
        var owned = user.Datasets.ToList();
        s.Reply.WriteArrayHeader(4);
        s.Reply.WriteBulk("role"u8);
        s.Reply.WriteBulk(Encoding.ASCII.GetBytes(user.Role.ToString().ToLowerInvariant()));
        s.Reply.WriteBulk("datasets"u8);
        s.Reply.WriteArrayHeader(owned.Count);
        foreach (var dataset in owned) s.Reply.WriteBulk(Encoding.UTF8.GetBytes(dataset));
    }

    /// <summary>ACL LOAD: the users file (and password file) read again and put in force on this host, all or nothing.</summary>
    private static void Load(ClientSession s)
    {
        if (s.User!.Role < CacheRole.Admin)
        {
            s.Reply.WriteError(Encoding.UTF8.GetBytes($"NOPERM User {s.User.Name} has no permissions to run the 'acl|load' command: that takes the admin role"));
            return;
        }
        var (loaded, message) = s.LoadUsersAgain();
        if (loaded) s.Reply.WriteRaw(Replies.Ok);
        else s.Reply.WriteError(Encoding.UTF8.GetBytes("ERR " + message));
    }

    /// <summary>HELLO negotiates RESP3 in newer clients; this server speaks RESP2 only and says so.</summary>
    public static void Hello(ClientSession s)
    {
        var args = s.Args;
        var reply = s.Reply;
        if (args.Count >= 2)
        {
            if (!RespParser.TryParseInt64(args.Span(1), out long version))
            {
                reply.WriteError("ERR Protocol version is not an integer or out of range"u8);
                return;
            }
            if (version != 2)
            {
                reply.WriteError("NOPROTO unsupported protocol version"u8);
                return;
            }
        }

        byte[]? newName = null;
        for (int i = 2; i < args.Count; i++)
        {
            var option = args.Span(i);
            if (Ascii.EqualsIgnoreCase(option, "AUTH"u8) && i + 2 < args.Count)
            {
                if (Authenticate(s, args.Span(i + 1), args.Span(i + 2)) is { } refusal)
                {
                    reply.WriteError(refusal);
                    return;
                }
                i += 2;
            }
            else if (Ascii.EqualsIgnoreCase(option, "SETNAME"u8) && i + 1 < args.Count)
            {
                newName = args.Span(++i).ToArray();
            }
            else
            {
                reply.WriteError("ERR Syntax error in HELLO option '"u8, Replies.Sanitize(option), "'"u8);
                return;
            }
        }
        if (!s.Authenticated)
        {
            reply.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"u8);
            return;
        }
        if (newName is not null)
            s.ClientName = newName;

        reply.WriteArrayHeader(14);
        reply.WriteBulk("server"u8);
        reply.WriteBulk("redis"u8);
        reply.WriteBulk("version"u8);
        reply.WriteBulk(InfoReport.RedisCompatibleVersion);
        reply.WriteBulk("proto"u8);
        reply.WriteInteger(2);
        reply.WriteBulk("id"u8);
        reply.WriteInteger(s.Id);
        reply.WriteBulk("mode"u8);
        reply.WriteBulk("standalone"u8);
        reply.WriteBulk("role"u8);
        reply.WriteBulk("master"u8);
        reply.WriteBulk("modules"u8);
        reply.WriteArrayHeader(0);
    }

    /// <summary>One database: SELECT 0 is accepted, any other index refused.</summary>
    public static void Select(ClientSession s)
    {
        if (!RespParser.TryParseInt64(s.Args.Span(1), out long index))
            s.Reply.WriteError(Replies.NotAnInteger);
        else if (index != 0)
            s.Reply.WriteError("ERR DB index is out of range"u8);
        else
            s.Reply.WriteRaw(Replies.Ok);
    }

    /// <summary>CLIENT ID | GETNAME | SETNAME name | SETINFO attr value (accepted and ignored).</summary>
    public static void Client(ClientSession s)
    {
        var args = s.Args;
        var sub = args.Span(1);
        if (Ascii.EqualsIgnoreCase(sub, "ID"u8) && args.Count == 2)
        {
            s.Reply.WriteInteger(s.Id);
        }
        else if (Ascii.EqualsIgnoreCase(sub, "GETNAME"u8) && args.Count == 2)
        {
            if (s.ClientName is { Length: > 0 } name)
                s.Reply.WriteBulk(name);
            else
                s.Reply.WriteNullBulk();
        }
        else if (Ascii.EqualsIgnoreCase(sub, "SETNAME"u8) && args.Count == 3)
        {
            var name = args.Span(2);
            if (name.IndexOfAnyExceptInRange((byte)'!', (byte)'~') >= 0)
            {
                s.Reply.WriteError("ERR Client names cannot contain spaces, newlines or special characters."u8);
                return;
            }
            s.ClientName = name.ToArray();
            s.Reply.WriteRaw(Replies.Ok);
        }
        else if (Ascii.EqualsIgnoreCase(sub, "SETINFO"u8) && args.Count == 4)
        {
            s.Reply.WriteRaw(Replies.Ok);
        }
        else
        {
            Replies.UnknownSubcommand(s, sub, "CLIENT"u8);
        }
    }
}
