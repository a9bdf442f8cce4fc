using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CacheHost.Storage;

namespace Hpc.CacheHost.Server.Commands;

/// <summary>GET, MGET and SET: the hot path, allocation-free.</summary>
internal static class StringCommands
{
    public static void Get(ClientSession s)
    {
        if (s.Store.TryGet(s.Args.Span(1), out var value))
            s.Reply.WriteBulk(value);
        else
            s.Reply.WriteNullBulk();
    }

    /// <summary>STRLEN key: the length of the value, 0 when the key does not exist.</summary>
    public static void StrLen(ClientSession s) =>
        s.Reply.WriteInteger(s.Store.TryPeek(s.Args.Span(1), out var value) ? value.Length : 0);

    public static void MGet(ClientSession s)
    {
        var args = s.Args;
        var reply = s.Reply;
        var store = s.Store;
        reply.WriteArrayHeader(args.Count - 1);
        for (int i = 1; i < args.Count; i++)
        {
            if (store.TryGet(args.Span(i), out var value))
                reply.WriteBulk(value);
            else
                reply.WriteNullBulk();
        }
    }

    /// <summary>SET key value [NX|XX] [EX seconds|PX milliseconds].</summary>
    public static void Set(ClientSession s)
    {
        var args = s.Args;
        var condition = SetCondition.Always;
        long ttlMs = 0;
        for (int i = 3; i < args.Count; i++)
        {
            var option = args.Span(i);
            if (Ascii.EqualsIgnoreCase(option, "NX"u8) && condition == SetCondition.Always)
            {
                condition = SetCondition.IfNotExists;
            }
            else if (Ascii.EqualsIgnoreCase(option, "XX"u8) && condition == SetCondition.Always)
            {
                condition = SetCondition.IfExists;
            }
            else if ((Ascii.EqualsIgnoreCase(option, "EX"u8) || Ascii.EqualsIgnoreCase(option, "PX"u8)) && ttlMs == 0 && i + 1 < args.Count)
            {
                long unitMs = option[0] is (byte)'E' or (byte)'e' ? 1000 : 1;
                if (!RespParser.TryParseInt64(args.Span(++i), out long amount))
                {
                    s.Reply.WriteError(Replies.NotAnInteger);
                    return;
                }
                if (amount <= 0 || amount > long.MaxValue / unitMs)
                {
                    s.Reply.WriteError("ERR invalid expire time in 'set' command"u8);
                    return;
                }
                ttlMs = amount * unitMs;
            }
            else
            {
                s.Reply.WriteError(Replies.SyntaxError);
                return;
            }
        }

        switch (s.Store.Set(args.Span(1), args[2], condition, ttlMs))
        {
            case SetOutcome.Stored:
                // A "latest" pointer publishes its version here: its segments take the version's life before the reply.
                if (Publication.IsPointer(args.Span(1))) Publication.KeepSegments(s.Store, args.Span(1), args[2]);
                s.Reply.WriteRaw(Replies.Ok);
                break;
            case SetOutcome.ConditionNotMet:
                s.Reply.WriteNullBulk();
                break;
            default:
                s.Reply.WriteError(Replies.OutOfMemory);
                break;
        }
    }
}
