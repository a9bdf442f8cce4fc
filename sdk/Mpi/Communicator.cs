using System.Diagnostics.CodeAnalysis;
using System.Runtime.InteropServices;

namespace Hpc.Mpi;

/// <summary>
/// A group of ranks that talk to each other: <see cref="MpiRuntime.World"/> or one split from it. Messages are raw
/// bytes (MPI_BYTE). Not thread-safe: call it from one thread at a time (and from several only if the runtime granted
/// <see cref="MpiThreadLevel.Serialized"/> or more).
/// </summary>
public sealed unsafe class Communicator : IDisposable
{
    private readonly MpiRuntime runtime;
    private readonly bool owned;
    private nint handle;

    internal Communicator(MpiRuntime runtime, nint handle, bool owned)
    {
        this.runtime = runtime;
        this.handle = handle;
        this.owned = owned;
        MpiAbi abi = runtime.Abi;
        MpiRuntime.Check(abi.CommRank(handle, out int rank), "MPI_Comm_rank");
        MpiRuntime.Check(abi.CommSize(handle, out int size), "MPI_Comm_size");
        Rank = rank;
        Size = size;
    }

    /// <summary>This process's rank in the communicator, 0 ≤ Rank &lt; <see cref="Size"/>.</summary>
    public int Rank { get; }

    /// <summary>How many ranks the communicator has.</summary>
    public int Size { get; }

    /// <summary>
    /// Splits the communicator into one communicator per node: the ranks that can share memory
    /// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), ordered by their rank here. Collective: every rank calls it.
    /// Dispose the result when done.
    /// </summary>
    public Communicator SplitByNode()
    {
        MpiAbi abi = Abi;
        MpiRuntime.Check(abi.SplitShared(handle, Rank, out nint node), "MPI_Comm_split_type");
        return new Communicator(runtime, node, owned: true);
    }

    /// <summary>Returns once every rank has called it (MPI_Barrier).</summary>
    public void Barrier() => MpiRuntime.Check(Abi.Barrier(handle), "MPI_Barrier");

    /// <summary>Sends <paramref name="data"/> to <paramref name="destination"/> and returns once the buffer may be reused (MPI_Send).</summary>
    public void Send(ReadOnlySpan<byte> data, int destination, int tag)
    {
        MpiAbi abi = Abi;
        fixed (byte* p = data) MpiRuntime.Check(abi.Send(p, data.Length, destination, tag, handle), "MPI_Send");
    }

    /// <summary>
    /// Receives a message of at most <paramref name="buffer"/>'s length from <paramref name="source"/> (MPI_Recv). A
    /// longer message is an error (MPI_ERR_TRUNCATE); the fan-out sends sizes both sides know.
    /// </summary>
    public void Receive(Span<byte> buffer, int source, int tag)
    {
        MpiAbi abi = Abi;
        fixed (byte* p = buffer) MpiRuntime.Check(abi.Receive(p, buffer.Length, source, tag, handle), "MPI_Recv");
    }

