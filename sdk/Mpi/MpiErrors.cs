namespace Hpc.Mpi;

/// <summary>
/// No usable MPI library was found on this node: none loads, or the one that loads does not match the launcher.
/// Callers treat it as "no fan-out here" and fetch from the cache tier directly; the message lists every library that
/// was tried and why each one was refused.
/// </summary>
public sealed class MpiUnavailableException : Exception
{
    /// <summary>Creates the exception from the names or paths tried, each with the reason it was refused.</summary>
    public MpiUnavailableException(IReadOnlyList<string> tried, Exception? inner = null)
        : base("No usable MPI library was found; tried " + string.Join("; ", tried)
               + ". Install Open MPI or MPICH, or set HPCDATA_MPI_LIBRARY to the library's path.", inner)
        => Tried = tried;

    /// <summary>What was tried, in order, each with the reason it was refused.</summary>
    public IReadOnlyList<string> Tried { get; }
}

/// <summary>An MPI call returned an error code (the communicators are set to return errors instead of aborting).</summary>
public sealed class MpiException : Exception
{
    /// <summary>Creates the exception for <paramref name="call"/> returning <paramref name="errorCode"/>.</summary>
    public MpiException(string call, int errorCode, string errorText)
        : base($"{call} failed with MPI error {errorCode}: {errorText}")
    {
        Call = call;
        ErrorCode = errorCode;
    }

    /// <summary>The MPI function that failed, e.g. <c>MPI_Isend</c>.</summary>
    public string Call { get; }

    /// <summary>The code the library returned; its meaning is the library's own beyond 0 = success.</summary>
    public int ErrorCode { get; }
}
