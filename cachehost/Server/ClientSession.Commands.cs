using System.Buffers;
using System.Security.Cryptography;
using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CacheHost.Storage;

namespace Hpc.CacheHost.Server;

internal sealed partial class ClientSession
{
    private const int MaxNameInErrorBytes = 128;

    private static ReadOnlySpan<byte> Ok => "+OK\r\n"u8;
    private static ReadOnlySpan<byte> NotAnInteger => "ERR value is not an integer or out of range"u8;
    private static ReadOnlySpan<byte> SyntaxError => "ERR syntax error"u8;

    /// <summary>Executes the parsed command and appends its reply; never throws for anything a client sends.</summary>
    private void Execute()
    {
        var name = _command.Span(0);
        var info = CommandTable.Lookup(name);
        if (info is null)
        {
            WriteUnknownCommand(name);
            return;
        }
        if (!info.AcceptsArgumentCount(_command.Count))
        {
            _reply.WriteError("ERR wrong number of arguments for '"u8, info.LowerName, "' command"u8);
            return;
        }
        if (!_authenticated && !info.AllowedBeforeAuth)
        {
            _reply.WriteError("NOAUTH Authentication required."u8);
            return;
        }

        switch (info.Id)
        {
            case CommandId.Get: Get(); break;
            case CommandId.MGet: MGet(); break;
            case CommandId.Set: Set(); break;
            case CommandId.Del: Del(); break;
            case CommandId.Exists: Exists(); break;
            case CommandId.Expire: Expire(unitMs: 1000, "ERR invalid expire time in 'expire' command"u8); break;
            case CommandId.PExpire: Expire(unitMs: 1, "ERR invalid expire time in 'pexpire' command"u8); break;
            case CommandId.Ttl: Ttl(inSeconds: true); break;
            case CommandId.PTtl: Ttl(inSeconds: false); break;
            case CommandId.Persist: _reply.WriteInteger(_server.Store.Persist(_command.Span(1)) ? 1 : 0); break;
            case CommandId.Ping: Ping(); break;
            case CommandId.Echo: _reply.WriteBulk(_command.Span(1)); break;
            case CommandId.Auth: Auth(); break;
            case CommandId.Hello: Hello(); break;
            case CommandId.Select: Select(); break;
            case CommandId.Quit: _quitRequested = true; _reply.WriteRaw(Ok); break;
            case CommandId.Info: Info(); break;
            case CommandId.DbSize: _reply.WriteInteger(_server.Store.Count); break;
            case CommandId.FlushAll or CommandId.FlushDb: Flush(); break;
            case CommandId.Config: Config(); break;
            case CommandId.Command: Command(); break;
            case CommandId.Client: Client(); break;
            case CommandId.Keys: Keys(); break;
        }
    }

    private void Get()
    {
        if (_server.Store.TryGet(_command.Span(1), out var value))
            _reply.WriteBulk(value);
        else
            _reply.WriteNullBulk();
    }

    private void MGet()
    {
        _reply.WriteArrayHeader(_command.Count - 1);
        for (int i = 1; i < _command.Count; i++)
        {
            if (_server.Store.TryGet(_command.Span(i), out var value))
                _reply.WriteBulk(value);
            else
                _reply.WriteNullBulk();
        }
    }

    private void Set()
    {
        var condition = SetCondition.Always;
        long ttlMs = 0;
        for (int i = 3; i < _command.Count; i++)
        {
            var option = _command.Span(i);
            if (CommandTable.Is(option, "NX"u8) && condition == SetCondition.Always)
            {
                condition = SetCondition.IfNotExists;
            }
            else if (CommandTable.Is(option, "XX"u8) && condition == SetCondition.Always)
            {
                condition = SetCondition.IfExists;
            }
            else if ((CommandTable.Is(option, "EX"u8) || CommandTable.Is(option, "PX"u8)) && ttlMs == 0 && i + 1 < _command.Count)
            {
                long unitMs = option[0] is (byte)'E' or (byte)'e' ? 1000 : 1;
                if (!RespParser.TryParseInt64(_command.Span(++i), out long amount))
                {
                    _reply.WriteError(NotAnInteger);
                    return;
                }
                if (amount <= 0 || amount > long.MaxValue / unitMs)
                {
                    _reply.WriteError("ERR invalid expire time in 'set' command"u8);
                    return;
                }
                ttlMs = amount * unitMs;
            }
            else
            {
                _reply.WriteError(SyntaxError);
                return;
            }
        }

        switch (_server.Store.Set(_command.Span(1), _command[2], condition, ttlMs))
        {
            case SetOutcome.Stored:
                _reply.WriteRaw(Ok);
                break;
            case SetOutcome.ConditionNotMet:
                _reply.WriteNullBulk();
                break;
            default:
                _reply.WriteError("OOM command not allowed when used memory > 'maxmemory'."u8);
                break;
        }
    }

