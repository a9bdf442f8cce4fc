using System.Buffers;
using System.Diagnostics;
using System.Threading.Channels;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.Stager;

public sealed class StageOptions
{
    public required string Name { get; init; }
    public int SegmentSize { get; init; } = SegmentCodec.DefaultSegmentSize;
    public bool Compress { get; init; } = true;
    /// <summary>Cache-tier lifetime of the version; null keeps it until removed.</summary>
    public TimeSpan? Lifetime { get; init; }
    /// <summary>Who may read the version on a node; null: everyone.</summary>
    public Hpc.CommonData.Access.DatasetReaders? Readers { get; init; }
    public int Parallelism { get; init; } = Environment.ProcessorCount;
    /// <summary>Segments per upload batch (pipelined as one write per host).</summary>
    public int UploadBatch { get; init; } = 64;
    /// <summary>Batches in flight at once (each is one pipelined exchange per host).</summary>
    public int Uploaders { get; init; } = 6;
    /// <summary>Content-defined boundaries (<see cref="ContentChunker"/>, the default) or fixed <see cref="SegmentSize"/> segments.</summary>
    public bool ContentDefined { get; init; } = true;
    /// <summary>Estimate the new stored bytes from a sample and refuse before sending when the tier cannot hold them.</summary>
    public bool CheckSpace { get; init; } = true;
}

public sealed record StageProgress(long RawBytes, long StoredBytes, int Segments, long? TotalBytes, TimeSpan Elapsed);

/// <summary>
/// Chunks, compresses and hashes on all cores, uploads pipelined batches to every cache host in parallel, skips
/// segments the tier already holds, and publishes atomically: "latest" moves only after every segment and the
/// manifest are stored, so readers never see a half-staged version.
/// </summary>
public sealed class StagingPipeline(CacheTierClient tier, ILogger logger)
{
    private readonly record struct RawChunk(int Index, byte[] Buffer, int Length);
    private readonly record struct EncodedChunk(int Index, SegmentId Id, byte[] Buffer, int Length, int RawLength);

    public async Task<StageResult> StageAsync(StageSource source, StageOptions options, IProgress<StageProgress>? progress = null, CancellationToken ct = default)
    {
        var sent = new SentSegments();
        try
        {
            return await StageCoreAsync(source, options, progress, sent, ct);
        }
        catch (Exception) when (Volatile.Read(ref sent.Count) > 0)
        {
            // Segments this stage sent belong to no version: left behind they would hold the cache hosts' memory (with
            // no TTL) until some removal collected them, and refuse the next stage. Our staging lease is gone by now,
            // so the collection can run; another running stager makes it wait for the next one.
            await CollectAfterFailureAsync(sent.Count);
            throw;
        }
    }

    /// <summary>How many new segments a stage has sent so far, for the clean-up when it fails.</summary>
    private sealed class SentSegments { public int Count; }

    private async Task CollectAfterFailureAsync(int sent)
    {
        using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        try
        {
            var gc = await new SegmentCollector(tier, logger).CollectAsync(limit.Token);
            if (gc.Ran) logger.LogWarning("Staging failed after sending {Sent} new segments; freed {Deleted} segments no version references", sent, gc.SegmentsDeleted);
            else logger.LogWarning("Staging failed after sending {Sent} new segments; they stay until the next collection ({Reason})", sent, gc.SkippedBecause);
        }
        catch (Exception e) when (e is IOException or TimeoutException or OperationCanceledException or CommonDataException)
        {
            logger.LogWarning("Staging failed after sending {Sent} new segments; freeing them failed too ({Error})", sent, e.Message);
        }
    }

