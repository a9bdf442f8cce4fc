using Hpc.CommonData.Fanout;
using System.Buffers.Binary;
using System.Collections.Concurrent;
using Hpc.Mpi;

namespace Hpc.Jobs.Fanout;

/// <summary>
/// The ranks of an MPI job as an <see cref="IRankGroup"/>. Every MPI call — initialization included — runs on one
/// thread of its own, so the library is only ever asked for single-threaded use, and the async exchange above never
/// blocks in MPI: sends and receives are posted there and polled (MPI_Test) until they complete. The thread waits a
/// millisecond for new work when nothing moved, so waiting ranks do not take a core from the node's agent.
/// </summary>
public sealed class MpiRankGroup : IRankGroup, IDisposable
{
    private const int Tag = 0x4843; // "HC"
    // A queue and a kernel event rather than a BlockingCollection: its timed wait spins on sched_yield first, which with
    // a rank and an agent per node on few cores took a fifth of the machine.
    private readonly ConcurrentQueue<Action> _work = new();
    private readonly AutoResetEvent _posted = new(false);
    private volatile bool _closed;
    private readonly List<(MpiRequest Request, TaskCompletionSource Done)> _active = [];
    private readonly Thread _thread;
    private MpiRuntime? _mpi;
    private Communicator? _world;
    private bool _abandoned;

    private readonly bool _controlOnly;

    private MpiRankGroup(bool controlOnly)
    {
        _controlOnly = controlOnly;
        var ready = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        _thread = new Thread(() => Pump(ready)) { IsBackground = true, Name = "mpi" };
        _thread.Start();
        ready.Task.GetAwaiter().GetResult();
        Ring = new Link(this);
    }

    /// <summary>Initializes MPI; throws <see cref="MpiUnavailableException"/> when the node has no MPI library.</summary>
    /// <param name="controlOnly">The exchange's blocks travel on another link (<see cref="TcpRing"/>): MPI carries only
    /// the collectives, and need not look for a fabric.</param>
    public static MpiRankGroup Start(bool controlOnly = false) => new(controlOnly);

    public int Rank { get; private set; }
    public int Size { get; private set; }
    public string Implementation { get; private set; } = "";
    public IRingLink Ring { get; }

