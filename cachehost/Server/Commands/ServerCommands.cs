using System.Text;

namespace Hpc.CacheHost.Server.Commands;

/// <summary>The server as a whole: INFO, DBSIZE, FLUSHALL/FLUSHDB, CONFIG, COMMAND.</summary>
internal static class ServerCommands
{
    public static void Info(ClientSession s)
    {
        var sections = new List<string>(s.Args.Count - 1);
        for (int i = 1; i < s.Args.Count; i++)
            sections.Add(Encoding.UTF8.GetString(s.Args.Span(i)));
        s.Reply.WriteBulk(Encoding.UTF8.GetBytes(InfoReport.Build(s.Server, sections)));
    }

    public static void DbSize(ClientSession s) => s.Reply.WriteInteger(s.Store.Count);

    /// <summary>FLUSHALL and FLUSHDB (one database, so the same) with an optional ASYNC or SYNC.</summary>
    public static void Flush(ClientSession s)
    {
        var args = s.Args;
        if (args.Count > 2 || (args.Count == 2 && !Ascii.EqualsIgnoreCase(args.Span(1), "ASYNC"u8) && !Ascii.EqualsIgnoreCase(args.Span(1), "SYNC"u8)))
        {
            s.Reply.WriteError(Replies.SyntaxError);
            return;
        }
        s.Store.Flush();
        s.Reply.WriteRaw(Replies.Ok);
    }

    /// <summary>CONFIG GET answers the parameters clients probe on connect (redis-benchmark reads save and appendonly).</summary>
    public static void Config(ClientSession s)
    {
        var args = s.Args;
        var sub = args.Span(1);
        if (Ascii.EqualsIgnoreCase(sub, "GET"u8) && args.Count >= 3)
        {
            var parameters = InfoReport.ConfigParameters(s.Server);
            var matched = new List<KeyValuePair<string, string>>();
            for (int i = 2; i < args.Count; i++)
            {
                string pattern = Encoding.UTF8.GetString(args.Span(i));
                foreach (var parameter in parameters)
                {
                    if (GlobMatch(pattern, parameter.Key) && !matched.Contains(parameter))
                        matched.Add(parameter);
                }
            }
            s.Reply.WriteArrayHeader(matched.Count * 2);
            foreach (var (key, value) in matched)
            {
                s.Reply.WriteBulk(Encoding.UTF8.GetBytes(key));
                s.Reply.WriteBulk(Encoding.UTF8.GetBytes(value));
            }
        }
        else if (Ascii.EqualsIgnoreCase(sub, "RESETSTAT"u8) && args.Count == 2)
        {
            // The counters are what operators watch the host by; only they may start them over.
            if (s.User is { Role: < Hpc.CommonData.Cache.CacheRole.Admin } user)
                s.Reply.WriteError(Encoding.UTF8.GetBytes($"NOPERM User {user.Name} has no permissions to run the 'config|resetstat' command"));
            else
            {
                s.Server.Stats.Reset();
                s.Store.ResetStats();
                s.Reply.WriteRaw(Replies.Ok);
            }
        }
        else if (Ascii.EqualsIgnoreCase(sub, "SET"u8) || Ascii.EqualsIgnoreCase(sub, "REWRITE"u8))
        {
            s.Reply.WriteError("ERR CONFIG "u8, Replies.Sanitize(sub), " is not supported by this cache host; restart it with new options"u8);
        }
        else
        {
            Replies.UnknownSubcommand(s, sub, "CONFIG"u8);
        }
    }

    /// <summary>
    /// COMMAND COUNT and COMMAND LIST come from the command table. redis-cli asks for COMMAND DOCS to build its hints;
    /// an empty answer (as for COMMAND and COMMAND INFO) makes it fall back to its own.
    /// </summary>
    public static void Command(ClientSession s)
    {
        if (s.Args.Count == 1)
        {
            s.Reply.WriteArrayHeader(0);
            return;
        }
        var sub = s.Args.Span(1);
        if (Ascii.EqualsIgnoreCase(sub, "COUNT"u8))
        {
            s.Reply.WriteInteger(CommandTable.Count);
        }
        else if (Ascii.EqualsIgnoreCase(sub, "LIST"u8))
        {
            s.Reply.WriteArrayHeader(CommandTable.Count);
            foreach (var command in CommandTable.All)
                s.Reply.WriteBulk(command.LowerName.AsSpan());
        }
        else if (Ascii.EqualsIgnoreCase(sub, "DOCS"u8) || Ascii.EqualsIgnoreCase(sub, "INFO"u8))
        {
            s.Reply.WriteArrayHeader(0);
        }
        else
        {
            Replies.UnknownSubcommand(s, sub, "COMMAND"u8);
        }
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
