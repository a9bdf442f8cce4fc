using System.Buffers;
using System.Text;
using Hpc.CacheHost.Resp;

namespace Hpc.CacheHost.Tests;

public class RespParserTests
{
    private static readonly RespLimits Limits = RespLimits.ForFrameSize(64 * 1024);

    public static TheoryData<string, string[]> ValidFrames => new()
    {
        { "*1\r\n$4\r\nPING\r\n", ["PING"] },
        { "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n", ["GET", "key"] },
        { "*2\r\n$3\r\nGET\r\n$0\r\n\r\n", ["GET", ""] },
        { "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\na\r\nb\r\n\r\n", ["SET", "k", "a\r\nb\r\n"] },
        { "*2\r\n$4\r\nECHO\r\n$4\r\n\0\u0001$*\r\n", ["ECHO", "\0\u0001$*"] },
        { "PING\r\n", ["PING"] },
        { "PING\n", ["PING"] },
        { "  set  k \t v \r\n", ["set", "k", "v"] },
        { "*0\r\n", [] },
        { "*-1\r\n", [] },
        { "\r\n", [] },
    };

    public static TheoryData<string, string> MalformedFrames => new()
    {
        { "*x\r\n", "invalid multibulk length" },
        { "*\r\n", "invalid multibulk length" },
        { "*1\n", "invalid multibulk length" },
        { "*-2\r\n", "invalid multibulk length" },
        { "*99999999999999999999\r\n", "invalid multibulk length" },
        { "*2000000\r\n", "invalid multibulk length" },
        { "*1\r\n$x\r\n", "invalid bulk length" },
        { "*1\r\n$\r\n", "invalid bulk length" },
        { "*1\r\n$-1\r\n", "invalid bulk length" },
        { "*1\r\n$99999999999999999999\r\n", "invalid bulk length" },
        { "*1\r\n$100000\r\n", "invalid bulk length" },
        { "*1\r\n:3\r\n", "expected '$', got ':'" },
        { "*1\r\n$3\r\nGETxx", "expected CRLF after bulk string" },
        { "*1\r\n$3\r\nGET\n\r", "expected CRLF after bulk string" },
    };

    [Theory]
    [MemberData(nameof(ValidFrames))]
    public void A_complete_frame_yields_its_arguments_and_is_consumed(string frame, string[] expected)
    {
        var buffer = Sequence(Latin1(frame));

        var (status, args, error) = Parse(ref buffer);

        Assert.Null(error);
        Assert.Equal(RespParseStatus.Complete, status);
        Assert.Equal(expected, args);
        Assert.True(buffer.IsEmpty);
    }

    [Theory]
    [MemberData(nameof(ValidFrames))]
    public void Every_proper_prefix_of_a_frame_is_incomplete_and_consumes_nothing(string frame, string[] _)
    {
        byte[] bytes = Latin1(frame);
        for (int length = 0; length < bytes.Length; length++)
        {
            var buffer = Sequence(bytes[..length]);
            var (status, _, error) = Parse(ref buffer);
            Assert.True(status == RespParseStatus.Incomplete, $"prefix of {length} bytes gave {status} {error}");
            Assert.Equal(length, buffer.Length);
        }
    }

    [Theory]
    [MemberData(nameof(ValidFrames))]
    public void A_frame_split_into_one_byte_segments_parses_like_a_contiguous_one(string frame, string[] expected)
    {
        var buffer = Sequence(Latin1(frame).Select(b => new[] { b }).ToArray());

        var (status, args, _) = Parse(ref buffer);

        Assert.Equal(RespParseStatus.Complete, status);
        Assert.Equal(expected, args);
        Assert.True(buffer.IsEmpty);
    }

    [Fact]
    public void Pipelined_frames_parse_one_at_a_time_and_leave_a_partial_tail_untouched()
    {
        var buffer = Sequence(Latin1("*1\r\n$4\r\nPING\r\nECHO hi\r\n*2\r\n$3\r\nGET\r\n$3\r\nke"));

        Assert.Equal(["PING"], Parse(ref buffer).Args);
        Assert.Equal(["ECHO", "hi"], Parse(ref buffer).Args);
        var (status, _, _) = Parse(ref buffer);

        Assert.Equal(RespParseStatus.Incomplete, status);
        Assert.Equal("*2\r\n$3\r\nGET\r\n$3\r\nke", Encoding.Latin1.GetString(buffer.ToArray()));
    }

