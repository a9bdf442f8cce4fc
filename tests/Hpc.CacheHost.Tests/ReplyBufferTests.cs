using System.Text;
using Hpc.CacheHost.Resp;

namespace Hpc.CacheHost.Tests;

public class ReplyBufferTests
{
    [Fact]
    public void Replies_are_formatted_as_resp2()
    {
        using var reply = new ReplyBuffer();

        reply.WriteSimpleString("OK"u8);
        reply.WriteError("ERR nope"u8);
        reply.WriteInteger(-42);
        reply.WriteNullBulk();
        reply.WriteArrayHeader(2);
        reply.WriteBulk("a\r\nb"u8);
        reply.WriteBulk(""u8);

        Assert.Equal("+OK\r\n-ERR nope\r\n:-42\r\n$-1\r\n*2\r\n$4\r\na\r\nb\r\n$0\r\n\r\n", Flatten(reply));
    }

    [Fact]
    public void A_large_stored_value_is_sent_from_its_own_array_without_a_copy()
    {
        using var reply = new ReplyBuffer();
        byte[] stored = Enumerable.Repeat((byte)'v', 64 * 1024).ToArray();

        reply.WriteBulk(stored);
        reply.WriteBulk(stored);

        var segments = reply.GetSegments();
        Assert.Equal(2, segments.Count(s => ReferenceEquals(s.Array, stored)));
        Assert.Equal(2 * (stored.Length + "$65536\r\n\r\n".Length), reply.Length);
        Assert.Equal($"$65536\r\n{new string('v', 65536)}\r\n$65536\r\n{new string('v', 65536)}\r\n", Flatten(reply));
    }

    [Fact]
    public void A_small_stored_value_is_copied_into_the_reply()
    {
        using var reply = new ReplyBuffer();
        byte[] stored = "tiny"u8.ToArray();

        reply.WriteBulk(stored);

        Assert.DoesNotContain(reply.GetSegments(), s => ReferenceEquals(s.Array, stored));
        Assert.Equal("$4\r\ntiny\r\n", Flatten(reply));
    }

    [Fact]
    public void Many_replies_spill_into_further_chunks_and_reset_clears_them()
    {
        using var reply = new ReplyBuffer();
        var expected = new StringBuilder();
        for (int i = 0; i < 50_000; i++)
        {
            reply.WriteInteger(i);
            expected.Append(':').Append(i).Append("\r\n");
        }

        Assert.Equal(expected.ToString(), Flatten(reply));
        Assert.True(reply.ShouldFlush);

        reply.Reset();
        Assert.True(reply.IsEmpty);
        reply.WriteSimpleString("PONG"u8);
        Assert.Equal("+PONG\r\n", Flatten(reply));
    }

    private static string Flatten(ReplyBuffer reply) =>
        string.Concat(reply.GetSegments().Select(s => Encoding.Latin1.GetString(s.Array!, s.Offset, s.Count)));
}
