using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Server.Commands;

/// <summary>Executes one parsed command for <paramref name="session"/>: reads its arguments, appends exactly one reply.</summary>
internal delegate void CommandHandler(ClientSession session);

[Flags]
internal enum CommandFlags
{
    None = 0,
    /// <summary>Allowed before the client has authenticated (to authenticate, negotiate, or leave).</summary>
    NoAuth = 1,
    /// <summary>Changes the store: writer or admin.</summary>
    Write = 2,
    /// <summary>Removes keys: admin, or a writer within <see cref="WriteRules.Delete"/>.</summary>
    Delete = 4,
    /// <summary>Admin only.</summary>
    Admin = 8,
}

/// <param name="Name">Lower case, as Redis reports it (COMMAND LIST, arity errors).</param>
/// <param name="Arity">Redis convention: N means exactly N arguments including the name, -N means at least N.</param>
internal sealed record CommandInfo(string Name, int Arity, CommandFlags Flags, CommandHandler Handler)
{
    public byte[] LowerName { get; } = Encoding.ASCII.GetBytes(Name);

    public bool AllowedBeforeAuth => (Flags & CommandFlags.NoAuth) != 0;

    public bool AcceptsArgumentCount(int count) => Arity >= 0 ? count == Arity : count >= -Arity;

    /// <summary>The least role that may run it (a writer's deletes are further limited by key).</summary>
    public CacheRole Role { get; } = (Flags & CommandFlags.Admin) != 0 ? CacheRole.Admin
        : (Flags & (CommandFlags.Write | CommandFlags.Delete)) != 0 ? CacheRole.Writer : CacheRole.Reader;
}

/// <summary>
/// Every command this host serves: one row each. Adding a command is a row here and its handler method in the family's
/// file beside this one (see docs/adding-a-resp-command.md). Dispatch compares bytes case-insensitively among the
/// commands of the same name length, in the order below, so it allocates nothing; keep hot commands first.
/// </summary>
internal static class CommandTable
{
    private static readonly CommandInfo[] Commands =
    [
        // Hot path first: a stager sends SET, workers and agents GET/MGET.
        new("get", 2, CommandFlags.None, StringCommands.Get),
        new("set", -3, CommandFlags.Write, StringCommands.Set),
        new("mget", -2, CommandFlags.None, StringCommands.MGet),
        // A stager learns how segments already on the tier are stored (their codec may not be the one it uses now).
        new("strlen", 2, CommandFlags.None, StringCommands.StrLen),

        new("del", -2, CommandFlags.Delete, KeyCommands.Del),
        new("exists", -2, CommandFlags.None, KeyCommands.Exists),
        new("expire", -3, CommandFlags.Write, KeyCommands.Expire),
        new("pexpire", -3, CommandFlags.Write, KeyCommands.PExpire),
        new("ttl", 2, CommandFlags.None, KeyCommands.Ttl),
        new("pttl", 2, CommandFlags.None, KeyCommands.PTtl),
        new("persist", 2, CommandFlags.Write, KeyCommands.Persist),
        new("keys", 2, CommandFlags.None, KeyCommands.Keys),

        new("ping", -1, CommandFlags.None, ConnectionCommands.Ping),
        new("echo", 2, CommandFlags.None, ConnectionCommands.Echo),
        new("auth", -2, CommandFlags.NoAuth, ConnectionCommands.Auth),
        new("hello", -1, CommandFlags.NoAuth, ConnectionCommands.Hello),
        new("select", 2, CommandFlags.None, ConnectionCommands.Select),
        new("quit", -1, CommandFlags.NoAuth, ConnectionCommands.Quit),
        new("client", -2, CommandFlags.None, ConnectionCommands.Client),

        new("info", -1, CommandFlags.None, ServerCommands.Info),
        new("dbsize", 1, CommandFlags.None, ServerCommands.DbSize),
        new("flushall", -1, CommandFlags.Admin, ServerCommands.Flush),
        new("flushdb", -1, CommandFlags.Admin, ServerCommands.Flush),
        new("config", -2, CommandFlags.None, ServerCommands.Config),
        new("command", -1, CommandFlags.None, ServerCommands.Command),
        new("acl", -2, CommandFlags.None, ConnectionCommands.Acl),
    ];

    /// <summary>The commands indexed by name length; each bucket keeps the table's order.</summary>
    private static readonly CommandInfo[][] ByLength = Index(Commands);

    /// <summary>Number of commands served, as COMMAND COUNT reports it.</summary>
    public static int Count => Commands.Length;

    public static IReadOnlyList<CommandInfo> All => Commands;

    public static CommandInfo? Lookup(ReadOnlySpan<byte> name)
    {
        var byLength = ByLength;
        if ((uint)name.Length >= (uint)byLength.Length)
            return null;
        foreach (var command in byLength[name.Length])
        {
            if (Ascii.EqualsIgnoreCase(name, command.LowerName))
                return command;
        }
        return null;
    }

    private static CommandInfo[][] Index(CommandInfo[] commands)
    {
        foreach (var command in commands)
        {
            if (command.Name.Length == 0 || command.Name.Any(c => !char.IsAsciiLetterLower(c) && c != '-' && c != '|' && !char.IsAsciiDigit(c)))
                throw new InvalidOperationException($"Command name '{command.Name}' must be lower-case ASCII.");
            if (commands.Count(c => c.Name == command.Name) > 1)
                throw new InvalidOperationException($"Command '{command.Name}' is in the table twice.");
        }
        var byLength = new CommandInfo[commands.Max(c => c.Name.Length) + 1][];
        for (int length = 0; length < byLength.Length; length++)
            byLength[length] = commands.Where(c => c.Name.Length == length).ToArray();
        return byLength;
    }
}
