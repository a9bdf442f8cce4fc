using System.Buffers;
using System.Text;
using BenchmarkDotNet.Attributes;
using Hpc.CacheHost.Resp;
using Hpc.CommonData.Cache;

namespace Hpc.Benchmarks;

/// <summary>
/// The two RESP hot paths at the sizes the system uses: the cache host parsing a stager's pipelined batch of
/// 16 × SET key 64 KB NX, and the client walking a 16 × 64 KB MGET reply. Both work on slices of the receive buffer,
/// so neither should allocate per command or per value.
/// </summary>
[MemoryDiagnoser]
public class RespBenchmarks
{
    private const int Values = 16;
    private const int ValueBytes = 64 * 1024;
    private ReadOnlySequence<byte> _setBatch;
    private ReadOnlySequence<byte> _mgetReply;
    private readonly RespCommand _command = new();
    private readonly RespLimits _limits = RespLimits.ForFrameSize(64 << 20);

    [GlobalSetup]
    public void Setup()
    {
        var value = new byte[ValueBytes];
        new Random(1).NextBytes(value);
        using var requests = new MemoryStream();
        using var reply = new MemoryStream();
        reply.Write(Encoding.ASCII.GetBytes($"*{Values}\r\n"));
        for (var i = 0; i < Values; i++)
        {
            var key = $"hcd:s:{i:x32}";
            requests.Write(Encoding.ASCII.GetBytes($"*4\r\n$3\r\nSET\r\n${key.Length}\r\n{key}\r\n${ValueBytes}\r\n"));
            requests.Write(value);
            requests.Write("\r\n$2\r\nNX\r\n"u8);
            reply.Write(Encoding.ASCII.GetBytes($"${ValueBytes}\r\n"));
            reply.Write(value);
            reply.Write("\r\n"u8);
        }
        _setBatch = new ReadOnlySequence<byte>(requests.ToArray());
        _mgetReply = new ReadOnlySequence<byte>(reply.ToArray());
    }

    [Benchmark(Description = "cache host: parse 16 × SET 64 KB")]
    public int ParseSetBatch()
    {
        var buffer = _setBatch;
        var parsed = 0;
        while (RespParser.TryParseCommand(ref buffer, _command, _limits, out _) == RespParseStatus.Complete) parsed++;
        return parsed;
    }

    [Benchmark(Description = "client: walk 16 × 64 KB MGET reply")]
    public long ParseMgetReply()
    {
        var reader = new SequenceReader<byte>(_mgetReply);
        if (!RespReplyParser.TryReadArrayHeader(ref reader, out var count)) return -1;
        long bytes = 0;
        for (var i = 0; i < count; i++)
        {
            if (!RespReplyParser.TryReadBulk(ref reader, ValueBytes, out var value, out _)) return -1;
            bytes += value.Length;
        }
        return bytes;
    }
}
