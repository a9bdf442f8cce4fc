using System.Reflection;
using System.Runtime.InteropServices;

namespace Hpc.Mpi;

/// <summary>Which handle ABI the loaded MPI library uses.</summary>
public enum MpiAbiFamily
{
    /// <summary>MPICH and its ABI relatives (Intel MPI, MS-MPI): 32-bit integer handles, constants fixed in mpi.h.</summary>
    Mpich,

    /// <summary>Open MPI: handles are pointers; predefined ones are addresses of globals the library exports.</summary>
    OpenMpi,
}

/// <summary>Finds and loads the node's MPI library once per process and binds the import name to it.</summary>
internal static class MpiLibrary
{
    /// <summary>The variable that names the library explicitly (a path or a name dlopen/LoadLibrary can find).</summary>
    internal const string PathVariable = "HPCDATA_MPI_LIBRARY";

    private static readonly Lock Gate = new();
    private static (nint Handle, string Name, MpiAbi Abi)? loaded;

    /// <summary>The library's handle ABI; loads the library on first use.</summary>
    internal static MpiAbi Abi => Load().Abi;

    /// <summary>What was loaded (the value of HPCDATA_MPI_LIBRARY or the probed name).</summary>
    internal static string Name => Load().Name;

    /// <summary>The names tried, in order, when HPCDATA_MPI_LIBRARY is not set.</summary>
    /// <remarks>
    /// Open MPI and MPICH are often installed side by side, and a rank must load the library its launcher speaks to —
    /// the other one would come up as a singleton of size 1. The launcher says who it is in the environment (Open
    /// MPI's mpirun sets OMPI_COMM_WORLD_SIZE; Hydra, MS-MPI's and Intel MPI's launchers set PMI_RANK/PMI_SIZE), so the
    /// matching family goes first; with neither, the order is Open MPI, MPICH, the MPICH-ABI name, MS-MPI.
    /// </remarks>
    internal static IReadOnlyList<string> ProbeOrder(Func<string, string?> environment)
    {
        string[] openMpi = ["libmpi.so.40"];
        string[] mpich = ["libmpich.so.12", "libmpi.so.12", "msmpi.dll"];
        bool underMpich = environment("PMI_RANK") is not null || environment("PMI_SIZE") is not null;
        bool underOpenMpi = environment("OMPI_COMM_WORLD_SIZE") is not null;
        return underMpich && !underOpenMpi ? [.. mpich, .. openMpi] : [.. openMpi, .. mpich];
    }

    private static (nint Handle, string Name, MpiAbi Abi) Load()
    {
        lock (Gate)
        {
            if (loaded is { } done) return done;
            PrepareEnvironment();
            var tried = new List<string>();
            string? explicitPath = Environment.GetEnvironmentVariable(PathVariable);
            bool named = !string.IsNullOrWhiteSpace(explicitPath);
            // A library named explicitly is the operator's choice: failing to load it is an error, not a cue to pick
            // another MPI that may not match the launcher.
            IReadOnlyList<string> candidates = named ? [explicitPath!] : ProbeOrder(Environment.GetEnvironmentVariable);
            foreach (string candidate in candidates)
            {
                nint handle;
                try
                {
                    handle = NativeLibrary.Load(candidate);
                }
                catch (Exception e) when (e is DllNotFoundException or BadImageFormatException)
                {
                    // A probed name is simply absent on most nodes; a named one deserves the loader's reason.
                    tried.Add(named ? $"{candidate} (from {PathVariable}): {e.Message}" : candidate + ": not found");
                    continue;
                }
                MpiAbi? abi = MpiAbi.Detect(handle);
                if (abi is null)
                {
                    tried.Add(candidate + ": loaded, but exports no MPI_Init_thread");
                    NativeLibrary.Free(handle);
                    continue;
                }
                NativeLibrary.SetDllImportResolver(typeof(MpiLibrary).Assembly, Resolve);
                loaded = (handle, candidate, abi);
                return loaded.Value;
            }
            throw new MpiUnavailableException(tried);
        }
    }

