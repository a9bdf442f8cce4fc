using System.Buffers;
using System.Buffers.Text;
using System.IO.Pipelines;
using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Text;

namespace Hpc.CommonData.Cache;

/// <summary>Called once per MGET element, in order; <paramref name="value"/> is only valid during the call.</summary>
public delegate void BulkHandler(int index, in ReadOnlySequence<byte> value, bool isNull);

/// <summary>
/// One RESP2 connection to a cache host. Not thread-safe: a caller owns it for a whole exchange (write a pipelined
/// batch, read its replies) and then returns it to the pool. Works against our cache host and real Redis alike.
/// </summary>
public sealed class RespConnection : IAsyncDisposable
{
    private readonly Socket _socket;
    private readonly Stream _stream;
    private readonly PipeReader _reader;
    private readonly ArrayBufferWriter<byte> _out = new(64 * 1024);
    /// <summary>Values <see cref="ArgumentByReference"/> left in place: each goes on the wire after _out's first End bytes.</summary>
    private readonly List<(int End, ArraySegment<byte> Value)> _referenced = [];
    private readonly List<ArraySegment<byte>> _gather = [];
    /// <summary>The stream is the socket's own (no TLS, no rate limit): a batch may go out as one gathered send.</summary>
    private readonly bool _plain;
    private readonly long _maxBulk;
    private bool _broken;
    private bool _sawEof;
    /// <summary>The start of a reply that was not RESP, as text, once one was read.</summary>
    private string? _notResp;

    public CacheEndpoint Endpoint { get; }
    public bool IsBroken => _broken;

    /// <summary>
    /// Called whenever reply bytes arrive. The caller's timeout is about a silent host, not a slow one: a batch queued
    /// behind many others on a shared link may take long, and must not fail while it is still moving.
    /// </summary>
    public Action? Progress { get; set; }

    /// <summary>Set when reply bytes arrive; the exchange's owner clears it, to tell a silent host from a slow one.</summary>
    public bool Heard { get; set; }

    /// <summary>
    /// On a Redis Cluster connection every reply that says the key lives elsewhere (MOVED, ASK) or cannot be served yet
    /// (CLUSTERDOWN, TRYAGAIN) is thrown as a <see cref="RespErrorException"/>, whatever the exchange expected: the
    /// host set follows it, so no command's caller mistakes it for its own answer.
    /// </summary>
    public bool ThrowsRoutingErrors { get; set; }

    /// <summary>
    /// Whether the host has closed this connection while it lay in the pool: a host closes connections that send nothing
    /// for its idle limit (<c>--idle-timeout</c>), and restarts. Between exchanges nothing is owed to us, so a socket
    /// that reads as ready with no bytes is at its end (or reset). Looked at before reuse, so the next exchange opens a
    /// new connection at once instead of failing on the old one and waiting out a retry's backoff.
    /// </summary>
    internal bool IsClosedByPeer()
    {
        try
        {
            return _socket.Poll(0, SelectMode.SelectRead) && _socket.Available == 0;
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException)
        {
            return true;
        }
    }

    private const int IpProtocolIp = 0;
    private const int IpBindAddressNoPort = 24; // IP_BIND_ADDRESS_NO_PORT in linux/in.h

    /// <summary>
    /// Binds <paramref name="socket"/> to <paramref name="source"/> before it connects. An address this machine does not
    /// have is a setting to fix, not a host to retry, so it is not a <see cref="CacheHostUnavailableException"/>.
    /// </summary>
    private static void BindSource(Socket socket, IPAddress source, CacheEndpoint endpoint)
    {
        if (OperatingSystem.IsLinux())
        {
            // The port is then picked at connect, per destination, as without a bind: a bind alone would give every
            // connection a port of its own across all destinations, and a busy node could run out of them.
            try { socket.SetRawSocketOption(IpProtocolIp, IpBindAddressNoPort, BitConverter.GetBytes(1)); }
            catch (SocketException) { }
        }
        try
        {
            socket.Bind(new IPEndPoint(source, 0));
        }
        catch (SocketException e)
        {
            socket.Dispose();
            throw new CommonDataException(ErrorCode.BadRequest,
                $"cannot connect to {endpoint} from {source} (--cache-source-address, {CacheTierOptions.SourceAddressVariable}): {e.Message}" +
                (e.SocketErrorCode == SocketError.AddressNotAvailable ? " (it is not an address of this machine)" : ""), e);
        }
    }

