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
    /// <summary>
    /// <c>hcd:jobs:{&lt;version&gt;}:&lt;account&gt;:&lt;job&gt;</c> — one job a version with lifetime "job" is kept for,
    /// one key per job and account so that no account can drop another's reference (the braces keep a version's
    /// references in one Redis Cluster slot).
    /// </summary>
    public const string JobsPrefix = "hcd:jobs:";
    /// <summary><c>hcd:lock:&lt;version&gt;</c> — short lock around a change of that version's job references; its value is <c>account:job</c>.</summary>
    public const string LockPrefix = "hcd:lock:";
    /// <summary><c>hcd:staging:&lt;account&gt;:&lt;id&gt;</c> — a running stager's lease: segment collection waits for it.</summary>
    public const string StagingPrefix = "hcd:staging:";
    /// <summary><c>hcd:removed:&lt;version&gt;</c> — a removed version's dataset name: nodes holding a copy stop serving it.</summary>
    public const string RemovedPrefix = "hcd:removed:";
    /// <summary>
    /// Words of a host's refusal of a removal record for a version whose manifest it lacks (so cannot tell its owner):
    /// the owner's removal stores the manifest there and sends the record again.
    /// </summary>
    public const string RemovalOwnerUnknown = "this host cannot tell the owner of version";

    /// <summary>How long a job reference and a removal record live at most (a host refuses longer from a writer).</summary>
    public static readonly TimeSpan RecordLifetime = TimeSpan.FromDays(31);
    /// <summary>
    /// How long the segments a stage sends live until it publishes (renewed while it runs): a stage that fails or is
    /// killed leaves them to expire on their own, where only an administrator's collection could free them before.
    /// </summary>
    public static readonly TimeSpan UnpublishedLifetime = TimeSpan.FromHours(1);
    /// <summary>
    /// The INFO server field (value 1) of a cache host that, when it takes a version's "latest" pointer, gives the
    /// segments that version's manifest lists the version's life: a stager publishing there sends its segments with
    /// the unpublished life only, so a publish that fails leaves them expiring.
    /// </summary>
    public const string PublishKeepsSegmentsInfoField = "hpc_publish_keeps_segments";
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
    public static string Lock(string version) => LockPrefix + version;
    public static string Removed(string version) => RemovedPrefix + version;

    /// <summary>Every job reference of <paramref name="version"/> starts with this (a <c>KEYS prefix*</c> lists them).</summary>
    public static string JobReferences(string version) => JobsPrefix + "{" + version + "}:";

    public static string JobReference(string version, string account, string job) => JobReferences(version) + account + ":" + job;

    public static bool TryParseJobReference(string key, out string version, out string account, out string job)
    {
        version = account = job = "";
        if (!key.StartsWith(JobsPrefix + "{", StringComparison.Ordinal)) return false;
        var close = key.IndexOf("}:", JobsPrefix.Length, StringComparison.Ordinal);
        if (close < 0) return false;
        version = key[(JobsPrefix.Length + 1)..close];
        var rest = key[(close + 2)..];
        var colon = rest.IndexOf(':');
        if (colon <= 0 || colon == rest.Length - 1) return false;
        (account, job) = (rest[..colon], rest[(colon + 1)..]);
        return true;
    }

    public static string Staging(string account, string lease) => StagingPrefix + account + ":" + lease;

    public static bool TryParseStagingLease(string key, out string account)
    {
        account = "";
        if (!key.StartsWith(StagingPrefix, StringComparison.Ordinal)) return false;
        var colon = key.IndexOf(':', StagingPrefix.Length);
        if (colon <= StagingPrefix.Length || colon == key.Length - 1) return false;
        account = key[StagingPrefix.Length..colon];
        return true;
    }
}