    private void Del()
    {
        long deleted = 0;
        for (int i = 1; i < _command.Count; i++)
            deleted += _server.Store.Delete(_command.Span(i)) ? 1 : 0;
        _reply.WriteInteger(deleted);
    }

    /// <summary>
    /// KEYS with a prefix pattern ("hcd:s:*", or "*"): what an administrator's garbage collection needs. Other glob
    /// forms are refused rather than half-supported.
    /// </summary>
    private void Keys()
    {
        var pattern = _command.Span(1);
        var star = pattern.IndexOfAny("*?["u8);
        if (star >= 0 && (star != pattern.Length - 1 || pattern[star] != (byte)'*'))
        {
            _reply.WriteError("ERR only exact keys and 'prefix*' patterns are supported"u8);
            return;
        }
        var keys = star < 0 ? (_server.Store.Exists(pattern) ? [pattern.ToArray()] : []) : _server.Store.KeysWithPrefix(pattern[..star]);
        _reply.WriteArrayHeader(keys.Count);
        foreach (var key in keys) _reply.WriteBulk(key.AsSpan());
    }

    private void Exists()
    {
        // As in Redis, a key named twice counts twice.
        long found = 0;
        for (int i = 1; i < _command.Count; i++)
            found += _server.Store.Exists(_command.Span(i)) ? 1 : 0;
        _reply.WriteInteger(found);
    }

    private void Expire(long unitMs, ReadOnlySpan<byte> invalidTimeError)
    {
        if (!RespParser.TryParseInt64(_command.Span(2), out long amount))
        {
            _reply.WriteError(NotAnInteger);
            return;
        }
        if (amount > long.MaxValue / unitMs || amount < long.MinValue / unitMs)
        {
            _reply.WriteError(invalidTimeError);
            return;
        }

        ExpireCondition? condition = _command.Count switch
        {
            3 => ExpireCondition.Always,
            4 => ParseExpireCondition(_command.Span(3)),
            _ => null,
        };
        if (condition is null)
        {
            _reply.WriteError(SyntaxError);
            return;
        }
        _reply.WriteInteger(_server.Store.SetExpiry(_command.Span(1), amount * unitMs, condition.Value) ? 1 : 0);
    }

    private static ExpireCondition? ParseExpireCondition(ReadOnlySpan<byte> option) =>
        CommandTable.Is(option, "NX"u8) ? ExpireCondition.IfNoExpiry
        : CommandTable.Is(option, "XX"u8) ? ExpireCondition.IfHasExpiry
        : CommandTable.Is(option, "GT"u8) ? ExpireCondition.IfGreater
        : CommandTable.Is(option, "LT"u8) ? ExpireCondition.IfLess
        : null;

    private void Ttl(bool inSeconds)
    {
        long ms = _server.Store.GetTimeToLiveMs(_command.Span(1));
        _reply.WriteInteger(ms < 0 || !inSeconds ? ms : (ms + 500) / 1000);
    }

    private void Ping()
    {
        if (_command.Count == 1)
            _reply.WriteRaw("+PONG\r\n"u8);
        else if (_command.Count == 2)
            _reply.WriteBulk(_command.Span(1));
        else
            _reply.WriteError("ERR wrong number of arguments for 'ping' command"u8);
    }

    private void Auth()
    {
        if (_command.Count > 3)
        {
            _reply.WriteError(SyntaxError);
            return;
        }
        if (_server.Password is null)
        {
            _reply.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"u8);
            return;
        }
        if (TryAuthenticate(_command.Count == 3 ? _command.Span(1) : "default"u8, _command.Span(_command.Count - 1)))
            _reply.WriteRaw(Ok);
        else
            _reply.WriteError("WRONGPASS invalid username-password pair or user is disabled."u8);
    }

    private bool TryAuthenticate(ReadOnlySpan<byte> user, ReadOnlySpan<byte> password)
    {
        bool valid = _server.Password is null
            || (user.SequenceEqual("default"u8) && CryptographicOperations.FixedTimeEquals(password, _server.Password));
        if (valid)
            _authenticated = true;
        return valid;
    }

