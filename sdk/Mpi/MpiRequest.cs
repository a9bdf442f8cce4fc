using System.Buffers;

namespace Hpc.Mpi;

/// <summary>
/// A send or receive in flight (MPI_Request), started by <see cref="Communicator.ISend"/> or
/// <see cref="Communicator.IReceive"/>. It holds its buffer pinned until it completes — by <see cref="Wait"/>,
/// <see cref="Test"/>, <see cref="WaitAll"/> or <see cref="WaitAny"/> — and unpins it then. A request dropped
/// without completing keeps its buffer pinned for good: a leak, never memory the library still writes to being moved.
/// </summary>
public sealed class MpiRequest : IDisposable
{
    private readonly MpiRuntime runtime;
    private nint handle;
    private MemoryHandle pin, second;

    internal MpiRequest(MpiRuntime runtime, nint handle, MemoryHandle pin, MemoryHandle second = default)
    {
        this.runtime = runtime;
        this.handle = handle;
        this.pin = pin;
        this.second = second;
        Complete(handle);
    }

    /// <summary>Whether the operation has completed (as last seen by a wait or test) and its buffer is free again.</summary>
    public bool IsCompleted { get; private set; }

    /// <summary>Blocks until the operation completes (MPI_Wait).</summary>
    public void Wait()
    {
        if (IsCompleted) return;
        int rc = runtime.Abi.Wait(ref handle);
        Complete(handle);
        MpiRuntime.Check(rc, "MPI_Wait");
    }

    /// <summary>Returns whether the operation has completed, without blocking (MPI_Test).</summary>
    public bool Test()
    {
        if (IsCompleted) return true;
        int rc = runtime.Abi.Test(ref handle, out bool done);
        if (done) Complete(runtime.Abi.RequestNull);
        MpiRuntime.Check(rc, "MPI_Test");
        return IsCompleted;
    }

    /// <summary>Blocks until every request has completed (MPI_Waitall). Completed ones may be among them.</summary>
    public static void WaitAll(params ReadOnlySpan<MpiRequest> requests)
    {
        if (requests.IsEmpty) return;
        MpiAbi abi = requests[0].runtime.Abi;
        Span<nint> handles = requests.Length <= 128 ? stackalloc nint[requests.Length] : new nint[requests.Length];
        for (int i = 0; i < requests.Length; i++) handles[i] = requests[i].IsCompleted ? abi.RequestNull : requests[i].handle;
        int rc = abi.WaitAll(handles);
        // On an error some requests may have completed and others not; each one's handle says which.
        for (int i = 0; i < requests.Length; i++) if (!requests[i].IsCompleted) requests[i].Complete(handles[i]);
        MpiRuntime.Check(rc, "MPI_Waitall");
    }

    /// <summary>
    /// Blocks until one of the pending requests completes (MPI_Waitany) and returns its index, or -1 if none was
    /// pending. Call it again to wait for the next one.
    /// </summary>
    public static int WaitAny(params ReadOnlySpan<MpiRequest> requests)
    {
        if (requests.IsEmpty) return -1;
        MpiAbi abi = requests[0].runtime.Abi;
        Span<nint> handles = requests.Length <= 128 ? stackalloc nint[requests.Length] : new nint[requests.Length];
        for (int i = 0; i < requests.Length; i++) handles[i] = requests[i].IsCompleted ? abi.RequestNull : requests[i].handle;
        int rc = abi.WaitAny(handles, out int index);
        if (index >= 0) requests[index].Complete(handles[index]);
        MpiRuntime.Check(rc, "MPI_Waitany");
        return index;
    }

    /// <summary>
    /// Cancels the operation if it is still pending (MPI_Cancel) and waits for it to finish, so the buffer can be
    /// unpinned safely. A receive ends at once; a send some libraries cannot cancel ends when its receiver takes it.
    /// </summary>
    public void Dispose()
    {
        if (IsCompleted || runtime.IsFinalized) return;
        int rc = runtime.Abi.Cancel(ref handle);
        if (rc == 0) rc = runtime.Abi.Wait(ref handle);
        if (rc == 0) Complete(handle);
    }

    private void Complete(nint currentHandle)
    {
        if (IsCompleted || currentHandle != runtime.Abi.RequestNull) return;
        handle = currentHandle;
        IsCompleted = true;
        pin.Dispose();
        pin = default;
        second.Dispose();
        second = default;
    }
}
