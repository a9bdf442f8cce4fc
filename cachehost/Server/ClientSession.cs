using System.IO.Pipelines;
using System.Net;
using System.Net.Security;
using System.Security.Authentication;
using System.Net.Sockets;
using System.Text;
using System.Buffers;
using Hpc.CacheHost.Resp;
using Microsoft.Extensions.Logging;

namespace Hpc.CacheHost.Server;

/// <summary>
/// One client connection: reads pipelined requests, executes each against the store as soon as its frame is
/// complete, and sends the batch's replies as one gather write before reading again.
/// </summary>
internal sealed partial class ClientSession : IDisposable
{
    // A whole 64 KB SET usually fits one receive segment, so its value is copied out of the pipe in one piece.
    private const int ReceiveBufferBytes = 128 * 1024;
    private const int MinimumReadBytes = 16 * 1024;

    private readonly Socket _socket;
    private readonly ServerContext _server;
    private readonly ILogger _logger;
    private PipeReader _reader = null!;
    private SslStream? _tls;
    private readonly RespCommand _command = new();
    private readonly ReplyBuffer _reply = new();
    private readonly SocketSender _sender = new();
    private long _commandsInBatch;
    private long _frameCharge;
    private int _failedAuths;
    private TimeSpan _authPenalty;
    private CacheUser? _user;
    private int _usersGeneration;
    private ITimer? _authDeadline;
    private bool _quitRequested;
    private byte[]? _clientName;
    private int _closed;
    /// <summary>The account whose share this connection counts against (<see cref="AccountShares"/>), or null.</summary>
    private string? _shareAccount;
    private bool _shareWriter;
    /// <summary>
    /// When the session began waiting for the client's next bytes (a timestamp); 0 while it has a request in hand or
    /// replies to send, so a client waiting on a long answer is never idle; <see cref="ClosedForIdleness"/> once closed.
    /// </summary>
    private long _idleSince;
    private const long ClosedForIdleness = -1;

    public ClientSession(long id, Socket socket, ServerContext server, ILogger logger)
    {
        Id = id;
        _socket = socket;
        _server = server;
        _logger = logger;
        Remote = socket.RemoteEndPoint;
        _usersGeneration = server.UsersGeneration;
        _user = server.Users.Required ? null : ServerContext.OpenAccess;
    }

    private static readonly TimeSpan HandshakeTimeout = TimeSpan.FromSeconds(10);

    /// <summary>Secures the connection when the host serves TLS; false (logged) when the client's handshake fails.</summary>
    private async Task<bool> OpenAsync(CancellationToken cancellationToken)
    {
        Stream stream = new NetworkStream(_socket, ownsSocket: false);
        if (_server.Tls is { } tls)
        {
            _tls = new SslStream(stream, leaveInnerStreamOpen: false);
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(HandshakeTimeout);
            try
            {
                if (!await StartsWithTlsAsync(timeout.Token))
                {
                    // A client speaking RESP in plain text reads this as an error reply, and says what is wrong instead
                    // of retrying a host it takes to be down.
                    if (_server.LogGates.PlainClients.TryPass(out long heldBack))
                        Log.PlainClientOnTlsHost(_logger, Id, Remote, heldBack);
                    await _socket.SendAsync(TlsOnlyReply, SocketFlags.None, timeout.Token);
                    return false;
                }
                await _tls.AuthenticateAsServerAsync(tls, timeout.Token);
            }
            catch (Exception ex) when (ex is AuthenticationException or IOException or SocketException || (ex is OperationCanceledException && !cancellationToken.IsCancellationRequested))
            {
                if (_server.LogGates.TlsHandshakes.TryPass(out long heldBack))
                    Log.TlsHandshakeFailed(_logger, Id, Remote, ex.GetBaseException().Message, heldBack);
                return false;
            }
            stream = _tls;
        }
        _reader = PipeReader.Create(stream,
            new StreamPipeReaderOptions(bufferSize: ReceiveBufferBytes, minimumReadSize: MinimumReadBytes, leaveOpen: true));
        return true;
    }

    private static readonly byte[] TlsOnlyReply =
        "-ERR this host accepts TLS connections only: connect with TLS (hpcdata: --cache-tls or --cache-ca; redis-cli: --tls)\r\n"u8.ToArray();

    /// <summary>
    /// Whether the client's first byte opens a TLS handshake record (content type 22), looked at without taking it.
    /// False also for a client that closed without sending anything.
    /// </summary>
    private async Task<bool> StartsWithTlsAsync(CancellationToken cancellationToken)
    {
        var first = new byte[1];
        int received = await _socket.ReceiveAsync(first, SocketFlags.Peek, cancellationToken);
        return received == 1 && first[0] == 0x16;
    }

