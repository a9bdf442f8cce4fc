// One MPI rank of a test scenario: `dotnet Hpc.Mpi.Probe.dll <scenario> [bytes]`, started by the tests under
// mpiexec. Every rank prints lines "rank R: …" that the tests assert on, and "rank R: FAIL …" plus exit code 1 when a
// check fails.
using System.Diagnostics;
using Hpc.Mpi;

string scenario = args.Length > 0 ? args[0] : "info";
// "<scenario>+control": MPI started as the fan-out's ranks start it, for its collectives alone.
bool controlOnly = scenario.EndsWith("+control", StringComparison.Ordinal);
if (controlOnly) scenario = scenario[..^"+control".Length];
int bytes = args.Length > 1 ? int.Parse(args[1]) : 4 << 20;

// "churn": threads call malloc/free (so brk, sbrk, mmap, munmap and madvise) while MPI starts, as a .NET process's
// GC and thread pool do; a library that rewrites those functions' code in place then crashes them.
using var churning = new CancellationTokenSource();
var churners = scenario == "churn"
    ? Enumerable.Range(0, 2).Select(t => new Thread(() => Churn(t, churning.Token)) { IsBackground = true }).ToList()
    : [];
churners.ForEach(t => t.Start());
using var mpi = MpiRuntime.Initialize(MpiThreadLevel.Funneled, controlOnly);
Communicator world = mpi.World;
int rank = world.Rank, size = world.Size;
void Say(string line) => Console.WriteLine($"rank {rank}: {line}");
int failures = 0;
void Fail(string why) { failures++; Say("FAIL " + why); }

