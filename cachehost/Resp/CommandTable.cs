using System.Text;

namespace Hpc.CacheHost.Resp;

internal enum CommandId : byte
{
    Unknown,
    Get, Set, MGet, Del, Exists,
    Expire, PExpire, Ttl, PTtl, Persist,
    Ping, Echo, Auth, Hello, Select, Quit,
    Info, DbSize, FlushAll, FlushDb,
    Config, Command, Client, Keys,
}

/// <param name="Arity">Redis convention: N means exactly N arguments including the name, -N means at least N.</param>
/// <param name="AllowedBeforeAuth">Commands a client may send before authenticating (to authenticate, or to leave).</param>
internal sealed record CommandInfo(CommandId Id, byte[] LowerName, int Arity, bool AllowedBeforeAuth = false)
{
    public bool AcceptsArgumentCount(int count) => Arity >= 0 ? count == Arity : count >= -Arity;
}

/// <summary>
/// Maps a command name to its descriptor by comparing bytes case-insensitively, so dispatch allocates no string.
/// </summary>
internal static class CommandTable
{
    private static readonly CommandInfo[] ById = Build(
        new(CommandId.Get, "get"u8.ToArray(), 2),
        new(CommandId.Set, "set"u8.ToArray(), -3),
        new(CommandId.MGet, "mget"u8.ToArray(), -2),
        new(CommandId.Del, "del"u8.ToArray(), -2),
        new(CommandId.Exists, "exists"u8.ToArray(), -2),
        new(CommandId.Expire, "expire"u8.ToArray(), -3),
        new(CommandId.PExpire, "pexpire"u8.ToArray(), -3),
        new(CommandId.Ttl, "ttl"u8.ToArray(), 2),
        new(CommandId.PTtl, "pttl"u8.ToArray(), 2),
        new(CommandId.Persist, "persist"u8.ToArray(), 2),
        new(CommandId.Ping, "ping"u8.ToArray(), -1),
        new(CommandId.Echo, "echo"u8.ToArray(), 2),
        new(CommandId.Auth, "auth"u8.ToArray(), -2, AllowedBeforeAuth: true),
        new(CommandId.Hello, "hello"u8.ToArray(), -1, AllowedBeforeAuth: true),
        new(CommandId.Select, "select"u8.ToArray(), 2),
        new(CommandId.Quit, "quit"u8.ToArray(), -1, AllowedBeforeAuth: true),
        new(CommandId.Info, "info"u8.ToArray(), -1),
        new(CommandId.DbSize, "dbsize"u8.ToArray(), 1),
        new(CommandId.FlushAll, "flushall"u8.ToArray(), -1),
        new(CommandId.FlushDb, "flushdb"u8.ToArray(), -1),
        new(CommandId.Config, "config"u8.ToArray(), -2),
        new(CommandId.Command, "command"u8.ToArray(), -1),
        new(CommandId.Client, "client"u8.ToArray(), -2),
        new(CommandId.Keys, "keys"u8.ToArray(), 2));

    /// <summary>Number of commands served, as COMMAND COUNT reports it.</summary>
    public static int Count => ById.Length - 1;

    public static CommandInfo Get(CommandId id) => ById[(int)id];

    public static CommandInfo? Lookup(ReadOnlySpan<byte> name)
    {
        var id = name.Length switch
        {
            3 => Is(name, "GET"u8) ? CommandId.Get
                : Is(name, "SET"u8) ? CommandId.Set
                : Is(name, "DEL"u8) ? CommandId.Del
                : Is(name, "TTL"u8) ? CommandId.Ttl
                : CommandId.Unknown,
            4 => Is(name, "MGET"u8) ? CommandId.MGet
                : Is(name, "PING"u8) ? CommandId.Ping
                : Is(name, "PTTL"u8) ? CommandId.PTtl
                : Is(name, "ECHO"u8) ? CommandId.Echo
                : Is(name, "AUTH"u8) ? CommandId.Auth
                : Is(name, "QUIT"u8) ? CommandId.Quit
                : Is(name, "INFO"u8) ? CommandId.Info
                : Is(name, "KEYS"u8) ? CommandId.Keys
                : CommandId.Unknown,
            5 => Is(name, "HELLO"u8) ? CommandId.Hello : CommandId.Unknown,
            6 => Is(name, "EXISTS"u8) ? CommandId.Exists
                : Is(name, "EXPIRE"u8) ? CommandId.Expire
                : Is(name, "SELECT"u8) ? CommandId.Select
                : Is(name, "DBSIZE"u8) ? CommandId.DbSize
                : Is(name, "CONFIG"u8) ? CommandId.Config
                : Is(name, "CLIENT"u8) ? CommandId.Client
                : CommandId.Unknown,
            7 => Is(name, "PEXPIRE"u8) ? CommandId.PExpire
                : Is(name, "PERSIST"u8) ? CommandId.Persist
                : Is(name, "COMMAND"u8) ? CommandId.Command
                : Is(name, "FLUSHDB"u8) ? CommandId.FlushDb
                : CommandId.Unknown,
            8 => Is(name, "FLUSHALL"u8) ? CommandId.FlushAll : CommandId.Unknown,
            _ => CommandId.Unknown,
        };
        return id == CommandId.Unknown ? null : ById[(int)id];
    }

    public static bool Is(ReadOnlySpan<byte> text, ReadOnlySpan<byte> upperCaseLiteral) => Ascii.EqualsIgnoreCase(text, upperCaseLiteral);

    private static CommandInfo[] Build(params CommandInfo[] commands)
    {
        var byId = new CommandInfo[Enum.GetValues<CommandId>().Length];
        byId[0] = new CommandInfo(CommandId.Unknown, [], 0);
        foreach (var command in commands)
            byId[(int)command.Id] = command;
        return byId;
    }
}
