using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.CacheHost.Storage;

namespace Hpc.CacheHost.Server.Commands;

/// <summary>Commands on keys whatever their value: DEL, EXISTS, KEYS and the expiry family.</summary>
internal static class KeyCommands
{
    public static void Del(ClientSession s)
    {
        long deleted = 0;
        for (int i = 1; i < s.Args.Count; i++)
            deleted += s.Store.Delete(s.Args.Span(i)) ? 1 : 0;
        s.Reply.WriteInteger(deleted);
    }

    public static void Exists(ClientSession s)
    {
        // As in Redis, a key named twice counts twice.
        long found = 0;
        for (int i = 1; i < s.Args.Count; i++)
            found += s.Store.Exists(s.Args.Span(i)) ? 1 : 0;
        s.Reply.WriteInteger(found);
    }

    /// <summary>
    /// KEYS with a prefix pattern ("hcd:s:*", or "*"): what an administrator's garbage collection needs. Other glob
    /// forms are refused rather than half-supported.
    /// </summary>
    public static void Keys(ClientSession s)
    {
        var pattern = s.Args.Span(1);
        var star = pattern.IndexOfAny("*?["u8);
        if (star >= 0 && (star != pattern.Length - 1 || pattern[star] != (byte)'*'))
        {
            s.Reply.WriteError("ERR only exact keys and 'prefix*' patterns are supported"u8);
            return;
        }
        var keys = star < 0 ? (s.Store.Exists(pattern) ? [pattern.ToArray()] : []) : s.Store.KeysWithPrefix(pattern[..star]);
        s.Reply.WriteArrayHeader(keys.Count);
        foreach (var key in keys)
            s.Reply.WriteBulk(key.AsSpan());
    }

    public static void Expire(ClientSession s) => Expire(s, unitMs: 1000, "ERR invalid expire time in 'expire' command"u8);

    public static void PExpire(ClientSession s) => Expire(s, unitMs: 1, "ERR invalid expire time in 'pexpire' command"u8);

    public static void Ttl(ClientSession s) => TimeToLive(s, inSeconds: true);

    public static void PTtl(ClientSession s) => TimeToLive(s, inSeconds: false);

    public static void Persist(ClientSession s) => s.Reply.WriteInteger(s.Store.Persist(s.Args.Span(1)) ? 1 : 0);

    /// <summary>EXPIRE/PEXPIRE key amount [NX|XX|GT|LT].</summary>
    private static void Expire(ClientSession s, long unitMs, ReadOnlySpan<byte> invalidTimeError)
    {
        var args = s.Args;
        if (!RespParser.TryParseInt64(args.Span(2), out long amount))
        {
            s.Reply.WriteError(Replies.NotAnInteger);
            return;
        }
        if (amount > long.MaxValue / unitMs || amount < long.MinValue / unitMs)
        {
            s.Reply.WriteError(invalidTimeError);
            return;
        }

        ExpireCondition? condition = args.Count switch
        {
            3 => ExpireCondition.Always,
            4 => ParseExpireCondition(args.Span(3)),
            _ => null,
        };
        if (condition is null)
        {
            s.Reply.WriteError(Replies.SyntaxError);
            return;
        }
        s.Reply.WriteInteger(s.Store.SetExpiry(args.Span(1), amount * unitMs, condition.Value) ? 1 : 0);
    }

    private static ExpireCondition? ParseExpireCondition(ReadOnlySpan<byte> option) =>
        Ascii.EqualsIgnoreCase(option, "NX"u8) ? ExpireCondition.IfNoExpiry
        : Ascii.EqualsIgnoreCase(option, "XX"u8) ? ExpireCondition.IfHasExpiry
        : Ascii.EqualsIgnoreCase(option, "GT"u8) ? ExpireCondition.IfGreater
        : Ascii.EqualsIgnoreCase(option, "LT"u8) ? ExpireCondition.IfLess
        : null;

    private static void TimeToLive(ClientSession s, bool inSeconds)
    {
        long ms = s.Store.GetTimeToLiveMs(s.Args.Span(1));
        s.Reply.WriteInteger(ms < 0 || !inSeconds ? ms : (ms + 500) / 1000);
    }
}