    /// <summary>UCX settings a .NET process needs, each applied unless the operator set that variable.</summary>
    /// <remarks>
    /// UCX runs under MPICH's ch4:ucx and Open MPI's pml ucx. It reads its configuration when libucs is loaded — with
    /// the MPI library, before MPI_Init — and from the C environment, which Environment.SetEnvironmentVariable does
    /// not change on Unix: hence setenv, before the first load.
    /// <list type="bullet">
    /// <item>UCX_ERROR_SIGNALS empty: UCX's own SIGSEGV/SIGBUS handlers take the signal the .NET runtime turns into
    /// NullReferenceException and kill the rank with a UCX backtrace (seen with MPICH 4.0.2).</item>
    /// <item>UCX_MEM_EVENTS=no: to learn of memory being unmapped, UCX rewrites the first instructions of libc's mmap,
    /// munmap, madvise, brk and sbrk in place ("bistro" hooks) while MPI initializes. A .NET process always has other
    /// threads calling those (the GC, the thread pool), and one that runs into a half-written instruction dies of
    /// SIGILL: a fan-out rank did, in brk, under srun with MPICH 4.0.2 and UCX 1.13, and the other ranks then waited for
    /// it; ranks whose threads allocate throughout MPI_Init crashed in 14 of 30 launches with the hooks, none without. Without the events UCX keeps no registration cache (it registers memory per transfer on RDMA fabrics), and
    /// its TCP transport does not use one.</item>
    /// </list>
    /// </remarks>
    internal static readonly IReadOnlyList<(string Name, string Value)> UcxDefaults = [("UCX_ERROR_SIGNALS", ""), ("UCX_MEM_EVENTS", "no")];

    /// <summary>
    /// Open MPI's point-to-point layer for a process whose MPI carries only a few small collectives (the bulk data
    /// going over its own sockets): ob1 over the byte-transfer layers, applied unless the operator chose the layer or
    /// a matching transport (<c>OMPI_MCA_pml</c>, <c>OMPI_MCA_mtl</c>).
    /// </summary>
    /// <remarks>
    /// Left to choose, Open MPI 4.1 first tries the cm layer, whose libfabric transport initializes every provider it
    /// was built with to find out whether the node has a fabric: 4 ranks on one 2-core node spent 0.42–0.51 s in
    /// MPI_Init, against 0.19–0.26 s with ob1 (three launches each). Nothing the collectives need is lost: ob1 reaches
    /// every rank the fan-out's TCP ring can reach. MPICH ignores the variable.
    /// </remarks>
    internal static readonly IReadOnlyList<(string Name, string Value)> ControlOnlyDefaults = [("OMPI_MCA_pml", "ob1")];

    /// <summary>Applies <see cref="ControlOnlyDefaults"/> (before MPI_Init, which reads them) unless the operator chose.</summary>
    internal static void PrepareForControlOnly()
    {
        if (OperatingSystem.IsWindows()) return;
        if (Environment.GetEnvironmentVariable("OMPI_MCA_pml") is not null || Environment.GetEnvironmentVariable("OMPI_MCA_mtl") is not null) return;
        SetUnlessSet(ControlOnlyDefaults);
    }

    private static void PrepareEnvironment()
    {
        if (OperatingSystem.IsWindows()) return;
        SetUnlessSet(UcxDefaults);
    }

    private static void SetUnlessSet(IReadOnlyList<(string Name, string Value)> defaults)
    {
        foreach (var (name, value) in defaults)
        {
            try { _ = LibC.setenv(name, value, overwrite: 0); }
            catch (DllNotFoundException) { return; }   // not glibc: UCX is unlikely there, and MPI still works without this
            catch (EntryPointNotFoundException) { return; }
        }
    }

    private static nint Resolve(string name, Assembly assembly, DllImportSearchPath? searchPath) =>
        name == MpiCommonNative.Library && loaded is { } done ? done.Handle : 0;
}

internal static partial class LibC
{
    [LibraryImport("libc.so.6", StringMarshalling = StringMarshalling.Utf8)]
    internal static partial int setenv(string name, string value, int overwrite);
}

/// <summary>
/// The handle ABI of the loaded library: its predefined handles and constants, and the calls whose signatures depend on
/// the handle type. Handles are carried as <see cref="nint"/> either way; MPICH's ints are sign-extended into it and
/// truncated back.
/// </summary>
internal abstract unsafe class MpiAbi
{
    internal abstract MpiAbiFamily Family { get; }
    internal abstract nint CommWorld { get; }
    internal abstract nint CommNull { get; }
    internal abstract nint RequestNull { get; }

