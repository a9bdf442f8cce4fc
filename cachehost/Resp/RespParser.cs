using System.Buffers;

namespace Hpc.CacheHost.Resp;

internal enum RespParseStatus { Incomplete, Complete, ProtocolError }

/// <summary>
/// Where an incomplete frame stands when it is waiting for the payload of a bulk string: argument
/// <paramref name="Index"/> of <paramref name="Count"/>, <paramref name="Length"/> bytes long, starting
/// <paramref name="DataOffset"/> bytes into the buffer. Default when the frame is incomplete anywhere else.
/// </summary>
internal readonly record struct PendingBulk(int Index, long Count, long Length, long DataOffset)
{
    public bool IsWaiting => Length > 0;
}

/// <summary>Bounds on one request frame, all derived from the configured maximum frame size.</summary>
internal readonly record struct RespLimits(int MaxFrameBytes, int MaxArguments, int MaxInlineBytes)
{
    // Redis's own ceilings: 1M multibulk elements, 64 KiB inline requests.
    private const int RedisMaxArguments = 1024 * 1024;
    private const int RedisMaxInlineBytes = 64 * 1024;

    /// <summary>The smallest possible argument on the wire, "$0\r\n\r\n".</summary>
    private const int MinArgumentBytes = 6;

    public static RespLimits ForFrameSize(int maxFrameBytes) => new(
        maxFrameBytes,
        Math.Min(RedisMaxArguments, maxFrameBytes / MinArgumentBytes),
        Math.Min(RedisMaxInlineBytes, maxFrameBytes));
}

/// <summary>
/// Parses RESP2 requests: multibulk arrays of bulk strings (what clients send) and inline commands (what a person
/// types into telnet). Incomplete frames leave the buffer untouched so the caller can wait for more bytes; every
/// declared size is checked before any waiting, so a hostile header cannot make the server buffer without bound.
/// </summary>
internal static class RespParser
{
    private enum LengthStatus { Incomplete, Ok, Invalid }

    /// <summary>
    /// Parses one frame from the start of <paramref name="buffer"/>. On <see cref="RespParseStatus.Complete"/> the
    /// buffer is sliced past the frame and <paramref name="command"/> holds its arguments (none for an empty frame,
    /// which gets no reply). On a protocol error <paramref name="error"/> is the text after "ERR Protocol error: ".
    /// </summary>
    public static RespParseStatus TryParseCommand(ref ReadOnlySequence<byte> buffer, RespCommand command, in RespLimits limits, out string? error) =>
        TryParseCommand(ref buffer, command, limits, out error, out _);

    /// <summary>
    /// As above; on <see cref="RespParseStatus.Incomplete"/>, <paramref name="knownFrameBytes"/> is the least the
    /// frame will occupy as far as its headers so far declare (the bulk string being received counted whole), so a
    /// server can charge a large frame to its memory budget before buffering it.
    /// </summary>
    public static RespParseStatus TryParseCommand(ref ReadOnlySequence<byte> buffer, RespCommand command, in RespLimits limits, out string? error, out long knownFrameBytes) =>
        TryParseCommand(ref buffer, command, limits, out error, out knownFrameBytes, out _);

    /// <summary>
    /// As above; when the frame waits for a bulk string's payload, <paramref name="pending"/> says which and where, and
    /// <paramref name="command"/> keeps the arguments before it (valid until the buffer is advanced), so a server can
    /// receive a large value straight into its final storage.
    /// </summary>
    public static RespParseStatus TryParseCommand(ref ReadOnlySequence<byte> buffer, RespCommand command, in RespLimits limits, out string? error, out long knownFrameBytes,
        out PendingBulk pending)
    {
        command.Reset();
        error = null;
        pending = default;
        knownFrameBytes = buffer.Length;
        if (buffer.IsEmpty)
            return RespParseStatus.Incomplete;

        var reader = new SequenceReader<byte>(buffer);
        var status = reader.TryPeek(out byte first) && first == (byte)'*'
            ? ParseMultibulk(ref reader, command, limits, out error, ref knownFrameBytes, ref pending)
            : ParseInline(ref reader, command, limits, out error);

        if (status == RespParseStatus.Complete)
            buffer = buffer.Slice(reader.Position);
        else if (!pending.IsWaiting)
            command.Reset();
        return status;
    }

