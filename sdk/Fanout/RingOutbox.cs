namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>
    /// Blocks waiting for the right neighbour: this rank's own blocks before the forwarded ones, each kind in arrival
    /// order. An own block is data entering the ring, with every link still ahead of it. Queued behind forwarded blocks,
    /// the shares entered late: in the lab (4 nodes, 25 Mbit/s, 256 MB) the downlinks ran at 19–22 Mbit/s and then for
    /// the last 20 s one node received while the others idled. Forwarded blocks keep arrival order: sending those with
    /// fewest hops behind them first too left the blocks on their last hop waiting on every link until the end, and at
    /// 8 and 16 nodes one node then received alone for seconds (docs/benchmarks.md, "The ring's order").
    /// </summary>
    internal sealed class Outbox
    {
        private readonly Queue<Message> _own = new(), _forwarded = new();
        private readonly SemaphoreSlim _ready = new(0);
        private bool _completed;
        private int _holds;

        /// <summary>Blocks are still coming though the producers are done (a bypass fetching): the end waits.</summary>
        public void Hold()
        {
            lock (_own) _holds++;
        }

        public void Unhold()
        {
            lock (_own) _holds--;
            _ready.Release();
        }

        public void Add(Message m, bool own)
        {
            lock (_own) (own ? _own : _forwarded).Enqueue(m);
            _ready.Release();
        }

        /// <summary>No more blocks: <see cref="TakeAsync"/> answers null once the queued ones are taken.</summary>
        public void Complete()
        {
            lock (_own) _completed = true;
            _ready.Release();
        }

        /// <summary>Each Add, Unhold and the Complete release the semaphore once; a wake that finds neither a block nor
        /// the end (an Unhold while others still hold) waits again.</summary>
        public async ValueTask<Message?> TakeAsync(CancellationToken ct)
        {
            while (true)
            {
                await _ready.WaitAsync(ct);
                lock (_own)
                {
                    if (_own.TryDequeue(out var m) || _forwarded.TryDequeue(out m)) return m;
                    if (_completed && _holds == 0) return null;
                }
            }
        }
    }
}