    internal static MpiAbi? Detect(nint library)
    {
        if (!NativeLibrary.TryGetExport(library, "MPI_Init_thread", out _)) return null;
        return NativeLibrary.TryGetExport(library, "ompi_mpi_comm_world", out _) ? new OpenMpiAbi(library) : new MpichAbi();
    }

    internal abstract int CommRank(nint comm, out int rank);
    internal abstract int CommSize(nint comm, out int size);
    internal abstract int SetErrorsReturn(nint comm);
    internal abstract int SplitShared(nint comm, int key, out nint newComm);
    internal abstract int CommFree(nint comm);
    internal abstract int Barrier(nint comm);
    internal abstract int Send(void* buffer, int count, int destination, int tag, nint comm);
    internal abstract int Receive(void* buffer, int count, int source, int tag, nint comm);
    internal abstract int Isend(void* buffer, int count, int destination, int tag, nint comm, out nint request);
    internal abstract int Irecv(void* buffer, int count, int source, int tag, nint comm, out nint request);
    internal abstract int Wait(ref nint request);
    internal abstract int Test(ref nint request, out bool completed);
    internal abstract int Cancel(ref nint request);
    internal abstract int WaitAll(Span<nint> requests);
    internal abstract int WaitAny(Span<nint> requests, out int index);
    internal abstract int Broadcast(void* buffer, int count, int root, nint comm);
    internal abstract int AllGather(void* mine, int count, void* all, nint comm);
    internal abstract int Abort(nint comm, int errorCode);
    internal abstract int Ibarrier(nint comm, out nint request);
    internal abstract int Ibroadcast(void* buffer, int count, int root, nint comm, out nint request);
    internal abstract int Iallgather(void* mine, int count, void* all, nint comm, out nint request);
}

/// <summary>MPICH, Intel MPI, MS-MPI. Values from MPICH 4.0.2's mpi.h; MS-MPI's mpi.h has the same ones.</summary>
internal sealed unsafe class MpichAbi : MpiAbi
{
    private const int MPI_COMM_WORLD = 0x44000000;
    private const int MPI_COMM_NULL = 0x04000000;
    private const int MPI_REQUEST_NULL = 0x2c000000;
    private const int MPI_BYTE = 0x4c00010d;
    private const int MPI_ERRORS_RETURN = 0x54000001;
    private const int MPI_INFO_NULL = 0x1c000000;
    private const int MPI_COMM_TYPE_SHARED = 1;
    private const nint MPI_STATUS_IGNORE = 1;      // (MPI_Status*)1, and MPI_STATUSES_IGNORE likewise
    private const int MPI_UNDEFINED = -32766;

    internal override MpiAbiFamily Family => MpiAbiFamily.Mpich;
    internal override nint CommWorld => MPI_COMM_WORLD;
    internal override nint CommNull => MPI_COMM_NULL;
    internal override nint RequestNull => MPI_REQUEST_NULL;

    internal override int CommRank(nint comm, out int rank) { int r; int rc = MpichNative.MPI_Comm_rank((int)comm, &r); rank = r; return rc; }
    internal override int CommSize(nint comm, out int size) { int s; int rc = MpichNative.MPI_Comm_size((int)comm, &s); size = s; return rc; }
    internal override int SetErrorsReturn(nint comm) => MpichNative.MPI_Comm_set_errhandler((int)comm, MPI_ERRORS_RETURN);

    internal override int SplitShared(nint comm, int key, out nint newComm)
    {
        int c;
        int rc = MpichNative.MPI_Comm_split_type((int)comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &c);
        newComm = c;
        return rc;
    }

    internal override int CommFree(nint comm) { int c = (int)comm; return MpichNative.MPI_Comm_free(&c); }
    internal override int Barrier(nint comm) => MpichNative.MPI_Barrier((int)comm);
    internal override int Send(void* buffer, int count, int destination, int tag, nint comm) => MpichNative.MPI_Send(buffer, count, MPI_BYTE, destination, tag, (int)comm);
    internal override int Receive(void* buffer, int count, int source, int tag, nint comm) => MpichNative.MPI_Recv(buffer, count, MPI_BYTE, source, tag, (int)comm, MPI_STATUS_IGNORE);

    internal override int Isend(void* buffer, int count, int destination, int tag, nint comm, out nint request)
    {
        int r = MPI_REQUEST_NULL;
        int rc = MpichNative.MPI_Isend(buffer, count, MPI_BYTE, destination, tag, (int)comm, &r);
        request = r;
        return rc;
    }

