namespace Hpc.NodeAgent;

/// <summary>
/// One writer per version at a time. A fetch and an ingest of the same version each hold the version's turn while they
/// write its partial file and journal; whoever comes second waits, then starts from what the first one journaled (a
/// fetch resumes from the ingested segments; an ingest after a fetch finds the copy complete, or partial with the
/// fetch's segments). Different versions never wait for each other. Turns are granted first come, first served.
/// <para>An ingest is driven by a process on the node, which may stop sending while it holds the turn. A waiter that
/// gives a stall timeout asks, each time that long passes without the turn, whether the holder has stalled; a stalled
/// holder (<see cref="IStallable"/>) is abandoned and the turn passes on, so nobody waits on a silent process for
/// longer than about that timeout. A waiter that can fetch the version itself (a fetch, given the segment source) also
/// asks a holder that still makes progress whether its own fetch would finish clearly sooner
/// (<see cref="IStallable.AbandonIfOutpacedAsync"/>).</para>
/// </summary>
public sealed class VersionWriters
{
    private readonly Dictionary<string, Turn> _turns = new();

    /// <summary>A holder of a turn that can be abandoned when it stops making progress.</summary>
    public interface IStallable
    {
        /// <summary>Abandons the holder if it made no progress for <paramref name="stall"/>; true when it did so.</summary>
        bool AbandonIfStalled(TimeSpan stall);

        /// <summary>
        /// Asked after <see cref="AbandonIfStalled"/> kept the holder, by a waiter that can fetch the version from
        /// <paramref name="source"/> itself: abandons the holder when a measured fetch from that source would finish the
        /// version clearly sooner than the holder will; true when it did so.
        /// </summary>
        Task<bool> AbandonIfOutpacedAsync(ISegmentSource source, TimeSpan stall, CancellationToken ct) => Task.FromResult(false);
    }

    internal sealed class Turn
    {
        public readonly SemaphoreSlim Gate = new(1, 1);
        public int Users;
        public volatile IStallable? Holder;
    }

    /// <summary>
    /// Waits for the version's turn; dispose the result to pass it on. With <paramref name="stall"/>, a holder that made
    /// no progress for that long is abandoned (<see cref="IStallable"/>) rather than waited for; with <paramref name="probe"/>
    /// as well, so is one that a fetch from that source would clearly outpace (<see cref="IStallable.AbandonIfOutpacedAsync"/>).
    /// </summary>
    public async Task<Held> AcquireAsync(string version, CancellationToken ct, TimeSpan? stall = null, ISegmentSource? probe = null)
    {
        Turn turn;
        lock (_turns)
        {
            if (!_turns.TryGetValue(version, out turn!)) _turns[version] = turn = new Turn();
            turn.Users++;
        }
        try
        {
            if (stall is not { } limit) await turn.Gate.WaitAsync(ct);
            else
                while (!await turn.Gate.WaitAsync(limit, ct))
                {
                    if (turn.Holder is not { } holder || holder.AbandonIfStalled(limit) || probe is null) continue;
                    await holder.AbandonIfOutpacedAsync(probe, limit, ct);
                }
        }
        catch
        {
            Leave(version, turn, holding: false);
            throw;
        }
        return new Held(this, version, turn);
    }

    private void Leave(string version, Turn turn, bool holding)
    {
        if (holding)
        {
            turn.Holder = null;
            turn.Gate.Release();
        }
        lock (_turns)
            if (--turn.Users == 0) _turns.Remove(version);
    }

    /// <summary>A turn held; <see cref="Occupy"/> names who holds it, so waiters can abandon a stalled holder.</summary>
    public sealed class Held : IDisposable
    {
        private readonly VersionWriters _owner;
        private readonly string _version;
        private readonly Turn _turn;
        private int _released;

        internal Held(VersionWriters owner, string version, Turn turn) => (_owner, _version, _turn) = (owner, version, turn);

        public void Occupy(IStallable holder) => _turn.Holder = holder;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _released, 1) == 0) _owner.Leave(_version, _turn, holding: true);
        }
    }
}