    public long Id { get; }

    /// <summary>The client's address while this connection counts as one not yet logged in from it (<see cref="ConnectionAdmission"/>).</summary>
    internal IPAddress? PendingAddress { get; private set; }
    private int _pending;

    /// <summary>Counts this connection as not logged in from <paramref name="address"/> until it logs in or closes.</summary>
    internal void CountAsPending(IPAddress address)
    {
        PendingAddress = address;
        Volatile.Write(ref _pending, 1);
    }

    /// <summary>Stops counting this connection as not logged in (once, whichever comes first: its login or its end).</summary>
    internal void LeavePending()
    {
        if (Interlocked.Exchange(ref _pending, 0) == 1 && PendingAddress is { } address) _server.Admission.EndPending(address);
    }

    public EndPoint? Remote { get; }

    public async Task RunAsync(CancellationToken cancellationToken)
    {
        Log.ClientConnected(_logger, Id, Remote);
        if (_user is null)
            _authDeadline = _server.Time.CreateTimer(static s => ((ClientSession)s!).CloseIfNotAuthenticated(), this,
                _server.Options.AuthTimeout, Timeout.InfiniteTimeSpan);
        try
        {
            if (await OpenAsync(cancellationToken))
                await ProcessRequestsAsync(cancellationToken);
        }
        catch (Exception ex) when (IsExpectedDisconnect(ex, cancellationToken))
        {
            Log.ClientConnectionLost(_logger, Id, ex.GetBaseException().Message);
        }
        catch (Exception ex)
        {
            Log.ClientFault(_logger, ex, Id);
        }
        finally
        {
            if (_reader is not null)
                await _reader.CompleteAsync();
            Dispose();
            Log.ClientDisconnected(_logger, Id);
        }
    }

    private async Task ProcessRequestsAsync(CancellationToken cancellationToken)
    {
        var limits = _server.Limits;
        while (true)
        {
            Volatile.Write(ref _idleSince, _server.Time.GetTimestamp());
            var result = await _reader.ReadAsync(cancellationToken);
            if (Interlocked.Exchange(ref _idleSince, 0) == ClosedForIdleness)
                return;
            var buffer = result.Buffer;
            var consumed = buffer.Start;
            var examined = buffer.End;
            try
            {
                if (result.IsCanceled)
                    return;

                long received = buffer.Length;
                string? protocolError = null;
                bool overBudget = false;
                if (_streamValue is not null)
                {
                    var step = ContinueStream(ref buffer, out protocolError);
                    consumed = buffer.Start;
                    if (step == StreamStep.NeedMore)
                    {
                        _server.Stats.AddInput(received - buffer.Length);
                        if (result.IsCompleted)
                        {
                            Log.TruncatedRequest(_logger, Id, _streamFilled);
                            return;
                        }
                        continue;
                    }
                }
                long frameRest = 0;
                while (!_quitRequested && protocolError is null)
                {
                    var status = RespParser.TryParseCommand(ref buffer, _command, limits, out protocolError, out long knownFrameBytes, out var pending);
                    if (status == RespParseStatus.Incomplete)
                    {
                        frameRest = knownFrameBytes - buffer.Length;
                        overBudget = !ChargeFrame(knownFrameBytes);
                        if (!overBudget && IsLargeValueOfPlainSet(pending))
                        {
                            // Received straight into the array the store will keep: the frame never piles up in the
                            // pipe's buffers, and the value is not copied a second time.
                            _streamKey = _command.Span(1).ToArray();
                            _streamValue = Storage.FreshPages.NewValue((int)pending.Length);
                            _streamFilled = 0;
                            _command.Reset();
                            buffer = buffer.Slice(pending.DataOffset);
                            var step = ContinueStream(ref buffer, out protocolError);
                            consumed = buffer.Start;
                            if (step == StreamStep.Done && protocolError is null)
                                continue;
                        }
                        break;
                    }
                    if (status != RespParseStatus.Complete)
                        break;
                    // The store charges what it keeps of the frame on its own; the frame's charge ends here.
                    ReleaseFrameCharge();
                    consumed = buffer.Start;
                    if (_command.Count > 0)
                    {
                        Execute();
                        _commandsInBatch++;
                        if (_authPenalty > TimeSpan.Zero)
                        {
                            var penalty = _authPenalty;
                            _authPenalty = TimeSpan.Zero;
                            await Task.Delay(penalty, cancellationToken);
                        }
                    }
                    _command.Reset();
                    if (_reply.ShouldFlush)
                        await FlushAsync();
                }
                _server.Stats.AddInput(received - buffer.Length);

                if (overBudget)
                {
                    // Refused before it is buffered: waiting for the rest would hold memory the budget does not have.
                    _reply.WriteError(Commands.Replies.OutOfMemory, " (a request frame larger than the memory budget has room for)"u8);
                    Log.FrameOverBudget(_logger, Id, Remote, _pendingFrameBytes, _server.Store.UsedBytes, _server.Store.MaxBytes);
                    await FlushAsync();
                    return;
                }
                if (protocolError is not null)
                {
                    // Replies already owed to earlier requests go first; the error explains why the connection ends.
                    _reply.WriteError("ERR Protocol error: "u8, Encoding.UTF8.GetBytes(protocolError));
                    if (_server.LogGates.ProtocolErrors.TryPass(out long heldBack))
                        Log.ProtocolError(_logger, Id, Remote, protocolError, heldBack);
                }
                // A client in the middle of sending a value sends the rest whatever we answer, so while that rest is
                // at most one read away, the replies so far wait for it and go out together with the next ones: a
                // stager's pipelined 64 KB SETs arrive a piece at a time, and a send per piece was ~13% of the host's
                // CPU. A longer wait (a large value, a slow link) is not imposed on replies already owed, nor more than a
                // few reads in a row, so a client that never stops sending still hears back.
                bool deferReplies = frameRest > 0 && frameRest <= ReceiveBufferBytes && _streamValue is null && _deferredReads < MaxDeferredReads
                    && protocolError is null && !_quitRequested && !result.IsCompleted;
                if (deferReplies)
                {
                    _deferredReads++;
                }
                else
                {
                    _deferredReads = 0;
                    await FlushAsync();
                }
                if (protocolError is not null || _quitRequested)
                    return;
                if (result.IsCompleted)
                {
                    if (!buffer.IsEmpty)
                        Log.TruncatedRequest(_logger, Id, buffer.Length);
                    return;
                }
            }
            finally
            {
                _reader.AdvanceTo(consumed, examined);
            }
        }
    }

