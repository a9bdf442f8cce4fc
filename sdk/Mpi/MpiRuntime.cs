using System.Runtime.InteropServices;
using System.Text;

namespace Hpc.Mpi;

/// <summary>The thread support MPI is asked for and grants (MPI_THREAD_*; the values are the same in every MPI).</summary>
public enum MpiThreadLevel
{
    /// <summary>Only one thread exists that calls MPI.</summary>
    Single = 0,
    /// <summary>Many threads, but only the one that initialized MPI calls it.</summary>
    Funneled = 1,
    /// <summary>Any thread calls MPI, never two at once.</summary>
    Serialized = 2,
    /// <summary>Any thread calls MPI at any time.</summary>
    Multiple = 3,
}

/// <summary>
/// MPI in this process: initialized by <see cref="Initialize"/>, finalized by <see cref="Dispose"/>. MPI allows one
/// initialization per process, so there is at most one runtime, and none again after it was disposed.
/// </summary>
public sealed unsafe class MpiRuntime : IDisposable
{
    private static readonly Lock Gate = new();
    private static MpiRuntime? current;

    private readonly MpiAbi abi;
    private readonly bool ownsInitialization;
    private string? implementation;
    private bool finalized;

    private MpiRuntime(MpiAbi abi, bool ownsInitialization, MpiThreadLevel provided)
    {
        this.abi = abi;
        this.ownsInitialization = ownsInitialization;
        ProvidedThreadLevel = provided;
        World = new Communicator(this, abi.CommWorld, owned: false);
    }

    /// <summary>
    /// Loads the node's MPI library and initializes MPI (MPI_Init_thread) asking for <paramref name="required"/>;
    /// the level granted is <see cref="ProvidedThreadLevel"/>. If something else in the process already initialized
    /// MPI, the runtime uses it and leaves finalizing to that owner.
    /// </summary>
    /// <exception cref="MpiUnavailableException">
    /// No MPI library could be loaded, or the one loaded does not match the launcher: fetch directly instead.
    /// </exception>
    /// <param name="required">The thread level asked for.</param>
    /// <param name="controlOnly">This process sends only small control messages over MPI (its data travels on its own
    /// sockets): MPI may skip probing for a high-speed fabric it would not use (<see cref="MpiLibrary.ControlOnlyDefaults"/>).</param>
    /// <exception cref="InvalidOperationException">A runtime is already open, or MPI was finalized in this process.</exception>
    public static MpiRuntime Initialize(MpiThreadLevel required = MpiThreadLevel.Single, bool controlOnly = false)
    {
        if (controlOnly) MpiLibrary.PrepareForControlOnly();
        MpiAbi abi = MpiLibrary.Abi;
        lock (Gate)
        {
            if (current is { finalized: false }) throw new InvalidOperationException("MPI is already initialized by an open MpiRuntime in this process; use that one.");
            int flag;
            Check(MpiCommonNative.MPI_Finalized(&flag), "MPI_Finalized");
            if (flag != 0) throw new InvalidOperationException("MPI was finalized in this process; MPI cannot be initialized twice.");
            Check(MpiCommonNative.MPI_Initialized(&flag), "MPI_Initialized");
            bool owns = flag == 0;
            int provided = (int)required;
            if (owns)
            {
                Check(MpiCommonNative.MPI_Init_thread(null, null, (int)required, &provided), "MPI_Init_thread");
            }
            var runtime = new MpiRuntime(abi, owns, (MpiThreadLevel)provided);
            // The default handler aborts the whole job on any error; the fan-out wants an exception it can answer by
            // falling back to the cache tier. Communicators split from World inherit the handler.
            Check(abi.SetErrorsReturn(abi.CommWorld), "MPI_Comm_set_errhandler");
            int launched = LaunchedRanks();
            if (owns && runtime.World.Size == 1 && launched > 1)
            {
                // The other family's library does not speak this launcher's protocol and comes up as a singleton:
                // every rank would believe it is alone and fetch everything itself.
                runtime.Dispose();
                throw new MpiUnavailableException([$"{MpiLibrary.Name} ({abi.Family}): the launcher started {launched} ranks but the library sees a world of 1, so it does not match the launcher"]);
            }
            current = runtime;
            return runtime;
        }
    }

    /// <summary>The thread support MPI granted; it may be less than was asked for.</summary>
    public MpiThreadLevel ProvidedThreadLevel { get; }

    /// <summary>All ranks of the job (MPI_COMM_WORLD).</summary>
    public Communicator World { get; }

    /// <summary>The handle ABI of the loaded library.</summary>
    public MpiAbiFamily AbiFamily => abi.Family;

    /// <summary>The library that was loaded: the value of HPCDATA_MPI_LIBRARY or the probed name, e.g. libmpi.so.40.</summary>
    public string LibraryName => MpiLibrary.Name;

    /// <summary>The library's own description of itself (MPI_Get_library_version), e.g. "MPICH Version: 4.0.2 …".</summary>
    public string Implementation => implementation ??= ReadImplementation();

    internal bool IsFinalized => finalized;

    internal MpiAbi Abi
    {
        get
        {
            ObjectDisposedException.ThrowIf(finalized, this);
            return abi;
        }
    }

    /// <summary>Finalizes MPI (MPI_Finalize) if this runtime initialized it. Every rank must do so.</summary>
    public void Dispose()
    {
        lock (Gate)
        {
            if (finalized) return;
            finalized = true;
            if (!ownsInitialization) return;
            int flag;
            Check(MpiCommonNative.MPI_Finalized(&flag), "MPI_Finalized");
            if (flag == 0) Check(MpiCommonNative.MPI_Finalize(), "MPI_Finalize");
        }
    }

    private static int LaunchedRanks() =>
        int.TryParse(Environment.GetEnvironmentVariable("OMPI_COMM_WORLD_SIZE") ?? Environment.GetEnvironmentVariable("PMI_SIZE"), out int n) ? n : 0;

    /// <summary>Throws <see cref="MpiException"/> naming <paramref name="call"/> and the library's error text if <paramref name="code"/> is not MPI_SUCCESS.</summary>
    internal static void Check(int code, string call)
    {
        if (code != 0) throw new MpiException(call, code, ErrorText(code));
    }

    private static string ErrorText(int code)
    {
        // MPI_MAX_ERROR_STRING is 512 in MPICH and MS-MPI, 256 in Open MPI.
        byte* text = stackalloc byte[1024];
        int length = 0;
        if (MpiCommonNative.MPI_Error_string(code, text, &length) != 0 || length <= 0) return "(the library gave no error text)";
        return Encoding.UTF8.GetString(text, Math.Min(length, 1024)).TrimEnd('\0', ' ', '\n');
    }

    private static string ReadImplementation()
    {
        // MPI_MAX_LIBRARY_VERSION_STRING is 8192 in MPICH (it lists its configure line), 256 in Open MPI.
        byte[] text = new byte[8192];
        int length = 0;
        fixed (byte* p = text) Check(MpiCommonNative.MPI_Get_library_version(p, &length), "MPI_Get_library_version");
        return Encoding.UTF8.GetString(text, 0, Math.Clamp(length, 0, text.Length)).TrimEnd('\0', ' ', '\n');
    }
}