    [Fact]
    public void Arguments_are_slices_of_the_receive_buffer_not_copies()
    {
        byte[] bytes = Latin1("*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n");
        var buffer = new ReadOnlySequence<byte>(bytes);
        using var command = new RespCommand();

        RespParser.TryParseCommand(ref buffer, command, Limits, out _);

        Assert.True(System.Runtime.InteropServices.MemoryMarshal.TryGetArray(command[1].First, out var segment));
        Assert.Same(bytes, segment.Array);
        Assert.Equal(17, segment.Offset);
    }

    [Theory]
    [MemberData(nameof(MalformedFrames))]
    public void A_malformed_frame_is_a_protocol_error(string frame, string expectedError)
    {
        var buffer = Sequence(Latin1(frame));

        var (status, _, error) = Parse(ref buffer);

        Assert.Equal(RespParseStatus.ProtocolError, status);
        Assert.Equal(expectedError, error);
    }

    [Fact]
    public void An_oversized_bulk_header_is_rejected_before_its_payload_arrives()
    {
        var buffer = Sequence(Latin1("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$70000\r\n"));

        var (status, _, error) = Parse(ref buffer);

        Assert.Equal(RespParseStatus.ProtocolError, status);
        Assert.Equal("invalid bulk length", error);
    }

    [Fact]
    public void Arguments_that_are_each_allowed_but_together_exceed_the_frame_limit_are_rejected()
    {
        string half = new('x', 40_000);
        var buffer = Sequence(Latin1($"*3\r\n$3\r\nSET\r\n$40000\r\n{half}\r\n$40000\r\n"));

        var (status, _, error) = Parse(ref buffer);

        Assert.Equal(RespParseStatus.ProtocolError, status);
        Assert.StartsWith("request frame larger than", error);
    }

    [Fact]
    public void An_inline_line_longer_than_the_limit_is_rejected_without_waiting_for_its_end()
    {
        var buffer = Sequence(Latin1("SET k " + new string('v', Limits.MaxInlineBytes)));

        var (status, _, error) = Parse(ref buffer);

        Assert.Equal(RespParseStatus.ProtocolError, status);
        Assert.Equal("too big inline request", error);
    }

    [Fact]
    public void A_value_straddling_segments_is_joined_when_asked_for_as_a_span()
    {
        var buffer = Sequence(Latin1("*2\r\n$4\r\nECHO\r\n$6\r\nab"), Latin1("cd"), Latin1("ef\r\n"));
        using var command = new RespCommand();

        Assert.Equal(RespParseStatus.Complete, RespParser.TryParseCommand(ref buffer, command, Limits, out _));

        Assert.False(command[1].IsSingleSegment);
        Assert.Equal("abcdef", Encoding.Latin1.GetString(command.Span(1)));
        Assert.Equal("ECHO", Encoding.Latin1.GetString(command.Span(0)));
    }

    [Theory]
    [InlineData("0", 0L)]
    [InlineData("42", 42L)]
    [InlineData("-7", -7L)]
    [InlineData("9223372036854775807", long.MaxValue)]
    [InlineData("-9223372036854775808", long.MinValue)]
    public void Integer_arguments_parse_across_the_whole_range(string text, long expected)
    {
        Assert.True(RespParser.TryParseInt64(Latin1(text), out long value));
        Assert.Equal(expected, value);
    }

    [Theory]
    [InlineData("")]
    [InlineData("-")]
    [InlineData("+1")]
    [InlineData("1.5")]
    [InlineData(" 1")]
    [InlineData("9223372036854775808")]
    [InlineData("-9223372036854775809")]
    [InlineData("99999999999999999999")]
    public void Integer_arguments_that_are_not_integers_or_overflow_are_refused(string text)
    {
        Assert.False(RespParser.TryParseInt64(Latin1(text), out _));
    }

    private static (RespParseStatus Status, string[] Args, string? Error) Parse(ref ReadOnlySequence<byte> buffer)
    {
        using var command = new RespCommand();
        var status = RespParser.TryParseCommand(ref buffer, command, Limits, out string? error);
        var args = Enumerable.Range(0, command.Count).Select(i => Encoding.Latin1.GetString(command[i].ToArray())).ToArray();
        return (status, args, error);
    }

    private static byte[] Latin1(string text) => Encoding.Latin1.GetBytes(text);

    internal static ReadOnlySequence<byte> Sequence(params byte[][] chunks) => Hpc.Fuzzing.Sequences.Of(chunks);
}
