using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Tests;

/// <summary>
/// A reply that arrives a little at a time, as on a slow shared link: the client waits for the rest of a value it
/// has seen the header of, but never for bytes the server has not promised (a short null value, the next reply).
/// </summary>
public class RespConnectionTrickleTests
{
    [Fact]
    public async Task An_mget_reply_dribbled_in_small_pieces_ending_in_a_null_value_completes_and_the_connection_stays_usable()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        var value = Enumerable.Range(0, 200_000).Select(i => (byte)('a' + i % 26)).ToArray();

        var server = Task.Run(async () =>
        {
            using var client = await listener.AcceptTcpClientAsync();
            var stream = client.GetStream();
            var request = new byte[4096];
            await stream.ReadAtLeastAsync(request, 1);                                   // the PING a new connection opens with
            await stream.WriteAsync("+PONG\r\n"u8.ToArray());
            await stream.ReadAtLeastAsync(request, 1);                                   // the MGET
            var reply = new List<byte>();
            reply.AddRange(Encoding.ASCII.GetBytes($"*3\r\n${value.Length}\r\n"));
            reply.AddRange(value);
            reply.AddRange(Encoding.ASCII.GetBytes("\r\n$2\r\nok\r\n$-1\r\n"));   // the last value is missing: 5 bytes
            var bytes = reply.ToArray();
            for (var at = 0; at < bytes.Length; at += 7_000)
            {
                await stream.WriteAsync(bytes.AsMemory(at, Math.Min(7_000, bytes.Length - at)));
                await Task.Delay(2);
            }
            await stream.ReadAtLeastAsync(request, 1);                                   // the PING
            await stream.WriteAsync("+PONG\r\n"u8.ToArray());
            await Task.Delay(200);
        });

        await using var connection = await RespConnection.ConnectAsync(new CacheEndpoint("127.0.0.1", port), null, TimeSpan.FromSeconds(5), default);
        connection.Command("MGET"u8, "a", "b", "c");
        await connection.FlushAsync(default);
        var received = new byte[3][];
        var nulls = new bool[3];
        await connection.ReadBulkArrayAsync(3, (int i, in ReadOnlySequence<byte> v, bool isNull) => { received[i] = v.ToArray(); nulls[i] = isNull; }, default)
            .AsTask().WaitAsync(TimeSpan.FromSeconds(20));
        Assert.Equal(value, received[0]);
        Assert.Equal("ok"u8.ToArray(), received[1]);
        Assert.True(nulls[2]);

        connection.Command("PING"u8);
        var pong = await connection.FlushAndReadAsync(default).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal("PONG", pong.Text);
        await server.WaitAsync(TimeSpan.FromSeconds(10));
    }
}