    /// <summary>HELLO negotiates RESP3 in newer clients; this server speaks RESP2 only and says so.</summary>
    private void Hello()
    {
        if (_command.Count >= 2)
        {
            if (!RespParser.TryParseInt64(_command.Span(1), out long version))
            {
                _reply.WriteError("ERR Protocol version is not an integer or out of range"u8);
                return;
            }
            if (version != 2)
            {
                _reply.WriteError("NOPROTO unsupported protocol version"u8);
                return;
            }
        }

        byte[]? newName = null;
        for (int i = 2; i < _command.Count; i++)
        {
            var option = _command.Span(i);
            if (CommandTable.Is(option, "AUTH"u8) && i + 2 < _command.Count)
            {
                if (!TryAuthenticate(_command.Span(i + 1), _command.Span(i + 2)))
                {
                    _reply.WriteError("WRONGPASS invalid username-password pair or user is disabled."u8);
                    return;
                }
                i += 2;
            }
            else if (CommandTable.Is(option, "SETNAME"u8) && i + 1 < _command.Count)
            {
                newName = _command.Span(++i).ToArray();
            }
            else
            {
                _reply.WriteError("ERR Syntax error in HELLO option '"u8, Sanitize(option), "'"u8);
                return;
            }
        }
        if (!_authenticated)
        {
            _reply.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"u8);
            return;
        }
        if (newName is not null)
            _clientName = newName;

        _reply.WriteArrayHeader(14);
        _reply.WriteBulk("server"u8);
        _reply.WriteBulk("redis"u8);
        _reply.WriteBulk("version"u8);
        _reply.WriteBulk(InfoReport.RedisCompatibleVersion);
        _reply.WriteBulk("proto"u8);
        _reply.WriteInteger(2);
        _reply.WriteBulk("id"u8);
        _reply.WriteInteger(Id);
        _reply.WriteBulk("mode"u8);
        _reply.WriteBulk("standalone"u8);
        _reply.WriteBulk("role"u8);
        _reply.WriteBulk("master"u8);
        _reply.WriteBulk("modules"u8);
        _reply.WriteArrayHeader(0);
    }

    private void Select()
    {
        if (!RespParser.TryParseInt64(_command.Span(1), out long index))
            _reply.WriteError(NotAnInteger);
        else if (index != 0)
            _reply.WriteError("ERR DB index is out of range"u8);
        else
            _reply.WriteRaw(Ok);
    }

    private void Info()
    {
        var sections = new List<string>(_command.Count - 1);
        for (int i = 1; i < _command.Count; i++)
            sections.Add(Encoding.UTF8.GetString(_command.Span(i)));
        _reply.WriteBulk(Encoding.UTF8.GetBytes(InfoReport.Build(_server, sections)));
    }

    private void Flush()
    {
        if (_command.Count > 2 || (_command.Count == 2 && !CommandTable.Is(_command.Span(1), "ASYNC"u8) && !CommandTable.Is(_command.Span(1), "SYNC"u8)))
        {
            _reply.WriteError(SyntaxError);
            return;
        }
        _server.Store.Flush();
        _reply.WriteRaw(Ok);
    }

    /// <summary>CONFIG GET answers the parameters clients probe on connect (redis-benchmark reads save and appendonly).</summary>
    private void Config()
    {
        var sub = _command.Span(1);
        if (CommandTable.Is(sub, "GET"u8) && _command.Count >= 3)
        {
            var parameters = InfoReport.ConfigParameters(_server);
            var matched = new List<KeyValuePair<string, string>>();
            for (int i = 2; i < _command.Count; i++)
            {
                string pattern = Encoding.UTF8.GetString(_command.Span(i));
                foreach (var parameter in parameters)
                {
                    if (GlobMatch(pattern, parameter.Key) && !matched.Contains(parameter))
                        matched.Add(parameter);
                }
            }
            _reply.WriteArrayHeader(matched.Count * 2);
            foreach (var (key, value) in matched)
            {
                _reply.WriteBulk(Encoding.UTF8.GetBytes(key));
                _reply.WriteBulk(Encoding.UTF8.GetBytes(value));
            }
        }
        else if (CommandTable.Is(sub, "RESETSTAT"u8) && _command.Count == 2)
        {
            _reply.WriteRaw(Ok);
        }
        else if (CommandTable.Is(sub, "SET"u8) || CommandTable.Is(sub, "REWRITE"u8))
        {
            _reply.WriteError("ERR CONFIG "u8, Sanitize(sub), " is not supported by this cache host; restart it with new options"u8);
        }
        else
        {
            WriteUnknownSubcommand(sub, "CONFIG"u8);
        }
    }

