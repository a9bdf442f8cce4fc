using Hpc.CommonData.Agent;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Win32.SafeHandles;

namespace Hpc.NodeAgent;

/// <summary>
/// One ingest: stored segments of a version handed to the agent by a process on the node (node preparation receiving
/// them from other nodes), written into the version's partial copy exactly as a fetch writes it. Each segment is
/// verified as a fetched one is (<see cref="SegmentFetcher.TryWriteSegment"/>: checksum, decode, raw length, content
/// id) and only then written at its offset and appended to the journal; a rejected one is neither. The ingest holds the
/// version's writer turn from <see cref="BeginAsync"/> to <see cref="Dispose"/>, so no fetch writes the same copy
/// meanwhile, and its copy is marked as ingesting, so it is not evicted. It never publishes: the next fetch of the
/// version (prefetch or open) resumes from the journal, asks the cache tier only for what is still missing — nothing
/// when every segment arrived — verifies the whole copy and publishes it.
/// <para>A fetch of the version waiting for the turn abandons an ingest that delivered no segment for the stall timeout,
/// or fewer bytes than its least rate over a window of that length
/// (<see cref="VersionWriters.IStallable"/>): <see cref="Abandoned"/> is then cancelled, and whoever feeds the ingest
/// ends it, passing the turn to the fetch. It also abandons one that delivers more than that but so little that the
/// fetch's own copy from the cache tier, measured then and there, would finish clearly sooner
/// (<see cref="AbandonIfOutpacedAsync"/>).</para>
/// </summary>
public sealed class SegmentIngest : IDisposable, VersionWriters.IStallable
{
    /// <summary>How many rejection reasons the final report carries.</summary>
    public const int MaxReasons = 5;

    /// <summary>
    /// An ingest that delivered less than this many times its least rate over a window (4 MiB/s with the default
    /// --ingest-min-rate) is compared with the waiting fetch's own rate; one that delivered more is taken for a healthy
    /// fan-out and never probed, so healthy fan-outs cost the cache tier nothing: a fan-out link of a compute node
    /// carries hundreds of times that.
    /// </summary>
    public const int ProbeBelowLeastRates = 16;

    /// <summary>
    /// How many times sooner the fetch's own projected finish must be than the ingest's for the ingest to be abandoned.
    /// The probe is measured while the ingest still uses the node's link: when that link is what bounds both, the two
    /// share it and the probe measures about the ingest's rate or less, never twice it. Only an ingest held back by
    /// something else (its sender, the fan-out peer's link) falls short by a factor of two, and only then do the
    /// readers gain enough to leave a fan-out for the cache tier.
    /// </summary>
    public const double OutpaceMargin = 2;

    /// <summary>The probe: missing segments fetched from the cache tier until this many stored bytes, or <see cref="ProbeMaxSegments"/>.</summary>
    public const long ProbeBytes = 1 << 20;

    /// <inheritdoc cref="ProbeBytes"/>
    public const int ProbeMaxSegments = 16;

    private readonly CopyIndex? _index;
    private readonly ILogger _log;
    private readonly VersionWriters.Held? _turn;
    private readonly CancellationTokenSource _abandoned = new();
    /// <summary>When the last segment arrived (or the ingest began), in <see cref="Environment.TickCount64"/> milliseconds.</summary>
    private long _lastProgress = Environment.TickCount64;
    /// <summary>Stored bytes accepted so far, and where the current measuring window began (tick, bytes then).</summary>
    private long _bytes, _windowStart = Environment.TickCount64, _windowBytes;
    private readonly long _minBytesPerSecond;
    /// <summary>Stored bytes per second delivered over the last whole window, or -1 when none was measured since the last probe.</summary>
    private double _lastWindowRate = -1;
    private int _probing;
    private readonly string? _partialPath;
    private readonly Lock _window = new();
    private readonly DatasetFiles? _file;
    private readonly FileStream? _journal;
    private readonly bool[] _have;
    /// <summary>Guards what several accepting threads share: the bitmaps, the counts, the reasons, the journal.</summary>
    private readonly Lock _gate = new();
    private readonly List<string> _reasons = [];
    private byte[]? _rejectedBits;
    private int _missing, _accepted, _alreadyHad, _rejected;
    private CommonDataException? _failure;
    private bool _disposed;

