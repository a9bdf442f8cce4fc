using Hpc.CommonData;
using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent.Pipe;

/// <summary>The pipe server's log messages, source-generated with stable event ids so operators can filter on them.</summary>
internal static partial class Log
{
    [LoggerMessage(1, LogLevel.Information, "Node agent {Node} serving pipe {Pipe}, data in {Directory}, budget {Budget}")]
    public static partial void Serving(ILogger logger, string node, string pipe, string directory, string budget);

    [LoggerMessage(2, LogLevel.Critical, "Node agent cannot serve pipe {Pipe}: {Error}")]
    public static partial void CannotServe(ILogger logger, string pipe, string error);

    [LoggerMessage(3, LogLevel.Warning, "Removing stale pipe socket {Path} left by an agent that did not shut down")]
    public static partial void StaleSocket(ILogger logger, string path);

    [LoggerMessage(4, LogLevel.Warning, "Cannot open socket {Path} to all users ({Reason}); only the agent's user can connect")]
    public static partial void SocketNotOpenToAll(ILogger logger, string path, string reason);

    [LoggerMessage(10, LogLevel.Warning, "Accept failed: {Error}")]
    public static partial void AcceptFailed(ILogger logger, string error);

    [LoggerMessage(11, LogLevel.Warning, "Refusing connection: {Max} already open")]
    public static partial void TooManyConnections(ILogger logger, int max);

    [LoggerMessage(12, LogLevel.Warning, "Closing pipe connection after a bad frame: {Error}")]
    public static partial void BadFrame(ILogger logger, string error);

    [LoggerMessage(13, LogLevel.Error, "Pipe connection failed")]
    public static partial void ConnectionFailed(ILogger logger, Exception error);

    [LoggerMessage(20, LogLevel.Error, "Request {Op} {Dataset} failed")]
    public static partial void RequestFailed(ILogger logger, Exception error, string op, string? dataset);

    [LoggerMessage(21, LogLevel.Warning, "Refused {Op} of {Dataset} to pid {Pid} (uid {Uid}): {Error}")]
    public static partial void Refused(ILogger logger, string op, string? dataset, int? pid, uint? uid, string error);

    [LoggerMessage(22, LogLevel.Information, "Released pin {Pin} and evicted {Dataset} for uid {Uid}")]
    public static partial void ReleasedAndEvicted(ILogger logger, string? pin, string dataset, uint? uid);

    [LoggerMessage(30, LogLevel.Warning, "Closing pipe connection after a bad ingest manifest frame: {Error}")]
    public static partial void BadIngestManifest(ILogger logger, string error);

    [LoggerMessage(31, LogLevel.Error, "Ingest of {Dataset} {Version} refused")]
    public static partial void IngestFailed(ILogger logger, Exception error, string? dataset, string? version);

    [LoggerMessage(32, LogLevel.Warning, "Ingest of {Dataset} {Version} from pid {Pid} (uid {Uid}) refused: {Error}")]
    public static partial void IngestRefused(ILogger logger, string? dataset, string? version, int? pid, uint? uid, string error);

    [LoggerMessage(33, LogLevel.Warning, "Ingest of {Version} broken off: the connection ended before its last frame")]
    public static partial void IngestBrokenOff(ILogger logger, string version);

    [LoggerMessage(34, LogLevel.Warning, "Closing pipe connection after a failed ingest: {Error}")]
    public static partial void IngestAborted(ILogger logger, string error);
}
