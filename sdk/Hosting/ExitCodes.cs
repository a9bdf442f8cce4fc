namespace Hpc.CommonData.Hosting;

/// <summary>
/// Exit codes of every command, decided here only. Failures whose kind is known use the values of BSD's sysexits.h,
/// which operators' scripts already know, so a Slurm prolog or an epilog can tell a missing dataset (fail the job) from
/// a cache tier that is down or busy (requeue) from a node that got damaged bytes (drain it).
/// </summary>
public static class ExitCodes
{
    public const int Ok = 0;
    /// <summary>The command ran and failed for a reason of no kind below (the line on stderr says why).</summary>
    public const int Failed = 1;
    /// <summary>The command line was wrong; nothing was done.</summary>
    public const int Usage = 2;
    /// <summary>Bytes failed verification (checksum, length, content hash); nothing damaged was handed on (EX_DATAERR).</summary>
    public const int Integrity = 65;
    /// <summary>No such dataset, version, file or account (EX_NOINPUT).</summary>
    public const int NotFound = 66;
    /// <summary>A cache host or the node agent cannot be reached or went away (EX_UNAVAILABLE).</summary>
    public const int Unavailable = 69;
    /// <summary>A memory or disk budget, or the disk, cannot take the data (EX_CANTCREAT).</summary>
    public const int NoSpace = 73;
    /// <summary>A local file could not be read, or changed while it was read (EX_IOERR): a stage of a file still being written.</summary>
    public const int IoError = 74;
    /// <summary>Worth trying again later: a peer stayed silent too long, or a per-user limit was reached (EX_TEMPFAIL).</summary>
    public const int TryLater = 75;
    /// <summary>A peer broke its protocol (EX_PROTOCOL).</summary>
    public const int Protocol = 76;
    /// <summary>Authentication failed or the account may not do this (EX_NOPERM).</summary>
    public const int Denied = 77;
    /// <summary>Cancelled by SIGINT / SIGTERM after cleaning up (128 + SIGINT, as shells report it).</summary>
    public const int Cancelled = 130;

    /// <summary>The exit code of a failure of kind <paramref name="kind"/>.</summary>
    public static int For(ErrorCode kind) => kind switch
    {
        ErrorCode.BadRequest => Usage,
        ErrorCode.NotFound => NotFound,
        ErrorCode.Integrity => Integrity,
        ErrorCode.Unavailable => Unavailable,
        ErrorCode.NoSpace => NoSpace,
        ErrorCode.AccessDenied => Denied,
        ErrorCode.Timeout or ErrorCode.Limit => TryLater,
        ErrorCode.Protocol => Protocol,
        _ => Failed,
    };

    /// <summary>
    /// The kind of failure a program of ours said with <paramref name="code"/>, for a launcher that only sees another
    /// process's exit (node prep's agent): its class travels on instead of becoming "unreachable".
    /// </summary>
    public static ErrorCode KindOf(int code) => code switch
    {
        Usage => ErrorCode.BadRequest,
        NotFound => ErrorCode.NotFound,
        Integrity => ErrorCode.Integrity,
        Unavailable => ErrorCode.Unavailable,
        NoSpace => ErrorCode.NoSpace,
        Denied => ErrorCode.AccessDenied,
        TryLater => ErrorCode.Limit,
        Protocol => ErrorCode.Protocol,
        _ => ErrorCode.Internal,
    };

    /// <summary>The exit code of <paramref name="e"/>: a malformed value is the command line's fault, the rest by kind.</summary>
    public static int Of(Exception e) => e is FormatException or ArgumentException ? Usage
        : e is CommonDataException c ? For(c.Code)
        : e is InvalidOperationException or System.Text.Json.JsonException ? Failed
        : For(CommonDataException.From(e).Code);

    /// <summary>Failures that are the world's fault, not a bug: reported as one line, no stack trace.</summary>
    public static bool IsExpected(Exception e) => e is CommonDataException or IOException or UnauthorizedAccessException or TimeoutException
        or InvalidDataException or FormatException or ArgumentException or InvalidOperationException or System.Text.Json.JsonException
        or System.Net.Sockets.SocketException;

    /// <summary>Writes <c>who: message</c> on stderr and returns the exit code for <paramref name="e"/>.</summary>
    public static int Report(string who, Exception e)
    {
        Console.Error.WriteLine($"{who}: {e.Message}");
        return Of(e);
    }
}
