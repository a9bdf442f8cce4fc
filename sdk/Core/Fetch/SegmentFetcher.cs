using Hpc.CommonData.Cache;
using System.Runtime.ExceptionServices;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Fetch;

/// <summary>
/// Fetches segments of a version from the cache tier and decodes each one, verified, straight to its offset in a
/// destination mapping (the agent's partial file, or private memory). Used by the node agent and by the SDK's
/// direct mode, so both verify exactly the same way.
/// </summary>
public static class SegmentFetcher
{
    /// <param name="destination">Base of a writable region of at least <c>manifest.RawLength</c> bytes.</param>
    /// <param name="onSegment">Called once per segment that decoded and verified (from several threads).</param>
    public static Task FetchAsync(CacheTierClient client, Manifest manifest, string version, nint destination,
        IReadOnlyList<int> wanted, Action<int>? onSegment, CancellationToken ct) =>
        FetchAsync(client, manifest, version, destination, wanted, onSegment, progress: null, ct);

    /// <inheritdoc cref="FetchAsync(CacheTierClient, Manifest, string, nint, IReadOnlyList{int}, Action{int}?, CancellationToken)"/>
    /// <param name="progress">Told the raw bytes and segments done of <paramref name="wanted"/> after each batch a host answered.</param>
    public static unsafe Task FetchAsync(CacheTierClient client, Manifest manifest, string version, nint destination,
        IReadOnlyList<int> wanted, Action<int>? onSegment, IProgress<FetchProgress>? progress, CancellationToken ct)
    {
        var ids = manifest.SegmentIds;
        var offsets = manifest.Offsets;
        // Counted as segments decode (an add, nothing allocated); reported once per batch.
        long bytesDone = 0, totalBytes = 0;
        var segmentsDone = 0;
        if (progress is not null) foreach (var i in wanted) totalBytes += manifest.Segments[i].RawLength;
        return client.FetchSegmentsAsync(ids, wanted, (index, stored) =>
        {
            var target = new Span<byte>((byte*)destination + offsets[index], manifest.Segments[index].RawLength);
            var problem = SegmentCodec.TryDecode(stored, ids[index], target);
            if (problem is null)
            {
                onSegment?.Invoke(index);
                if (progress is not null) Interlocked.Add(ref bytesDone, target.Length);
            }
            return problem;
        }, $"dataset '{manifest.Name}' version {version}",
            progress is null ? null : intact => progress.Report(new FetchProgress(Interlocked.Read(ref bytesDone), totalBytes,
                Interlocked.Add(ref segmentsDone, intact), wanted.Count)), ct);
    }

    /// <summary>
    /// As <see cref="FetchAsync(CacheTierClient, Manifest, string, nint, IReadOnlyList{int}, Action{int}?, CancellationToken)"/>, but each segment is decoded into a pooled buffer and written at its offset with a
    /// positional write. For files on tmpfs this is cheaper than decoding into a shared mapping: a store through the
    /// mapping faults every 4 KB page in and the kernel zeroes it first, a full-page write needs neither. Writing 1 GiB
    /// in 64 KB blocks on tmpfs (a C program, this project's 2-core VM): 0.26–0.28 CPU-s by positional writes; through a
    /// mapping 1.3–1.6 populated in advance by MADV_POPULATE_WRITE, 1.4–3.7 after fallocate and MAP_POPULATE, 3.7–4.0 faulting page by page.
    /// </summary>
    /// <param name="destination">The copy being written: one file or a tree (<see cref="DatasetFiles"/>).</param>
    /// <remarks>
    /// A failure on this side — writing the file (a full disk: ENOSPC) or in <paramref name="onSegment"/> — stops the
    /// fetch and is thrown as it is. It is not the cache host's fault, so it is neither retried against the host nor
    /// reported as the host being unavailable.
    /// </remarks>
    public static async Task FetchToFileAsync(CacheTierClient client, Manifest manifest, string version, DatasetFiles destination,
        IReadOnlyList<int> wanted, Action<int>? onSegment, CancellationToken ct)
    {
        ExceptionDispatchInfo? localFailure = null;
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(ct);
        try
        {
            await client.FetchSegmentsAsync(manifest.SegmentIds, wanted, (index, stored) =>
            {
                try
                {
                    var problem = TryWriteSegment(manifest, index, stored, destination);
                    if (problem is null) onSegment?.Invoke(index);
                    return problem;
                }
                catch (Exception e)
                {
                    Interlocked.CompareExchange(ref localFailure, ExceptionDispatchInfo.Capture(e), null);
                    stop.Cancel();
                    throw new LocalFailureException(e);
                }
            }, $"dataset '{manifest.Name}' version {version}", stop.Token);
        }
        catch (Exception) when (localFailure is not null)
        {
            localFailure.Throw();
        }
    }

    /// <summary>
    /// Verifies stored segment <paramref name="index"/> of <paramref name="manifest"/> — header, payload checksum, decode,
    /// raw length, content id — decoding it into a pooled buffer (a raw segment is written from where it lies), and only then writes its raw bytes at its offset in
    /// <paramref name="destination"/>. Returns null when written, otherwise why the segment was rejected (nothing was
    /// written). A failure writing the file is thrown as it is. Fetches and the agent's ingest both verify through here.
    /// </summary>
    public static string? TryWriteSegment(Manifest manifest, int index, ReadOnlySpan<byte> stored, DatasetFiles destination)
    {
        var length = manifest.Segments[index].RawLength;
        var buffer = System.Buffers.ArrayPool<byte>.Shared.Rent(length);
        try
        {
            string? problem;
            ReadOnlySpan<byte> content;
            try { problem = SegmentCodec.TryVerify(stored, manifest.SegmentIds[index], buffer.AsSpan(0, length), out content); }
            catch (Exception e) when (e is ArgumentException or InvalidOperationException or IndexOutOfRangeException)
            {
                problem = $"segment {manifest.SegmentIds[index]}: payload cannot be decoded ({e.Message})"; // damaged bytes never fail the caller
                content = default;
            }
            if (problem is not null) return problem;
            destination.Write(content, manifest.Offsets[index]);
            return null;
        }
        finally { System.Buffers.ArrayPool<byte>.Shared.Return(buffer); }
    }

    /// <summary>Carries a local failure through the cache-tier client, which would take an <see cref="IOException"/> for a host's.</summary>
    private sealed class LocalFailureException(Exception inner) : Exception(inner.Message, inner);

    /// <summary>Recomputes the whole-dataset hash over the bytes and compares it with the manifest's.</summary>
    public static unsafe bool HashMatches(Manifest manifest, byte* data, long length) =>
        length == manifest.RawLength && XxHash.Hash128Of(data, length).ToString("x32") == manifest.Hash;
}
