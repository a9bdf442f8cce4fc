namespace Hpc.NodeAgent;

/// <summary>
/// One writer per version at a time. A fetch and an ingest of the same version each hold the version's turn while they
/// write its partial file and journal; whoever comes second waits, then starts from what the first one journaled (a
/// fetch resumes from the ingested segments; an ingest after a fetch finds the copy complete, or partial with the
/// fetch's segments). Different versions never wait for each other. Turns are granted first come, first served.
/// </summary>
public sealed class VersionWriters
{
    private readonly Dictionary<string, Turn> _turns = new();

    private sealed class Turn
    {
        public readonly SemaphoreSlim Gate = new(1, 1);
        public int Users;
    }

    /// <summary>Waits for the version's turn; dispose the result to pass it on.</summary>
    public async Task<IDisposable> AcquireAsync(string version, CancellationToken ct)
    {
        Turn turn;
        lock (_turns)
        {
            if (!_turns.TryGetValue(version, out turn!)) _turns[version] = turn = new Turn();
            turn.Users++;
        }
        try
        {
            await turn.Gate.WaitAsync(ct);
        }
        catch
        {
            Leave(version, turn, holding: false);
            throw;
        }
        return new Holder(this, version, turn);
    }

    private void Leave(string version, Turn turn, bool holding)
    {
        if (holding) turn.Gate.Release();
        lock (_turns)
            if (--turn.Users == 0) _turns.Remove(version);
    }

    private sealed class Holder(VersionWriters owner, string version, Turn turn) : IDisposable
    {
        private int _released;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _released, 1) == 0) owner.Leave(version, turn, holding: true);
        }
    }
}