    // Collectives are posted and tested like the ring's sends: a blocking MPI_Bcast or MPI_Allgather spins a core
    // while it waits for the slowest rank to start, and on a node that shares its cores that is time taken from others.
    public async Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct)
    {
        var length = new byte[8];
        BinaryPrimitives.WriteInt64LittleEndian(length, fromRoot?.Length ?? 0);
        await Post(() => _world!.IBroadcast(length, 0), ct);
        var bytes = Rank == 0 ? fromRoot! : new byte[BinaryPrimitives.ReadInt64LittleEndian(length)];
        await Post(() => _world!.IBroadcast(bytes, 0), ct);
        return bytes;
    }

    public async Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct)
    {
        var all = new byte[mine.Length * Size];
        await Post(() => _world!.IAllGather(mine, all), ct);
        return Enumerable.Range(0, Size).Select(r => all.AsSpan(r * mine.Length, mine.Length).ToArray()).ToArray();
    }

    /// <summary>
    /// The exchange failed and peers may be gone: never call MPI again (a collective could wait forever) and leave the
    /// posted buffers pinned. The process finishes its node's data on its own and exits without MPI_Finalize.
    /// </summary>
    public void Abandon() => _abandoned = true;

    /// <summary>How long the closing barrier may wait for the slowest rank before the process leaves MPI behind.</summary>
    public static readonly TimeSpan FinalizeLimit = TimeSpan.FromSeconds(5);

    /// <summary>
    /// How long this rank's closing barrier waits: <see cref="FinalizeLimit"/>, or after an exchange
    /// <see cref="ClosingLimitAfter"/>; as long as the job allows when the exchange left a slow node out of the ring —
    /// that leaf finishes at its own link's pace, long after the members. A rank that leaves without finalizing makes
    /// mpiexec end the ranks still at work with it.
    /// </summary>
    public TimeSpan ClosingLimit { get; set; } = FinalizeLimit;

    /// <summary>
    /// The closing barrier's wait after a ring exchange that took <paramref name="exchange"/> on this rank: as long
    /// again, at least <see cref="FinalizeLimit"/>. A ring paced by one slow link ends seconds apart on its ranks (the
    /// nodes of a 45 s ring, 40.6 to 45.1 s), so a fixed few seconds let the first ones leave while the last were
    /// still receiving, and mpiexec ended those. The step ends with its slowest rank anyway, so waiting costs nothing;
    /// a rank that died still bounds the wait.
    /// When the ring went on without a member (<paramref name="memberLost"/>), the barrier can never complete: that
    /// member's process is dead, or hung and cut off, and its exchange fails without a barrier. Waiting as long as the
    /// exchange would hold the step twice its time for nothing, so a survivor waits <see cref="FinalizeLimit"/> only,
    /// which still lets survivors finishing a little later receive their last blocks before it leaves.
    /// </summary>
    public static TimeSpan ClosingLimitAfter(TimeSpan exchange, bool memberLost = false) =>
        memberLost || exchange <= FinalizeLimit ? FinalizeLimit : exchange;

    /// <summary>
    /// How long MPI_Finalize may take once every rank has passed the barrier. Nothing is left to move then, so a
    /// finalize that has not returned in this time is the hang below, and every second more delays the job's next step.
    /// </summary>
    public static readonly TimeSpan FinalizeAfterBarrier = TimeSpan.FromMilliseconds(500);

    /// <summary>
    /// True when srun started the ranks itself and speaks PMI to them (Slurm's pmi2 plugin; not mpiexec, which runs its
    /// own proxies under srun and tells its ranks so in <c>HYDI_CONTROL_FD</c>).
    /// </summary>
    /// <remarks>
    /// MPI_Finalize ends with a PMI barrier that srun completes by sending every node's slurmstepd the result. MPICH
    /// 4.0 over UCX's TCP transport sometimes hangs in finalize before that barrier; if some ranks then reach the
    /// barrier and others leave, srun retries the send to the steps that are gone for 1 + 2 + 4 + 8 s ("mpi/pmi2: failed
    /// to send temp kvs to compute nodes") and the step ends 15 s late. Under srun a rank may leave without finalize:
    /// no PMI exchange is left open, and the step ends with its last rank.
    /// </remarks>
    public static bool StartedBySrun(Func<string, string?> environment) =>
        environment("SLURM_STEP_ID") is { Length: > 0 } && environment("PMI_FD") is { Length: > 0 } && environment("HYDI_CONTROL_FD") is null;

    public void Dispose()
    {
        if (!_abandoned)
        {
            try
            {
                // Every rank is done with the exchange by now, so nothing is lost if finalizing never returns: MPICH
                // 4.0 over UCX's TCP transport hung in MPI_Finalize (UCX stops progressing TCP endpoints before it
                // flushes them) with three ranks or more on separate hosts.
                var passed = Post(() => _world!.IBarrier(), CancellationToken.None).Wait(ClosingLimit);
                var finished = passed && (StartedBySrun(Environment.GetEnvironmentVariable) ||
                                          RunAsync(() => { _mpi!.Dispose(); return 0; }, CancellationToken.None).Wait(FinalizeAfterBarrier));
                if (!finished)
                    Console.Error.WriteLine($"hpcdata nodeprep: the closing barrier or MPI_Finalize did not return in time ({Implementation}); " +
                                            "the exchange had ended, leaving it behind");
            }
            catch (AggregateException) { }
        }
        _closed = true;
        _posted.Set();
    }

    private Task<T> RunAsync<T>(Func<T> call, CancellationToken ct)
    {
        var done = new TaskCompletionSource<T>(TaskCreationOptions.RunContinuationsAsynchronously);
        Enqueue(() =>
        {
            try { done.TrySetResult(call()); }
            catch (Exception e) { done.TrySetException(e); }
        });
        return done.Task.WaitAsync(ct);
    }

    private Task Post(Func<MpiRequest> start, CancellationToken ct)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Enqueue(() =>
        {
            try { _active.Add((start(), done)); }
            catch (Exception e) { done.TrySetException(e); }
        });
        return done.Task.WaitAsync(ct);
    }

    private void Enqueue(Action action)
    {
        if (_closed) throw new ObjectDisposedException(nameof(MpiRankGroup));
        _work.Enqueue(action);
        _posted.Set();
    }

    private void Pump(TaskCompletionSource ready)
    {
        try
        {
            _mpi = MpiRuntime.Initialize(MpiThreadLevel.Single, _controlOnly);
            _world = _mpi.World;
            // MPICH's version text goes on with its whole configure line: its first line names it.
            (Rank, Size, Implementation) = (_world.Rank, _world.Size, _mpi.Implementation.Split('\n')[0].Replace('\t', ' ').Trim());
            ready.SetResult();
        }
        catch (Exception e)
        {
            ready.SetException(e);
            return;
        }
        while (!_closed || !_work.IsEmpty)
        {
            while (_work.TryDequeue(out var action)) action();
            var moved = false;
            for (var i = _active.Count - 1; i >= 0; i--)
            {
                var (request, done) = _active[i];
                try
                {
                    if (!request.Test()) continue;
                    done.TrySetResult();
                }
                catch (Exception e) { done.TrySetException(e); }
                _active.RemoveAt(i);
                moved = true;
            }
            // Nothing finished: wait for new work or the next poll. A millisecond is far shorter than a block takes on
            // any link, and socket buffers carry the data meanwhile; spinning instead took a core from the node.
            if (!moved) _posted.WaitOne(_active.Count == 0 ? 50 : 1);
        }
    }

    private sealed class Link(MpiRankGroup group) : IPeerLinks
    {
        public int Rank => group.Rank;
        public int Size => group.Size;

        /// <summary>Four: a rendezvous send starts with a round trip, which the others in flight cover.</summary>
        public int SendWindow => 4;

        public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) =>
            group.Post(() => group._world!.ISend(message, (Rank + 1) % Size, Tag), ct);

        public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => ReceiveFromAsync((Rank - 1 + Size) % Size, buffer, ct);

        /// <summary>MPI reaches every rank already: nothing to open.</summary>
        public Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct) => Task.CompletedTask;

        public Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct) => group.Post(() => group._world!.ISend(message, rank, Tag), ct);

        public async Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct)
        {
            await group.Post(() => group._world!.IReceive(buffer, rank, Tag), ct);
            // Messages carry their own length (the block header), so no MPI status is needed.
            return BinaryPrimitives.ReadInt32LittleEndian(buffer.Span[16..]);
        }
    }
}
