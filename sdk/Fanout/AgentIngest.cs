using Hpc.CommonData.Agent;

namespace Hpc.CommonData.Fanout;

/// <summary>The node's agent as the end of the exchange: blocks go to it over its pipe as an ingest, only the segments it lacks.</summary>
public sealed class AgentIngest(string pipe) : INodeIngest
{
    private AgentClient? _client;
    private IngestSession? _session;
    private StoredSegmentSlice[] _slices = [];

    public async Task<bool> BeginAsync(string name, string version, ReadOnlyMemory<byte> manifest, CancellationToken ct)
    {
        _client = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(5), ct);
        _session = await _client.BeginIngestAsync(name, version, manifest, ct);
        return !_session.Complete;
    }

    public bool Lacks(int index) => (_session ?? throw new InvalidOperationException("ingest not begun")).IsMissing(index);

    public ValueTask WriteAsync(ReadOnlyMemory<byte> blockMessage, FanoutPlan plan, CancellationToken ct)
    {
        var session = _session ?? throw new InvalidOperationException("ingest not begun");
        var count = 0;
        foreach (var (index, offset, length) in BlockMessage.Layout(blockMessage, plan))
        {
            if (!session.IsMissing(index)) continue;
            if (count == _slices.Length) Array.Resize(ref _slices, Math.Max(16, count * 2));
            // The records are slices of the message itself: the session writes them to the pipe without copying them first.
            _slices[count++] = new StoredSegmentSlice(index, offset, length);
        }
        return count == 0 ? ValueTask.CompletedTask : session.SendAsync(blockMessage, _slices.AsMemory(0, count), ct);
    }

    public Task<IngestReport> EndAsync(CancellationToken ct) =>
        (_session ?? throw new InvalidOperationException("ingest not begun")).CompleteAsync(ct);

    public async ValueTask DisposeAsync()
    {
        if (_session is not null) await _session.DisposeAsync();
        if (_client is not null) await _client.DisposeAsync();
    }
}
