using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fetch;

/// <summary>
/// Fetches segments of a version from the cache tier and decodes each one, verified, straight to its offset in a
/// destination mapping (the agent's partial file, or private memory). Used by the node agent and by the SDK's
/// direct mode, so both verify exactly the same way.
/// </summary>
public static unsafe class SegmentFetcher
{
    /// <param name="destination">Base of a writable region of at least <c>manifest.RawLength</c> bytes.</param>
    /// <param name="onSegment">Called once per segment that decoded and verified (from several threads).</param>
    public static Task FetchAsync(CacheTierClient client, Manifest manifest, string version, nint destination,
        IReadOnlyList<int> wanted, Action<int>? onSegment, CancellationToken ct)
    {
        var ids = manifest.SegmentIds;
        var offsets = manifest.Offsets;
        return client.FetchSegmentsAsync(ids, wanted, (index, stored) =>
        {
            var target = new Span<byte>((byte*)destination + offsets[index], manifest.Segments[index].RawLength);
            var problem = SegmentCodec.TryDecode(stored, ids[index], target);
            if (problem is null) onSegment?.Invoke(index);
            return problem;
        }, $"dataset '{manifest.Name}' version {version}", ct);
    }

    /// <summary>Recomputes the whole-dataset hash over the bytes and compares it with the manifest's.</summary>
    public static bool HashMatches(Manifest manifest, byte* data, long length) =>
        length == manifest.RawLength && XxHash.Hash128Of(data, length).ToString("x32") == manifest.Hash;
}