    private SegmentIngest(string version, Manifest manifest, bool complete, ILogger log, CopyIndex? index = null, VersionWriters.Held? turn = null,
        DatasetFiles? file = null, FileStream? journal = null, bool[]? have = null, long minBytesPerSecond = 0, string? partialPath = null)
    {
        (Version, Manifest, Complete, _log, _index, _turn, _file, _journal, _partialPath) = (version, manifest, complete, log, index, turn, file, journal, partialPath);
        _minBytesPerSecond = Math.Max(0, minBytesPerSecond);
        _have = have ?? [];
        _missing = complete ? 0 : _have.Count(h => !h);
    }

    public string Version { get; }
    public Manifest Manifest { get; }

    /// <summary>The version was already published on the node when the ingest began: nothing is written.</summary>
    public bool Complete { get; }

    /// <summary>Cancelled when a waiting fetch abandoned this ingest for making no progress.</summary>
    public CancellationToken Abandoned => _abandoned.Token;

    /// <summary>Why the ingest was abandoned when a waiting fetch's own measured rate outpaced it; null otherwise.</summary>
    public string? Outpaced { get; private set; }

    /// <summary>Segments a waiting fetch's probes fetched from the cache tier into this ingest's copy.</summary>
    public int Probed { get; private set; }

    /// <summary>
    /// Abandons the ingest when, while a fetch waits, it delivered nothing for <paramref name="stall"/>, or less than its
    /// least rate over a whole window of that length: progress is bytes, so one segment now and then does not count as
    /// steady.
    /// </summary>
    public bool AbandonIfStalled(TimeSpan stall)
    {
        var now = Environment.TickCount64;
        var window = (long)stall.TotalMilliseconds;
        var silent = now - Volatile.Read(ref _lastProgress) >= window;
        var slow = false;
        lock (_window)
        {
            var elapsed = now - _windowStart;
            if (elapsed >= window)
            {
                var delivered = Interlocked.Read(ref _bytes) - _windowBytes;
                slow = delivered * 1000 < _minBytesPerSecond * elapsed;
                _lastWindowRate = delivered * 1000.0 / elapsed;
                (_windowStart, _windowBytes) = (now, Interlocked.Read(ref _bytes));
            }
        }
        if (!silent && !slow) return false;
        try { _abandoned.Cancel(); }
        catch (ObjectDisposedException) { return false; }
        return true;
    }

