using System.Text;
using Hpc.CacheHost.Resp;
using Hpc.Fuzzing;

namespace Hpc.CacheHost.Tests;

/// <summary>The RESP parser under mutated frames, whole and cut at random points: it completes, waits or refuses; it never throws or hangs.</summary>
public sealed class RespParserFuzzTests
{
    private static readonly byte[][] Seeds = [.. new[]
    {
        "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n",
        "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n",
        "*4\r\n$4\r\nMGET\r\n$2\r\nk1\r\n$2\r\nk2\r\n$0\r\n\r\n",
        "PING\r\nECHO hello\r\n",
        "*5\r\n$3\r\nSET\r\n$3\r\nseg\r\n$10\r\n0123456789\r\n$2\r\nPX\r\n$4\r\n1000\r\n",
        "*2\r\n$4\r\nAUTH\r\n$6\r\ns3cret\r\n",
    }.Select(Encoding.ASCII.GetBytes)];

    [Fact]
    public async Task Mutated_frames_parse_wait_or_are_refused_and_never_throw()
    {
        var limits = RespLimits.ForFrameSize(64 << 10);
        using var command = new RespCommand();
        var outcomes = new int[3];
        var cuts = new Random(7);
        var ran = await Mutator.RunAsync("RESP parser", Seeds, input =>
        {
            // The same bytes as one buffer and cut into random pieces, as they arrive from a socket.
            foreach (var buffer in new[] { RespParserTests.Sequence(input), RespParserTests.Sequence(Cut(input, cuts)) })
            {
                var rest = buffer;
                for (var frames = 0; frames < 1000; frames++)
                {
                    var status = RespParser.TryParseCommand(ref rest, command, limits, out var error);
                    outcomes[(int)status]++;
                    if (status == RespParseStatus.ProtocolError && error is null) throw new InvalidOperationException("a protocol error without a reason");
                    if (status != RespParseStatus.Complete) break;
                    for (var i = 0; i < command.Count; i++) _ = command.Span(i).Length;
                }
            }
        });
        Assert.Equal(Mutator.Iterations, ran);
        Assert.All(outcomes, count => Assert.True(count > 0, $"outcomes complete/incomplete/refused: {string.Join("/", outcomes)}"));
    }

    private static byte[][] Cut(byte[] input, Random rng)
    {
        var pieces = new List<byte[]>();
        for (var at = 0; at < input.Length;)
        {
            var n = Math.Min(input.Length - at, 1 + rng.Next(8));
            pieces.Add(input[at..(at + n)]);
            at += n;
        }
        return [.. pieces];
    }
}
