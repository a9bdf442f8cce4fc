using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>Segments and manifests in their stored form, as a stager writes them: what a host with accounts accepts from writers.</summary>
internal static class StoredObjects
{
    /// <summary>A stored segment: its key and its bytes.</summary>
    public static (string Key, byte[] Stored, ManifestSegment Entry) Segment(string text)
    {
        var raw = Encoding.UTF8.GetBytes(text);
        var stored = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var n = SegmentCodec.Encode(raw, stored);
        var id = SegmentId.Of(raw);
        return ("hcd:s:" + id, stored[..n], new ManifestSegment(id.ToString(), raw.Length, n));
    }

    /// <summary>A version of <paramref name="name"/> holding one segment: the manifest's key (its version), its stored bytes.</summary>
    public static (string Version, string Key, byte[] Stored) Version(string name, ManifestSegment segment)
    {
        // The host never checks the whole-dataset hash (it is the readers' check on a copy), only that the manifest parses.
        var manifest = new Manifest { Name = name, Hash = new string('0', 32), Segments = [segment], RawLength = segment.RawLength, StoredLength = segment.StoredLength };
        var bytes = manifest.Serialize();
        var version = Manifest.VersionOf(bytes);
        var encoded = new byte[SegmentCodec.MaxEncodedLength(bytes.Length)];
        var n = SegmentCodec.Encode(bytes, encoded);
        return (version, "hcd:m:" + version, encoded[..n]);
    }
}
