using System.Buffers;
using System.Collections.Concurrent;
using System.Runtime.InteropServices;
using System.Diagnostics;
using System.Threading.Channels;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.Stager;

public sealed record StageOptions
{
    public required string Name { get; init; }
    public int SegmentSize { get; init; } = SegmentCodec.DefaultSegmentSize;
    public SegmentCompression Compression { get; init; } = SegmentCompression.Lz4;
    /// <summary>Choose the codec from a sample (<see cref="CodecChoice"/>); <see cref="Compression"/> is then ignored.</summary>
    public bool AutoCodec { get; init; }
    /// <summary>The nodes' link rate, for <see cref="AutoCodec"/>; null when not known.</summary>
    public ByteRate? LinkRate { get; init; }
    /// <summary>Cache-tier lifetime of the version; null keeps it until removed.</summary>
    public TimeSpan? Lifetime { get; init; }
    /// <summary>Who may read the version on a node; null: everyone.</summary>
    public Hpc.CommonData.Access.DatasetReaders? Readers { get; init; }
    public int Parallelism { get; init; } = Environment.ProcessorCount;
    /// <summary>Batches (a 4 MB slab's segments each) uploaded at once, each one pipelined exchange per host.</summary>
    public int Uploaders { get; init; } = 6;
    /// <summary>Content-defined boundaries (<see cref="ContentChunker"/>, the default) or fixed <see cref="SegmentSize"/> segments.</summary>
    public bool ContentDefined { get; init; } = true;
    /// <summary>Estimate the new stored bytes from a sample and refuse before sending when the tier cannot hold them.</summary>
    public bool CheckSpace { get; init; } = true;
    /// <summary>
    /// The life of the segments this stage sends until it publishes (renewed while it runs); publishing gives them the
    /// version's <see cref="Lifetime"/>. A stage that fails or is killed leaves nothing on the tier for longer.
    /// </summary>
    public TimeSpan UnpublishedLifetime { get; init; } = CacheKeys.UnpublishedLifetime;
    /// <summary>Publish an empty dataset read from standard input (refused otherwise).</summary>
    public bool AllowEmpty { get; init; }
}

public sealed record StageProgress(long RawBytes, long StoredBytes, int Segments, long? TotalBytes, TimeSpan Elapsed);

/// <summary>
/// Reads the source into slabs and cuts them into segments where they lie, compresses and hashes on all cores, uploads
/// each slab's segments as one pipelined batch per cache host (all hosts in parallel), skips segments the tier already
/// holds, and publishes atomically: "latest" moves only after every segment and the manifest are stored, so readers
/// never see a half-staged version.
/// </summary>
public sealed class StagingPipeline(CacheTierClient tier, ILogger logger)
{
    /// <summary>
    /// One slab of the source and the segments cut from it, handed from the reader to an encoder to an uploader and
    /// then reused: the hand-offs are per slab (tens of segments), not per segment, and nothing is allocated per
    /// segment. Segments stay where they were read; a segment stored raw is sent from the slab itself.
    /// </summary>
    private sealed class Batch(int slabLength, int maxSegments)
    {
        public readonly byte[] Slab = ArrayPool<byte>.Shared.Rent(slabLength);
        /// <summary>Headers and LZ4 payloads, back to back; a raw-stored segment has only its 24 header bytes here.</summary>
        public readonly byte[] Heads = ArrayPool<byte>.Shared.Rent(slabLength + maxSegments * (SegmentCodec.MaxHeadLength(0)));
        public readonly int[] Offset = new int[maxSegments];
        public readonly int[] Length = new int[maxSegments];
        public readonly int[] HeadOffset = new int[maxSegments];
        public readonly int[] HeadLength = new int[maxSegments];
        public readonly bool[] StoredRaw = new bool[maxSegments];
        public readonly SegmentId[] Ids = new SegmentId[maxSegments];
        public readonly bool[] Present = new bool[maxSegments];
        public readonly bool[] Held = new bool[maxSegments];
        /// <summary>Bytes the tier holds for a segment it already had: its stored form, in whichever codec stored it.</summary>
        public readonly long[] TierLength = new long[maxSegments];
        public readonly List<StoredSegmentParts> Send = new(maxSegments);
        public readonly List<int> SendIndex = new(maxSegments);
        /// <summary>Segment starts found by chunking from the slab's first byte as if a segment began there (content-defined only).</summary>
        public readonly int[] Guess = new int[maxSegments + 1];
        public int GuessCount;
        /// <summary>Place of the slab in the source, counted in slabs.</summary>
        public long Sequence;
        /// <summary>Bytes of the source in the slab: the tail of the slab before it, then what was read.</summary>
        public int DataLength;
        /// <summary>The source ends in this slab: every segment from the first start on is this slab's.</summary>
        public bool Last;
        /// <summary>Its segments are known (its boundaries stitched to the slab before it), so it is ready to encode.</summary>
        public bool Cut;
        /// <summary>Index in the dataset of the first segment.</summary>
        public int First;
        public int Count;

        public int StoredLength(int i) => StoredRaw[i] ? HeadLength[i] + Length[i] : HeadLength[i];

        public StoredSegmentParts Parts(int i) => new(Ids[i], Heads.AsMemory(HeadOffset[i], HeadLength[i]),
            StoredRaw[i] ? Slab.AsMemory(Offset[i], Length[i]) : ReadOnlyMemory<byte>.Empty);

