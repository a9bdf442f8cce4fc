using System.Buffers;
using System.Buffers.Text;
using System.Text;

namespace Hpc.CommonData.Cache;

public enum RespKind { SimpleString, Error, Integer, Bulk, Array, Null }

/// <summary>A small, fully materialised RESP2 reply (control traffic; segment data takes the streaming path).</summary>
public sealed record RespReply(RespKind Kind, string? Text = null, long Integer = 0, byte[]? Bulk = null, RespReply[]? Items = null)
{
    public static readonly RespReply Nil = new(RespKind.Null);
    public override string ToString() => Kind switch
    {
        RespKind.Bulk => Encoding.UTF8.GetString(Bulk!),
        RespKind.Integer => Integer.ToString(),
        RespKind.Array => $"[{string.Join(", ", Items!.Select(i => i.ToString()))}]",
        RespKind.Null => "(nil)",
        _ => Text ?? "",
    };
}

/// <summary>The server answered with a RESP error (the connection is still usable).</summary>
public sealed class RespErrorException(string host, string message) : CommonDataException(CodeOf(message), $"{host}: {message}{HintFor(message)}")
{
    /// <summary>
    /// How our cache host ends a WRONGPASS it gave without checking the password (its failed-login budget was spent):
    /// Redis clients see a refused login, ours a limit to wait out, not a password to check.
    /// </summary>
    public const string Unchecked = "the password was not checked";

    private static bool IsUnchecked(string message) => message.StartsWith("WRONGPASS ", StringComparison.Ordinal) && message.EndsWith(Unchecked, StringComparison.Ordinal);

    /// <summary>
    /// What setting a refusal points at, since the person reading it sets switches and variables, not RESP commands:
    /// MOVED/ASK to a client that takes a Redis Cluster for independent hosts, and refused credentials.
    /// </summary>
    private static string HintFor(string message) => IsUnchecked(message)
        ? " (rate-limited: after too many failed logins the host refuses more for a while without looking at them; try again later)"
        : message.Split(' ', 2)[0] switch
    {
        "MOVED" or "ASK" => $" (the cache hosts are a Redis Cluster: give --cache-cluster or set {CacheTierOptions.ClusterVariable}=1)",
        "NOAUTH" => $" (the cache hosts want a password: give --cache-password-file PATH or set {CacheTierOptions.PasswordVariable} " +
                    $"or {CacheTierOptions.PasswordFileVariable}, with --cache-user NAME or {CacheTierOptions.UserVariable} for a named account)",
        "WRONGPASS" => $" (check the password from --cache-password-file, --cache-password, {CacheTierOptions.PasswordFileVariable} or " +
                       $"{CacheTierOptions.PasswordVariable}, and the account from --cache-user or {CacheTierOptions.UserVariable}, the default user without it)",
        _ => "",
    };

    /// <summary>OOM is a full budget; NOAUTH / WRONGPASS / NOPERM are refused credentials (unless refused unchecked: a limit); the rest are refused requests.</summary>
    private static ErrorCode CodeOf(string message) => IsUnchecked(message) ? ErrorCode.Limit : message.Split(' ', 2)[0] switch
    {
        "OOM" => ErrorCode.NoSpace,
        "NOAUTH" or "WRONGPASS" or "NOPERM" => ErrorCode.AccessDenied,
        _ => ErrorCode.BadRequest,
    };

    public string Host { get; } = host;
    public string ServerMessage { get; } = message;
}

/// <summary>The byte stream is not valid RESP; the connection cannot be trusted afterwards.</summary>
public sealed class RespProtocolException(string message) : CommonDataException(ErrorCode.Protocol, message);

/// <summary>Incremental RESP2 reply parsing over a <see cref="ReadOnlySequence{T}"/>: false means "need more bytes".</summary>
public static class RespReplyParser
{
    public const int MaxArrayLength = 1 << 20;
    public const int MaxDepth = 8;

    public static bool TryReadLine(ref SequenceReader<byte> reader, out ReadOnlySequence<byte> line)
    {
        if (!reader.TryReadTo(out line, "\r\n"u8)) return false;
        return true;
    }

    public static long ParseInteger(ReadOnlySequence<byte> digits)
    {
        Span<byte> tmp = stackalloc byte[24];
        if (digits.Length is 0 or > 20) throw new RespProtocolException("bad integer in reply");
        digits.CopyTo(tmp);
        if (!Utf8Parser.TryParse(tmp[..(int)digits.Length], out long value, out var used) || used != digits.Length)
            throw new RespProtocolException("bad integer in reply");
        return value;
    }

    /// <summary>Reads a bulk string header and, when the payload is complete, slices it without copying.</summary>
    public static bool TryReadBulk(ref SequenceReader<byte> reader, long maxBulk, out ReadOnlySequence<byte> value, out bool isNull)
    {
        value = default; isNull = false;
        var start = reader;
        if (!reader.TryPeek(out var type)) return false;
        if (type == (byte)'-')
        {
            if (!TryReadLine(ref reader, out var err)) { reader = start; return false; }
            throw new RespErrorException("", Encoding.UTF8.GetString(err.Slice(1)));
        }
        if (type != (byte)'$') throw new RespProtocolException($"expected a bulk string, got '{(char)type}'");
        reader.Advance(1);
        if (!TryReadLine(ref reader, out var lenLine)) { reader = start; return false; }
        var len = ParseInteger(lenLine);
        if (len == -1) { isNull = true; return true; }
        if (len < 0 || len > maxBulk) throw new RespProtocolException($"bulk length {len} out of range");
        if (reader.Remaining < len + 2) { reader = start; return false; }
        value = reader.Sequence.Slice(reader.Position, len);
        reader.Advance(len);
        if (!reader.IsNext("\r\n"u8, advancePast: true)) throw new RespProtocolException("bulk string not terminated by CRLF");
        return true;
    }

