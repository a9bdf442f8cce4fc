using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cache;

/// <summary>
/// Every key the system writes on a cache host, and nothing else spells one. Segments are content-addressed; dataset
/// names appear only in the "latest" pointer. Administrators can list a kind with <c>KEYS prefix*</c>.
/// </summary>
public static class CacheKeys
{
    /// <summary><c>hcd:s:&lt;id&gt;</c> — one stored segment (header + payload), keyed by the hash of its raw bytes.</summary>
    public const string SegmentPrefix = "hcd:s:";
    /// <summary><c>hcd:m:&lt;version&gt;</c> — a version's manifest, stored as a segment whose id is the version.</summary>
    public const string ManifestPrefix = "hcd:m:";
    /// <summary><c>hcd:latest:&lt;owner/name&gt;</c> — the version readers get when they ask for none.</summary>
    public const string LatestPrefix = "hcd:latest:";
    /// <summary><c>hcd:jobs:&lt;version&gt;</c> — the jobs a version with lifetime "job" is kept for.</summary>
    public const string JobsPrefix = "hcd:jobs:";
    /// <summary><c>hcd:lock:&lt;version&gt;</c> — short lock around a change of that job list.</summary>
    public const string LockPrefix = "hcd:lock:";
    /// <summary><c>hcd:staging:&lt;id&gt;</c> — a running stager's lease: segment collection waits for it.</summary>
    public const string StagingPrefix = "hcd:staging:";
    /// <summary><c>hcd:owner:&lt;owner/name&gt;</c> — the cache account a dataset name belongs to (claimed by its first stage).</summary>
    public const string OwnerPrefix = "hcd:owner:";
    /// <summary><c>hcd:gc</c> — set while a segment collection runs; stagers wait for it.</summary>
    public const string Collection = "hcd:gc";

    public static ReadOnlySpan<byte> SegmentPrefixBytes => "hcd:s:"u8;
    public const int SegmentKeyLength = 6 + SegmentId.HexLength;

    /// <summary>Writes a segment's key without allocating (the fetch and upload paths make one per segment).</summary>
    public static void WriteSegmentKey(in SegmentId id, Span<byte> destination)
    {
        SegmentPrefixBytes.CopyTo(destination);
        id.WriteHex(destination[SegmentPrefix.Length..]);
    }

    public static string Segment(SegmentId id) => SegmentPrefix + id;
    public static string Manifest(string version) => ManifestPrefix + version;
    public static string Latest(string name) => LatestPrefix + DatasetName.Validate(name);
    public static string Jobs(string version) => JobsPrefix + version;
    public static string Lock(string version) => LockPrefix + version;
    public static string Staging(string lease) => StagingPrefix + lease;
    public static string Owner(string name) => OwnerPrefix + DatasetName.Validate(name);
}