    private long _pendingFrameBytes;
    private int _deferredReads;
    private const int MaxDeferredReads = 8;
    private byte[]? _streamKey;
    private byte[]? _streamValue;
    private int _streamFilled;

    private enum StreamStep { NeedMore, Done }

    /// <summary>A plain <c>SET key value</c> whose value is larger than a receive buffer and has not arrived yet.</summary>
    private bool IsLargeValueOfPlainSet(in PendingBulk pending) =>
        pending is { Index: 2, Count: 3 } && pending.Length > ReceiveBufferBytes && _command.Count == 2 && Ascii.EqualsIgnoreCase(_command.Span(0), "SET"u8);

    /// <summary>
    /// Copies what has arrived of a streamed value into its array; once it is whole and its CRLF has come, stores it.
    /// Advances <paramref name="buffer"/> past what it used.
    /// </summary>
    private StreamStep ContinueStream(ref ReadOnlySequence<byte> buffer, out string? protocolError)
    {
        protocolError = null;
        var value = _streamValue!;
        var take = (int)Math.Min(value.Length - _streamFilled, buffer.Length);
        buffer.Slice(0, take).CopyTo(value.AsSpan(_streamFilled));
        _streamFilled += take;
        buffer = buffer.Slice(take);
        if (_streamFilled < value.Length || buffer.Length < 2)
            return StreamStep.NeedMore;
        Span<byte> crlf = stackalloc byte[2];
        buffer.Slice(0, 2).CopyTo(crlf);
        buffer = buffer.Slice(2);
        var key = _streamKey!;
        (_streamKey, _streamValue, _streamFilled) = (null, null, 0);
        if (!crlf.SequenceEqual("\r\n"u8))
        {
            protocolError = "expected CRLF after bulk string";
            ReleaseFrameCharge();
            return StreamStep.Done;
        }
        ExecuteStreamedSet(key, value);
        _commandsInBatch++;
        return StreamStep.Done;
    }

    /// <summary>
    /// Charges a request frame still being received to the store's budget, as far as its headers declare it, once it
    /// is larger than one receive buffer; smaller ones (every read, most writes) are the connection's fixed overhead,
    /// so reads keep working when the budget is full. False when the budget cannot take it.
    /// </summary>
    private bool ChargeFrame(long knownFrameBytes)
    {
        _pendingFrameBytes = knownFrameBytes;
        if (knownFrameBytes <= ReceiveBufferBytes || knownFrameBytes <= _frameCharge)
            return true;
        if (!_server.Store.TryReserveFrame(knownFrameBytes - _frameCharge))
            return false;
        _frameCharge = knownFrameBytes;
        return true;
    }