    /// <summary>The exchange was abandoned part-way; replies may still be in flight, so the connection is not reused.</summary>
    public void MarkBroken() => _broken = true;

    private RespConnection(CacheEndpoint endpoint, Socket socket, Stream stream, long maxBulk)
    {
        Endpoint = endpoint;
        _socket = socket;
        _stream = stream;
        _reader = PipeReader.Create(_stream, new StreamPipeReaderOptions(bufferSize: 256 * 1024, minimumReadSize: 64 * 1024));
        _maxBulk = maxBulk;
        _plain = stream is NetworkStream;
    }

    /// <summary>Connects and, given a password, authenticates as <paramref name="user"/> (Redis 6 form) or as the default user.</summary>
    public static Task<RespConnection> ConnectAsync(CacheEndpoint endpoint, string? password, TimeSpan timeout, CancellationToken ct, string? user = null,
        CacheTls? tls = null, TokenBucket? rateLimit = null) => ConnectAsync(endpoint, password, timeout, ct, user, tls, rateLimit, source: null);

    /// <param name="source">This machine's address to connect from (<see cref="CacheTierOptions.SourceAddress"/>); null: the system's routing picks it.</param>
    internal static async Task<RespConnection> ConnectAsync(CacheEndpoint endpoint, string? password, TimeSpan timeout, CancellationToken ct, string? user,
        CacheTls? tls, TokenBucket? rateLimit, IPAddress? source)
    {
        using var cts = CancellationTokenSource.CreateLinkedTokenSource(ct);
        cts.CancelAfter(timeout);
        // Under a rate limit the kernel's buffers must stay small: the bucket paces what the process reads, and a 1 MB
        // receive window per connection would let the host send each batch at the link's full speed into it, so the link
        // would see the average rate as bursts of every connection's megabyte. About 5 ms of the rate (at least 64 KB)
        // per connection keeps the link itself near the rate.
        var buffer = rateLimit is null ? 1 << 20 : (int)Math.Clamp(rateLimit.Rate.BytesPerSecond / 200, 64 << 10, 1 << 20);
        var socket = source is null ? new Socket(SocketType.Stream, ProtocolType.Tcp) : new Socket(source.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        socket.NoDelay = true;
        socket.ReceiveBufferSize = buffer;
        socket.SendBufferSize = buffer;
        if (source is not null) BindSource(socket, source, endpoint);
        try
        {
            if (IPAddress.TryParse(endpoint.Host, out var ip)) await socket.ConnectAsync(new IPEndPoint(ip, endpoint.Port), cts.Token);
            else await socket.ConnectAsync(endpoint.Host, endpoint.Port, cts.Token);
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested)
        {
            socket.Dispose();
            throw new CacheHostUnavailableException(endpoint, $"connect timed out after {timeout.TotalMilliseconds:0} ms", timedOut: true);
        }
        catch (SocketException e)
        {
            socket.Dispose();
            throw new CacheHostUnavailableException(endpoint, e.Message, e);
        }
        Stream stream = new NetworkStream(socket, ownsSocket: true);
        // Below TLS: the budget is about bytes on the link.
        if (rateLimit is not null) stream = new RateLimitedStream(stream, rateLimit);
        if (tls is not null)
        {
            var secure = new SslStream(stream, leaveInnerStreamOpen: false);
            try
            {
                await secure.AuthenticateAsClientAsync(tls.ClientOptions(endpoint.Host), cts.Token);
            }
            catch (OperationCanceledException) when (!ct.IsCancellationRequested)
            {
                // A stopped host completes the TCP handshake in its kernel and then says nothing: silence, not distrust.
                await secure.DisposeAsync();
                throw new CacheHostUnavailableException(endpoint, $"TLS handshake got no answer in {timeout.TotalMilliseconds:0} ms", timedOut: true);
            }
            catch (Exception e) when (e is AuthenticationException or IOException)
            {
                await secure.DisposeAsync();
                // Not "unavailable": a host whose certificate we do not trust must not be retried as if it were down.
                var hint = tls.SiteCa
                    ? $" (is the file in --cache-ca or {CacheTierOptions.TlsCaVariable} the CA that signed the cache hosts' certificates?)"
                    : $" (a site's own CA is not among this machine's roots: give --cache-ca PATH or set {CacheTierOptions.TlsCaVariable})";
                throw new CommonDataException(ErrorCode.AccessDenied, $"{endpoint}: TLS handshake failed: {e.GetBaseException().Message}{hint}");
            }
            stream = secure;
        }
        var connection = new RespConnection(endpoint, socket, stream, Format.SegmentCodec.MaxRawLength + 4096L);
        // A plain connection says something first even without a password: a TLS-only host answers its first bytes with
        // why it will not talk and hangs up, and that is a setting to fix, not an outage to retry.
        if (!string.IsNullOrEmpty(password) || tls is null)
        {
            if (string.IsNullOrEmpty(password)) connection.Command("PING"u8);
            else if (string.IsNullOrEmpty(user)) connection.Command("AUTH"u8, password);
            else connection.Command("AUTH"u8, user, password);
            RespReply reply;
            try
            {
                reply = await connection.FlushAndReadAsync(cts.Token);
            }
            catch (RespProtocolException e)
            {
                // The first answer of a connection is not RESP: another service has this port (a web server, ssh). That
                // is a wrong address, not a host having a bad moment, so it is not a RespProtocolException, which is
                // retried: every attempt would hear the same.
                await connection.DisposeAsync();
                throw new CommonDataException(ErrorCode.Protocol,
                    $"{endpoint} is not a cache host: it answered \"{connection._notResp}\" to {(string.IsNullOrEmpty(password) ? "PING" : "AUTH")}, " +
                    $"which is not RESP (another service on this port?); check --cache-hosts or {CacheTierOptions.HostsVariable}", e);
            }
            if (reply.Kind == RespKind.Error)
            {
                await connection.DisposeAsync();
                if (reply.Text?.StartsWith(TlsOnlyReply, StringComparison.Ordinal) == true)
                    throw new CommonDataException(ErrorCode.AccessDenied, $"{endpoint}: {reply.Text} (HPCDATA_CACHE_TLS=1 or HPCDATA_CACHE_CA in the environment)");
                throw new RespErrorException(endpoint.ToString(), string.IsNullOrEmpty(user) ? reply.Text ?? "AUTH refused" : $"{reply.Text} (as user '{user}')");
            }
        }
        return connection;
    }

    /// <summary>How a TLS-only cache host answers a client that speaks plain RESP to it.</summary>
    private const string TlsOnlyReply = "ERR this host accepts TLS connections only";

    // ---- writing: commands are buffered and sent in one write, so a batch is pipelined ----

    public void BeginCommand(int argumentCount)
    {
        WriteByte((byte)'*');
        WriteInteger(argumentCount);
        WriteCrlf();
    }

    public void Argument(ReadOnlySpan<byte> value)
    {
        WriteByte((byte)'$');
        WriteInteger(value.Length);
        WriteCrlf();
        _out.Write(value);
        WriteCrlf();
    }

    /// <summary>
    /// A bulk argument made of <paramref name="first"/> then <paramref name="second"/> (either may be empty), e.g. a
    /// segment's header and its payload. On a plain connection large parts are not copied: they are sent from where
    /// they are by the gathered write of <see cref="FlushAsync"/>, so they must stay unchanged until it completes. Under
    /// TLS or a rate limit they are copied into the batch like any argument (the stream takes one buffer at a time).
    /// </summary>
    public void ArgumentByReference(ReadOnlyMemory<byte> first, ReadOnlyMemory<byte> second)
    {
        WriteByte((byte)'$');
        WriteInteger(first.Length + second.Length);
        WriteCrlf();
        Part(first);
        Part(second);
        WriteCrlf();
    }

    /// <summary>Below this a part is copied: an entry in the gather list costs more than copying a few hundred bytes.</summary>
    private const int ReferenceThreshold = 2048;

    private void Part(ReadOnlyMemory<byte> part)
    {
        if (part.IsEmpty) return;
        if (_plain && part.Length >= ReferenceThreshold && System.Runtime.InteropServices.MemoryMarshal.TryGetArray(part, out var array))
            _referenced.Add((_out.WrittenCount, array));
        else
            _out.Write(part.Span);
    }

    public void Argument(string value)
    {
        var n = Encoding.UTF8.GetByteCount(value);
        WriteByte((byte)'$');
        WriteInteger(n);
        WriteCrlf();
        Encoding.UTF8.GetBytes(value, _out.GetSpan(n));
        _out.Advance(n);
        WriteCrlf();
    }

    public void Argument(long value)
    {
        Span<byte> tmp = stackalloc byte[20];
        Utf8Formatter.TryFormat(value, tmp, out var n);
        Argument(tmp[..n]);
    }

    /// <summary>Buffers a whole command whose arguments are strings (control traffic).</summary>
    public void Command(ReadOnlySpan<byte> name, params ReadOnlySpan<string> args)
    {
        BeginCommand(1 + args.Length);
        Argument(name);
        foreach (var a in args) Argument(a);
    }

    public ValueTask<RespReply> FlushAndReadCommandAsync(ReadOnlySpan<byte> name, string arg, CancellationToken ct)
    {
        Command(name, arg);
        return FlushAndReadAsync(ct);
    }

    public ValueTask<RespReply> FlushAndReadCommandAsync(ReadOnlySpan<byte> name, string[] args, CancellationToken ct)
    {
        Command(name, args);
        return FlushAndReadAsync(ct);
    }

    private void WriteByte(byte b) { _out.GetSpan(1)[0] = b; _out.Advance(1); }
    private void WriteCrlf() { "\r\n"u8.CopyTo(_out.GetSpan(2)); _out.Advance(2); }
    private void WriteInteger(long v) { Utf8Formatter.TryFormat(v, _out.GetSpan(20), out var n); _out.Advance(n); }

    public async ValueTask FlushAsync(CancellationToken ct)
    {
        try
        {
            if (_referenced.Count == 0)
            {
                var batch = _out.WrittenMemory;
                for (var at = 0; at < batch.Length; at += SendPiece)
                {
                    await _stream.WriteAsync(batch.Slice(at, Math.Min(SendPiece, batch.Length - at)), ct);
                    Progress?.Invoke();
                }
            }
            else await SendGatheredAsync(ct);
            Progress?.Invoke();
        }
        catch (Exception e) when (e is IOException or SocketException or ObjectDisposedException)
        {
            _broken = true;
            ct.ThrowIfCancellationRequested();
            throw new CacheHostUnavailableException(Endpoint, $"send failed: {e.Message}", e);
        }
        finally
        {
            _out.ResetWrittenCount();
            _referenced.Clear();
            _gather.Clear();
        }
    }

    /// <summary>Most buffers handed to one sendmsg: well under the kernel's IOV_MAX (1024).</summary>
    private const int GatherLimit = 512;

    /// <summary>
    /// A batch is sent in pieces of about this many bytes, each reported to <see cref="Progress"/>: a host that stops
    /// reading (stopped, hung) is seen to stop within one piece however large the batch, while one that reads slowly
    /// (a slow link, a rate limit) keeps showing progress.
    /// </summary>
    public const int SendPiece = 256 << 10;

    /// <summary>
    /// Sends the batch's own bytes interleaved with the referenced values, as few sendmsg calls as the gather list
    /// allows. A gathered socket send takes no cancellation token, so cancelling (the exchange's timeout or the
    /// caller) shuts the socket: the send fails, and the connection is broken as after any abandoned exchange.
    /// </summary>
    private async ValueTask SendGatheredAsync(CancellationToken ct)
    {
        if (!System.Runtime.InteropServices.MemoryMarshal.TryGetArray(_out.WrittenMemory, out var own)) throw new InvalidOperationException("batch buffer is not an array");
        var at = 0;
        foreach (var (end, value) in _referenced)
        {
            if (end > at) _gather.Add(own.Slice(at, end - at));
            _gather.Add(value);
            at = end;
        }
        if (own.Count > at) _gather.Add(own.Slice(at));
        await using var cancel = ct.Register(static s =>
        {
            try { ((Socket)s!).Shutdown(SocketShutdown.Both); }
            catch (Exception e) when (e is SocketException or ObjectDisposedException) { }
        }, _socket);
        for (var first = 0; first < _gather.Count;)
        {
            // Whole buffers up to a piece's worth (a referenced value is one segment, 64 KB or so) or the gather limit.
            var end = first;
            long expected = 0;
            while (end < _gather.Count && end - first < GatherLimit && (end == first || expected + _gather[end].Count <= SendPiece))
                expected += _gather[end++].Count;
            var part = first == 0 && end == _gather.Count ? _gather : _gather.GetRange(first, end - first);
            var sent = await _socket.SendAsync(part, SocketFlags.None);
            if (sent != expected) throw new IOException($"sent {sent} of {expected} bytes");
            Progress?.Invoke();
            first = end;
        }
    }

    public async ValueTask<RespReply> FlushAndReadAsync(CancellationToken ct)
    {
        await FlushAsync(ct);
        return await ReadReplyAsync(ct);
    }

    // ---- reading ----

    public async ValueTask<RespReply> ReadReplyAsync(CancellationToken ct)
    {
        while (true)
        {
            var buffer = await ReadAsync(ct);
            var reader = new SequenceReader<byte>(buffer);
            bool done;
            RespReply reply;
            try { done = RespReplyParser.TryRead(ref reader, _maxBulk, out reply); }
            catch (RespProtocolException)
            {
                _broken = true;
                _notResp = RespReplyParser.Preview(buffer);
                throw;
            }
            if (done)
            {
                _reader.AdvanceTo(reader.Position);
                if (ThrowsRoutingErrors && reply is { Kind: RespKind.Error, Text: { } text } && ClusterRedirect.IsRouting(text))
                    throw new RespErrorException(Endpoint.ToString(), text);
                return reply;
            }
            _reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    /// <summary>
    /// Reads one bulk-string reply (what a GET answers), handing the value to <paramref name="handler"/> (index 0)
    /// without copying it, as <see cref="ReadBulkArrayAsync"/> does for MGET; <see cref="ReadReplyAsync"/> would copy
    /// it into a new array. A server error is thrown as <see cref="RespErrorException"/> and leaves the connection usable.
    /// Pooled state machine: a GET loop awaits this once per value, and it should not allocate every time.
    /// </summary>
    [System.Runtime.CompilerServices.AsyncMethodBuilder(typeof(System.Runtime.CompilerServices.PoolingAsyncValueTaskMethodBuilder))]
    public async ValueTask ReadBulkAsync(BulkHandler handler, CancellationToken ct)
    {
        while (true)
        {
            var buffer = await ReadAsync(ct);
            var reader = new SequenceReader<byte>(buffer);
            try
            {
                if (RespReplyParser.TryReadBulk(ref reader, _maxBulk, out var value, out var isNull))
                {
                    handler(0, value, isNull);
                    _reader.AdvanceTo(reader.Position);
                    return;
                }
            }
            catch (RespErrorException e) { throw ServerError(e, reader.Position); }
            catch (Exception) when (BreaksConnection()) { throw; }
            _reader.AdvanceTo(buffer.Start, buffer.End);
        }
    }

    /// <summary>
    /// A server's error reply ends only its command: the reply is consumed, the connection stays usable, and the error
    /// names this host.
    /// </summary>
    private RespErrorException ServerError(RespErrorException e, SequencePosition consumed)
    {
        _reader.AdvanceTo(consumed);
        return new RespErrorException(Endpoint.ToString(), e.ServerMessage);
    }

    /// <summary>
    /// Any other failure while reading a reply leaves the stream at an unknown place: the connection is broken. Used
    /// as an exception filter that never catches, so the failure goes on with its own stack.
    /// </summary>
    private bool BreaksConnection()
    {
        _broken = true;
        return false;
    }

    /// <summary>
    /// Reads the replies of <paramref name="results"/>' length pipelined commands answering a status, an integer or
    /// nil (SET NX, EXISTS) into it, without allocating per reply: 1 for +OK, the integer, 0 for nil. A server error is
    /// thrown as <see cref="RespErrorException"/>; the replies after it are left unread.
    /// </summary>
    public async ValueTask ReadStatusRepliesAsync(Memory<long> results, CancellationToken ct)
    {
        var next = 0;
        while (next < results.Length)
        {
            var buffer = await ReadAsync(ct);
            var reader = new SequenceReader<byte>(buffer);
            try
            {
                var span = results.Span;
                while (next < span.Length && RespReplyParser.TryReadStatus(ref reader, out var value)) span[next++] = value;
            }
            catch (RespErrorException e) { throw ServerError(e, reader.Position); }
            catch (Exception) when (BreaksConnection()) { throw; }
            AdvancePast(buffer, reader.Position, done: next == results.Length);
        }
    }

    /// <summary>
    /// Gives back what a pipelined read used. Only when more of its own replies are still to come is the rest of the
    /// buffer marked examined: the replies to the commands pipelined after these (an MGET after the PTTLs) may have
    /// arrived in the same read, and a buffer marked examined makes the next read wait for bytes that never come — the
    /// hang of a repair whose segments are small enough (zero pages, padding) to arrive all at once.
    /// </summary>
    private void AdvancePast(in ReadOnlySequence<byte> buffer, SequencePosition consumed, bool done)
    {
        if (done) _reader.AdvanceTo(consumed);
        else _reader.AdvanceTo(consumed, buffer.End);
    }

    /// <summary>Reads an MGET reply of <paramref name="count"/> elements, handing each value over as soon as it is complete.</summary>
    public ValueTask ReadBulkArrayAsync(int count, BulkHandler handler, CancellationToken ct) => ReadBulksAsync(count, handler, array: true, ct);

    /// <summary>
    /// Reads the replies of <paramref name="count"/> pipelined GETs, handing each value over as soon as it is complete
    /// (where MGET cannot be used: a Redis Cluster refuses one across hash slots). A server error is thrown as
    /// <see cref="RespErrorException"/>; the replies after it are left unread.
    /// </summary>
    public ValueTask ReadBulkRepliesAsync(int count, BulkHandler handler, CancellationToken ct) => ReadBulksAsync(count, handler, array: false, ct);

    private async ValueTask ReadBulksAsync(int count, BulkHandler handler, bool array, CancellationToken ct)
    {
        var headerRead = !array;
        var next = 0;
        while (next < count || !headerRead)
        {
            var buffer = await ReadAsync(ct);
            var reader = new SequenceReader<byte>(buffer);
            try
            {
                if (!headerRead)
                {
                    if (RespReplyParser.TryReadArrayHeader(ref reader, out var n))
                    {
                        if (n != count) { _broken = true; throw new RespProtocolException($"{Endpoint}: MGET returned {n} values for {count} keys"); }
                        headerRead = true;
                    }
                }
                while (headerRead && next < count && RespReplyParser.TryReadBulk(ref reader, _maxBulk, out var value, out var isNull))
                {
                    handler(next, value, isNull);
                    next++;
                }
            }
            catch (RespErrorException e) { throw ServerError(e, reader.Position); }
            catch (Exception) when (BreaksConnection()) { throw; }
            AdvancePast(buffer, reader.Position, done: headerRead && next == count);
        }
    }

    private async ValueTask<ReadOnlySequence<byte>> ReadAsync(CancellationToken ct)
    {
        if (_sawEof) throw new CacheHostUnavailableException(Endpoint, "connection closed in the middle of a reply");
        ReadResult result;
        try { result = await _reader.ReadAsync(ct); }
        catch (OperationCanceledException) { _broken = true; throw; }
        catch (Exception e) when (e is IOException or SocketException or ObjectDisposedException)
        {
            _broken = true;
            throw new CacheHostUnavailableException(Endpoint, $"receive failed: {e.Message}", e);
        }
        Heard = true;
        Progress?.Invoke();
        if (result.IsCompleted && result.Buffer.IsEmpty)
        {
            _broken = true;
            throw new CacheHostUnavailableException(Endpoint, "connection closed by the cache host");
        }
        if (result.IsCompleted)
        {
            // Partial data then EOF: if the parser asks for more, the next read fails instead of spinning.
            _broken = true;
            _sawEof = true;
        }
        return result.Buffer;
    }

    public async ValueTask DisposeAsync()
    {
        _broken = true;
        await _reader.CompleteAsync();
        await _stream.DisposeAsync();
    }
}
