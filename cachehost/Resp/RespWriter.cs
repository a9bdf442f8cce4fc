using System.Globalization;

namespace Hpc.CacheHost.Resp;

/// <summary>
/// Try-write helpers for RESP2 replies: each formats into a span and reports false, writing nothing useful, when the
/// span is too small, so the caller can move to a fresh buffer and try again.
/// </summary>
internal static class RespWriter
{
    /// <summary>Longest integer reply: type byte, sign and 19 digits, CRLF.</summary>
    public const int MaxIntegerReplyBytes = 1 + 20 + 2;

    public static ReadOnlySpan<byte> Crlf => "\r\n"u8;

    public static bool TryWriteSimpleString(Span<byte> destination, ReadOnlySpan<byte> text, out int written) =>
        TryWriteLine(destination, (byte)'+', text, out written);

    /// <summary>Writes an error; <paramref name="message"/> starts with its code, e.g. "ERR ..." or "OOM ...".</summary>
    public static bool TryWriteError(Span<byte> destination, ReadOnlySpan<byte> message, out int written) =>
        TryWriteLine(destination, (byte)'-', message, out written);

    public static bool TryWriteInteger(Span<byte> destination, long value, out int written) =>
        TryWriteNumberLine(destination, (byte)':', value, out written);

    public static bool TryWriteArrayHeader(Span<byte> destination, int count, out int written) =>
        TryWriteNumberLine(destination, (byte)'*', count, out written);

    public static bool TryWriteBulkHeader(Span<byte> destination, int length, out int written) =>
        TryWriteNumberLine(destination, (byte)'$', length, out written);

    public static bool TryWriteNullBulk(Span<byte> destination, out int written) => TryCopy(destination, "$-1\r\n"u8, out written);

    public static bool TryWriteBulk(Span<byte> destination, ReadOnlySpan<byte> value, out int written)
    {
        if (!TryWriteBulkHeader(destination, value.Length, out int header) || destination.Length - header < value.Length + 2)
        {
            written = 0;
            return false;
        }
        value.CopyTo(destination[header..]);
        Crlf.CopyTo(destination[(header + value.Length)..]);
        written = header + value.Length + 2;
        return true;
    }

    private static bool TryWriteLine(Span<byte> destination, byte type, ReadOnlySpan<byte> text, out int written)
    {
        written = 0;
        if (destination.Length < text.Length + 3)
            return false;
        destination[0] = type;
        text.CopyTo(destination[1..]);
        Crlf.CopyTo(destination[(1 + text.Length)..]);
        written = text.Length + 3;
        return true;
    }

    private static bool TryWriteNumberLine(Span<byte> destination, byte type, long value, out int written)
    {
        written = 0;
        if (destination.Length < 3 || !value.TryFormat(destination[1..], out int digits, default, CultureInfo.InvariantCulture)
            || destination.Length < digits + 3)
        {
            return false;
        }
        destination[0] = type;
        Crlf.CopyTo(destination[(1 + digits)..]);
        written = digits + 3;
        return true;
    }

    private static bool TryCopy(Span<byte> destination, ReadOnlySpan<byte> bytes, out int written)
    {
        bool fits = bytes.TryCopyTo(destination);
        written = fits ? bytes.Length : 0;
        return fits;
    }
}