        public void Release()
        {
            ArrayPool<byte>.Shared.Return(Slab);
            ArrayPool<byte>.Shared.Return(Heads);
        }
    }

    /// <summary>
    /// Batches in flight, and so the stager's memory: a few per encoder and uploader, each a slab and its encoded
    /// form. Taken last-in first-out, so the slab read next is one the caches saw most recently.
    /// </summary>
    private sealed class BatchPool(int limit, Func<Batch> create) : IDisposable
    {
        private readonly ConcurrentStack<Batch> _free = new();
        private readonly List<Batch> _all = [];
        private readonly SemaphoreSlim _slots = new(limit);

        public Batch Take(CancellationToken ct)
        {
            _slots.Wait(ct);
            if (_free.TryPop(out var b)) return b;
            b = create();
            lock (_all) _all.Add(b);
            return b;
        }

        public void Return(Batch b)
        {
            b.Count = 0;
            b.GuessCount = 0;
            b.Cut = false;
            b.Last = false;
            _free.Push(b);
            _slots.Release();
        }

        /// <summary>Only once every stage has stopped: a batch still being sent must not go back to the shared pool.</summary>
        public void Dispose()
        {
            foreach (var b in _all) b.Release();
            _all.Clear();
            _slots.Dispose();
        }
    }