    /// <summary>
    /// Reads one reply of a command that answers a status, an integer or nil (SET NX, EXISTS) without materialising
    /// it: <paramref name="value"/> is 1 for a status (+OK), the integer, or 0 for nil. A server error is thrown as
    /// <see cref="RespErrorException"/> once its line is complete; any other reply is a protocol error.
    /// </summary>
    public static bool TryReadStatus(ref SequenceReader<byte> reader, out long value)
    {
        value = 0;
        var start = reader;
        if (!reader.TryPeek(out var type)) return false;
        if (type is not ((byte)'+' or (byte)':' or (byte)'-' or (byte)'$')) throw new RespProtocolException($"expected a status, an integer or nil, got '{(char)type}'");
        reader.Advance(1);
        if (!TryReadLine(ref reader, out var line)) { reader = start; return false; }
        switch (type)
        {
            case (byte)'+':
                value = 1;
                return true;
            case (byte)':':
                value = ParseInteger(line);
                return true;
            case (byte)'-':
                throw new RespErrorException("", Encoding.UTF8.GetString(line));
            default:
                if (ParseInteger(line) != -1) throw new RespProtocolException("expected a status, an integer or nil, got a bulk string");
                return true;
        }
    }

    public static bool TryReadArrayHeader(ref SequenceReader<byte> reader, out long count)
    {
        count = 0;
        var start = reader;
        if (!reader.TryPeek(out var type)) return false;
        if (type == (byte)'-')
        {
            if (!TryReadLine(ref reader, out var err)) { reader = start; return false; }
            throw new RespErrorException("", Encoding.UTF8.GetString(err.Slice(1)));
        }
        if (type != (byte)'*') throw new RespProtocolException($"expected an array, got '{(char)type}'");
        reader.Advance(1);
        if (!TryReadLine(ref reader, out var line)) { reader = start; return false; }
        count = ParseInteger(line);
        if (count < -1 || count > MaxArrayLength) throw new RespProtocolException($"array length {count} out of range");
        return true;
    }

    /// <summary>Parses one complete reply of any type; errors become <see cref="RespKind.Error"/> values.</summary>
    public static bool TryRead(ref SequenceReader<byte> reader, long maxBulk, out RespReply reply, int depth = 0)
    {
        reply = RespReply.Nil;
        if (depth > MaxDepth) throw new RespProtocolException("reply nested too deeply");
        var start = reader;
        if (!reader.TryPeek(out var type)) return false;
        switch (type)
        {
            case (byte)'+' or (byte)'-' or (byte)':':
            {
                reader.Advance(1);
                if (!TryReadLine(ref reader, out var line)) { reader = start; return false; }
                reply = type switch
                {
                    (byte)'+' => new RespReply(RespKind.SimpleString, Encoding.UTF8.GetString(line)),
                    (byte)'-' => new RespReply(RespKind.Error, Encoding.UTF8.GetString(line)),
                    _ => new RespReply(RespKind.Integer, Integer: ParseInteger(line)),
                };
                return true;
            }
            case (byte)'$':
                if (!TryReadBulk(ref reader, maxBulk, out var value, out var isNull)) { reader = start; return false; }
                reply = isNull ? RespReply.Nil : new RespReply(RespKind.Bulk, Bulk: value.ToArray());
                return true;
            case (byte)'*':
            {
                if (!TryReadArrayHeader(ref reader, out var count)) { reader = start; return false; }
                if (count == -1) { reply = RespReply.Nil; return true; }
                var items = new RespReply[count];
                for (var i = 0; i < count; i++)
                    if (!TryRead(ref reader, maxBulk, out items[i], depth + 1)) { reader = start; return false; }
                reply = new RespReply(RespKind.Array, Items: items);
                return true;
            }
            default:
                throw new RespProtocolException($"unexpected reply type byte 0x{type:x2}; the reply begins \"{Preview(reader.UnreadSequence)}\", which is not RESP");
        }
    }

    /// <summary>
    /// The first line of bytes that are not RESP, as text a person recognises ("HTTP/1.1 400 Bad Request", "SSH-2.0-…"):
    /// what tells someone which other service answers on that port. Control bytes show as '.', and it is cut short.
    /// </summary>
    internal static string Preview(ReadOnlySequence<byte> bytes, int max = 60)
    {
        var text = new StringBuilder(max + 1);
        foreach (var memory in bytes)
            foreach (var b in memory.Span)
            {
                if (b is (byte)'\r' or (byte)'\n') return text.ToString();
                if (text.Length == max) return text.Append('…').ToString();
                text.Append(b is >= 0x20 and < 0x7f ? (char)b : '.');
            }
        return text.ToString();
    }
}
