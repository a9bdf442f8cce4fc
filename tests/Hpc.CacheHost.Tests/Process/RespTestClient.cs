using System.Net.Sockets;
using System.Text;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>A RESP error reply, kept apart from simple strings so tests can tell them apart.</summary>
internal sealed record RespError(string Message);

/// <summary>
/// A deliberately small, blocking RESP2 client for tests: it can send well-formed commands or arbitrary bytes, and
/// every read has a timeout so a silent server fails the test instead of hanging it.
/// </summary>
internal sealed class RespTestClient : IDisposable
{
    private static readonly TimeSpan IoTimeout = TimeSpan.FromSeconds(15);

    private readonly TcpClient _tcp;
    private readonly BufferedStream _stream;

    /// <param name="from">The local address to connect from (any 127.x.y.z on Linux's loopback), so a test can be many clients.</param>
    /// <param name="receiveBufferBytes">A fixed kernel receive buffer, so a client that stops reading holds the host's
    /// reply back within a known size, whatever the machine's buffer tuning.</param>
    public RespTestClient(CacheHostProcess host, System.Net.IPAddress? from = null, int? receiveBufferBytes = null)
    {
        _tcp = from is null ? new TcpClient() : new TcpClient(new System.Net.IPEndPoint(from, 0));
        (_tcp.NoDelay, _tcp.ReceiveTimeout, _tcp.SendTimeout) = (true, (int)IoTimeout.TotalMilliseconds, (int)IoTimeout.TotalMilliseconds);
        if (receiveBufferBytes is { } size) _tcp.ReceiveBufferSize = size;
        _tcp.Connect(host.Host, host.Port);
        _stream = new BufferedStream(_tcp.GetStream(), 64 * 1024);
    }

    /// <summary>Sends one command as a multibulk frame; arguments are strings (UTF-8) or raw byte arrays.</summary>
    /// <summary>A connection to <paramref name="host"/> logged in as <paramref name="user"/>.</summary>
    public static RespTestClient LoggedIn(CacheHostProcess host, string user, string password)
    {
        var client = new RespTestClient(host);
        Assert.Equal("OK", client.Call("AUTH", user, password));
        return client;
    }

    public object? Call(params object[] args)
    {
        Send(args);
        return ReadReply();
    }

    public void Send(params object[] args)
    {
        WriteCommand(args);
        _stream.Flush();
    }

    public void WriteCommand(params object[] args)
    {
        WriteAscii($"*{args.Length}\r\n");
        foreach (object arg in args)
        {
            byte[] bytes = arg as byte[] ?? Encoding.UTF8.GetBytes(Convert.ToString(arg, System.Globalization.CultureInfo.InvariantCulture)!);
            WriteAscii($"${bytes.Length}\r\n");
            _stream.Write(bytes);
            WriteAscii("\r\n");
        }
    }

    public void Flush() => _stream.Flush();

    public void SendRaw(string text)
    {
        _stream.Write(Encoding.Latin1.GetBytes(text));
        _stream.Flush();
    }

    public void SendBytes(ReadOnlySpan<byte> bytes)
    {
        _stream.Write(bytes);
        _stream.Flush();
    }

    /// <summary>
    /// Reads one reply: string for +, <see cref="RespError"/> for -, long for :, byte[] or null for $, object?[] or
    /// null for *.
    /// </summary>
    public object? ReadReply()
    {
        int type = _stream.ReadByte();
        if (type == -1)
            throw new EndOfStreamException("Server closed the connection.");
        string line = ReadLine();
        switch (type)
        {
            case '+':
                return line;
            case '-':
                return new RespError(line);
            case ':':
                return long.Parse(line);
            case '$':
                int length = int.Parse(line);
                if (length < 0)
                    return null;
                byte[] data = new byte[length];
                _stream.ReadExactly(data);
                ReadLine();
                return data;
            case '*':
                int count = int.Parse(line);
                if (count < 0)
                    return null;
                var items = new object?[count];
                for (int i = 0; i < count; i++)
                    items[i] = ReadReply();
                return items;
            default:
                throw new InvalidDataException($"Unexpected reply type '{(char)type}'.");
        }
    }

    public string? ReadString() => ReadReply() switch
    {
        null => null,
        byte[] bulk => Encoding.UTF8.GetString(bulk),
        string simple => simple,
        RespError error => throw new InvalidOperationException($"Server replied with error: {error.Message}"),
        var other => throw new InvalidDataException($"Expected a string reply, got {other}."),
    };

    /// <summary>True when the server closes the connection (EOF or reset) within the timeout.</summary>
    public bool IsClosedByServer()
    {
        try
        {
            var buffer = new byte[4096];
            var deadline = DateTime.UtcNow + IoTimeout;
            while (DateTime.UtcNow < deadline)
            {
                if (_stream.Read(buffer) == 0)
                    return true;
            }
            return false;
        }
        catch (IOException ex) when (ex.InnerException is SocketException { SocketErrorCode: SocketError.ConnectionReset })
        {
            return true;
        }
    }

    /// <summary>Whether the server has closed the connection by now, waiting at most <paramref name="wait"/> (0: just look).</summary>
    public bool IsClosedByServer(TimeSpan wait)
    {
        try
        {
            var socket = _tcp.Client;
            return socket.Poll((int)wait.TotalMicroseconds, SelectMode.SelectRead) && socket.Available == 0;
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException)
        {
            return true;
        }
    }

    /// <summary>The error the server sent unasked within <paramref name="wait"/> (a refused connection), or null.</summary>
    public string? TryReadError(TimeSpan wait)
    {
        try
        {
            if (!_tcp.Client.Poll((int)wait.TotalMicroseconds, SelectMode.SelectRead) || _tcp.Client.Available == 0) return null;
            return ReadReply() is RespError error ? error.Message : null;
        }
        catch (Exception e) when (e is IOException or SocketException or ObjectDisposedException)
        {
            return null;
        }
    }

    public void Dispose()
    {
        _stream.Dispose();
        _tcp.Dispose();
    }

    private void WriteAscii(string text) => _stream.Write(Encoding.ASCII.GetBytes(text));

    private string ReadLine()
    {
        var line = new StringBuilder();
        while (true)
        {
            int b = _stream.ReadByte();
            if (b == -1)
                throw new EndOfStreamException("Server closed the connection mid-reply.");
            if (b == '\r')
            {
                if (_stream.ReadByte() != '\n')
                    throw new InvalidDataException("CR without LF in reply.");
                return line.ToString();
            }
            line.Append((char)b);
        }
    }
}
