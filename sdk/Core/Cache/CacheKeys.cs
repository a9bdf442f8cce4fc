using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cache;

/// <summary>The key space on cache hosts. Segments are content-addressed; names only ever appear in the "latest" pointer.</summary>
public static class CacheKeys
{
    public static ReadOnlySpan<byte> SegmentPrefix => "hcd:s:"u8;
    public const int SegmentKeyLength = 6 + SegmentId.HexLength;

    public static void WriteSegmentKey(in SegmentId id, Span<byte> destination)
    {
        SegmentPrefix.CopyTo(destination);
        id.WriteHex(destination[6..]);
    }

    public static string Segment(SegmentId id) => "hcd:s:" + id;
    public static string Manifest(string version) => "hcd:m:" + version;
    public static string Latest(string name) => "hcd:latest:" + DatasetName.Validate(name);
}
