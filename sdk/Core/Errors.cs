using System.Text.Json.Serialization;

namespace Hpc.CommonData;

/// <summary>What kind of failure a <see cref="CommonDataException"/> reports. It crosses the agent's pipe as itself,
/// spelled as in the attribute (<c>"code":"not-found"</c>).</summary>
[JsonConverter(typeof(JsonStringEnumConverter<ErrorCode>))]
public enum ErrorCode
{
    /// <summary>A fault of the system itself; the message and the component's log say more.</summary>
    [JsonStringEnumMemberName("internal")] Internal = 0,
    /// <summary>The request or the input is malformed (bad name, bad option, bad frame).</summary>
    [JsonStringEnumMemberName("bad-request")] BadRequest,
    /// <summary>No such dataset, version or file; the message names which.</summary>
    [JsonStringEnumMemberName("not-found")] NotFound,
    /// <summary>Bytes failed verification (checksum, length or content hash); they were never handed to a caller.</summary>
    [JsonStringEnumMemberName("integrity")] Integrity,
    /// <summary>A cache host or the node agent cannot be reached or went away; the message names it.</summary>
    [JsonStringEnumMemberName("unavailable")] Unavailable,
    /// <summary>A memory or disk budget, or the disk itself, cannot take the data.</summary>
    [JsonStringEnumMemberName("no-space")] NoSpace,
    /// <summary>The caller is not allowed to do this (authentication or permissions).</summary>
    [JsonStringEnumMemberName("access-denied")] AccessDenied,
    /// <summary>A peer stayed silent for longer than allowed.</summary>
    [JsonStringEnumMemberName("timeout")] Timeout,
    /// <summary>A peer broke its protocol (a malformed reply); the connection was dropped.</summary>
    [JsonStringEnumMemberName("protocol")] Protocol,
    /// <summary>
    /// A limit one user of a shared service may use was reached (connections, requests, ingests or pinned bytes on a
    /// node); the message names the limit and the option that sets it. Other users are unaffected.
    /// </summary>
    [JsonStringEnumMemberName("limit")] Limit,
}

/// <summary>
/// The one exception type the system throws for its own failures. <see cref="Code"/> says which kind; the message says
/// which dataset, version, host or file. Agent errors arrive in the worker as this same type with the same code.
/// </summary>
public class CommonDataException(ErrorCode code, string message, Exception? inner = null) : Exception(message, inner)
{
    public ErrorCode Code { get; } = code;

    /// <summary>
    /// The failure as this type: itself if it already is one, otherwise classified by what the runtime threw
    /// (a timeout, a full disk, a refused permission, a broken connection).
    /// </summary>
    public static CommonDataException From(Exception e) => e switch
    {
        CommonDataException c => c,
        TimeoutException => new CommonDataException(ErrorCode.Timeout, e.Message, e),
        UnauthorizedAccessException => new CommonDataException(ErrorCode.AccessDenied, e.Message, e),
        IOException io when IsDiskFull(io) => new CommonDataException(ErrorCode.NoSpace, e.Message, e),
        FileNotFoundException or DirectoryNotFoundException => new CommonDataException(ErrorCode.NotFound, e.Message, e),
        InvalidDataException => new CommonDataException(ErrorCode.Protocol, e.Message, e),
        IOException => new CommonDataException(ErrorCode.Unavailable, e.Message, e),
        ArgumentException or FormatException => new CommonDataException(ErrorCode.BadRequest, e.Message, e),
        _ => new CommonDataException(ErrorCode.Internal, e.Message, e),
    };

    /// <summary>True for ENOSPC / EDQUOT (Linux) and ERROR_DISK_FULL / ERROR_HANDLE_DISK_FULL (Windows).</summary>
    public static bool IsDiskFull(IOException e) => OperatingSystem.IsWindows()
        ? (e.HResult & 0xFFFF) is 112 or 39
        : e.HResult is 28 or 122;
}
