using System.Buffers;
using System.Text;
using Hpc.CommonData.Access;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Format;

namespace Hpc.Fuzzing;

/// <summary>
/// The corpus's starting inputs, made by the same writers the product uses (so a format change is one regeneration:
/// <c>Hpc.Fuzz seeds corpus</c>): valid RESP commands as our clients send them, manifests in both encodings with and
/// without files and readers, and agent request frames.
/// </summary>
public static class Seeds
{
    public static IReadOnlyDictionary<string, byte[]> For(string target) => target switch
    {
        "resp" => new Dictionary<string, byte[]>
        {
            ["set"] = Ascii("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"),
            ["get-ping"] = Ascii("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n"),
            ["mget"] = Ascii("*4\r\n$4\r\nMGET\r\n$2\r\nk1\r\n$2\r\nk2\r\n$0\r\n\r\n"),
            ["inline"] = Ascii("PING\r\nECHO hello\r\n"),
            ["set-px"] = Ascii("*5\r\n$3\r\nSET\r\n$3\r\nseg\r\n$10\r\n0123456789\r\n$2\r\nPX\r\n$4\r\n1000\r\n"),
            ["auth"] = Ascii("*3\r\n$4\r\nAUTH\r\n$5\r\nnode1\r\n$6\r\ns3cret\r\n"),
        },
        "manifest" => Manifests(),
        "agent-frames" => new Dictionary<string, byte[]>
        {
            ["open"] = Frames("""{"op":"open","dataset":"risk/fuzz"}"""),
            ["prefetch-pin"] = Frames("""{"op":"prefetch","dataset":"risk/fuzz","version":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","pin":"job-7"}"""),
            ["release-status"] = Frames("""{"op":"release","dataset":"risk/fuzz","pin":"job-7","evict":true}""", """{"op":"status"}"""),
        },
        _ => throw new ArgumentException($"no target '{target}'"),
    };

    private static Dictionary<string, byte[]> Manifests()
    {
        var segments = Enumerable.Range(0, 3).Select(i => Encoding.ASCII.GetBytes(new string((char)('a' + i), 1000 + i))).ToList();
        var manifest = new Manifest
        {
            Name = "risk/fuzz", Hash = new string('a', 32), Created = DateTimeOffset.UnixEpoch, LifetimeSeconds = 3600,
            Segments = segments.Select(s => new ManifestSegment(SegmentId.Of(s).ToString(), s.Length, s.Length / 2)).ToList(),
            RawLength = segments.Sum(s => s.Length), StoredLength = segments.Sum(s => s.Length / 2),
            Files = [new DatasetFile("a/b.csv", 0, 1000, 420), new DatasetFile("c.csv", 1000, 2003, 420)],
        };
        var restricted = new Manifest
        {
            Name = manifest.Name, Hash = manifest.Hash, Segments = manifest.Segments, RawLength = manifest.RawLength, StoredLength = manifest.StoredLength,
            Chunking = ContentChunker.Name, Readers = DatasetReaders.Of([1000], [100]),
        };
        return new() { ["binary-tree"] = manifest.Serialize(), ["json-tree"] = manifest.SerializeJson(), ["binary-readers"] = restricted.Serialize() };
    }

    private static byte[] Ascii(string text) => Encoding.ASCII.GetBytes(text);

    private static byte[] Frames(params string[] messages)
    {
        var writer = new ArrayBufferWriter<byte>();
        foreach (var m in messages) AgentFrames.Write(writer, Encoding.UTF8.GetBytes(m));
        return writer.WrittenSpan.ToArray();
    }
}
