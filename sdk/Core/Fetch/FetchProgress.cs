namespace Hpc.CommonData.Fetch;

/// <summary>
/// How far a fetch from the cache tier is: raw bytes and segments that arrived verified, of all it fetches. Reported
/// once per batch of segments a cache host answered (<see cref="SegmentFetcher.FetchAsync(Cache.CacheTierClient, Format.Manifest, string, nint, IReadOnlyList{int}, Action{int}?, IProgress{FetchProgress}?, CancellationToken)"/>),
/// from the fetch's threads: a report may arrive just after a later one, so a reader keeps the largest.
/// </summary>
public readonly record struct FetchProgress(long BytesDone, long TotalBytes, int SegmentsDone, int Segments);