    internal override int Irecv(void* buffer, int count, int source, int tag, nint comm, out nint request)
    {
        int r = MPI_REQUEST_NULL;
        int rc = MpichNative.MPI_Irecv(buffer, count, MPI_BYTE, source, tag, (int)comm, &r);
        request = r;
        return rc;
    }

    internal override int Wait(ref nint request) { int r = (int)request; int rc = MpichNative.MPI_Wait(&r, MPI_STATUS_IGNORE); request = r; return rc; }

    internal override int Test(ref nint request, out bool completed)
    {
        int r = (int)request, flag;
        int rc = MpichNative.MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        request = r;
        completed = flag != 0;
        return rc;
    }

    internal override int Cancel(ref nint request) { int r = (int)request; int rc = MpichNative.MPI_Cancel(&r); request = r; return rc; }

    // MPI_Request is 4 bytes here, so the array handed to the library is an int[] copy of the handles.
    internal override int WaitAll(Span<nint> requests)
    {
        Span<int> handles = requests.Length <= 256 ? stackalloc int[requests.Length] : new int[requests.Length];
        for (int i = 0; i < requests.Length; i++) handles[i] = (int)requests[i];
        int rc;
        fixed (int* p = handles) rc = MpichNative.MPI_Waitall(handles.Length, p, MPI_STATUS_IGNORE);
        for (int i = 0; i < requests.Length; i++) requests[i] = handles[i];
        return rc;
    }

    internal override int WaitAny(Span<nint> requests, out int index)
    {
        Span<int> handles = requests.Length <= 256 ? stackalloc int[requests.Length] : new int[requests.Length];
        for (int i = 0; i < requests.Length; i++) handles[i] = (int)requests[i];
        int rc, found;
        fixed (int* p = handles) rc = MpichNative.MPI_Waitany(handles.Length, p, &found, MPI_STATUS_IGNORE);
        for (int i = 0; i < requests.Length; i++) requests[i] = handles[i];
        index = found == MPI_UNDEFINED ? -1 : found;
        return rc;
    }

    internal override int Broadcast(void* buffer, int count, int root, nint comm) => MpichNative.MPI_Bcast(buffer, count, MPI_BYTE, root, (int)comm);
    internal override int AllGather(void* mine, int count, void* all, nint comm) => MpichNative.MPI_Allgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, (int)comm);
    internal override int Abort(nint comm, int errorCode) => MpichNative.MPI_Abort((int)comm, errorCode);

    internal override int Ibarrier(nint comm, out nint request)
    {
        int r = MPI_REQUEST_NULL;
        int rc = MpichNative.MPI_Ibarrier((int)comm, &r);
        request = r;
        return rc;
    }

    internal override int Ibroadcast(void* buffer, int count, int root, nint comm, out nint request)
    {
        int r = MPI_REQUEST_NULL;
        int rc = MpichNative.MPI_Ibcast(buffer, count, MPI_BYTE, root, (int)comm, &r);
        request = r;
        return rc;
    }

    internal override int Iallgather(void* mine, int count, void* all, nint comm, out nint request)
    {
        int r = MPI_REQUEST_NULL;
        int rc = MpichNative.MPI_Iallgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, (int)comm, &r);
        request = r;
        return rc;
    }
}

/// <summary>Open MPI (4.x, 5.x). Predefined handles are the addresses of exported globals, so they are looked up.</summary>
internal sealed unsafe class OpenMpiAbi(nint library) : MpiAbi
{
    private readonly nint commWorld = NativeLibrary.GetExport(library, "ompi_mpi_comm_world");
    private readonly nint commNull = NativeLibrary.GetExport(library, "ompi_mpi_comm_null");
    private readonly nint requestNull = NativeLibrary.GetExport(library, "ompi_request_null");
    private readonly nint mpiByte = NativeLibrary.GetExport(library, "ompi_mpi_byte");
    private readonly nint errorsReturn = NativeLibrary.GetExport(library, "ompi_mpi_errors_return");
    private readonly nint infoNull = NativeLibrary.GetExport(library, "ompi_mpi_info_null");
    private const int MPI_COMM_TYPE_SHARED = 0;    // first member of an enum in Open MPI's mpi.h, unlike MPICH's 1
    private const nint MPI_STATUS_IGNORE = 0;      // ((MPI_Status *) 0), and MPI_STATUSES_IGNORE likewise
    private const int MPI_UNDEFINED = -32766;