    private static RespParseStatus ParseMultibulk(ref SequenceReader<byte> reader, RespCommand command, in RespLimits limits, out string? error, ref long knownFrameBytes,
        ref PendingBulk pending)
    {
        error = null;
        reader.Advance(1);
        switch (TryReadLength(ref reader, out long count))
        {
            case LengthStatus.Incomplete:
                return RespParseStatus.Incomplete;
            case LengthStatus.Invalid:
                error = "invalid multibulk length";
                return RespParseStatus.ProtocolError;
        }

        // Redis skips "*0" and the null array "*-1" without replying; anything more negative is garbage.
        if (count is 0 or -1)
            return RespParseStatus.Complete;
        if (count < 0 || count > limits.MaxArguments)
        {
            error = "invalid multibulk length";
            return RespParseStatus.ProtocolError;
        }

        for (long i = 0; i < count; i++)
        {
            if (!reader.TryRead(out byte type))
                return RespParseStatus.Incomplete;
            if (type != (byte)'$')
            {
                error = $"expected '$', got '{Printable(type)}'";
                return RespParseStatus.ProtocolError;
            }

            switch (TryReadLength(ref reader, out long length))
            {
                case LengthStatus.Incomplete:
                    return RespParseStatus.Incomplete;
                case LengthStatus.Invalid:
                    error = "invalid bulk length";
                    return RespParseStatus.ProtocolError;
            }
            if (length < 0 || length > limits.MaxFrameBytes)
            {
                error = "invalid bulk length";
                return RespParseStatus.ProtocolError;
            }
            if (reader.Consumed + length + 2 > limits.MaxFrameBytes)
            {
                error = $"request frame larger than {limits.MaxFrameBytes} bytes";
                return RespParseStatus.ProtocolError;
            }
            if (reader.Remaining < length + 2)
            {
                knownFrameBytes = reader.Consumed + length + 2;
                if (length > 0)
                    pending = new PendingBulk((int)i, count, length, reader.Consumed);
                return RespParseStatus.Incomplete;
            }

            command.Add(reader.Sequence.Slice(reader.Position, length));
            reader.Advance(length);
            if (!reader.IsNext("\r\n"u8, advancePast: true))
            {
                error = "expected CRLF after bulk string";
                return RespParseStatus.ProtocolError;
            }
        }
        return RespParseStatus.Complete;
    }

    private static RespParseStatus ParseInline(ref SequenceReader<byte> reader, RespCommand command, in RespLimits limits, out string? error)
    {
        error = null;
        // Only the first MaxInlineBytes may hold the newline, so a client that never sends one cannot make us rescan
        // an ever-growing buffer.
        var window = reader.UnreadSequence.Slice(0, Math.Min(reader.Remaining, limits.MaxInlineBytes + 1L));
        var newline = window.PositionOf((byte)'\n');
        if (newline is null)
        {
            if (reader.Remaining > limits.MaxInlineBytes)
            {
                error = "too big inline request";
                return RespParseStatus.ProtocolError;
            }
            return RespParseStatus.Incomplete;
        }

        var line = window.Slice(0, newline.Value);
        reader.Advance(line.Length + 1);

        var tokens = new SequenceReader<byte>(line);
        ReadOnlySpan<byte> separators = " \t\r"u8;
        while (true)
        {
            tokens.AdvancePastAny(separators);
            if (tokens.End)
                break;
            var start = tokens.Position;
            if (!tokens.TryAdvanceToAny(separators, advancePastDelimiter: false))
                tokens.AdvanceToEnd();
            command.Add(line.Slice(start, tokens.Position));
        }
        return RespParseStatus.Complete;
    }

    // Reads "<integer>\r\n". A length has at most 19 digits before it overflows, so this never scans far.
    private static LengthStatus TryReadLength(ref SequenceReader<byte> reader, out long value)
    {
        value = 0;
        bool negative = reader.IsNext((byte)'-', advancePast: true);
        int digits = 0;
        while (true)
        {
            if (!reader.TryRead(out byte b))
                return LengthStatus.Incomplete;
            if (b == (byte)'\r')
                break;
            uint digit = (uint)(b - '0');
            if (digit > 9 || value > (long.MaxValue - digit) / 10)
                return LengthStatus.Invalid;
            value = value * 10 + digit;
            digits++;
        }
        if (!reader.TryRead(out byte lf))
            return LengthStatus.Incomplete;
        if (lf != (byte)'\n' || digits == 0)
            return LengthStatus.Invalid;
        if (negative)
            value = -value;
        return LengthStatus.Ok;
    }

    /// <summary>Parses a decimal integer argument the way Redis does: optional minus, digits only, no overflow.</summary>
    public static bool TryParseInt64(ReadOnlySpan<byte> text, out long value)
    {
        value = 0;
        bool negative = text.Length > 0 && text[0] == (byte)'-';
        var digits = negative ? text[1..] : text;
        if (digits.IsEmpty || digits.Length > 19)
            return false;
        ulong magnitude = 0;
        foreach (byte b in digits)
        {
            uint digit = (uint)(b - '0');
            if (digit > 9)
                return false;
            magnitude = magnitude * 10 + digit;
        }
        // 19 digits fit in ulong, so the only overflow left is past long's range.
        if (negative ? magnitude > (ulong)long.MaxValue + 1 : magnitude > long.MaxValue)
            return false;
        value = negative ? (long)(0 - magnitude) : (long)magnitude;
        return true;
    }

    private static char Printable(byte b) => b is >= 0x20 and < 0x7f ? (char)b : '?';
}
