using System.Buffers;

namespace Hpc.CacheHost.Server.Commands;

/// <summary>
/// Replies and error texts several handlers share. Errors keep Redis's prefixes and wording (ERR, OOM, NOAUTH,
/// WRONGPASS, NOPROTO): clients, redis-cli and the SDK's RespErrorException classify errors by them.
/// </summary>
internal static class Replies
{
    private const int MaxNameInErrorBytes = 128;

    public static ReadOnlySpan<byte> Ok => "+OK\r\n"u8;
    public static ReadOnlySpan<byte> NotAnInteger => "ERR value is not an integer or out of range"u8;
    public static ReadOnlySpan<byte> SyntaxError => "ERR syntax error"u8;
    public static ReadOnlySpan<byte> OutOfMemory => "OOM command not allowed when used memory > 'maxmemory'."u8;
    public static ReadOnlySpan<byte> WrongPass => "WRONGPASS invalid username-password pair or user is disabled."u8;

    public static void UnknownCommand(ClientSession session, ReadOnlySpan<byte> name)
    {
        // Redis's wording, which clients and people recognise; the arguments help find the sender's bug.
        var args = session.Args;
        var message = new ArrayBufferWriter<byte>(256);
        message.Write("ERR unknown command '"u8);
        message.Write(Sanitize(name));
        message.Write("', with args beginning with: "u8);
        for (int i = 1; i < args.Count && message.WrittenCount < 2 * MaxNameInErrorBytes; i++)
        {
            message.Write("'"u8);
            message.Write(Sanitize(args.Span(i)));
            message.Write("' "u8);
        }
        session.Reply.WriteError(message.WrittenSpan);
    }

    public static void UnknownSubcommand(ClientSession session, ReadOnlySpan<byte> sub, ReadOnlySpan<byte> command)
    {
        var message = new ArrayBufferWriter<byte>(128);
        message.Write("ERR unknown subcommand '"u8);
        message.Write(Sanitize(sub));
        message.Write("'. Try "u8);
        message.Write(command);
        message.Write(" HELP."u8);
        session.Reply.WriteError(message.WrittenSpan);
    }

    /// <summary>A client-supplied name made safe for an error line: bounded, and without CR, LF or other controls.</summary>
    public static byte[] Sanitize(ReadOnlySpan<byte> text)
    {
        var copy = text[..Math.Min(text.Length, MaxNameInErrorBytes)].ToArray();
        for (int i = 0; i < copy.Length; i++)
        {
            if (copy[i] < 0x20 || copy[i] == 0x7f)
                copy[i] = (byte)' ';
        }
        return copy;
    }
}
