using System.Buffers;
using System.IO.Pipelines;
using Hpc.CacheHost.Resp;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Format;

namespace Hpc.Fuzzing;

/// <summary>
/// The parsers that read bytes from another process or the network, each as a fuzz target: it returns for any input the
/// parser handles (parsed, waiting for more, or refused with the error its caller handles) and throws only for a
/// defect — any other exception, or an outcome the parser's contract does not allow. AFL++ counts a throw as a crash.
/// </summary>
public static class FuzzTargets
{
    public static readonly IReadOnlyDictionary<string, Action<byte[]>> All = new Dictionary<string, Action<byte[]>>(StringComparer.Ordinal)
    {
        ["resp"] = Resp,
        ["manifest"] = ManifestBytes,
        ["agent-frames"] = AgentMessages,
    };

    /// <summary>The cache host's RESP parser over the input whole and cut in two (a frame split across socket reads).</summary>
    public static void Resp(byte[] input)
    {
        // Not a static field: instrumented code must not run before SharpFuzz has set up the coverage map.
        var limits = RespLimits.ForFrameSize(64 << 10);
        using var command = new RespCommand();
        var half = input.Length / 2;
        foreach (var buffer in new[] { new ReadOnlySequence<byte>(input), Sequences.Of(input[..half], input[half..]) })
        {
            var rest = buffer;
            for (var frames = 0; frames < 1000; frames++)
            {
                var status = RespParser.TryParseCommand(ref rest, command, limits, out var error);
                if (status == RespParseStatus.ProtocolError && error is null) throw new InvalidOperationException("a protocol error without a reason");
                if (status != RespParseStatus.Complete) break;
                for (var i = 0; i < command.Count; i++) _ = command.Span(i).Length;
            }
        }
    }

    /// <summary>A manifest as the agent and the stager read one from the cache tier (binary or JSON): parsed whole, or refused as invalid data.</summary>
    public static void ManifestBytes(byte[] input)
    {
        try
        {
            var manifest = Manifest.Parse(input);
            if (manifest.Offsets.Count != manifest.Segments.Count + 1 && manifest.Segments.Count > 0)
                throw new InvalidOperationException($"{manifest.Segments.Count} segments but {manifest.Offsets.Count} offsets");
            _ = manifest.SegmentIds.Count;
        }
        catch (InvalidDataException) { }
    }

    /// <summary>The agent's control messages as its pipe server reads them: frames of JSON requests until the end, or one refusal.</summary>
    public static void AgentMessages(byte[] input)
    {
        var reader = PipeReader.Create(new ReadOnlySequence<byte>(input));
        try
        {
            for (var messages = 0; messages < 1000; messages++)
            {
                var request = AgentFrames.ReadMessageAsync(reader, () => AgentJson.Default.AgentRequest, CancellationToken.None).AsTask().GetAwaiter().GetResult();
                if (request is null) break;
                _ = request.Op.Length;
            }
        }
        catch (InvalidDataException) { }
    }
}
