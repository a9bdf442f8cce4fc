using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent;

/// <summary>The node agent's log messages, source-generated with stable event ids so operators can filter on them.</summary>
internal static partial class AgentLog
{
    [LoggerMessage(1, LogLevel.Information, "Node agent {Node} serving pipe {Pipe}, data in {Directory}, budget {Budget}")]
    public static partial void Serving(this ILogger logger, string node, string pipe, string directory, string budget);

    [LoggerMessage(2, LogLevel.Critical, "Node agent cannot serve pipe {Pipe}: {Error}")]
    public static partial void CannotServe(this ILogger logger, string pipe, string error);

    [LoggerMessage(5, LogLevel.Critical, "Node agent stopped serving pipe {Pipe} on an unexpected error")]
    public static partial void FailedServing(this ILogger logger, string pipe, Exception error);

    [LoggerMessage(3, LogLevel.Warning, "Removing stale pipe socket {Path} left by an agent that did not shut down")]
    public static partial void StaleSocket(this ILogger logger, string path);

    [LoggerMessage(4, LogLevel.Warning, "Cannot open socket {Path} to all users ({Reason}); only the agent's user can connect")]
    public static partial void SocketNotOpenToAll(this ILogger logger, string path, string reason);

    [LoggerMessage(10, LogLevel.Warning, "Accept failed: {Error}")]
    public static partial void AcceptFailed(this ILogger logger, string error);

