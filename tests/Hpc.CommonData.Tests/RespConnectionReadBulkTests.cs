using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Tests;

/// <summary><see cref="RespConnection.ReadBulkAsync"/>: one GET reply, handed over in place, against a scripted server.</summary>
public class RespConnectionReadBulkTests
{
    /// <summary>Accepts one connection and writes <paramref name="wire"/> to it in pieces of <paramref name="piece"/> bytes.</summary>
    private static async Task<(RespConnection Connection, Task Server)> ConnectToScriptAsync(string wire, int piece)
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        var server = Task.Run(async () =>
        {
            using var peer = await listener.AcceptSocketAsync();
            listener.Stop();
            // A new plain connection opens with a PING; its answer comes first.
            var bytes = Encoding.ASCII.GetBytes("+PONG\r\n" + wire);
            for (var at = 0; at < bytes.Length; at += piece)
            {
                await peer.SendAsync(bytes.AsMemory(at, Math.Min(piece, bytes.Length - at)));
                await Task.Delay(2);
            }
            await Task.Delay(200);
        });
        var connection = await RespConnection.ConnectAsync(new CacheEndpoint("127.0.0.1", port), null, TimeSpan.FromSeconds(5), default);
        return (connection, server);
    }

    [Theory]
    [InlineData(1000)]  // each reply arrives whole
    [InlineData(3)]     // headers and values split across reads
    public async Task Hands_over_values_and_nils_in_order_and_survives_a_server_error(int piece)
    {
        var (c, server) = await ConnectToScriptAsync("$5\r\nhello\r\n$-1\r\n-WRONGTYPE not a string\r\n$0\r\n\r\n$3\r\nabc\r\n", piece);
        await using (c)
        {
            var seen = new List<string>();
            void Record(int index, in ReadOnlySequence<byte> value, bool isNull)
            {
                Assert.Equal(0, index);
                seen.Add(isNull ? "(nil)" : Encoding.ASCII.GetString(value.ToArray()));
            }

            await c.ReadBulkAsync(Record, default);
            await c.ReadBulkAsync(Record, default);
            var error = await Assert.ThrowsAsync<RespErrorException>(() => c.ReadBulkAsync(Record, default).AsTask());
            Assert.Equal("WRONGTYPE not a string", error.ServerMessage);
            Assert.False(c.IsBroken);
            await c.ReadBulkAsync(Record, default);
            await c.ReadBulkAsync(Record, default);

            Assert.Equal(["hello", "(nil)", "", "abc"], seen);
        }
        await server;
    }

    /// <summary>
    /// Pipelined PTTLs, an MGET, then another command, as a repair's batch sends them: when their replies are small they
    /// arrive in one read, and each read of a group leaves the next group's replies to be read, not waited for.
    /// </summary>
    [Theory]
    [InlineData(1000)]  // every reply in the same read
    [InlineData(3)]     // split anywhere
    public async Task Replies_that_arrived_with_those_read_before_them_are_read_not_waited_for(int piece)
    {
        var (c, server) = await ConnectToScriptAsync(":5\r\n:-1\r\n*2\r\n$3\r\nabc\r\n$-1\r\n:1\r\n", piece);
        await using (c)
        {
            var lives = new long[2];
            await c.ReadStatusRepliesAsync(lives, default).AsTask().WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal([5L, -1L], lives);
            var values = new string?[2];
            await c.ReadBulkArrayAsync(2, (int k, in ReadOnlySequence<byte> value, bool isNull) => values[k] = isNull ? null : Encoding.ASCII.GetString(value.ToArray()), default)
                .AsTask().WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(new string?[] { "abc", null }, values);
            var last = new long[1];
            await c.ReadStatusRepliesAsync(last, default).AsTask().WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(1L, last[0]);
        }
        await server;
    }

    [Fact]
    public async Task A_reply_that_is_not_a_bulk_string_breaks_the_connection()
    {
        var (c, server) = await ConnectToScriptAsync("*1\r\n$1\r\na\r\n", 1000);
        await using (c)
        {
            await Assert.ThrowsAsync<RespProtocolException>(() => c.ReadBulkAsync((int _, in ReadOnlySequence<byte> _, bool _) => { }, default).AsTask());
            Assert.True(c.IsBroken);
        }
        await server;
    }
}