    /// <summary>
    /// Asked by a waiting fetch after <see cref="AbandonIfStalled"/> kept the ingest. When the ingest delivered less than
    /// <see cref="ProbeBelowLeastRates"/> times its least rate over the last window and would not finish within another
    /// window at that rate, the fetch measures its own rate now: it fetches a few segments the ingest still lacks (the
    /// last ones, furthest from what the sender is sending) from <paramref name="source"/> for at most one window,
    /// each verified and written into this copy and journaled as an ingested one is (nothing unverified is kept, and
    /// nobody is served from the copy before the fetch verifies and publishes it). When the fetch's projected finish at
    /// that rate is at least <see cref="OutpaceMargin"/> times sooner than the ingest's, the ingest is abandoned
    /// (<see cref="Outpaced"/> says why); otherwise it goes on and the next window asks again. Each decision is logged
    /// once with both rates. A probe that fails (the tier is down) keeps the ingest.
    /// </summary>
    public async Task<bool> AbandonIfOutpacedAsync(ISegmentSource source, TimeSpan stall, CancellationToken ct)
    {
        double ingestRate;
        lock (_window) (ingestRate, _lastWindowRate) = (_lastWindowRate, -1);
        if (Complete || _partialPath is null || ingestRate <= 0 || ingestRate >= ProbeBelowLeastRates * (double)_minBytesPerSecond) return false;
        var wanted = new List<int>();
        long remaining = 0, probeBytes = 0;
        lock (_gate)
        {
            if (_disposed || _failure is not null) return false;
            for (var i = _have.Length - 1; i >= 0; i--)
            {
                if (_have[i]) continue;
                long stored = Manifest.Segments[i].StoredLength;
                remaining += stored;
                if (probeBytes < ProbeBytes && wanted.Count < ProbeMaxSegments) { wanted.Add(i); probeBytes += stored; }
            }
        }
        if (wanted.Count == 0 || remaining < ingestRate * stall.TotalSeconds) return false; // done within a window anyway
        if (Interlocked.Exchange(ref _probing, 1) == 1) return false;
        long fetched = 0;
        var clock = System.Diagnostics.Stopwatch.StartNew();
        string? failed = null;
        try
        {
            using var files = DatasetFiles.Open(_partialPath, Manifest, writable: true);
            using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct, _abandoned.Token);
            limit.CancelAfter(stall);
            await source.FetchAsync(Manifest, Version, files, wanted, i =>
            {
                if (Probe(i)) Interlocked.Add(ref fetched, Manifest.Segments[i].StoredLength);
            }, limit.Token);
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested) { } // a window's worth measured
        catch (ObjectDisposedException) { return false; } // the ingest ended meanwhile: the turn passes on anyway
        catch (Exception e) when (e is not OperationCanceledException) { failed = e.Message; }
        finally { Volatile.Write(ref _probing, 0); }
        var seconds = Math.Max(1e-3, clock.Elapsed.TotalSeconds);
        var ownRate = Interlocked.Read(ref fetched) / seconds;
        long left = 0;
        lock (_gate)
        {
            if (_disposed) return false;
            for (var i = 0; i < _have.Length; i++)
                if (!_have[i]) left += Manifest.Segments[i].StoredLength;
        }
        var ingestFinish = left / ingestRate;
        var ownFinish = ownRate > 0 ? left / ownRate : double.PositiveInfinity;
        var outpaced = failed is null && ownFinish * OutpaceMargin <= ingestFinish;
        if (!outpaced)
        {
            _log.IngestKeptAfterProbe(Manifest.Name, Version, ByteRate.Format(ingestRate), ingestFinish, ByteRate.Format(ownRate), ownFinish, wanted.Count,
                OutpaceMargin, failed ?? "not outpaced");
            return false;
        }
        Outpaced = $"it delivered {ByteRate.Format(ingestRate)} over the last {stall.TotalSeconds:0.###} s, which would finish the {ByteSize.Format(left)} " +
            $"it still lacks in {ingestFinish:0.#} s, while the reader's own fetch from the cache tier measured {ByteRate.Format(ownRate)}, " +
            $"which finishes it in {ownFinish:0.#} s, at least {OutpaceMargin:0.#}× sooner";
        _log.IngestOutpaced(Manifest.Name, Version, ByteRate.Format(ingestRate), ingestFinish, ByteRate.Format(ownRate), ownFinish, wanted.Count, OutpaceMargin);
        try { _abandoned.Cancel(); }
        catch (ObjectDisposedException) { return false; }
        return true;
    }

    /// <summary>A segment a waiting fetch's probe wrote (verified) into the copy: journaled as ingested; false when the ingest already had it or ended.</summary>
    private bool Probe(int index)
    {
        lock (_gate)
        {
            if (_disposed || _failure is not null || _have[index]) return false;
            try { DataDirectory.AppendJournal(_journal!, index); }
            catch (Exception e) when (e is IOException or ObjectDisposedException) { return false; }
            _have[index] = true;
            _missing--;
            Probed++;
            _index!.SegmentDone(Version, Manifest.Segments[index].RawLength);
            return true;
        }
    }

    /// <summary>
    /// Checks the manifest (it must hash to <paramref name="version"/> and name <paramref name="name"/>), waits for the
    /// version's writer turn (a running fetch or ingest of it finishes first), and opens the version's partial copy:
    /// the existing one, its journal entries re-verified, or a new one once the budget has room
    /// (<see cref="ErrorCode.NoSpace"/> otherwise). For a version already complete on the node, returns a finished
    /// ingest with <see cref="Complete"/> set.
    /// </summary>
    /// <param name="vouch">Throws unless the agent's cache tier vouches for the manifest (see <see cref="DatasetStore.BeginIngestAsync"/>);
    /// not asked when the node already holds the version, whose manifest came from that tier or was checked against it.</param>
    public static async Task<SegmentIngest> BeginAsync(DataDirectory directory, CopyIndex index, VersionWriters writers,
        string name, string version, ReadOnlyMemory<byte> serializedManifest, ILogger log, CancellationToken ct, Func<CancellationToken, Task>? vouch = null,
        Action<Manifest>? authorize = null, TimeSpan? stall = null, long minBytesPerSecond = 0)
    {
        DatasetName.Validate(name);
        if (!SegmentId.TryParse(version, out _)) throw new CommonDataException(ErrorCode.BadRequest, $"ingest: '{version}' is not a version id");
        if (Manifest.VersionOf(serializedManifest.Span) != version)
            throw new CommonDataException(ErrorCode.Integrity, $"ingest of '{name}' version {version}: the manifest sent hashes to {Manifest.VersionOf(serializedManifest.Span)}, not to the version");
        Manifest manifest;
        try { manifest = Manifest.Parse(serializedManifest.Span); }
        catch (InvalidDataException e) { throw new CommonDataException(ErrorCode.BadRequest, $"ingest of '{name}' version {version}: {e.Message}", e); }
        if (manifest.Name != name)
            throw new CommonDataException(ErrorCode.NotFound, $"version '{version}' belongs to dataset '{manifest.Name}', not '{name}'");
        // Only a reader of the version may hand the agent its bytes: the agent would serve them, and waiting readers
        // would wait on whoever holds the ingest.
        authorize?.Invoke(manifest);

        // Asked before the version's turn is taken: a round trip to the tier must not hold up a fetch of the version.
        var asked = false;
        if (vouch is not null && index.Find(version) is null)
        {
            await vouch(ct);
            asked = true;
        }
        var turn = await writers.AcquireAsync(version, ct, stall);
        try
        {
            var existing = index.Find(version);
            if (existing is { Complete: true })
            {
                turn.Dispose();
                return new SegmentIngest(version, existing.Manifest, complete: true, log);
            }
            if (existing is null && vouch is not null && !asked) await vouch(ct); // the copy that made asking needless went meanwhile
            // Segments are checked against the node's own manifest of the version when it has one.
            manifest = index.BeginIngest(version, manifest).Manifest;
            DatasetFiles? file = null;
            FileStream? journal = null;
            try
            {
                if (existing is null || !File.Exists(directory.ManifestPath(version))) await directory.WriteManifestAsync(version, serializedManifest);
                file = directory.CreatePartial(version, manifest);
                var have = FetchCoordinator.VerifiedJournalEntries(directory, version, manifest, file, index.TakeVerifiedHere(version));
                index.SetProgress(version, have.Count(h => h), Enumerable.Range(0, have.Length).Where(i => have[i]).Sum(i => (long)manifest.Segments[i].RawLength));
                journal = directory.OpenJournal(version);
                // Segments another local version holds are copied from it first (checked against their ids), as a fetch
                // does: the node then reports only what it really lacks, and a fan-out carries only that.
                var sources = index.LeaseComplete(c => c.Version != version && FetchCoordinator.Shares(c, manifest));
                (int Segments, long Bytes) reused;
                try { reused = FetchCoordinator.CopyFromLocalCopies(directory, index, version, manifest, file, have, sources, journal); }
                finally { FetchCoordinator.ReleaseLeases(index, sources); }
                var ingest = new SegmentIngest(version, manifest, complete: false, log, index, turn, file, journal, have, minBytesPerSecond,
                    directory.PartialPath(version, manifest));
                turn.Occupy(ingest);
                log.IngestStarted(name, version, ingest._missing, have.Length, reused.Segments);
                return ingest;
            }
            catch (Exception e)
            {
                journal?.Dispose();
                file?.Dispose();
                index.EndIngest(version);
                var error = CommonDataException.From(e);
                if (error.Code != ErrorCode.NoSpace) throw;
                index.Remove(version); // as for a fetch: a partial copy on a full disk only holds the space the next request needs
                throw e is CommonDataException ? e : new CommonDataException(ErrorCode.NoSpace,
                    $"ingest of '{name}' version {version}: no space left in the data directory {directory.Root} ({e.Message}); the partial copy was removed", e);
            }
        }
        catch
        {
            turn.Dispose();
            throw;
        }
    }

    /// <summary>The first answer: complete, or how many and which segments the node lacks.</summary>
    public IngestReport Begun() => Complete
        ? new IngestReport { Complete = true, Segments = Manifest.Segments.Count }
        : new IngestReport { Segments = _have.Length, Missing = _missing, MissingBitmap = IngestReport.BitmapOfMissing(_have) };

    /// <summary>
    /// Takes one stored segment. Rejected (counted, first reasons kept) when it fails verification; counted as already
    /// had when the node has it (or another thread wrote it first); otherwise written and journaled. Throws
    /// <see cref="ErrorCode.BadRequest"/> for an index outside the manifest, and the failure (e.g.
    /// <see cref="ErrorCode.NoSpace"/>) when the file cannot be written; either ends the ingest. Safe to call from several
    /// threads at once (<see cref="Hpc.NodeAgent.Pipe.IngestWorkers"/>): segments are verified and written in parallel,
    /// only the bookkeeping is serialized.
    /// </summary>
    public void Accept(int index, ReadOnlySpan<byte> stored)
    {
        lock (_gate)
        {
            if (Complete || _disposed || _failure is not null) throw new InvalidOperationException("this ingest takes no more segments");
            if ((uint)index >= (uint)_have.Length)
                throw new CommonDataException(ErrorCode.BadRequest, $"ingest of version {Version}: segment index {index} is out of range (the version has {_have.Length} segments)");
            if (_have[index]) { _alreadyHad++; return; }
        }
        // Two copies of one segment may be verified at once: a damaged one must not keep out a good one behind it, and
        // two good ones write the same bytes (checked against the content id) at the same offset.
        string? problem;
        try { problem = SegmentFetcher.TryWriteSegment(Manifest, index, stored, _file!); }
        catch (Exception e) { throw Fail(e); }
        lock (_gate)
        {
            if (problem is not null)
            {
                _rejected++;
                if (_reasons.Count < MaxReasons) _reasons.Add($"index {index}: {problem}");
                (_rejectedBits ??= new byte[(_have.Length + 7) / 8])[index >> 3] |= (byte)(1 << (index & 7));
                return;
            }
            if (_have[index]) { _alreadyHad++; return; }
            try { DataDirectory.AppendJournal(_journal!, index); }
            catch (Exception e) { throw Fail(e); }
            _have[index] = true;
            _missing--;
            _accepted++;
        }
        Interlocked.Add(ref _bytes, stored.Length);
        Volatile.Write(ref _lastProgress, Environment.TickCount64);
        _index!.SegmentDone(Version, Manifest.Segments[index].RawLength);
    }

    /// <summary>The second answer, after the last frame: what became of the segments sent; the journal is flushed.</summary>
    public IngestReport Finish()
    {
        if (!Complete)
        {
            try { _journal!.Flush(); }
            catch (Exception e) { throw Fail(e); }
        }
        _log.IngestEnded(Manifest.Name, Version, _accepted, _alreadyHad, _rejected, _missing);
        return new IngestReport
        {
            Complete = Complete, Segments = Manifest.Segments.Count, Missing = _missing, Accepted = _accepted, AlreadyHad = _alreadyHad,
            Rejected = _rejected, Rejections = _reasons.Count > 0 ? _reasons.ToList() : null, RejectedBitmap = _rejectedBits?.ToArray(),
        };
    }

    private CommonDataException Fail(Exception e)
    {
        lock (_gate) return FailLocked(e);
    }

    private CommonDataException FailLocked(Exception e)
    {
        var error = CommonDataException.From(e);
        if (error.Code == ErrorCode.NoSpace && e is not CommonDataException)
            error = new CommonDataException(ErrorCode.NoSpace,
                $"ingest of '{Manifest.Name}' version {Version}: no space left in the data directory ({e.Message}); the partial copy was removed", e);
        _failure = error;
        _log.IngestWriteFailed(Manifest.Name, Version, e.Message);
        return error;
    }

    /// <summary>
    /// Ends the ingest, whether finished or broken off (the connection went away): the journal and file are closed, the
    /// copy is no longer ingesting and stays partial for the next fetch — unless the disk was full, in which case it
    /// goes, as a fetch's would — and the writer turn passes on.
    /// </summary>
    public void Dispose()
    {
        lock (_gate)
        {
            if (_disposed) return;
            _disposed = true; // a waiting fetch's probe journals nothing more
        }
        if (!Complete)
        {
            try { _journal!.Dispose(); }
            catch (IOException e) { _log.JournalCloseFailed(Version, e.Message); }
            _file!.Dispose();
            _index!.EndIngest(Version, _have);
            if (_failure?.Code == ErrorCode.NoSpace) _index.Remove(Version);
        }
        _turn?.Dispose();
        _abandoned.Dispose();
    }
}