    /// <summary>redis-cli asks for COMMAND DOCS to build its hints; an empty answer makes it fall back to its own.</summary>
    private void Command()
    {
        if (_command.Count == 1)
        {
            _reply.WriteArrayHeader(0);
            return;
        }
        var sub = _command.Span(1);
        if (CommandTable.Is(sub, "COUNT"u8))
            _reply.WriteInteger(CommandTable.Count);
        else if (CommandTable.Is(sub, "DOCS"u8) || CommandTable.Is(sub, "INFO"u8) || CommandTable.Is(sub, "LIST"u8))
            _reply.WriteArrayHeader(0);
        else
            WriteUnknownSubcommand(sub, "COMMAND"u8);
    }

    private void Client()
    {
        var sub = _command.Span(1);
        if (CommandTable.Is(sub, "ID"u8) && _command.Count == 2)
        {
            _reply.WriteInteger(Id);
        }
        else if (CommandTable.Is(sub, "GETNAME"u8) && _command.Count == 2)
        {
            if (_clientName is { Length: > 0 })
                _reply.WriteBulk(_clientName);
            else
                _reply.WriteNullBulk();
        }
        else if (CommandTable.Is(sub, "SETNAME"u8) && _command.Count == 3)
        {
            var name = _command.Span(2);
            if (name.IndexOfAnyExceptInRange((byte)'!', (byte)'~') >= 0)
            {
                _reply.WriteError("ERR Client names cannot contain spaces, newlines or special characters."u8);
                return;
            }
            _clientName = name.ToArray();
            _reply.WriteRaw(Ok);
        }
        else if (CommandTable.Is(sub, "SETINFO"u8) && _command.Count == 4)
        {
            _reply.WriteRaw(Ok);
        }
        else
        {
            WriteUnknownSubcommand(sub, "CLIENT"u8);
        }
    }

    private void WriteUnknownCommand(ReadOnlySpan<byte> name)
    {
        // Redis's wording, which clients and people recognise; the arguments help find the sender's bug.
        var message = new ArrayBufferWriter<byte>(256);
        message.Write("ERR unknown command '"u8);
        message.Write(Sanitize(name));
        message.Write("', with args beginning with: "u8);
        for (int i = 1; i < _command.Count && message.WrittenCount < 2 * MaxNameInErrorBytes; i++)
        {
            message.Write("'"u8);
            message.Write(Sanitize(_command.Span(i)));
            message.Write("' "u8);
        }
        _reply.WriteError(message.WrittenSpan);
    }

    private void WriteUnknownSubcommand(ReadOnlySpan<byte> sub, ReadOnlySpan<byte> command)
    {
        var message = new ArrayBufferWriter<byte>(128);
        message.Write("ERR unknown subcommand '"u8);
        message.Write(Sanitize(sub));
        message.Write("'. Try "u8);
        message.Write(command);
        message.Write(" HELP."u8);
        _reply.WriteError(message.WrittenSpan);
    }

    /// <summary>A client-supplied name made safe for an error line: bounded, and without CR, LF or other controls.</summary>
    private static byte[] Sanitize(ReadOnlySpan<byte> text)
    {
        var copy = text[..Math.Min(text.Length, MaxNameInErrorBytes)].ToArray();
        for (int i = 0; i < copy.Length; i++)
        {
            if (copy[i] < 0x20 || copy[i] == 0x7f)
                copy[i] = (byte)' ';
        }
        return copy;
    }

    /// <summary>Glob match with * and ?, case-insensitive, as CONFIG GET patterns are.</summary>
    internal static bool GlobMatch(ReadOnlySpan<char> pattern, ReadOnlySpan<char> text)
    {
        int p = 0, t = 0, starP = -1, starT = 0;
        while (t < text.Length)
        {
            if (p < pattern.Length && (pattern[p] == '?' || char.ToLowerInvariant(pattern[p]) == char.ToLowerInvariant(text[t])))
            {
                p++;
                t++;
            }
            else if (p < pattern.Length && pattern[p] == '*')
            {
                starP = p++;
                starT = t;
            }
            else if (starP >= 0)
            {
                p = starP + 1;
                t = ++starT;
            }
            else
            {
                return false;
            }
        }
        while (p < pattern.Length && pattern[p] == '*')
            p++;
        return p == pattern.Length;
    }
}
