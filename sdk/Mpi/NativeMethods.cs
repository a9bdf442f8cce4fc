using System.Runtime.InteropServices;

namespace Hpc.Mpi;

// The C entry points, declared once per handle ABI. Every set binds the same import name; MpiLibrary's resolver maps it
// to whichever library was found, and MpiAbi picks the set that matches that library's handle type. Only the calls the
// fan-out uses are here. Statuses are always passed as MPI_STATUS(ES)_IGNORE, so no MPI_Status layout is needed.

/// <summary>Calls whose signatures carry no handles, identical in every MPI.</summary>
internal static unsafe partial class MpiCommonNative
{
    internal const string Library = "hpc-mpi";

    [LibraryImport(Library)] internal static partial int MPI_Init_thread(int* argc, byte*** argv, int required, int* provided);
    [LibraryImport(Library)] internal static partial int MPI_Initialized(int* flag);
    [LibraryImport(Library)] internal static partial int MPI_Finalized(int* flag);
    [LibraryImport(Library)] internal static partial int MPI_Finalize();
    [LibraryImport(Library)] internal static partial int MPI_Get_library_version(byte* version, int* length);
    [LibraryImport(Library)] internal static partial int MPI_Error_string(int errorCode, byte* text, int* length);
}

/// <summary>MPICH, Intel MPI and MS-MPI: every handle is a 32-bit integer (mpi.h: <c>typedef int MPI_Comm;</c>).</summary>
internal static unsafe partial class MpichNative
{
    private const string Library = MpiCommonNative.Library;

    [LibraryImport(Library)] internal static partial int MPI_Comm_rank(int comm, int* rank);
    [LibraryImport(Library)] internal static partial int MPI_Comm_size(int comm, int* size);
    [LibraryImport(Library)] internal static partial int MPI_Comm_set_errhandler(int comm, int errhandler);
    [LibraryImport(Library)] internal static partial int MPI_Comm_split_type(int comm, int splitType, int key, int info, int* newComm);
    [LibraryImport(Library)] internal static partial int MPI_Comm_free(int* comm);
    [LibraryImport(Library)] internal static partial int MPI_Barrier(int comm);
    [LibraryImport(Library)] internal static partial int MPI_Send(void* buffer, int count, int datatype, int destination, int tag, int comm);
    [LibraryImport(Library)] internal static partial int MPI_Recv(void* buffer, int count, int datatype, int source, int tag, int comm, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Isend(void* buffer, int count, int datatype, int destination, int tag, int comm, int* request);
    [LibraryImport(Library)] internal static partial int MPI_Irecv(void* buffer, int count, int datatype, int source, int tag, int comm, int* request);
    [LibraryImport(Library)] internal static partial int MPI_Wait(int* request, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Test(int* request, int* flag, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Waitall(int count, int* requests, nint statuses);
    [LibraryImport(Library)] internal static partial int MPI_Waitany(int count, int* requests, int* index, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Cancel(int* request);
    [LibraryImport(Library)] internal static partial int MPI_Bcast(void* buffer, int count, int datatype, int root, int comm);
    [LibraryImport(Library)] internal static partial int MPI_Allgather(void* sendBuffer, int sendCount, int sendType, void* receiveBuffer, int receiveCount, int receiveType, int comm);
    [LibraryImport(Library)] internal static partial int MPI_Abort(int comm, int errorCode);
    [LibraryImport(Library)] internal static partial int MPI_Ibarrier(int comm, int* request);
    [LibraryImport(Library)] internal static partial int MPI_Ibcast(void* buffer, int count, int datatype, int root, int comm, int* request);
    [LibraryImport(Library)] internal static partial int MPI_Iallgather(void* sendBuffer, int sendCount, int sendType, void* receiveBuffer, int receiveCount, int receiveType, int comm, int* request);
}

/// <summary>Open MPI: every handle is a pointer to a library object (mpi.h: <c>typedef struct ompi_communicator_t *MPI_Comm;</c>).</summary>
internal static unsafe partial class OpenMpiNative
{
    private const string Library = MpiCommonNative.Library;

    [LibraryImport(Library)] internal static partial int MPI_Comm_rank(nint comm, int* rank);
    [LibraryImport(Library)] internal static partial int MPI_Comm_size(nint comm, int* size);
    [LibraryImport(Library)] internal static partial int MPI_Comm_set_errhandler(nint comm, nint errhandler);
    [LibraryImport(Library)] internal static partial int MPI_Comm_split_type(nint comm, int splitType, int key, nint info, nint* newComm);
    [LibraryImport(Library)] internal static partial int MPI_Comm_free(nint* comm);
    [LibraryImport(Library)] internal static partial int MPI_Barrier(nint comm);
    [LibraryImport(Library)] internal static partial int MPI_Send(void* buffer, int count, nint datatype, int destination, int tag, nint comm);
    [LibraryImport(Library)] internal static partial int MPI_Recv(void* buffer, int count, nint datatype, int source, int tag, nint comm, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Isend(void* buffer, int count, nint datatype, int destination, int tag, nint comm, nint* request);
    [LibraryImport(Library)] internal static partial int MPI_Irecv(void* buffer, int count, nint datatype, int source, int tag, nint comm, nint* request);
    [LibraryImport(Library)] internal static partial int MPI_Wait(nint* request, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Test(nint* request, int* flag, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Waitall(int count, nint* requests, nint statuses);
    [LibraryImport(Library)] internal static partial int MPI_Waitany(int count, nint* requests, int* index, nint status);
    [LibraryImport(Library)] internal static partial int MPI_Cancel(nint* request);
    [LibraryImport(Library)] internal static partial int MPI_Bcast(void* buffer, int count, nint datatype, int root, nint comm);
    [LibraryImport(Library)] internal static partial int MPI_Allgather(void* sendBuffer, int sendCount, nint sendType, void* receiveBuffer, int receiveCount, nint receiveType, nint comm);
    [LibraryImport(Library)] internal static partial int MPI_Abort(nint comm, int errorCode);
    [LibraryImport(Library)] internal static partial int MPI_Ibarrier(nint comm, nint* request);
    [LibraryImport(Library)] internal static partial int MPI_Ibcast(void* buffer, int count, nint datatype, int root, nint comm, nint* request);
    [LibraryImport(Library)] internal static partial int MPI_Iallgather(void* sendBuffer, int sendCount, nint sendType, void* receiveBuffer, int receiveCount, nint receiveType, nint comm, nint* request);
}