    private async Task<StageResult> StageCoreAsync(StageSource source, StageOptions options, IProgress<StageProgress>? progress, SentSegments sentSegments,
        CancellationToken ct)
    {
        DatasetName.Validate(options.Name);
        if (options.SegmentSize is < 4096 or > 16 << 20) throw new ArgumentOutOfRangeException(nameof(options), "segment size must be between 4 KB and 16 MB");
        var clock = Stopwatch.StartNew();
        // Held until "latest" has moved: a segment collection must not free segments this staging decided to reuse.
        await using var lease = await new SegmentCollector(tier, logger).BeginStagingAsync(ct: ct);
        if (options.CheckSpace) await CheckSpaceAsync(source, options, ct);
        using var cts = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var raw = Channel.CreateBounded<RawChunk>(new BoundedChannelOptions(options.Parallelism * 4) { SingleWriter = true });
        var encoded = Channel.CreateBounded<EncodedChunk>(new BoundedChannelOptions(options.UploadBatch * 4) { SingleReader = true });
        var segments = new List<ManifestSegment?>();
        var hash = new XxHash.Streaming128();
        long rawTotal = 0, storedTotal = 0, sentTotal = 0, newRawTotal = 0;
        int skipped = 0, done = 0;

        var reader = Task.Run(() =>
        {
            try
            {
                void Emit(int index, byte[] buffer, int n)
                {
                    hash.Append(buffer.AsSpan(0, n));
                    rawTotal += n;
                    lock (segments) segments.Add(null);
                    if (!raw.Writer.TryWrite(new RawChunk(index, buffer, n)))
                        raw.Writer.WriteAsync(new RawChunk(index, buffer, n), cts.Token).AsTask().GetAwaiter().GetResult();
                }
                if (options.ContentDefined) ReadContentDefined(source, Emit);
                else
                {
                    for (var index = 0; ; index++)
                    {
                        var buffer = ArrayPool<byte>.Shared.Rent(options.SegmentSize);
                        var n = source.ReadBlock(buffer.AsSpan(0, options.SegmentSize));
                        if (n == 0) { ArrayPool<byte>.Shared.Return(buffer); break; }
                        Emit(index, buffer, n);
                    }
                }
                if (source.KnownLength is { } expected && source.Files is not null && expected != rawTotal)
                    throw new IOException($"'{source.Description}' changed while being staged ({rawTotal} bytes read, {expected} listed)");
                raw.Writer.Complete();
            }
            catch (Exception e)
            {
                raw.Writer.Complete(e);
                throw;
            }
        }, cts.Token);

        var encoders = Enumerable.Range(0, Math.Max(1, options.Parallelism)).Select(_ => Task.Run(async () =>
        {
            await foreach (var chunk in raw.Reader.ReadAllAsync(cts.Token))
            {
                var input = chunk.Buffer.AsSpan(0, chunk.Length);
                var output = ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxEncodedLength(chunk.Length));
                var id = SegmentId.Of(input);
                var length = SegmentCodec.Encode(input, output, options.Compress);
                ArrayPool<byte>.Shared.Return(chunk.Buffer);
                await encoded.Writer.WriteAsync(new EncodedChunk(chunk.Index, id, output, length, chunk.Length), cts.Token);
            }
        }, cts.Token)).ToArray();
        var encodersDone = Task.WhenAll(encoders).ContinueWith(t => encoded.Writer.Complete(t.Exception?.GetBaseException()), TaskScheduler.Default);

        var uploaders = Enumerable.Range(0, options.Uploaders).Select(_ => Task.Run(async () =>
        {
            var batch = new List<EncodedChunk>(options.UploadBatch);
            while (await encoded.Reader.WaitToReadAsync(cts.Token))
            {
                while (batch.Count < options.UploadBatch && encoded.Reader.TryRead(out var c)) batch.Add(c);
                if (batch.Count == 0) continue;
                try
                {
                    var present = await tier.ContainsSegmentsAsync(batch.Select(b => b.Id).ToArray(), cts.Token);
                    var missing = batch.Where((b, i) => !present[i]).Select(b => (b.Id, (ReadOnlyMemory<byte>)b.Buffer.AsMemory(0, b.Length))).ToArray();
                    // Counted before the put: a put that fails half-way may have stored some of them.
                    if (missing.Length > 0) Interlocked.Add(ref sentSegments.Count, missing.Length);
                    Interlocked.Add(ref newRawTotal, batch.Where((b, i) => !present[i]).Sum(b => (long)b.RawLength));
                    var sent = missing.Length == 0 ? 0 : await tier.PutSegmentsAsync(missing, options.Lifetime, cts.Token);
                    Interlocked.Add(ref sentTotal, sent);
                    Interlocked.Add(ref skipped, batch.Count - missing.Length);
                    lock (segments)
                        foreach (var b in batch) segments[b.Index] = new ManifestSegment(b.Id.ToString(), b.RawLength, b.Length);
                    var stored = Interlocked.Add(ref storedTotal, batch.Sum(b => (long)b.Length));
                    var count = Interlocked.Add(ref done, batch.Count);
                    progress?.Report(new StageProgress(Volatile.Read(ref rawTotal), stored, count, source.KnownLength, clock.Elapsed));
                }
                finally
                {
                    foreach (var b in batch) ArrayPool<byte>.Shared.Return(b.Buffer);
                    batch.Clear();
                }
            }
        }, cts.Token)).ToArray();