    internal override MpiAbiFamily Family => MpiAbiFamily.OpenMpi;
    internal override nint CommWorld => commWorld;
    internal override nint CommNull => commNull;
    internal override nint RequestNull => requestNull;

    internal override int CommRank(nint comm, out int rank) { int r; int rc = OpenMpiNative.MPI_Comm_rank(comm, &r); rank = r; return rc; }
    internal override int CommSize(nint comm, out int size) { int s; int rc = OpenMpiNative.MPI_Comm_size(comm, &s); size = s; return rc; }
    internal override int SetErrorsReturn(nint comm) => OpenMpiNative.MPI_Comm_set_errhandler(comm, errorsReturn);

    internal override int SplitShared(nint comm, int key, out nint newComm)
    {
        nint c;
        int rc = OpenMpiNative.MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, infoNull, &c);
        newComm = c;
        return rc;
    }

    internal override int CommFree(nint comm) => OpenMpiNative.MPI_Comm_free(&comm);
    internal override int Barrier(nint comm) => OpenMpiNative.MPI_Barrier(comm);
    internal override int Send(void* buffer, int count, int destination, int tag, nint comm) => OpenMpiNative.MPI_Send(buffer, count, mpiByte, destination, tag, comm);
    internal override int Receive(void* buffer, int count, int source, int tag, nint comm) => OpenMpiNative.MPI_Recv(buffer, count, mpiByte, source, tag, comm, MPI_STATUS_IGNORE);

    internal override int Isend(void* buffer, int count, int destination, int tag, nint comm, out nint request)
    {
        nint r = requestNull;
        int rc = OpenMpiNative.MPI_Isend(buffer, count, mpiByte, destination, tag, comm, &r);
        request = r;
        return rc;
    }

    internal override int Irecv(void* buffer, int count, int source, int tag, nint comm, out nint request)
    {
        nint r = requestNull;
        int rc = OpenMpiNative.MPI_Irecv(buffer, count, mpiByte, source, tag, comm, &r);
        request = r;
        return rc;
    }

    internal override int Wait(ref nint request) { fixed (nint* r = &request) return OpenMpiNative.MPI_Wait(r, MPI_STATUS_IGNORE); }

    internal override int Test(ref nint request, out bool completed)
    {
        int flag, rc;
        fixed (nint* r = &request) rc = OpenMpiNative.MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        completed = flag != 0;
        return rc;
    }

    internal override int Cancel(ref nint request) { fixed (nint* r = &request) return OpenMpiNative.MPI_Cancel(r); }

    // MPI_Request is pointer-sized here, so the handles are handed over in place.
    internal override int WaitAll(Span<nint> requests) { fixed (nint* p = requests) return OpenMpiNative.MPI_Waitall(requests.Length, p, MPI_STATUS_IGNORE); }

    internal override int WaitAny(Span<nint> requests, out int index)
    {
        int found, rc;
        fixed (nint* p = requests) rc = OpenMpiNative.MPI_Waitany(requests.Length, p, &found, MPI_STATUS_IGNORE);
        index = found == MPI_UNDEFINED ? -1 : found;
        return rc;
    }

    internal override int Broadcast(void* buffer, int count, int root, nint comm) => OpenMpiNative.MPI_Bcast(buffer, count, mpiByte, root, comm);
    internal override int AllGather(void* mine, int count, void* all, nint comm) => OpenMpiNative.MPI_Allgather(mine, count, mpiByte, all, count, mpiByte, comm);
    internal override int Abort(nint comm, int errorCode) => OpenMpiNative.MPI_Abort(comm, errorCode);

    internal override int Ibarrier(nint comm, out nint request)
    {
        nint r = requestNull;
        int rc = OpenMpiNative.MPI_Ibarrier(comm, &r);
        request = r;
        return rc;
    }

    internal override int Ibroadcast(void* buffer, int count, int root, nint comm, out nint request)
    {
        nint r = requestNull;
        int rc = OpenMpiNative.MPI_Ibcast(buffer, count, mpiByte, root, comm, &r);
        request = r;
        return rc;
    }

    internal override int Iallgather(void* mine, int count, void* all, nint comm, out nint request)
    {
        nint r = requestNull;
        int rc = OpenMpiNative.MPI_Iallgather(mine, count, mpiByte, all, count, mpiByte, comm, &r);
        request = r;
        return rc;
    }
}
