using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Format;
using Hpc.NodeAgent.Pipe;

namespace Hpc.NodeAgent.Fanout;

/// <summary>
/// The end of an exchange that runs inside the agent (node prep requested of the running agents): the blocks that
/// arrive on the ring's links go straight to the ingest's workers, which verify, decode and write them on the node's
/// cores, as a direct fetch's segments are. Nothing crosses the agent's pipe, so the data is not copied through a socket
/// into and out of the same process (what an exchange run by a job's rank needs, <see cref="AgentIngest"/>).
/// </summary>
/// <param name="turnWait">How long to wait for the version's writer turn: while a fetch of the version already runs on
/// this node, the ingest could begin only once it ended, and every other node's exchange would wait for this one. Past
/// it the node only forwards the others' blocks, and its own copy comes from that fetch.</param>
/// <param name="admit">Checks the manifest before the ingest begins (the job's user among its readers): a version the
/// request's user may not read is refused before a block of it is fetched for this node.</param>
public sealed class StoreIngest(DatasetStore store, int threads, TimeSpan turnWait, Action<Manifest>? admit = null) : INodeIngest
{
    private SegmentIngest? _ingest;
    private IngestReport? _begun;
    private IngestWorkers? _workers;
    private (int Index, int Offset, int Length)[] _records = [];

    public async Task<bool> BeginAsync(string name, string version, ReadOnlyMemory<byte> manifest, CancellationToken ct)
    {
        // The manifest came down the tree from rank 0's agent, which resolved it from its tier; every link of the tree is
        // authenticated by the cluster's key, and the manifest hashes to the version (checked by the exchange and again
        // here). Each block's segments are still verified against it.
        admit?.Invoke(Manifest.Parse(manifest.Span));
        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(ct);
        bounded.CancelAfter(turnWait);
        try { _ingest = await store.BeginIngestAsync(name, version, manifest, bounded.Token, vouched: true); }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested) { return false; }
        _begun = _ingest.Begun();
        if (_ingest.Complete) return false;
        _workers = new IngestWorkers(_ingest, threads);
        return true;
    }

    public bool Lacks(int index) => (_begun ?? throw new InvalidOperationException("ingest not begun")).IsMissing(index);

    public async ValueTask WriteAsync(ReadOnlyMemory<byte> blockMessage, FanoutPlan plan, CancellationToken ct)
    {
        var (ingest, workers) = (_ingest!, _workers ?? throw new InvalidOperationException("ingest not begun"));
        if (ingest.Abandoned.IsCancellationRequested) throw Abandoned(ingest);
        var count = 0;
        foreach (var record in BlockMessage.Layout(blockMessage, plan))
        {
            if (!_begun!.IsMissing(record.Index)) continue;
            if (count == _records.Length) Array.Resize(ref _records, Math.Max(16, count * 2));
            _records[count++] = record;
        }
        if (count == 0) return;
        using var feeding = CancellationTokenSource.CreateLinkedTokenSource(ct, ingest.Abandoned);
        try { await workers.PostAsync(blockMessage, _records.AsMemory(0, count), feeding.Token); }
        catch (OperationCanceledException) when (ingest.Abandoned.IsCancellationRequested && !ct.IsCancellationRequested) { throw Abandoned(ingest); }
    }

    public async Task<IngestReport> EndAsync(CancellationToken ct)
    {
        var ingest = _ingest ?? throw new InvalidOperationException("ingest not begun");
        if (_workers is not null) await _workers.CompleteAsync();
        return ingest.Finish();
    }

    /// <summary>A fetch of the same version waited on this ingest and gave up on it (too little progress, or its own measured fetch outpaced it); that fetch completes the copy.</summary>
    private static CommonDataException Abandoned(SegmentIngest ingest) =>
        new(ErrorCode.Timeout, $"ingest of '{ingest.Manifest.Name}' version {ingest.Version} abandoned: a fetch of that version waited on it and " +
            (ingest.Outpaced is { } outpaced ? $"measured its own fetch clearly faster: {outpaced}" : "it made too little progress"));

    public async ValueTask DisposeAsync()
    {
        if (_workers is not null) await _workers.DisposeAsync();
        _ingest?.Dispose();
    }
}
