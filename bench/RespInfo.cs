using System.Globalization;
using System.Net.Sockets;
using System.Text;

namespace Hpc.Bench;

/// <summary>
/// One INFO round trip on its own connection. Kept outside the SDK's cache-tier client on purpose: the benchmark must
/// read a host's counters the same way whether the host is ours or a real Redis, and must not share its pools.
/// </summary>
public static class RespInfo
{
    public static async Task<Dictionary<string, string>> ReadAsync(string host, int port, CancellationToken ct, Hpc.CommonData.Cache.CacheTls? tls = null)
    {
        using var client = new TcpClient();
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(ct);
        timeout.CancelAfter(TimeSpan.FromSeconds(10));
        await client.ConnectAsync(host, port, timeout.Token);
        Stream stream = client.GetStream();
        if (tls is not null)
        {
            var secure = new System.Net.Security.SslStream(stream);
            await secure.AuthenticateAsClientAsync(tls.ClientOptions(host), timeout.Token);
            stream = secure;
        }
        await stream.WriteAsync("*1\r\n$4\r\nINFO\r\n"u8.ToArray(), timeout.Token);
        var buffer = new MemoryStream();
        var chunk = new byte[16384];
        int expected = -1, headerEnd = -1;
        while (expected < 0 || buffer.Length < headerEnd + expected + 2)
        {
            var n = await stream.ReadAsync(chunk, timeout.Token);
            if (n == 0) throw new IOException($"{host}:{port} closed the connection during INFO");
            buffer.Write(chunk, 0, n);
            if (expected < 0)
            {
                var text = Encoding.ASCII.GetString(buffer.GetBuffer(), 0, (int)buffer.Length);
                var crlf = text.IndexOf("\r\n", StringComparison.Ordinal);
                if (crlf < 0) continue;
                if (text[0] != '$') throw new IOException($"{host}:{port} answered INFO with {text[..crlf]}");
                expected = int.Parse(text[1..crlf], CultureInfo.InvariantCulture);
                headerEnd = crlf + 2;
            }
        }
        var body = Encoding.UTF8.GetString(buffer.GetBuffer(), headerEnd, expected);
        var fields = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var line in body.Split("\r\n"))
        {
            var colon = line.IndexOf(':');
            if (colon > 0 && !line.StartsWith('#')) fields[line[..colon]] = line[(colon + 1)..];
        }
        return fields;
    }

    public static long Long(Dictionary<string, string> info, string key) =>
        info.TryGetValue(key, out var v) && long.TryParse(v, CultureInfo.InvariantCulture, out var n) ? n : -1;
}