    /// <summary>
    /// Starts sending <paramref name="data"/> (MPI_Isend). The memory is pinned until the returned request completes;
    /// do not change it before then.
    /// </summary>
    public MpiRequest ISend(ReadOnlyMemory<byte> data, int destination, int tag)
    {
        MpiAbi abi = Abi;
        var pin = data.Pin();
        try
        {
            MpiRuntime.Check(abi.Isend(pin.Pointer, data.Length, destination, tag, handle, out nint request), "MPI_Isend");
            return new MpiRequest(runtime, request, pin);
        }
        catch
        {
            pin.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Starts receiving into <paramref name="buffer"/> (MPI_Irecv). The memory is pinned until the returned request
    /// completes; its content is defined only after that.
    /// </summary>
    public MpiRequest IReceive(Memory<byte> buffer, int source, int tag)
    {
        MpiAbi abi = Abi;
        var pin = buffer.Pin();
        try
        {
            MpiRuntime.Check(abi.Irecv(pin.Pointer, buffer.Length, source, tag, handle, out nint request), "MPI_Irecv");
            return new MpiRequest(runtime, request, pin);
        }
        catch
        {
            pin.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Copies <paramref name="buffer"/> from <paramref name="root"/> into the same-sized buffer of every rank (MPI_Bcast).
    /// Collective: every rank calls it with the same length and root.
    /// </summary>
    public void Broadcast(Span<byte> buffer, int root)
    {
        MpiAbi abi = Abi;
        fixed (byte* p = buffer) MpiRuntime.Check(abi.Broadcast(p, buffer.Length, root, handle), "MPI_Bcast");
    }

    /// <summary>
    /// Gathers every rank's <paramref name="mine"/> into <paramref name="all"/>, rank r's at r × mine.Length
    /// (MPI_Allgather). Collective: every rank passes the same length, and <paramref name="all"/> holds Size of them.
    /// </summary>
    public void AllGather(ReadOnlySpan<byte> mine, Span<byte> all)
    {
        if ((long)mine.Length * Size != all.Length)
            throw new ArgumentException($"AllGather needs {mine.Length} × {Size} = {(long)mine.Length * Size} bytes to receive into, got {all.Length}.", nameof(all));
        MpiAbi abi = Abi;
        fixed (byte* m = mine)
        fixed (byte* a = all)
            MpiRuntime.Check(abi.AllGather(m, mine.Length, a, handle), "MPI_Allgather");
    }

    /// <summary>
    /// Starts a barrier (MPI_Ibarrier): the request completes once every rank has started it. A rank that waits by
    /// testing now and then, instead of blocking in MPI_Barrier, does not spin a core while the slowest rank catches up.
    /// </summary>
    public MpiRequest IBarrier()
    {
        MpiRuntime.Check(Abi.Ibarrier(handle, out nint request), "MPI_Ibarrier");
        return new MpiRequest(runtime, request, default);
    }

    /// <summary>Starts <see cref="Broadcast"/> (MPI_Ibcast); <paramref name="buffer"/> stays pinned until the request completes.</summary>
    public MpiRequest IBroadcast(Memory<byte> buffer, int root)
    {
        MpiAbi abi = Abi;
        var pin = buffer.Pin();
        try
        {
            MpiRuntime.Check(abi.Ibroadcast(pin.Pointer, buffer.Length, root, handle, out nint request), "MPI_Ibcast");
            return new MpiRequest(runtime, request, pin);
        }
        catch
        {
            pin.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Starts <see cref="AllGather(ReadOnlySpan{byte}, Span{byte})"/> (MPI_Iallgather). Both buffers stay pinned until
    /// the request completes; <paramref name="all"/> is defined only after that.
    /// </summary>
    public MpiRequest IAllGather(ReadOnlyMemory<byte> mine, Memory<byte> all)
    {
        if ((long)mine.Length * Size != all.Length)
            throw new ArgumentException($"AllGather needs {mine.Length} × {Size} = {(long)mine.Length * Size} bytes to receive into, got {all.Length}.", nameof(all));
        MpiAbi abi = Abi;
        var pinMine = mine.Pin();
        var pinAll = all.Pin();
        try
        {
            MpiRuntime.Check(abi.Iallgather(pinMine.Pointer, mine.Length, pinAll.Pointer, handle, out nint request), "MPI_Iallgather");
            return new MpiRequest(runtime, request, pinAll, pinMine);
        }
        catch
        {
            pinMine.Dispose();
            pinAll.Dispose();
            throw;
        }
    }

    /// <summary>Gathers one value per rank; element r of the result is rank r's <paramref name="value"/>. Collective.</summary>
    public long[] AllGather(long value)
    {
        var all = new long[Size];
        AllGather(MemoryMarshal.AsBytes(new ReadOnlySpan<long>(in value)), MemoryMarshal.AsBytes(all.AsSpan()));
        return all;
    }

    /// <summary>
    /// Ends every rank of the job (MPI_Abort); the launcher exits with a failure status. For a rank that cannot go on
    /// and must not leave the others waiting for it.
    /// </summary>
    [DoesNotReturn]
    public void Abort(int errorCode)
    {
        MpiRuntime.Check(Abi.Abort(handle, errorCode), "MPI_Abort");
        throw new InvalidOperationException("MPI_Abort returned.");
    }

    /// <summary>Frees a communicator split from another one (MPI_Comm_free); World is left to the runtime.</summary>
    public void Dispose()
    {
        if (!owned || handle == 0) return;
        nint h = handle;
        handle = 0;
        if (runtime.IsFinalized) return;   // MPI_Finalize already released it
        MpiRuntime.Check(runtime.Abi.CommFree(h), "MPI_Comm_free");
    }

    private MpiAbi Abi
    {
        get
        {
            ObjectDisposedException.ThrowIf(handle == 0, this);
            return runtime.Abi;
        }
    }
}
