using System.Collections.Concurrent;
using System.Diagnostics;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.NodeAgent;

/// <summary>
/// Makes versions local. Each version is fetched once however many ask at the same time; a partial copy left by an
/// interrupted fetch is resumed from its journal (entries re-verified), each segment is verified as it lands, the
/// whole copy is checked against the manifest's hash, made durable and read-only, and published by an atomic rename.
/// A fetch that failed on bad data (<see cref="ErrorCode.Integrity"/>) or a full disk (<see cref="ErrorCode.NoSpace"/>)
/// leaves nothing behind; one that failed otherwise (e.g. the cache tier went away) keeps its partial copy to resume.
/// A fetch writes only in its version's turn (<see cref="VersionWriters"/>), so it never writes beside an ingest of
/// the same version: it waits for the ingest to end and then fetches only what the journal does not hold. A partial
/// copy already on the node carries its verified manifest, so completing one whose segments are all here (ingested)
/// needs nothing from the cache tier. An ingest that delivers nothing for <paramref name="ingestStall"/> while a fetch
/// waits is abandoned (<see cref="VersionWriters"/>): the process feeding it may belong to anyone, and readers must not
/// wait on it. So is a slow one that a measured fetch of a few of its missing segments from the source shows this
/// fetch would clearly outpace (<see cref="SegmentIngest.AbandonIfOutpacedAsync"/>).
/// </summary>
public sealed class FetchCoordinator(DataDirectory directory, CopyIndex index, ISegmentSource source, FetchTelemetry telemetry, ILogger? log = null,
    VersionWriters? writers = null, TimeSpan? ingestStall = null)
{
    private readonly VersionWriters _writers = writers ?? new VersionWriters();

    private readonly ILogger _log = log ?? NullLogger.Instance;
    private readonly ConcurrentDictionary<string, Lazy<Task<Fetched>>> _fetches = new();

    /// <summary>A published copy, and whether its fetch resumed a partial copy (found some segments already on the node).</summary>
    /// <param name="ReusedBytes">Raw bytes taken from other versions' local copies instead of the cache tier (a delta).</param>
    /// <param name="ResumedBytes">Raw bytes of the segments already in the partial copy, verified and kept.</param>
    public sealed record Fetched(LocalCopy Copy, bool Resumed, long ReusedBytes = 0, long ResumedBytes = 0);

    /// <summary>
    /// The fetch of <paramref name="version"/>: joins the one in flight, or starts one. <paramref name="ct"/> ends only
    /// this caller's wait; the fetch goes on for the others (and for the node's next request).
    /// </summary>
    public Task<Fetched> FetchAsync(string name, string version, CancellationToken ct)
    {
        var fetch = _fetches.GetOrAdd(version, v => new Lazy<Task<Fetched>>(() => RunAsync(name, v)));
        return fetch.Value.WaitAsync(ct);
    }

    private async Task<Fetched> RunAsync(string name, string version)
    {
        try
        {
            await Task.Yield(); // the fetch runs on its own, not inside the first caller's GetOrAdd
            return await FetchAndPublishAsync(name, version);
        }
        finally
        {
            _fetches.TryRemove(version, out _);
        }
    }

    private async Task<Fetched> FetchAndPublishAsync(string name, string version)
    {
        var clock = Stopwatch.StartNew();
        using var turn = await _writers.AcquireAsync(version, CancellationToken.None, ingestStall ?? TimeSpan.FromSeconds(5), source);
        var existing = index.Find(version);
        if (existing is { Complete: true }) return new Fetched(existing, false); // published by a fetch that ended while this one waited
        var manifest = existing?.Manifest ?? await source.GetManifestAsync(name, version, CancellationToken.None);
        if (manifest.Name != name)
            throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{manifest.Name}', not '{name}'");
        // Copies already here that share segments with this version are leased before room is made for it, so eviction
        // does not take the very copies a delta would read; if the budget has no room with them kept, it fetches whole.
        var sources = index.LeaseComplete(c => c.Version != version && Shares(c, manifest));
        LocalCopy copy;
        try
        {
            copy = index.BeginFetch(version, manifest);
        }
        catch (CommonDataException e) when (e.Code == ErrorCode.NoSpace && sources.Count > 0)
        {
            ReleaseLeases(sources);
            sources = [];
            copy = index.BeginFetch(version, manifest);
        }
        try
        {
            if (existing is null || !File.Exists(directory.ManifestPath(version))) await directory.WriteManifestAsync(version, manifest);
            int resumed, reused = 0;
            long reusedBytes = 0, resumedBytes;
            using (var files = directory.CreatePartial(version, manifest))
            {
                var done = VerifiedJournalEntries(directory, version, manifest, files, index.TakeVerifiedHere(version));
                resumed = done.Count(d => d);
                resumedBytes = Enumerable.Range(0, done.Length).Where(i => done[i]).Sum(i => (long)manifest.Segments[i].RawLength);
                index.SetProgress(version, resumed, resumedBytes);
                await using var journal = directory.OpenJournal(version);
                var local = Stopwatch.StartNew();
                (reused, reusedBytes) = CopyFromLocalCopies(version, manifest, files, done, sources, journal);
                var wanted = Enumerable.Range(0, done.Length).Where(i => !done[i]).ToArray();
                _log.FetchStarted(name, version, wanted.Length, done.Length, resumed, reused, local.Elapsed.TotalSeconds);
                if (wanted.Length > 0) // all on the node (ingested, journaled before a restart, or in other versions): the cache tier is not asked
                {
                    var gate = new object();
                    await source.FetchAsync(manifest, version, files, wanted, i =>
                    {
                        lock (gate) DataDirectory.AppendJournal(journal, i);
                        index.SegmentDone(version, manifest.Segments[i].RawLength);
                    }, CancellationToken.None);
                }
                // On a disk data directory the bytes must be durable before the copy is published under its final name.
                // No second pass over the file: every segment in it was checked against its content id as it was written
                // (fetched, resumed from the journal or copied from another version), and the manifest naming those ids
                // hashes to the version id. Rehashing the whole copy cost a mapping of every page, a hash of every byte and
                // the mapping torn down, over a tenth of the agent's CPU per fetch; copies found at start-up are still rehashed whole.
                files.FlushToDisk();
            }
            ReleaseLeases(sources);
            sources = [];
            directory.Publish(version, manifest);
            index.Completed(version);
            _log.FetchPublished(name, version, manifest.RawLength, clock.Elapsed.TotalSeconds, ByteRate.Format(manifest.RawLength / Math.Max(1e-9, clock.Elapsed.TotalSeconds)));
            telemetry.Fetched(manifest, version, clock.Elapsed.TotalSeconds, resumed > 0 ? "resumed" : "fetched", reused, reusedBytes);
            AgentMetrics.Instance.FetchDuration.Record(clock.Elapsed.TotalSeconds);
            return new Fetched(copy, resumed > 0, reusedBytes, resumedBytes);
        }
        catch (Exception e)
        {
            ReleaseLeases(sources);
            sources = [];
            var error = CommonDataException.From(e);
            _log.FetchFailed(name, version, e.Message);
            index.EndFetch(version);
            if (error.Code is ErrorCode.Integrity or ErrorCode.NoSpace)
            {
                // Bad bytes are not worth resuming, and a partial copy on a full disk would only hold the space that the
                // next request needs: either way the copy goes, files and all.
                index.Remove(version);
            }
            if (error.Code == ErrorCode.NoSpace && e is not CommonDataException)
                throw new CommonDataException(ErrorCode.NoSpace,
                    $"dataset '{name}' version {version}: no space left in the data directory {directory.Root} ({e.Message}); the partial copy was removed", e);
            throw;
        }
    }

    /// <summary>Whether a local copy holds any segment of <paramref name="manifest"/> (sampled: a version sharing nothing is the common case to rule out fast).</summary>
    internal static bool Shares(LocalCopy copy, Manifest manifest)
    {
        var ids = manifest.SegmentIds;
        var step = Math.Max(1, ids.Count / 64);
        for (var i = 0; i < ids.Count; i += step)
            if (copy.SegmentIndex.ContainsKey(ids[i])) return true;
        return false;
    }

    private void ReleaseLeases(List<LocalCopy> sources) => ReleaseLeases(index, sources);

    internal static void ReleaseLeases(CopyIndex index, List<LocalCopy> sources)
    {
        foreach (var s in sources) index.Lease(s.Version, -1);
    }

    /// <summary>
    /// The delta: every segment still missing whose content id a leased local copy holds is copied from that copy's
    /// file and journaled, after its bytes are checked against the id (a copy damaged on disk since it was published is
    /// not trusted; that segment is fetched instead). Returns how many segments and raw bytes came from local copies.
    /// </summary>
    private (int Segments, long Bytes) CopyFromLocalCopies(string version, Manifest manifest, DatasetFiles target, bool[] done, List<LocalCopy> sources,
        FileStream journal) => CopyFromLocalCopies(directory, index, version, manifest, target, done, sources, journal);

    /// <inheritdoc cref="CopyFromLocalCopies(string, Manifest, DatasetFiles, bool[], List{LocalCopy}, FileStream)"/>
    /// <remarks>Also what an ingest begins with, so a fan-out carries only what no local version has.</remarks>
    internal static (int Segments, long Bytes) CopyFromLocalCopies(DataDirectory directory, CopyIndex index, string version, Manifest manifest,
        DatasetFiles target, bool[] done, List<LocalCopy> sources, FileStream journal)
    {
        if (sources.Count == 0) return (0, 0);
        var opened = new Dictionary<LocalCopy, DatasetFiles>();
        var buffer = System.Buffers.ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxRawLength);
        int segments = 0;
        long bytes = 0;
        try
        {
            var ids = manifest.SegmentIds;
            for (var i = 0; i < done.Length; i++)
            {
                if (done[i]) continue;
                foreach (var source in sources)
                {
                    if (!source.SegmentIndex.TryGetValue(ids[i], out var j)) continue;
                    if (!opened.TryGetValue(source, out var from))
                        opened[source] = from = directory.OpenComplete(source.Version, source.Manifest);
                    var length = manifest.Segments[i].RawLength;
                    var segment = buffer.AsSpan(0, length);
                    from.Read(segment, source.Manifest.Offsets[j]);
                    if (SegmentId.Of(segment) != ids[i]) continue;
                    target.Write(segment, manifest.Offsets[i]);
                    DataDirectory.AppendJournal(journal, i);
                    index.SegmentDone(version, length);
                    done[i] = true;
                    segments++;
                    bytes += length;
                    break;
                }
            }
        }
        finally
        {
            foreach (var f in opened.Values) f.Dispose();
            System.Buffers.ArrayPool<byte>.Shared.Return(buffer);
        }
        return (segments, bytes);
    }

    /// <summary>
    /// The segments a partial copy's journal records whose bytes still match their content ids: the journal may have
    /// reached the disk before the data did, so an entry alone proves nothing.
    /// </summary>
    /// <summary>
    /// The segments a partial copy's journal holds whose bytes in the file still hash to their ids. Entries this process
    /// verified itself (<paramref name="verifiedHere"/>, from an ingest that ended) are taken as they are; the others
    /// are read back and hashed on every core, as a resume after a restart needs all of them checked.
    /// </summary>
    internal static bool[] VerifiedJournalEntries(DataDirectory directory, string version, Manifest manifest, DatasetFiles files, bool[]? verifiedHere = null)
    {
        var done = new bool[manifest.Segments.Count];
        var check = new List<int>();
        var queued = new bool[done.Length];
        foreach (var i in directory.ReadJournal(version))
        {
            if (i < 0 || i >= done.Length || done[i] || queued[i]) continue;
            if (verifiedHere is not null && i < verifiedHere.Length && verifiedHere[i]) done[i] = true;
            else { queued[i] = true; check.Add(i); }
        }
        if (check.Count == 0) return done;
        Parallel.ForEach(System.Collections.Concurrent.Partitioner.Create(0, check.Count, Math.Max(16, check.Count / (4 * Environment.ProcessorCount))),
            () => System.Buffers.ArrayPool<byte>.Shared.Rent(SegmentCodec.MaxRawLength),
            (range, _, buffer) =>
            {
                for (var k = range.Item1; k < range.Item2; k++)
                {
                    var i = check[k];
                    var span = buffer.AsSpan(0, manifest.Segments[i].RawLength);
                    files.Read(span, manifest.Offsets[i]);
                    if (SegmentId.Of(span) == manifest.SegmentIds[i]) done[i] = true; // distinct i per iteration: no two threads write one slot
                }
                return buffer;
            },
            buffer => System.Buffers.ArrayPool<byte>.Shared.Return(buffer));
        return done;
    }
}