    /// <summary>
    /// Source bytes whose segments a batch owns (those that start in them): big enough that hand-offs are rare, small
    /// enough that the slab is still in the caches when it is encoded. A slab holds one largest segment more, so each
    /// segment it owns lies whole in it.
    /// </summary>
    private const int RegionBytes = 4 << 20;
    /// <summary>Cap on the memory of all batches in flight, for very large fixed segments.</summary>
    private const long InFlightBytes = 64L << 20;

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
            await CollectAfterFailureAsync(sent, options);
            throw;
        }
    }

    /// <summary>
    /// How many new segments a stage has sent so far, and, once the version's segments may have been given the version's
    /// life, why (null while they still have the unpublished life), for the clean-up when it fails.
    /// </summary>
    private sealed class SentSegments { public int Count; public string? KeptBecause; public string? Unsure; }

    private async Task CollectAfterFailureAsync(SentSegments sent, StageOptions options)
    {
        // A cache host gives a version's segments the version's life as it takes the version's "latest" pointer, so until
        // one has, they keep the unpublished life. Once they may have the version's life (a host took the pointer, or a
        // tier that cannot do this had them given it before publishing), a writer cannot shorten it again (another
        // version may hold the same bytes), and saying they expire would tell the operator the memory comes back by
        // itself when it does not.
        var unpublishedFate = $"they expire within {Durations.Format((long)options.UnpublishedLifetime.TotalSeconds)} unless a stage publishes them";
        var fate = sent.Unsure is { } unsure ? $"on a host that took the version's latest pointer they have the version's life; elsewhere {unpublishedFate} (which hosts took it could not be told: {unsure})"
            : sent.KeptBecause is not { } because ? unpublishedFate
            : options.Lifetime is { } life ? $"{because}, so they expire within {Durations.Format((long)life.TotalSeconds)}, not sooner"
            : $"{because}, so they do not expire: an administrator's hpcdata gc frees those no version references";
        using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        try
        {
            var gc = await new SegmentCollector(tier, logger).CollectAsync(limit.Token);
            if (gc.Ran) logger.LogWarning("Staging failed after sending {Sent} new segments; freed {Deleted} segments no version references", sent.Count, gc.SegmentsDeleted);
            else logger.LogWarning("Staging failed after sending {Sent} new segments; {Fate} ({Reason})", sent.Count, fate, gc.SkippedBecause);
        }
        catch (Exception e) when (e is IOException or TimeoutException or OperationCanceledException or CommonDataException)
        {
            logger.LogWarning("Staging failed after sending {Sent} new segments; {Fate} (collecting them now failed: {Error})", sent.Count, fate, e.Message);
        }
    }

    private async Task<StageResult> StageCoreAsync(StageSource source, StageOptions options, IProgress<StageProgress>? progress, SentSegments sentSegments,
        CancellationToken ct)
    {
        DatasetName.Validate(options.Name);
        if (options.SegmentSize is < 4096 or > 16 << 20) throw new ArgumentOutOfRangeException(nameof(options), "segment size must be between 4 KB and 16 MB");
        if (options.UnpublishedLifetime < TimeSpan.FromSeconds(1)) throw new ArgumentOutOfRangeException(nameof(options), "the unpublished segments' lifetime must be at least 1 s");
        var clock = Stopwatch.StartNew();
        await tier.Catalog.CheckMayPublishAsync(options.Name, ct);
        // Held until "latest" has moved: a segment collection must not free segments this staging decided to reuse.
        await using var lease = await new SegmentCollector(tier, logger).BeginStagingAsync(ct: ct);
        // Whether the tier is likely to hold some of these segments: unknown (no sample) counts as yes.
        var tierMayHold = true;
        string? codecReason = null;
        if (options.AutoCodec)
        {
            var choice = CodecChoice.Choose(SampleSegments(source, options, CodecChoice.Samples), options.LinkRate, Math.Max(1, options.Parallelism));
            options = options with { Compression = choice.Compression };
            codecReason = choice.Reason;
            logger.LogInformation("Codec for {Dataset}: {Codec} ({Reason})", options.Name, choice.Compression, choice.Reason);
        }
        if (options.CheckSpace) tierMayHold = await CheckSpaceAsync(source, options, ct) ?? true;
        using var cts = CancellationTokenSource.CreateLinkedTokenSource(ct);

        var maxSegment = options.ContentDefined ? ContentChunker.MaxSize : options.SegmentSize;
        var minSegment = options.ContentDefined ? ContentChunker.MinSize : options.SegmentSize;
        var region = Math.Max(RegionBytes, 2 * maxSegment);
        var slabLength = region + maxSegment;
        var maxSegments = slabLength / minSegment + 2;
        var parallelism = Math.Max(1, options.Parallelism);
        var uploaderCount = Math.Max(1, options.Uploaders);
        var inFlight = (int)Math.Clamp(InFlightBytes / slabLength, 3, parallelism + uploaderCount + 2);
        using var pool = new BatchPool(inFlight, () => new Batch(slabLength, maxSegments));
        var toUpload = Channel.CreateUnbounded<Batch>(new UnboundedChannelOptions());

        var segments = new List<ManifestSegment?>();
        var hash = new XxHash.Streaming128();
        long storedTotal = 0, sentTotal = 0, newRawTotal = 0;
        int skipped = 0, done = 0, keptOtherEncoding = 0;
        // Look segments up before sending them only while the tier has been seen to hold some: on a fresh dataset the
        // STRLEN round trip finds nothing, and SET NX tells afterwards what was already there. One batch that turns out
        // to be held costs its bytes once; from then on batches are looked up again.
        var lookUpFirst = tierMayHold;
        // Until "latest" moves, what this stage sends lives only UnpublishedLifetime (or the version's shorter lifetime).
        var sendLife = options.Lifetime is { } own && own < options.UnpublishedLifetime ? own : options.UnpublishedLifetime;

        // Slabs go from the reader to the workers; each worker first finds the slab's boundaries as if a segment
        // started at its first byte (content-defined boundaries fall back in step with the true ones within a segment or
        // two), then whoever finishes the slab next in order stitches it to the one before — walking from the true start
        // until it meets a guessed boundary — and the slab comes back to be encoded. Only the stitch is in order, and it
        // costs a segment or two of a slab's 64, so the cutting grows with the cores as the encoding does.
        var work = Channel.CreateUnbounded<Batch>(new UnboundedChannelOptions());
        var stitch = new SlabStitch(options, region, segments, hash);
        long emitted = 0, slabsDone = 0;
        var readerDone = false;
        var flow = new object();
        void Finished(Batch batch)
        {
            lock (flow)
            {
                slabsDone++;
                if (readerDone && slabsDone == emitted) work.Writer.TryComplete();
            }
        }

        var reader = Task.Factory.StartNew(() =>
        {
            try
            {
                long read = 0;
                ReadSlabs(source, region, slabLength, pool, batch =>
                {
                    lock (flow) emitted++;
                    work.Writer.TryWrite(batch);
                }, ref read, cts.Token);
                if (source.KnownLength is { } expected && source.Files is not null && expected != read)
                    throw new SourceChangedException($"'{source.Description}' changed while being staged ({read} bytes read, {expected} listed)");
                lock (flow)
                {
                    readerDone = true;
                    if (slabsDone == emitted) work.Writer.TryComplete();
                }
            }
            catch (Exception e)
            {
                work.Writer.TryComplete(e);
                throw;
            }
        }, cts.Token, TaskCreationOptions.LongRunning, TaskScheduler.Default);

        // Workers run on threads of their own: a thread-pool worker busy compressing batch after batch would leave
        // the uploads' socket completions queued behind it until the pool injected another thread (with one core,
        // half a second each time), and the slabs those uploads hold would stall the reader.
        var encoders = Enumerable.Range(0, parallelism).Select(_ => Task.Factory.StartNew(() =>
        {
            var probe = true;
            void Encode(Batch batch)
            {
                var at = 0;
                for (var i = 0; i < batch.Count; i++)
                {
                    var raw = batch.Slab.AsSpan(batch.Offset[i], batch.Length[i]);
                    batch.Ids[i] = SegmentId.Of(raw);
                    var n = SegmentCodec.EncodeHeadInOrder(raw, batch.Heads.AsSpan(at), options.Compression, ref probe, out batch.StoredRaw[i]);
                    batch.HeadOffset[i] = at;
                    batch.HeadLength[i] = n;
                    at += n;
                }
                toUpload.Writer.TryWrite(batch);
                Finished(batch);
            }
            while (WaitToRead(work.Reader, cts.Token))
            {
                if (!work.Reader.TryRead(out var batch)) continue;
                if (batch.Cut)
                {
                    Encode(batch);
                    continue;
                }
                if (options.ContentDefined) SlabStitch.Guess(batch, region);
                Batch? encodeHere = null;
                foreach (var ready in stitch.Add(batch))
                {
                    if (ready.Count == 0)
                    {
                        pool.Return(ready);
                        Finished(ready);
                    }
                    // The slab this worker has just cut is still in its caches: it encodes it (usually the one
                    // stitched), and hands any others stitched with it to the workers.
                    else if (encodeHere is null && ReferenceEquals(ready, batch)) encodeHere = ready;
                    else work.Writer.TryWrite(ready);
                }
                if (encodeHere is not null) Encode(encodeHere);
            }
        }, cts.Token, TaskCreationOptions.LongRunning, TaskScheduler.Default)).ToArray();
        var encodersDone = Task.WhenAll(encoders).ContinueWith(t => toUpload.Writer.Complete(t.Exception?.GetBaseException()), TaskScheduler.Default);

        var uploaders = Enumerable.Range(0, uploaderCount).Select(_ => Task.Run(async () =>
        {
            await foreach (var batch in toUpload.Reader.ReadAllAsync(cts.Token))
            {
                try
                {
                    var ids = new ArraySegment<SegmentId>(batch.Ids, 0, batch.Count);
                    Array.Clear(batch.TierLength);
                    if (Volatile.Read(ref lookUpFirst)) await tier.StoredSegmentLengthsAsync(ids, batch.Present, batch.TierLength, cts.Token);
                    else Array.Clear(batch.Present);
                    // One replica holding it is not the tier holding it: that segment is sent, in this stage's codec.
                    for (var i = 0; i < batch.Count; i++)
                        if (!batch.Present[i]) batch.TierLength[i] = 0;
                    batch.Send.Clear();
                    batch.SendIndex.Clear();
                    for (var i = 0; i < batch.Count; i++)
                        if (!batch.Present[i]) { batch.Send.Add(batch.Parts(i)); batch.SendIndex.Add(i); }
                    Array.Clear(batch.Held);
                    if (batch.Send.Count > 0)
                    {
                        // Counted before the put: a put that fails half-way may have stored some of them.
                        Interlocked.Add(ref sentSegments.Count, batch.Send.Count);
                        var sent = await tier.PutSegmentsAsync(batch.Send, sendLife, batch.Held, cts.Token);
                        Interlocked.Add(ref sentTotal, sent);
                    }
                    int held = 0, otherEncoding = 0;
                    long newRaw = 0, stored = 0;
                    var heldBySet = new List<int>();
                    for (var k = 0; k < batch.SendIndex.Count; k++)
                    {
                        if (batch.Held[k]) heldBySet.Add(batch.SendIndex[k]);
                        else newRaw += batch.Length[batch.SendIndex[k]];
                    }
                    if (heldBySet.Count > 0) await LearnTierLengthsAsync(batch, heldBySet, cts.Token);
                    // A segment the tier already had stays as it is stored there (segments are immutable, and versions
                    // staged before read it as stored): the manifest and the summary give its length there, not the
                    // length this stage's codec would have made.
                    for (var i = 0; i < batch.Count; i++)
                    {
                        if (batch.TierLength[i] > 0)
                        {
                            held++;
                            if (batch.TierLength[i] != batch.StoredLength(i)) otherEncoding++;
                        }
                        stored += batch.TierLength[i] > 0 ? batch.TierLength[i] : batch.StoredLength(i);
                    }
                    Volatile.Write(ref lookUpFirst, held > 0);
                    Interlocked.Add(ref newRawTotal, newRaw);
                    Interlocked.Add(ref skipped, held);
                    Interlocked.Add(ref keptOtherEncoding, otherEncoding);
                    lock (segments)
                        for (var i = 0; i < batch.Count; i++)
                            segments[batch.First + i] = new ManifestSegment(batch.Ids[i].ToString(), batch.Length[i],
                                batch.TierLength[i] > 0 ? (int)batch.TierLength[i] : batch.StoredLength(i));
                    var storedSoFar = Interlocked.Add(ref storedTotal, stored);
                    var count = Interlocked.Add(ref done, batch.Count);
                    progress?.Report(new StageProgress(stitch.RawBytes, storedSoFar, count, source.KnownLength, clock.Elapsed));
                }
                finally
                {
                    pool.Return(batch);
                }
            }
        }, cts.Token)).ToArray();

        string datasetHash;
        long rawTotal;
        using var stopRenewal = CancellationTokenSource.CreateLinkedTokenSource(cts.Token);
        var renewal = RenewWhileStagingAsync(segments, options.UnpublishedLifetime, stopRenewal.Token);
        try
        {
            await WhenAllOrFirstFailure(cts, uploaders.Append(reader).Append(encodersDone).Concat(encoders).ToArray());
            datasetHash = hash.Digest().ToString("x32");
            rawTotal = stitch.RawBytes;
        }
        finally
        {
            hash.Dispose();
            stopRenewal.Cancel();
            await renewal;
        }
        source.CheckUnchanged();
        if (source.IsStandardInput && rawTotal == 0 && !options.AllowEmpty)
            throw new CommonDataException(ErrorCode.BadRequest, "standard input was empty: nothing was published (--allow-empty stages an empty dataset)");
        var finished = segments.Select(x => x!).ToList();
        // Hosts that give a version's segments its life as they take its pointer leave them the unpublished life until
        // then (renewed here, so none expires before the pointer moves); on any other tier (redis-server, a Redis
        // Cluster, an older cache host) the stage gives them the version's life itself, before publishing, so that a
        // published version never references a segment that expires.
        var hostsKeep = await tier.PublishKeepsSegmentsAsync(ct);
        if (!hostsKeep)
            sentSegments.KeptBecause = "this cache tier does not give a version's segments its life as it publishes it (redis-server, a Redis Cluster, " +
                                       "an older cache host): they had been given the version's life before publishing";
        var (resent, resentBytes) = await KeepSegmentsAsync(source, options, finished, sendLife, hostsKeep ? sendLife : options.Lifetime, published: null, ct);
        if (resent > 0)
        {
            sentTotal += resentBytes;
            storedTotal = finished.Sum(x => (long)x.StoredLength);
        }
        var manifest = new Manifest
        {
            Name = options.Name, Created = DateTimeOffset.UtcNow, LifetimeSeconds = (long?)options.Lifetime?.TotalSeconds,
            RawLength = rawTotal, StoredLength = storedTotal, Hash = datasetHash,
            SegmentSize = options.ContentDefined ? ContentChunker.AverageSize : options.SegmentSize, Chunking = options.ContentDefined ? ContentChunker.Name : null,
            Segments = finished, Files = source.Files, Readers = options.Readers,
        };
        var result = await PublishAsync(manifest, options, sentTotal, skipped, newRawTotal, clock, hostsKeep ? sentSegments : null, cts.Token);
        sentSegments.KeptBecause = "the version was published, which gave them its life";
        if (hostsKeep)
        {
            // Each host gave the segments it held their life as it took the pointer; one that expired in the moments
            // before (or was lost with a host's restart) is sent again now, with the version's life.
            var (late, lateBytes) = await KeepSegmentsAsync(source, options, finished, options.Lifetime, options.Lifetime, published: result.Version, ct);
            if (late > 0) result = result with { SentBytes = result.SentBytes + lateBytes };
        }
        return result with { Codec = options.Compression.ToString(), CodecReason = codecReason, KeptInOtherEncoding = keptOtherEncoding };
    }

    /// <summary>
    /// Renews the life of the segments staged so far at a quarter of <paramref name="life"/>, so a stage that runs for
    /// hours does not lose its first segments before it publishes. A failed renewal is only logged: the keeping before
    /// publishing finds and sends again whatever expired.
    /// </summary>
    private async Task RenewWhileStagingAsync(List<ManifestSegment?> segments, TimeSpan life, CancellationToken ct)
    {
        try
        {
            while (true)
            {
                await Task.Delay(life / 4, ct);
                SegmentId[] ids;
                lock (segments) ids = segments.Where(x => x is not null).Select(x => SegmentId.Parse(x!.Id)).Distinct().ToArray();
                try
                {
                    await tier.KeepSegmentsAsync(ids, life, new bool[ids.Length], ct);
                }
                catch (Exception e) when (e is IOException or TimeoutException or CommonDataException)
                {
                    logger.LogWarning("Could not renew the life of {Count} segments staged so far: {Error}", ids.Length, e.Message);
                }
            }
        }
        catch (OperationCanceledException) { }
    }

    /// <summary>
    /// Gives every segment of the version at least <paramref name="keepLife"/> (null: until removed), never shortening a
    /// longer one. This covers the segments found already held too, which may be another stage's unpublished ones and
    /// expire otherwise. A segment a replica host no longer holds (expired, or lost with a restart) is read again from
    /// the source and sent with <paramref name="sendLife"/>; one that cannot be (standard input) fails the stage.
    /// <paramref name="published"/>: null before publishing, else the version published (whose manifest lists the
    /// segments already). Returns the segments and bytes sent again.
    /// </summary>
    private async Task<(int Segments, long Bytes)> KeepSegmentsAsync(StageSource source, StageOptions options, List<ManifestSegment> segments,
        TimeSpan? sendLife, TimeSpan? keepLife, string? published, CancellationToken ct)
    {
        var first = new Dictionary<SegmentId, (long Offset, int Length)>();
        long offset = 0;
        foreach (var s in segments)
        {
            first.TryAdd(SegmentId.Parse(s.Id), (offset, s.RawLength));
            offset += s.RawLength;
        }
        var ids = first.Keys.ToArray();
        var missing = new bool[ids.Length];
        await tier.KeepSegmentsAsync(ids, keepLife, missing, ct);
        var lost = Enumerable.Range(0, ids.Length).Where(i => missing[i]).ToList();
        if (lost.Count == 0) return (0, 0);
        if (published is null)
            logger.LogWarning("{Dataset}: {Count} segments expired or were lost from the cache tier before publishing; sending them again", options.Name, lost.Count);
        else
            logger.LogWarning("{Dataset}: {Count} segments of version {Version} expired or were lost from the cache tier as it was published; sending them again",
                options.Name, lost.Count, published);
        var unpublished = published is null ? "nothing was published" : $"version {published} was published without it";
        var rawLength = segments.Max(s => s.RawLength);
        var raw = ArrayPool<byte>.Shared.Rent(rawLength);
        var parts = new List<StoredSegmentParts>(lost.Count);
        var storedLength = new Dictionary<SegmentId, int>();
        try
        {
            foreach (var i in lost)
            {
                var (at, length) = first[ids[i]];
                var bytes = raw.AsSpan(0, length);
                for (var done = 0; done < length;)
                {
                    var n = source.ReadAt(at + done, bytes[done..]);
                    if (n <= 0)
                        throw new CommonDataException(ErrorCode.Unavailable,
                            $"segment {ids[i]} of '{options.Name}' is no longer on the cache tier and {source.Description} cannot be read again; {unpublished}, stage again");
                    done += n;
                }
                if (SegmentId.Of(bytes) != ids[i]) throw new SourceChangedException($"'{source.Description}' changed while being staged (segment {ids[i]} reads differently now)");
                var stored = new byte[SegmentCodec.MaxEncodedLength(length)];
                var n2 = SegmentCodec.Encode(bytes, stored, options.Compression);
                parts.Add(new StoredSegmentParts(ids[i], stored.AsMemory(0, n2), default));
                storedLength[ids[i]] = n2;
            }
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(raw);
        }
        var sent = await tier.PutSegmentsAsync(parts, sendLife, null, ct);
        var again = parts.Select(p => p.Id).ToArray();
        var stillMissing = new bool[again.Length];
        await tier.KeepSegmentsAsync(again, keepLife, stillMissing, ct);
        if (Array.IndexOf(stillMissing, true) is var k and >= 0)
            throw new CommonDataException(ErrorCode.Unavailable, $"segment {again[k]} of '{options.Name}' could not be kept on the cache tier; {unpublished}");
        // A published manifest is as it was sent: the segment's bytes are what its id names, whichever their length.
        if (published is null)
            for (var i = 0; i < segments.Count; i++)
                if (SegmentId.Parse(segments[i].Id) is var id && storedLength.TryGetValue(id, out var n))
                    segments[i] = segments[i] with { StoredLength = n };
        return (parts.Count, sent);
    }

    /// <summary>
    /// How the tier stores segments that SET NX found it held already (sent without a look-up first): one STRLEN batch,
    /// only for a batch where that happened.
    /// </summary>
    private async Task LearnTierLengthsAsync(Batch batch, List<int> held, CancellationToken ct)
    {
        var ids = held.Select(i => batch.Ids[i]).ToArray();
        var present = new bool[ids.Length];
        var lengths = new long[ids.Length];
        await tier.StoredSegmentLengthsAsync(ids, present, lengths, ct);
        for (var k = 0; k < held.Count; k++)
            batch.TierLength[held[k]] = lengths[k] > 0 ? lengths[k] : batch.StoredLength(held[k]);
    }

    private const int SpaceSamples = 32;

    /// <summary>
    /// Up to <paramref name="count"/> segments spread evenly over the source, cut as the stager cuts them: what the space
    /// check and the codec choice estimate from. Empty when the source's length is not known (standard input).
    /// </summary>
    private static List<byte[]> SampleSegments(StageSource source, StageOptions options, int count)
    {
        var result = new List<byte[]>();
        if (source.KnownLength is not { } length || length == 0) return result;
        var unit = options.ContentDefined ? ContentChunker.AverageSize : options.SegmentSize;
        var segmentCount = (length + unit - 1) / unit;
        var windows = (int)Math.Min(count, segmentCount);
        // Content-defined boundaries depend on where chunking started: from an arbitrary offset they fall into step with
        // the stager's after a cut or two, so the sample is the third segment found in a window.
        var read = options.ContentDefined ? 5 * ContentChunker.MaxSize : options.SegmentSize;
        var input = ArrayPool<byte>.Shared.Rent(read);
        try
        {
            for (var w = 0; w < windows; w++)
            {
                var n = source.ReadAt(w * segmentCount / windows * unit, input.AsSpan(0, read));
                if (n <= 0) break;
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
                result.Add(segment.ToArray());
            }
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(input);
        }
        return result;
    }

    /// <summary>
    /// Refuses, before anything is sent, a stage the cache tier clearly cannot hold: 32 segments spread over the source
    /// are encoded and looked up, which estimates both the compression ratio and how much the tier already has; the
    /// estimate of new stored bytes (× replicas, plus each entry's overhead) is compared with the hosts' free budget.
    /// Only a clear shortfall (the estimate's 90% does not fit) is refused; the hosts still refuse any write past
    /// their budget, so a wrong estimate costs a later failure, never data. Returns whether the tier held any of the
    /// sample, or null when there was no sample.
    /// </summary>
    private async Task<bool?> CheckSpaceAsync(StageSource source, StageOptions options, CancellationToken ct)
    {
        if (source.KnownLength is not { } length || length == 0) return null;
        var memory = await tier.GetMemoryAsync(ct);
        if (memory.Any(m => m.Max <= 0)) return null; // a host without a limit (a Redis without maxmemory) cannot say
        var unit = options.ContentDefined ? ContentChunker.AverageSize : options.SegmentSize;
        var segmentCount = (length + unit - 1) / unit;
        var sampled = SampleSegments(source, options, SpaceSamples);
        if (sampled.Count == 0) return null;
        var output = ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxEncodedLength(Math.Max(options.SegmentSize, ContentChunker.MaxSize)));
        var samples = new List<(SegmentId Id, int Raw, int Stored)>();
        try
        {
            foreach (var segment in sampled) samples.Add((SegmentId.Of(segment), segment.Length, SegmentCodec.Encode(segment, output, options.Compression)));
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(output);
        }
        var present = await tier.ContainsSegmentsAsync(samples.Select(s => s.Id).ToArray(), ct);
        double raw = samples.Sum(s => (double)s.Raw);
        double newStored = samples.Where((s, i) => !present[i]).Sum(s => (double)s.Stored);
        double newFraction = samples.Count(s => true) == 0 ? 0 : samples.Where((s, i) => !present[i]).Count() / (double)samples.Count;
        var needed = (long)((length * newStored / raw + segmentCount * newFraction * 192) * tier.Replicas);
        var free = memory.Sum(m => Math.Max(0, m.Max - m.Used));
        if (needed * 0.9 <= free) return present.Any(p => p);
        throw new CommonDataException(ErrorCode.NoSpace,
            $"the cache tier has {ByteSize.Format(free)} free ({string.Join(", ", memory.Select(m => $"{m.Host} {ByteSize.Format(Math.Max(0, m.Max - m.Used))} of {ByteSize.Format(m.Max)}"))}); " +
            $"staging '{options.Name}' needs about {ByteSize.Format(needed)} more (a sample of {samples.Count} segments: stored {newStored / Math.Max(1, raw):P0} of raw as new, " +
            $"{1 - newFraction:P0} already held; {tier.Replicas} replica(s)). Nothing was sent. Remove versions (hpcdata remove), collect (hpcdata gc), " +
            "add hosts or memory, or stage with --no-space-check to try anyway");
    }

    /// <summary>
    /// Reads the source into slabs in order: each begins with what the slab before it held past its region (at most one
    /// largest segment, copied), then <paramref name="region"/> bytes more are read. That copy is the only one before the
    /// segments are sent.
    /// </summary>
    private static void ReadSlabs(StageSource source, int region, int slabLength, BatchPool pool, Action<Batch> emit, ref long read, CancellationToken ct)
    {
        var batch = pool.Take(ct);
        batch.DataLength = 0;
        for (long sequence = 0; ; sequence++)
        {
            ct.ThrowIfCancellationRequested();
            var head = batch.DataLength;
            var n = source.ReadBlock(batch.Slab.AsSpan(head, slabLength - head));
            read += n;
            batch.DataLength = head + n;
            batch.Sequence = sequence;
            batch.Last = batch.DataLength < slabLength;
            if (batch.Last)
            {
                emit(batch);
                return;
            }
            var next = pool.Take(ct);
            batch.Slab.AsSpan(region, slabLength - region).CopyTo(next.Slab);
            next.DataLength = slabLength - region;
            emit(batch);
            batch = next;
        }
    }

    /// <summary>
    /// Joins slabs cut independently into one sequence of segments, in the source's order: the segments a slab owns are
    /// those that start in its region, from where the slab before it ended its last one. Also appends what it owns to
    /// the dataset hash and numbers its segments in the manifest, both of which need the order.
    /// </summary>
    private sealed class SlabStitch(StageOptions options, int region, List<ManifestSegment?> segments, XxHash.Streaming128 hash)
    {
        private readonly Dictionary<long, Batch> _waiting = [];
        private long _next;
        // Where the next slab's first segment starts, in that slab.
        private int _start;
        private long _raw;

        /// <summary>Source bytes cut into segments so far.</summary>
        public long RawBytes => Volatile.Read(ref _raw);

        /// <summary>
        /// Content-defined boundaries from the slab's first byte to the end of its region (the last one at or past it):
        /// right from the first start the true sequence shares with them.
        /// </summary>
        public static void Guess(Batch batch, int region)
        {
            var end = batch.Last ? batch.DataLength : region;
            var at = 0;
            var k = 0;
            while (at < end)
            {
                batch.Guess[k++] = at;
                at += NextCut(batch, at);
            }
            batch.Guess[k++] = at;
            batch.GuessCount = k;
        }

        /// <summary>Takes a slab whose boundaries were guessed; returns those, in order, that can now be cut.</summary>
        public List<Batch> Add(Batch batch)
        {
            var ready = new List<Batch>(1);
            lock (_waiting)
            {
                _waiting.Add(batch.Sequence, batch);
                while (_waiting.Remove(_next, out var b))
                {
                    Cut(b);
                    ready.Add(b);
                    _next++;
                }
            }
            return ready;
        }

        private void Cut(Batch b)
        {
            var end = b.Last ? b.DataLength : region;
            var at = _start;
            var g = 0;
            var inStep = false;
            b.Count = 0;
            while (at < end)
            {
                if (!inStep && b.GuessCount > 0)
                {
                    while (g < b.GuessCount && b.Guess[g] < at) g++;
                    inStep = g < b.GuessCount - 1 && b.Guess[g] == at;
                }
                int length;
                if (inStep) length = b.Guess[g + 1] - b.Guess[g++];
                else if (options.ContentDefined) length = NextCut(b, at);
                else length = Math.Min(options.SegmentSize, b.DataLength - at);
                b.Offset[b.Count] = at;
                b.Length[b.Count] = length;
                b.Count++;
                at += length;
            }
            hash.Append(b.Slab.AsSpan(_start, at - _start));
            Volatile.Write(ref _raw, _raw + (at - _start));
            _start = b.Last ? 0 : at - region;
            b.Cut = true;
            lock (segments)
            {
                b.First = segments.Count;
                CollectionsMarshal.SetCount(segments, segments.Count + b.Count);
            }
        }

        private static int NextCut(Batch b, int at)
        {
            var cut = ContentChunker.Default.NextCut(b.Slab.AsSpan(at, b.DataLength - at), final: b.Last);
            // Outside the last slab a segment that starts in the region always has a largest segment's bytes after it.
            if (cut <= 0) throw new InvalidOperationException($"no segment boundary after {at} of a slab of {b.DataLength} bytes");
            return cut;
        }
    }

    /// <summary>Blocks a dedicated thread until the channel has an item (true) or is complete (false).</summary>
    private static bool WaitToRead<T>(ChannelReader<T> reader, CancellationToken ct)
    {
        var wait = reader.WaitToReadAsync(ct);
        return wait.IsCompletedSuccessfully ? wait.Result : wait.AsTask().GetAwaiter().GetResult();
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

    /// <param name="hostsKeep">
    /// Given where the hosts give the version's segments its life as they take its pointer: when moving the pointer
    /// fails, whether some host took it anyway (then that life is given here too, and noted for the failure's report).
    /// </param>
    private async Task<StageResult> PublishAsync(Manifest manifest, StageOptions options, long sent, int skipped, long newRaw, Stopwatch clock,
        SentSegments? hostsKeep, CancellationToken ct)
    {
        var latest = await tier.GetLatestAsync(manifest.Name, ct);
        if (latest is not null)
        {
            try
            {
                var (_, current, currentBytes) = await tier.Catalog.ResolveWithBytesAsync(manifest.Name, latest, ct);
                if (current.Hash == manifest.Hash && current.SegmentSize == manifest.SegmentSize && current.Segments.SequenceEqual(manifest.Segments) &&
                    (current.Files ?? []).SequenceEqual(manifest.Files ?? []) && current.LifetimeSeconds == manifest.LifetimeSeconds &&
                    Hpc.CommonData.Access.DatasetReaders.Same(current.Readers, manifest.Readers))
                {
                    logger.LogInformation("{Dataset}: content unchanged, latest stays {Version}", manifest.Name, latest);
                    // Unchanged is no reason to leave a host without it: one restarted empty, added, or down at the
                    // last stage gets the manifest and pointer now (its segments were sent above, as for any host
                    // that lacked them).
                    var repaired = await tier.Catalog.RepairAsync(manifest.Name, latest, Encode(currentBytes), options.Lifetime, ct);
                    foreach (var host in repaired) logger.LogWarning("{Dataset}: {Host} lacked version {Version}'s manifest or latest pointer; restored", manifest.Name, host, latest);
                    return Result(manifest, latest, sent, skipped, unchanged: true, clock, newRaw) with { RepairedHosts = [.. repaired.Select(h => h.ToString())] };
                }
            }
            catch (Exception e) when (e is CommonDataException { Code: ErrorCode.NotFound or ErrorCode.Integrity } or InvalidDataException)
            {
                logger.LogWarning("{Dataset}: current latest {Version} is unreadable ({Reason}); publishing a new version", manifest.Name, latest, e.Message);
            }
        }
        var bytes = manifest.Serialize();
        var version = Manifest.VersionOf(bytes);
        var encoded = Encode(bytes);
        var n = encoded.Length;
        await tier.PutManifestAsync(version, encoded, options.Lifetime, ct);
        // Only now, with every segment and the manifest stored, does "latest" move.
        try
        {
            await tier.SetLatestAsync(manifest.Name, version, ct);
        }
        catch (Exception) when (hostsKeep is not null)
        {
            await KeepIfVisibleAsync(manifest, version, options, hostsKeep);
            throw;
        }
        return Result(manifest, version, sent + n * (long)tier.Hosts.Count, skipped, unchanged: false, clock, newRaw);
    }

    /// <summary>
    /// After the pointer was refused somewhere: where some host took it all the same, readers may be given the version,
    /// so every segment gets the version's life on every host that answers (that host gave its own already). Where
    /// none took it, the segments keep the unpublished life. Best effort: the stage fails anyway.
    /// </summary>
    private async Task KeepIfVisibleAsync(Manifest manifest, string version, StageOptions options, SentSegments sent)
    {
        using var limit = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        try
        {
            var pointers = await tier.Catalog.LatestByHostAsync(manifest.Name, limit.Token);
            if (!pointers.Any(p => p.Version == version)) return;
            sent.KeptBecause = $"a cache host took version {version}'s latest pointer, which gives them the version's life";
            var ids = manifest.SegmentIds.Distinct().ToArray();
            await tier.KeepSegmentsAsync(ids, options.Lifetime, new bool[ids.Length], limit.Token);
        }
        catch (Exception e) when (e is IOException or TimeoutException or OperationCanceledException or CommonDataException)
        {
            if (sent.KeptBecause is null) sent.Unsure = e.Message;
            logger.LogWarning("{Dataset}: after its latest pointer was refused, giving version {Version}'s segments its life failed: {Error}", manifest.Name, version, e.Message);
        }
    }

    private static byte[] Encode(byte[] manifest)
    {
        var encoded = new byte[SegmentCodec.MaxEncodedLength(manifest.Length)];
        return encoded[..SegmentCodec.Encode(manifest, encoded)];
    }

    private static StageResult Result(Manifest m, string version, long sent, int skipped, bool unchanged, Stopwatch clock, long newRaw) =>
        new(m.Name, version, m.RawLength, m.StoredLength, sent, m.Segments.Count, skipped, unchanged, clock.Elapsed.TotalSeconds, m.Hash, newRaw);
}
