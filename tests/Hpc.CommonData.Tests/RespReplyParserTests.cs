using System.Buffers;
using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Tests;

public class RespReplyParserTests
{
    private static RespReply? Parse(string text)
    {
        var reader = new SequenceReader<byte>(new ReadOnlySequence<byte>(Encoding.UTF8.GetBytes(text)));
        return RespReplyParser.TryRead(ref reader, 1 << 20, out var reply) ? reply : null;
    }

    [Theory]
    [InlineData("+OK\r\n", RespKind.SimpleString, "OK")]
    [InlineData("-ERR nope\r\n", RespKind.Error, "ERR nope")]
    [InlineData(":42\r\n", RespKind.Integer, "42")]
    [InlineData("$5\r\nhe\r\no\r\n", RespKind.Bulk, "he\r\no")]
    [InlineData("$-1\r\n", RespKind.Null, "(nil)")]
    [InlineData("*2\r\n$1\r\na\r\n$-1\r\n", RespKind.Array, "[a, (nil)]")]
    public void Parses_each_reply_type(string wire, RespKind kind, string shown)
    {
        var reply = Parse(wire)!;
        Assert.Equal(kind, reply.Kind);
        Assert.Equal(shown, reply.ToString());
    }

    [Fact]
    public void Every_proper_prefix_of_a_reply_is_incomplete()
    {
        const string wire = "*3\r\n$3\r\nabc\r\n:7\r\n+OK\r\n";
        for (var i = 0; i < wire.Length; i++) Assert.Null(Parse(wire[..i]));
        Assert.NotNull(Parse(wire));
    }

    [Theory]
    [InlineData("$abc\r\n")]
    [InlineData("$-5\r\n")]
    [InlineData("$3\r\nabcXY")]
    [InlineData("?what\r\n")]
    [InlineData(":99999999999999999999999\r\n")]
    [InlineData("$9999999999\r\n")]
    public void Malformed_replies_raise_protocol_errors(string wire) =>
        Assert.Throws<RespProtocolException>(() => Parse(wire));

    [Fact]
    public void Bulk_values_split_across_buffer_segments_are_sliced_whole()
    {
        var reader = new SequenceReader<byte>(Hpc.Fuzzing.Sequences.Of(Encoding.ASCII.GetBytes("$6\r\nabc"), Encoding.ASCII.GetBytes("def\r\n")));
        Assert.True(RespReplyParser.TryReadBulk(ref reader, 100, out var value, out var isNull));
        Assert.False(isNull);
        Assert.Equal("abcdef", Encoding.ASCII.GetString(value));
    }
}