    [LoggerMessage(11, LogLevel.Warning, "Refused a connection of uid {Uid}: {Error} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void ConnectionRefused(this ILogger logger, uint? uid, string error, int suppressed, double seconds);

    [LoggerMessage(14, LogLevel.Warning, "Closed a connection of uid {Uid} that sent no request within {IdleSeconds} s of connecting (--idle-timeout) ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void IdleClosed(this ILogger logger, uint? uid, double idleSeconds, int suppressed, double seconds);

    [LoggerMessage(12, LogLevel.Warning, "Closing pipe connection after a bad frame: {Error} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void BadFrame(this ILogger logger, string error, int suppressed, double seconds);

    [LoggerMessage(13, LogLevel.Error, "Pipe connection failed")]
    public static partial void ConnectionFailed(this ILogger logger, Exception error);

    [LoggerMessage(20, LogLevel.Error, "Request {Op} {Dataset} failed")]
    public static partial void RequestFailed(this ILogger logger, Exception error, string op, string? dataset);

    [LoggerMessage(21, LogLevel.Warning, "Refused {Op} of {Dataset} to pid {Pid} (uid {Uid}): {Error} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void Refused(this ILogger logger, string op, string? dataset, int? pid, uint? uid, string error, int suppressed, double seconds);

    [LoggerMessage(22, LogLevel.Information, "Released pin {Pin} and evicted {Dataset} for uid {Uid}")]
    public static partial void ReleasedAndEvicted(this ILogger logger, string? pin, string dataset, uint? uid);

    [LoggerMessage(30, LogLevel.Warning, "Closing pipe connection after a bad ingest manifest frame: {Error} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void BadIngestManifest(this ILogger logger, string error, int suppressed, double seconds);

    [LoggerMessage(31, LogLevel.Error, "Ingest of {Dataset} {Version} refused")]
    public static partial void IngestFailed(this ILogger logger, Exception error, string? dataset, string? version);

    [LoggerMessage(32, LogLevel.Warning, "Ingest of {Dataset} {Version} from pid {Pid} (uid {Uid}) refused: {Error} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void IngestRefused(this ILogger logger, string? dataset, string? version, int? pid, uint? uid, string error, int suppressed, double seconds);

    [LoggerMessage(33, LogLevel.Warning, "Ingest of {Version} broken off: the connection ended before its last frame ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void IngestBrokenOff(this ILogger logger, string version, int suppressed, double seconds);

    [LoggerMessage(34, LogLevel.Warning, "Closing pipe connection after a failed ingest: {Error} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void IngestAborted(this ILogger logger, string error, int suppressed, double seconds);

    [LoggerMessage(35, LogLevel.Warning, "Abandoning the ingest of {Version}: nothing, or less than {LeastRate}, delivered over {StallSeconds} s while a fetch of it waits (--ingest-stall-timeout, --ingest-min-rate)")]
    public static partial void IngestAbandoned(this ILogger logger, string version, double stallSeconds, string leastRate);

    [LoggerMessage(36, LogLevel.Warning, "Abandoning the ingest of {Dataset} {Version}: it delivers {IngestRate} (done in {IngestSeconds:0.#} s), while a fetch of it waiting measured its own rate from the cache tier at {OwnRate} over {ProbeSegments} segments (done in {OwnSeconds:0.#} s, at least {Margin}x sooner); the fetch completes the copy")]
    public static partial void IngestOutpaced(this ILogger logger, string dataset, string version, string ingestRate, double ingestSeconds, string ownRate, double ownSeconds, int probeSegments, double margin);

    [LoggerMessage(37, LogLevel.Information, "Keeping the ingest of {Dataset} {Version}: it delivers {IngestRate} (done in {IngestSeconds:0.#} s); a fetch of it waiting measured its own rate from the cache tier at {OwnRate} over {ProbeSegments} segments (done in {OwnSeconds:0.#} s), not {Margin}x sooner ({Why})")]
    public static partial void IngestKeptAfterProbe(this ILogger logger, string dataset, string version, string ingestRate, double ingestSeconds, string ownRate, double ownSeconds, int probeSegments, double margin, string why);


    [LoggerMessage(EventId = 100, Level = LogLevel.Warning, Message = "Cache host {Host} not reachable at start-up: {Error}")]
    public static partial void CacheHostUnreachable(this ILogger logger, string host, string error);

    [LoggerMessage(EventId = 101, Level = LogLevel.Information, Message = "Found {State} copy of {Dataset} {Version}")]
    public static partial void CopyFound(this ILogger logger, string state, string dataset, string version);

    [LoggerMessage(EventId = 102, Level = LogLevel.Warning, Message = "Discarding {File}: {Reason}")]
    public static partial void DiscardingFile(this ILogger logger, string file, string reason);

    [LoggerMessage(EventId = 103, Level = LogLevel.Information, Message = "Removing {State} copy of {Dataset} {Version} ({Bytes} bytes, last used {Last:u})")]
    public static partial void RemovingCopy(this ILogger logger, string state, string dataset, string version, long bytes, DateTimeOffset last);

    [LoggerMessage(EventId = 146, Level = LogLevel.Warning, Message = "The cache tier refuses this agent's credentials ({Error}); serving the {Copies} verified local copies this node holds until they are corrected (fetches of anything else are refused)")]
    public static partial void ServingLocalCopiesWhileRefused(this ILogger logger, string error, int copies);

    [LoggerMessage(EventId = 147, Level = LogLevel.Warning, Message = "The cache tier refuses this agent's credentials ({Error}); serving the newest local copy of {Dataset}, {Version}")]
    public static partial void ServingLocalCopyWhileRefused(this ILogger logger, string error, string dataset, string version);

    [LoggerMessage(EventId = 104, Level = LogLevel.Warning, Message = "Cache tier unreachable ({Error}); serving the newest local copy of {Dataset}, {Version}")]
    public static partial void ServingNewestLocalCopy(this ILogger logger, string error, string dataset, string version);

    [LoggerMessage(EventId = 145, Level = LogLevel.Warning, Message = "The cache tier answers but knows no latest version of {Dataset} and keeps no record of its removal; serving the local copy {Version}")]
    public static partial void ServingLocalCopyTheTierLost(this ILogger logger, string dataset, string version);

    [LoggerMessage(EventId = 105, Level = LogLevel.Error, Message = "Local copy of {Dataset} {Version} cannot be read ({Reason})")]
    public static partial void LocalCopyUnreadable(this ILogger logger, string dataset, string version, string reason);

    [LoggerMessage(EventId = 106, Level = LogLevel.Error, Message = "Local copy of {Dataset} {Version} failed verification; discarding it")]
    public static partial void LocalCopyDamaged(this ILogger logger, string dataset, string version);


    [LoggerMessage(EventId = 110, Level = LogLevel.Warning, Message = "Cannot restrict the modes of data directory {Dir} ({Reason}); other users may list it")]
    public static partial void DataDirectoryNotRestricted(this ILogger logger, string dir, string reason);

    [LoggerMessage(EventId = 111, Level = LogLevel.Warning, Message = "Data directory {Dir} does not take POSIX ACLs (errno {Errno}); copies of datasets with readers are readable " +
                                                                      "on the file system by the agent's user only, and other readers' workers get them over the pipe (stream mode)")]
    public static partial void NoPosixAcls(this ILogger logger, string dir, int errno);

    [LoggerMessage(EventId = 112, Level = LogLevel.Warning, Message = "{File} holds {Count} pins from before pins had owners; only root or the agent's user may release them")]
    public static partial void UnownedPins(this ILogger logger, string file, int count);

    [LoggerMessage(EventId = 113, Level = LogLevel.Warning, Message = "Ignoring unreadable {File}: {Reason}")]
    public static partial void PinsUnreadable(this ILogger logger, string file, string reason);

    [LoggerMessage(EventId = 114, Level = LogLevel.Warning, Message = "Could not delete {Path}: {Reason}")]
    public static partial void DeleteFailed(this ILogger logger, string path, string reason);


    [LoggerMessage(EventId = 120, Level = LogLevel.Information,
        Message = "Fetching {Dataset} {Version}: {Wanted} of {Total} segments ({Resumed} already in its partial copy, {Reused} taken from other local versions in {LocalSeconds:0.00} s)")]
    public static partial void FetchStarted(this ILogger logger, string dataset, string version, int wanted, int total, int resumed, int reused, double localSeconds);

    [LoggerMessage(EventId = 121, Level = LogLevel.Information, Message = "Published {Dataset} {Version}: {Bytes} bytes in {Seconds:0.00} s ({Rate})")]
    public static partial void FetchPublished(this ILogger logger, string dataset, string version, long bytes, double seconds, string rate);

    [LoggerMessage(EventId = 122, Level = LogLevel.Error, Message = "Fetch of {Dataset} {Version} failed: {Error}")]
    public static partial void FetchFailed(this ILogger logger, string dataset, string version, string error);

    [LoggerMessage(EventId = 123, Level = LogLevel.Warning, Message = "Could not write telemetry to {Path}: {Error}")]
    public static partial void TelemetryNotWritten(this ILogger logger, string path, string error);


    [LoggerMessage(EventId = 130, Level = LogLevel.Information, Message = "Restricted {Path} to the agent's user{Group} (it was {Mode})")]
    public static partial void FileRestricted(this ILogger logger, string path, string group, UnixFileMode mode);

    [LoggerMessage(EventId = 131, Level = LogLevel.Warning, Message = "Cannot restrict {Path} to the agent's user ({Reason}); other users may read it")]
    public static partial void FileNotRestricted(this ILogger logger, string path, string reason);

    [LoggerMessage(EventId = 148, Level = LogLevel.Warning, Message = "{Exposure}")]
    public static partial void SecretsExposed(this ILogger logger, string exposure);

    [LoggerMessage(EventId = 132, Level = LogLevel.Warning, Message = "Cannot give {Path} to admin group {Group} (errno {Errno}; the agent's user must be root or a member); " +
                                                                      "the agent's files stay readable by its user only")]
    public static partial void AdminGroupNotGiven(this ILogger logger, string path, uint group, int errno);


    [LoggerMessage(EventId = 140, Level = LogLevel.Information, Message = "Ingesting {Dataset} {Version}: {Missing} of {Total} segments missing on the node ({Reused} taken from other local versions)")]
    public static partial void IngestStarted(this ILogger logger, string dataset, string version, int missing, int total, int reused);

    [LoggerMessage(EventId = 141, Level = LogLevel.Information, Message = "Ingest of {Dataset} {Version} ended: {Accepted} accepted, {Had} already on the node, {Rejected} rejected, {Missing} still missing")]
    public static partial void IngestEnded(this ILogger logger, string dataset, string version, int accepted, int had, int rejected, int missing);

    [LoggerMessage(EventId = 142, Level = LogLevel.Warning, Message = "Ingest of {Dataset} {Version} rejected {Rejected} segments, first: {Reason} ({Suppressed} more like it not logged in the last {Seconds} s)")]
    public static partial void SegmentsRejected(this ILogger logger, string dataset, string version, int rejected, string reason, int suppressed, double seconds);

    [LoggerMessage(EventId = 143, Level = LogLevel.Error, Message = "Ingest of {Dataset} {Version} failed: {Error}")]
    public static partial void IngestWriteFailed(this ILogger logger, string dataset, string version, string error);

    [LoggerMessage(EventId = 144, Level = LogLevel.Warning, Message = "Closing the journal of {Version} failed: {Error}")]
    public static partial void JournalCloseFailed(this ILogger logger, string version, string error);
}