        string datasetHash;
        try
        {
            await WhenAllOrFirstFailure(cts, uploaders.Append(reader).Append(encodersDone).Concat(encoders).ToArray());
            datasetHash = hash.Digest().ToString("x32");
        }
        finally
        {
            hash.Dispose();
        }
        var manifest = new Manifest
        {
            Name = options.Name, Created = DateTimeOffset.UtcNow, LifetimeSeconds = (long?)options.Lifetime?.TotalSeconds,
            RawLength = rawTotal, StoredLength = storedTotal, Hash = datasetHash,
            SegmentSize = options.ContentDefined ? ContentChunker.AverageSize : options.SegmentSize, Chunking = options.ContentDefined ? ContentChunker.Name : null,
            Segments = segments.Select(x => x!).ToList(), Files = source.Files, Readers = options.Readers,
        };
        return await PublishAsync(manifest, options, sentTotal, skipped, newRawTotal, clock, cts.Token);
    }

    private const int SpaceSamples = 32;

    /// <summary>
    /// Refuses, before anything is sent, a stage the cache tier clearly cannot hold: 32 segments spread over the source
    /// are encoded and looked up, which estimates both the compression ratio and how much the tier already has; the
    /// estimate of new stored bytes (× replicas, plus each entry's overhead) is compared with the hosts' free budget.
    /// Only a clear shortfall (the estimate's 90% does not fit) is refused; the hosts still refuse any write past
    /// their budget, so a wrong estimate costs a later failure, never data.
    /// </summary>
    private async Task CheckSpaceAsync(StageSource source, StageOptions options, CancellationToken ct)
    {
        if (source.KnownLength is not { } length || length == 0) return;
        var memory = await tier.GetMemoryAsync(ct);
        if (memory.Any(m => m.Max <= 0)) return; // a host without a limit (a Redis without maxmemory) cannot say
        var unit = options.ContentDefined ? ContentChunker.AverageSize : options.SegmentSize;
        var segmentCount = (length + unit - 1) / unit;
        var windows = (int)Math.Min(SpaceSamples, segmentCount);
        // Content-defined boundaries depend on where chunking started: from an arbitrary offset they fall into step with
        // the stager's after a cut or two, so the sample is the third segment found in a window.
        var read = options.ContentDefined ? 5 * ContentChunker.MaxSize : options.SegmentSize;
        var input = ArrayPool<byte>.Shared.Rent(read);
        var output = ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxEncodedLength(Math.Max(options.SegmentSize, ContentChunker.MaxSize)));
        var samples = new List<(SegmentId Id, int Raw, int Stored)>();
        try
        {
            for (var w = 0; w < windows; w++)
            {
                var n = source.ReadAt(w * segmentCount / windows * unit, input.AsSpan(0, read));
                if (n <= 0) return;
                var segment = input.AsSpan(0, n);
                if (options.ContentDefined)
                {
                    for (var skip = 0; skip < 2; skip++)
                    {
                        var cut = ContentChunker.Default.NextCut(segment, final: true);
                        if (cut >= segment.Length) break;
                        segment = segment[cut..];
                    }
                    segment = segment[..ContentChunker.Default.NextCut(segment, final: true)];
                }
                samples.Add((SegmentId.Of(segment), segment.Length, SegmentCodec.Encode(segment, output, options.Compress)));
            }
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(input);
            ArrayPool<byte>.Shared.Return(output);
        }
        var present = await tier.ContainsSegmentsAsync(samples.Select(s => s.Id).ToArray(), ct);
        double raw = samples.Sum(s => (double)s.Raw);
        double newStored = samples.Where((s, i) => !present[i]).Sum(s => (double)s.Stored);
        double newFraction = samples.Count(s => true) == 0 ? 0 : samples.Where((s, i) => !present[i]).Count() / (double)samples.Count;
        var needed = (long)((length * newStored / raw + segmentCount * newFraction * 192) * tier.Replicas);
        var free = memory.Sum(m => Math.Max(0, m.Max - m.Used));
        if (needed * 0.9 <= free) return;
        throw new CommonDataException(ErrorCode.NoSpace,
            $"the cache tier has {ByteSize.Format(free)} free ({string.Join(", ", memory.Select(m => $"{m.Host} {ByteSize.Format(Math.Max(0, m.Max - m.Used))} of {ByteSize.Format(m.Max)}"))}); " +
            $"staging '{options.Name}' needs about {ByteSize.Format(needed)} more (a sample of {samples.Count} segments: stored {newStored / Math.Max(1, raw):P0} of raw as new, " +
            $"{1 - newFraction:P0} already held; {tier.Replicas} replica(s)). Nothing was sent. Remove versions (hpcdata remove), collect (hpcdata gc), " +
            "add hosts or memory, or stage with --no-space-check to try anyway");
    }

    private const int ChunkWindow = 8 << 20;

    /// <summary>
    /// Reads the source through an 8 MB window and hands out one pooled buffer per content-defined segment; the window
    /// keeps at least <see cref="ContentChunker.MaxSize"/> bytes ahead of the cursor, so every cut sees its full range.
    /// </summary>
    private static void ReadContentDefined(StageSource source, Action<int, byte[], int> emit)
    {
        var window = ArrayPool<byte>.Shared.Rent(ChunkWindow);
        try
        {
            int start = 0, end = 0, index = 0;
            var eof = false;
            while (true)
            {
                if (!eof && end - start < ContentChunker.MaxSize)
                {
                    if (start > 0)
                    {
                        window.AsSpan(start, end - start).CopyTo(window);
                        (start, end) = (0, end - start);
                    }
                    var n = source.ReadBlock(window.AsSpan(end));
                    end += n;
                    eof = end < window.Length;
                }
                if (start == end) break;
                var cut = ContentChunker.Default.NextCut(window.AsSpan(start, end - start), final: eof);
                var buffer = ArrayPool<byte>.Shared.Rent(cut);
                window.AsSpan(start, cut).CopyTo(buffer);
                start += cut;
                emit(index++, buffer, cut);
            }
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(window);
        }
    }

    /// <summary>Waits for all stages; the first failure cancels the others so nothing hangs on a full channel.</summary>
    private static async Task WhenAllOrFirstFailure(CancellationTokenSource cts, Task[] tasks)
    {
        var remaining = tasks.ToList();
        while (remaining.Count > 0)
        {
            var t = await Task.WhenAny(remaining);
            remaining.Remove(t);
            if (t.IsFaulted || t.IsCanceled)
            {
                cts.Cancel();
                try { await Task.WhenAll(remaining); } catch { /* secondary failures caused by the cancellation */ }
                await t;
            }
        }
    }

    private async Task<StageResult> PublishAsync(Manifest manifest, StageOptions options, long sent, int skipped, long newRaw, Stopwatch clock, CancellationToken ct)
    {
        var latest = await tier.GetLatestAsync(manifest.Name, ct);
        if (latest is not null)
        {
            try
            {
                var (_, current) = await tier.ResolveAsync(manifest.Name, latest, ct);
                if (current.Hash == manifest.Hash && current.SegmentSize == manifest.SegmentSize && current.Segments.SequenceEqual(manifest.Segments) &&
                    (current.Files ?? []).SequenceEqual(manifest.Files ?? []) && current.LifetimeSeconds == manifest.LifetimeSeconds &&
                    Hpc.CommonData.Access.DatasetReaders.Same(current.Readers, manifest.Readers))
                {
                    logger.LogInformation("{Dataset}: content unchanged, latest stays {Version}", manifest.Name, latest);
                    return Result(manifest, latest, sent, skipped, unchanged: true, clock, newRaw);
                }
            }
            catch (Exception e) when (e is CommonDataException { Code: ErrorCode.NotFound or ErrorCode.Integrity } or InvalidDataException)
            {
                logger.LogWarning("{Dataset}: current latest {Version} is unreadable ({Reason}); publishing a new version", manifest.Name, latest, e.Message);
            }
        }
        var bytes = manifest.Serialize();
        var version = Manifest.VersionOf(bytes);
        var encoded = new byte[SegmentCodec.MaxEncodedLength(bytes.Length)];
        var n = SegmentCodec.Encode(bytes, encoded);
        await tier.PutManifestAsync(version, encoded.AsMemory(0, n), options.Lifetime, ct);
        // Only now, with every segment and the manifest stored, does "latest" move.
        await tier.SetLatestAsync(manifest.Name, version, ct);
        return Result(manifest, version, sent + n * (long)tier.Hosts.Count, skipped, unchanged: false, clock, newRaw);
    }

    private static StageResult Result(Manifest m, string version, long sent, int skipped, bool unchanged, Stopwatch clock, long newRaw) =>
        new(m.Name, version, m.RawLength, m.StoredLength, sent, m.Segments.Count, skipped, unchanged, clock.Elapsed.TotalSeconds, m.Hash, newRaw);
}
