using System.Buffers;
using System.Text;
using Hpc.CacheHost.Storage;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CacheHost.Server;

/// <summary>
/// A version is published on a host when the host takes the dataset's "latest" pointer naming it: that write is what
/// makes the version visible. With it, the host gives every segment the version's manifest lists, and that it holds,
/// the version's life (kept until removed, or the manifest's lifetime), never shortening a longer one another version
/// gave a shared segment. The pointer's SET replies only after, so a stager that sees it accepted knows the segments
/// here no longer expire as unpublished ones do; a stage that fails before any host takes its pointer leaves its new
/// segments with the short life they were sent with. Stagers learn that a host does this from INFO
/// (<see cref="InfoField"/>); on any other host they give the segments their life themselves, before publishing.
/// </summary>
internal static class Publication
{
    /// <summary>The INFO server field that says this host gives a version's segments their life when it publishes it.</summary>
    public const string InfoField = CacheKeys.PublishKeepsSegmentsInfoField;

    private static readonly byte[] Latest = Encoding.ASCII.GetBytes(CacheKeys.LatestPrefix);
    private static readonly byte[] ManifestPrefix = Encoding.ASCII.GetBytes(CacheKeys.ManifestPrefix);

    /// <summary>Whether a SET of <paramref name="key"/> may publish a version (a prefix test: free for segments).</summary>
    public static bool IsPointer(ReadOnlySpan<byte> key) => key.StartsWith(Latest);

    /// <summary>
    /// After a pointer <paramref name="key"/> was stored with <paramref name="value"/>: gives the segments of the version
    /// it names their life. Returns how many segments were found here; nothing happens for a value that names no
    /// version whose readable manifest this host holds.
    /// </summary>
    public static int KeepSegments(CacheStore store, ReadOnlySpan<byte> key, in ReadOnlySequence<byte> value)
    {
        if (!IsPointer(key) || value.Length != SegmentId.HexLength) return 0;
        Span<byte> hex = stackalloc byte[SegmentId.HexLength];
        value.CopyTo(hex);
        return KeepSegments(store, hex);
    }

    private static int KeepSegments(CacheStore store, ReadOnlySpan<byte> hex)
    {
        Span<char> chars = stackalloc char[hex.Length];
        for (var i = 0; i < hex.Length; i++) chars[i] = (char)hex[i];
        if (!SegmentId.TryParse(chars, out var version)) return 0;
        Span<byte> manifestKey = stackalloc byte[ManifestPrefix.Length + hex.Length];
        ManifestPrefix.CopyTo(manifestKey);
        hex.CopyTo(manifestKey[ManifestPrefix.Length..]);
        if (!store.TryPeek(manifestKey, out var stored) || WriteRules.Decode(stored, version, out var manifest) is not null) return 0;
        long? lifeMs = manifest!.LifetimeSeconds is { } seconds and > 0 ? (seconds > long.MaxValue / 1000 ? long.MaxValue / 1000 : seconds) * 1000 : null;
        Span<byte> segmentKey = stackalloc byte[CacheKeys.SegmentKeyLength];
        var found = 0;
        foreach (var segment in manifest.Segments)
        {
            if (!SegmentId.TryParse(segment.Id.AsSpan(), out var id)) continue;
            CacheKeys.WriteSegmentKey(id, segmentKey);
            if (!store.Exists(segmentKey)) continue;
            found++;
            // PERSIST, or PEXPIRE … GT: a segment kept longer (or until removed) by another version keeps that life.
            if (lifeMs is { } ms) store.SetExpiry(segmentKey, ms, ExpireCondition.IfGreater);
            else store.Persist(segmentKey);
        }
        return found;
    }
}
