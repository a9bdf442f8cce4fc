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
/// needs nothing from the cache tier.
/// </summary>
public sealed class FetchCoordinator(DataDirectory directory, CopyIndex index, ISegmentSource source, FetchTelemetry telemetry, ILogger? log = null,
    VersionWriters? writers = null)
{
    private readonly VersionWriters _writers = writers ?? new VersionWriters();

    private readonly ILogger _log = log ?? NullLogger.Instance;
    private readonly ConcurrentDictionary<string, Lazy<Task<Fetched>>> _fetches = new();

    /// <summary>A published copy, and whether its fetch resumed a partial copy (found some segments already on the node).</summary>
    public sealed record Fetched(LocalCopy Copy, bool Resumed);

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
        using var turn = await _writers.AcquireAsync(version, CancellationToken.None);
        var existing = index.Find(version);
        if (existing is { Complete: true }) return new Fetched(existing, false); // published by a fetch that ended while this one waited
        var manifest = existing?.Manifest ?? await source.GetManifestAsync(name, version, CancellationToken.None);
        if (manifest.Name != name)
            throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{manifest.Name}', not '{name}'");
        var copy = index.BeginFetch(version, manifest);
        var partial = directory.PartialPath(version);
        try
        {
            if (existing is null || !File.Exists(directory.ManifestPath(version))) await directory.WriteManifestAsync(version, manifest);
            await using (var f = new FileStream(partial, FileMode.OpenOrCreate, FileAccess.ReadWrite, FileShare.ReadWrite))
                if (f.Length != manifest.RawLength) f.SetLength(manifest.RawLength);
            int resumed;
            using (var map = MappedFile.Open(partial, manifest.RawLength, writable: true))
            using (var file = File.OpenHandle(partial, FileMode.Open, FileAccess.ReadWrite, FileShare.ReadWrite))
            {
                var done = VerifiedJournalEntries(directory, version, manifest, map);
                resumed = done.Count(d => d);
                index.SetProgress(version, resumed, Enumerable.Range(0, done.Length).Where(i => done[i]).Sum(i => (long)manifest.Segments[i].RawLength));
                var wanted = Enumerable.Range(0, done.Length).Where(i => !done[i]).ToArray();
                _log.LogInformation("Fetching {Dataset} {Version}: {Wanted} of {Total} segments ({Resumed} already on the node)",
                    name, version, wanted.Length, done.Length, resumed);
                if (wanted.Length > 0) // all on the node (ingested, or journaled before a restart): the cache tier is not asked
                {
                    await using var journal = directory.OpenJournal(version);
                    var gate = new object();
                    await source.FetchAsync(manifest, version, file, wanted, i =>
                    {
                        lock (gate) DataDirectory.AppendJournal(journal, i);
                        index.SegmentDone(version, manifest.Segments[i].RawLength);
                    }, CancellationToken.None);
                }
                // On a disk data directory the bytes must be durable before the copy is published under its final name.
                RandomAccess.FlushToDisk(file);
                if (!HashMatches(manifest, map))
                {
                    AgentMetrics.Instance.VerificationFailures.Add(1);
                    throw new CommonDataException(ErrorCode.Integrity, $"dataset '{name}' version {version}: whole-dataset hash mismatch after fetch");
                }
            }
            directory.Publish(version, manifest.Readers);
            index.Completed(version);
            _log.LogInformation("Published {Dataset} {Version}: {Bytes} bytes in {Seconds:0.00} s ({Rate:0} MB/s)",
                name, version, manifest.RawLength, clock.Elapsed.TotalSeconds, manifest.RawLength / 1e6 / Math.Max(1e-9, clock.Elapsed.TotalSeconds));
            telemetry.Fetched(manifest, version, clock.Elapsed.TotalSeconds, resumed > 0 ? "resumed" : "fetched");
            AgentMetrics.Instance.FetchDuration.Record(clock.Elapsed.TotalSeconds);
            return new Fetched(copy, resumed > 0);
        }
        catch (Exception e)
        {
            var error = CommonDataException.From(e);
            _log.LogError("Fetch of {Dataset} {Version} failed: {Error}", name, version, e.Message);
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

    private static unsafe bool HashMatches(Manifest m, MappedFile map) => SegmentFetcher.HashMatches(m, map.Pointer, map.Length);

    /// <summary>
    /// The segments a partial copy's journal records whose bytes still match their content ids: the journal may have
    /// reached the disk before the data did, so an entry alone proves nothing.
    /// </summary>
    internal static unsafe bool[] VerifiedJournalEntries(DataDirectory directory, string version, Manifest manifest, MappedFile map)
    {
        var done = new bool[manifest.Segments.Count];
        foreach (var i in directory.ReadJournal(version))
        {
            if (i < 0 || i >= done.Length || done[i]) continue;
            var span = new ReadOnlySpan<byte>(map.Pointer + manifest.Offsets[i], manifest.Segments[i].RawLength);
            if (SegmentId.Of(span) == manifest.SegmentIds[i]) done[i] = true;
        }
        return done;
    }
}