    /// <param name="buffersFreed">False when the frame's memory lives on as a stored value (a streamed SET): then there
    /// is nothing for the process to give back.</param>
    private void ReleaseFrameCharge(bool buffersFreed = true)
    {
        if (_frameCharge == 0)
            return;
        _server.Store.ReleaseFrame(_frameCharge);
        if (buffersFreed)
            _server.FrameReleased(_frameCharge);
        _frameCharge = 0;
    }

    private async ValueTask FlushAsync()
    {
        if (_commandsInBatch > 0)
        {
            _server.Stats.AddCommands(_commandsInBatch);
            _commandsInBatch = 0;
        }
        if (_reply.IsEmpty)
            return;
        long length = _reply.Length;
        if (_tls is not null)
        {
            // Each write becomes TLS records; stored values go out as they are, the small replies between them in between.
            foreach (var segment in _reply.GetSegments())
                await _tls.WriteAsync(segment);
        }
        else
        {
            int sent = await _sender.SendAsync(_socket, _reply.GetSegments());
            if (sent != length)
                throw new IOException($"Socket accepted {sent} of {length} reply bytes.");
        }
        _server.Stats.AddOutput(length);
        _reply.Reset();
    }

    private static bool IsExpectedDisconnect(Exception exception, CancellationToken cancellationToken) => exception switch
    {
        OperationCanceledException => cancellationToken.IsCancellationRequested,
        ObjectDisposedException => true,
        SocketException socket => IsPeerGone(socket.SocketErrorCode),
        IOException { InnerException: SocketException socket } => IsPeerGone(socket.SocketErrorCode),
        _ => false,
    };

    private static bool IsPeerGone(SocketError error) => error is SocketError.ConnectionReset or SocketError.ConnectionAborted
        or SocketError.Shutdown or SocketError.OperationAborted or SocketError.Interrupted or SocketError.TimedOut;

    /// <summary>
    /// A connection that has not logged in when its time is up is closed: otherwise connections that never log in would
    /// hold places of --max-clients for as long as their peer keeps them open, and keep the accounts' clients out.
    /// </summary>
    private void CloseIfNotAuthenticated()
    {
        if (Volatile.Read(ref _user) is not null || Volatile.Read(ref _closed) != 0)
            return;
        if (_server.LogGates.AuthTimeouts.TryPass(out long heldBack))
            Log.AuthTimedOut(_logger, Id, Remote, _server.Options.AuthTimeout, heldBack);
        Abort();
    }

    /// <summary>
    /// Closes a logged-in connection that has sent nothing for <paramref name="limit"/> while waiting for a request (the
    /// server's idle sweep, <c>--idle-timeout</c>), so forgotten connections give back their place and their account's
    /// share. Not one that is not logged in (<c>--auth-timeout</c> is for those), nor any on an open host. Closed without
    /// a word, as Redis's <c>timeout</c> does: a client that sent a request the same moment takes the close as a lost
    /// connection and sends it again on a new one, where a reply would be taken as the answer to its request.
    /// </summary>
    internal void CloseIfIdle(long now, TimeSpan limit)
    {
        var since = Volatile.Read(ref _idleSince);
        if (since <= 0 || _server.Time.GetElapsedTime(since, now) < limit)
            return;
        var user = Volatile.Read(ref _user);
        if (user is null || ReferenceEquals(user, ServerContext.OpenAccess))
            return;
        // Only if the session is still waiting: one that has just received a request keeps it.
        if (Interlocked.CompareExchange(ref _idleSince, ClosedForIdleness, since) != since)
            return;
        Abort();
        if (_server.LogGates.IdleTimeouts.TryPass(out long heldBack))
            Log.IdleTimedOut(_logger, Id, Remote, user.Name, limit, heldBack);
    }

    /// <summary>Closes the connection; safe to call from the server's shutdown while the session is running.</summary>
    public void Abort()
    {
        try
        {
            _socket.Shutdown(SocketShutdown.Both);
        }
        catch (SocketException)
        {
            // Already reset by the peer; closing below is all that is left to do.
        }
        catch (ObjectDisposedException)
        {
        }
        _socket.Dispose();
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _closed, 1) != 0)
            return;
        _authDeadline?.Dispose();
        ReleaseShare();
        Abort();
        _tls?.Dispose();
        ReleaseFrameCharge();
        _command.Dispose();
        _reply.Dispose();
        _sender.Dispose();
    }
}
