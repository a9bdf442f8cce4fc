using System.Net;
using Microsoft.Extensions.Logging;

namespace Hpc.CacheHost;

/// <summary>Source-generated log messages with stable event ids, so operators can filter on them.</summary>
internal static partial class Log
{
    [LoggerMessage(1, LogLevel.Information, "Cache host listening on {EndPoint}, budget {MaxMemoryBytes} bytes, max frame {MaxFrameBytes} bytes, auth {AuthMode}")]
    public static partial void Listening(ILogger logger, EndPoint endPoint, long maxMemoryBytes, long maxFrameBytes, string authMode);

    [LoggerMessage(2, LogLevel.Information, "Cache host stopping; closing {Count} client connections")]
    public static partial void Stopping(ILogger logger, int count);

    [LoggerMessage(3, LogLevel.Warning, "The password was given with --password, which every user of this machine can read in the process list; use --password-file or HPCDATA_CACHE_PASSWORD instead")]
    public static partial void PasswordOnCommandLine(ILogger logger);

    [LoggerMessage(10, LogLevel.Debug, "Client {ClientId} connected from {Remote}")]
    public static partial void ClientConnected(ILogger logger, long clientId, EndPoint? remote);

    [LoggerMessage(11, LogLevel.Debug, "Client {ClientId} disconnected")]
    public static partial void ClientDisconnected(ILogger logger, long clientId);

    [LoggerMessage(12, LogLevel.Debug, "Client {ClientId} connection closed by peer: {Reason}")]
    public static partial void ClientConnectionLost(ILogger logger, long clientId, string reason);

    [LoggerMessage(13, LogLevel.Warning, "Client {ClientId} from {Remote} sent a malformed request and was disconnected: {Error} ({HeldBack} more such lines not written in the minute before)")]
    public static partial void ProtocolError(ILogger logger, long clientId, EndPoint? remote, string error, long heldBack);

    [LoggerMessage(21, LogLevel.Warning, "Client {ClientId} from {Remote} has given a wrong password {Failures} times; its replies are slowed ({HeldBack} more such lines not written in the minute before)")]
    public static partial void RepeatedAuthFailures(ILogger logger, long clientId, EndPoint? remote, int failures, long heldBack);

    [LoggerMessage(24, LogLevel.Warning, "Failed-AUTH budget spent for {Budget} (client {ClientId} from {Remote}, user '{User}'): AUTH is refused unchecked for a while from that address, or to that account from addresses it has not logged in from ({HeldBack} more such lines not written in the minute before)")]
    public static partial void AuthBudgetSpent(ILogger logger, string budget, long clientId, EndPoint? remote, string user, long heldBack);

    [LoggerMessage(25, LogLevel.Warning, "Client {ClientId} from {Remote} spoke plain TCP to this TLS-only host; told so and disconnected ({HeldBack} more such lines not written in the minute before)")]
    public static partial void PlainClientOnTlsHost(ILogger logger, long clientId, EndPoint? remote, long heldBack);

    [LoggerMessage(32, LogLevel.Warning, "Refused connection from {Remote}: {Cap} connections not yet logged in from that address ({HeldBack} more such lines not written in the minute before)")]
    public static partial void MaxUnauthenticatedReached(ILogger logger, EndPoint? remote, int cap, long heldBack);

    [LoggerMessage(26, LogLevel.Warning, "Refused connection from {Remote}: {MaxClients} clients already connected from that address ({HeldBack} more such lines not written in the minute before)")]
    public static partial void MaxClientsPerAddressReached(ILogger logger, EndPoint? remote, int maxClients, long heldBack);

    [LoggerMessage(27, LogLevel.Information, "Client {ClientId} from {Remote} did not authenticate within {Timeout} and was disconnected ({HeldBack} more such lines not written in the minute before)")]
    public static partial void AuthTimedOut(ILogger logger, long clientId, EndPoint? remote, TimeSpan timeout, long heldBack);

    [LoggerMessage(34, LogLevel.Warning, "Client {ClientId} from {Remote} refused at login as {Account} and disconnected: {Refusal} ({HeldBack} more such lines not written in the minute before)")]
    public static partial void MaxClientsPerAccountReached(ILogger logger, long clientId, EndPoint? remote, string account, string refusal, long heldBack);

    [LoggerMessage(35, LogLevel.Information, "Client {ClientId} from {Remote} (account {Account}) sent nothing for {Timeout} and was disconnected (--idle-timeout) ({HeldBack} more such lines not written in the minute before)")]
    public static partial void IdleTimedOut(ILogger logger, long clientId, EndPoint? remote, string account, TimeSpan timeout, long heldBack);

    [LoggerMessage(14, LogLevel.Debug, "Client {ClientId} closed with {Bytes} bytes of an unfinished request")]
    public static partial void TruncatedRequest(ILogger logger, long clientId, long bytes);

    [LoggerMessage(15, LogLevel.Error, "Client {ClientId} failed unexpectedly")]
    public static partial void ClientFault(ILogger logger, Exception exception, long clientId);

    [LoggerMessage(16, LogLevel.Warning, "Refused connection from {Remote}: {MaxClients} clients already connected ({HeldBack} more such lines not written in the minute before)")]
    public static partial void MaxClientsReached(ILogger logger, EndPoint? remote, int maxClients, long heldBack);

    [LoggerMessage(17, LogLevel.Error, "Accepting a connection failed")]
    public static partial void AcceptFailed(ILogger logger, Exception exception);

    [LoggerMessage(20, LogLevel.Debug, "Expiry sweep removed {Count} keys")]
    public static partial void Swept(ILogger logger, int count);

    [LoggerMessage(22, LogLevel.Warning, "Client {ClientId} from {Remote} refused: a request frame of {FrameBytes} bytes does not fit the memory budget ({UsedBytes} of {MaxBytes} bytes in use)")]
    public static partial void FrameOverBudget(ILogger logger, long clientId, EndPoint? remote, long frameBytes, long usedBytes, long maxBytes);

    [LoggerMessage(23, LogLevel.Information, "Client {ClientId} from {Remote} failed the TLS handshake: {Reason} ({HeldBack} more such lines not written in the minute before)")]
    public static partial void TlsHandshakeFailed(ILogger logger, long clientId, EndPoint? remote, string reason, long heldBack);

    [LoggerMessage(28, LogLevel.Information, "Client {ClientId} closed: account {Account} is no longer in the users file")]
    public static partial void AccountRemoved(ILogger logger, long clientId, string account);

    [LoggerMessage(33, LogLevel.Warning, "{Exposure}")]
    public static partial void SecretsExposed(ILogger logger, string exposure);

    [LoggerMessage(29, LogLevel.Information, "{Trigger}: {Outcome}")]
    public static partial void UsersReloaded(ILogger logger, string trigger, string outcome);

    [LoggerMessage(30, LogLevel.Error, "{Trigger}: {Outcome}")]
    public static partial void UsersNotReloaded(ILogger logger, string trigger, string outcome);

    [LoggerMessage(31, LogLevel.Warning, "SIGHUP could not be set back to its default (errno {Errno}): a host started with hangups ignored will not reload its users file on SIGHUP; ACL LOAD still does")]
    public static partial void HangupNotRestored(ILogger logger, int errno);
}