switch (scenario)
{
    case "churn":
        Thread.Sleep(50);
        churning.Cancel();
        churners.ForEach(t => t.Join());
        Say("churn survived");
        break;

    case "info":
        Say($"size {size} abi {mpi.AbiFamily} library {mpi.LibraryName} thread {mpi.ProvidedThreadLevel}");
        if (rank == 0) Say("implementation " + mpi.Implementation.Split('\n')[0].Trim());
        // The runtime's own use of SIGSEGV must survive the MPI library's signal handlers.
        try { string? nothing = args.Length > 99 ? "" : null; _ = nothing!.Length; Fail("no NullReferenceException"); }
        catch (NullReferenceException) { Say("null reference caught"); }
        break;

    case "ring":
    {
        // Rank r sends `bytes` to r+1 and receives as many from r-1, as 64 KB segments like the fan-out's, all
        // posted at once; each received segment is checked as soon as WaitAny reports it.
        const int Segment = 64 << 10;
        int segments = (bytes + Segment - 1) / Segment;
        int next = (rank + 1) % size, previous = (rank + size - 1) % size;
        byte[] outgoing = GC.AllocateUninitializedArray<byte>(bytes, pinned: true);
        byte[] incoming = GC.AllocateUninitializedArray<byte>(bytes, pinned: true);
        Fill(outgoing, rank);
        world.Barrier();
        var clock = Stopwatch.StartNew();
        var receives = new MpiRequest[segments];
        var sends = new MpiRequest[segments];
        for (int s = 0; s < segments; s++)
        {
            int offset = s * Segment, length = Math.Min(Segment, bytes - offset);
            receives[s] = world.IReceive(incoming.AsMemory(offset, length), previous, tag: s);
        }
        for (int s = 0; s < segments; s++)
        {
            int offset = s * Segment, length = Math.Min(Segment, bytes - offset);
            sends[s] = world.ISend(outgoing.AsMemory(offset, length), next, tag: s);
        }
        byte[] expected = new byte[bytes];
        Fill(expected, previous);
        int checkedSegments = 0;
        for (int index; (index = MpiRequest.WaitAny(receives)) >= 0; checkedSegments++)
        {
            int offset = index * Segment, length = Math.Min(Segment, bytes - offset);
            if (!incoming.AsSpan(offset, length).SequenceEqual(expected.AsSpan(offset, length))) Fail($"segment {index} from rank {previous} differs");
        }
        MpiRequest.WaitAll(sends);
        if (!sends.All(r => r.IsCompleted) || !receives.All(r => r.IsCompleted)) Fail("a request is not completed");
        if (checkedSegments != segments) Fail($"checked {checkedSegments} of {segments} segments");
        // A blocking pair as well, to exercise MPI_Send/MPI_Recv.
        Span<byte> token = stackalloc byte[8];
        if (rank == 0) { BitConverter.TryWriteBytes(token, 4242L); world.Send(token, next, 9999); world.Receive(token, previous, 9999); }
        else { world.Receive(token, previous, 9999); world.Send(token, next, 9999); }
        if (BitConverter.ToInt64(token) != 4242L) Fail("token changed on its way round");
        world.Barrier();
        Say($"ring ok {bytes} bytes in {segments} segments from rank {previous} in {clock.ElapsedMilliseconds} ms");
        break;
    }

    case "bcast":
    {
        byte[] buffer = new byte[bytes];
        if (rank == 0) Fill(buffer, 77);
        world.Broadcast(buffer, root: 0);
        byte[] expected = new byte[bytes];
        Fill(expected, 77);
        if (!buffer.AsSpan().SequenceEqual(expected)) Fail("broadcast bytes differ");
        Say($"bcast ok {bytes} bytes");
        break;
    }

    case "allgather":
    {
        long[] values = world.AllGather(rank * 1_000_000_007L + 5);
        for (int r = 0; r < size; r++) if (values[r] != r * 1_000_000_007L + 5) Fail($"value of rank {r} is {values[r]}");
        byte[] mine = Enumerable.Range(0, 16).Select(i => (byte)(rank * 16 + i)).ToArray();
        byte[] all = new byte[16 * size];
        world.AllGather(mine, all);
        for (int i = 0; i < all.Length; i++) if (all[i] != (byte)i) { Fail($"byte {i} of the gathered blocks is {all[i]}"); break; }
        Say("allgather ok " + string.Join(",", values));
        break;
    }

    case "split":
    {
        using Communicator node = world.SplitByNode();
        Say($"node rank {node.Rank} node size {node.Size}");
        long[] worldRanks = node.AllGather(rank);
        Say("node members " + string.Join(",", worldRanks));
        break;
    }

    case "error":
    {
        // With MPI_ERRORS_RETURN on World, a bad destination is an exception in this rank, not the job's end.
        try { world.Send(new byte[1], destination: size + 5, tag: 0); Fail("sending to a rank that does not exist worked"); }
        catch (MpiException e) { Say($"error ok {e.Call} code {e.ErrorCode}: {e.Message.Split('\n')[0]}"); }
        world.Barrier();
        break;
    }

    case "idle":
    {
        // Rank 0 keeps the others waiting in a barrier; each reports the CPU time it burnt waiting, which shows
        // whether the library's waiting ranks yield the core (they busy-poll by default).
        int milliseconds = args.Length > 1 ? int.Parse(args[1]) : 1000;
        TimeSpan before = Process.GetCurrentProcess().TotalProcessorTime;
        var clock = Stopwatch.StartNew();
        if (rank == 0) Thread.Sleep(milliseconds);
        world.Barrier();
        TimeSpan used = Process.GetCurrentProcess().TotalProcessorTime - before;
        Say($"idle ok waited {clock.ElapsedMilliseconds} ms using {used.TotalMilliseconds:F0} ms CPU");
        break;
    }

    case "abort":
        if (rank == size - 1)
        {
            Say("aborting");
            Console.Out.Flush();
            // Give the launcher a moment to forward what every rank has printed: the abort kills the forwarding too.
            Thread.Sleep(300);
            world.Abort(3);
        }
        Say("waiting in a barrier the aborting rank never reaches");
        Console.Out.Flush();
        world.Barrier();
        Fail("barrier returned although a rank aborted");
        break;

    default:
        Fail("unknown scenario " + scenario);
        break;
}

Console.Out.Flush();
return failures == 0 ? 0 : 1;

// Deterministic content that differs per sender and per position, so a misrouted or shifted segment shows.
static void Fill(Span<byte> data, int seed)
{
    uint x = 2_654_435_761u * (uint)(seed + 1);
    for (int i = 0; i < data.Length; i++)
    {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        data[i] = (byte)x;
    }
}

static unsafe void Churn(int seed, CancellationToken stop)
{
    var random = new Random(seed);
    var held = new List<nint>();
    while (!stop.IsCancellationRequested)
    {
        // Small blocks grow the heap with brk; large ones are mapped and unmapped.
        var size = random.Next(4) == 0 ? random.Next(256 << 10, 2 << 20) : random.Next(64, 64 << 10);
        held.Add((nint)System.Runtime.InteropServices.NativeMemory.Alloc((nuint)size));
        if (held.Count > 64)
        {
            foreach (var p in held) System.Runtime.InteropServices.NativeMemory.Free((void*)p);
            held.Clear();
        }
    }
    foreach (var p in held) System.Runtime.InteropServices.NativeMemory.Free((void*)p);
}
