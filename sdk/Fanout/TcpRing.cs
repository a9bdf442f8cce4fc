using System.Buffers.Binary;
using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// The ring's links as plain TCP connections between neighbours, set up through the rank group (each rank's listening
/// address and a secret travel in one all-gather). On Ethernet this carries blocks at the link's rate with a copy into
/// the socket and none out of it: no rendezvous round trip per message, no polling thread. The rank group (MPI) still
/// launches the ranks, agrees on the manifest and closes the exchange; an RDMA fabric is better served by the MPI
/// library's own link (<c>--ring mpi</c>).
/// </summary>
/// <remarks>
/// Only this job's ranks learn the secrets (among agents they travel sealed, <see cref="PeerLink"/>): a connection to a
/// rank's port that does not open with a proof of that rank's secret over the connection's own two ends is closed
/// without a byte read into the exchange; the secret never crosses the ring's links. The blocks themselves travel
/// unsealed, at the link's rate: what arrives is checked segment by segment against the manifest by the agent, and a
/// dataset that must not be seen on the wire is one for a network the site trusts, as with the cache tier without TLS.
/// </remarks>
public sealed class TcpRing : IRingRepair, IAsyncDisposable
{
    private const int SecretLength = 16;
    /// <summary>Address (IPv6 or IPv4-mapped), port, secret: every rank's entry in the all-gather.</summary>
    private const int EntryLength = 16 + 2 + SecretLength;
    /// <summary>Set in a hello's rank: the sender asks to become this rank's left neighbour in place of dead ones.</summary>
    private const int BypassFlag = 0x4000_0000;
    /// <summary>Sends go to the kernel in pieces of this size, each one progress: a link that takes nothing is silent.</summary>
    private const int SendPiece = 64 << 10;
    private readonly ConcurrentDictionary<int, Wire> _to = [], _from = [];
    private readonly byte[][] _entries;
    private readonly byte[] _secret;
    // Kept open until the route is known (routing around a slow member needs links beyond the neighbours), and then
    // for as long as the ring runs: a member whose neighbour died connects past it.
    private Socket? _listener;
    private Task _bypasses = Task.CompletedTask;
    private readonly CancellationTokenSource _closing = new();
    private int _disposed;

    private TcpRing(int rank, int size, Socket? listener, byte[][] entries, byte[] secret) =>
        (Rank, Size, _listener, _entries, _secret) = (rank, size, listener, entries, secret);

    public int Rank { get; }
    public int Size { get; }

    /// <summary>One: a TCP send completes as soon as the kernel holds the bytes, so the socket buffer is the window.</summary>
    public int SendWindow => 1;

    /// <summary>
    /// Listens on <paramref name="local"/>, learns every rank's address through <paramref name="group"/>, connects to
    /// the right neighbour and accepts the left one. Every rank must call it at the same point (it is a collective).
    /// </summary>
    public static async Task<TcpRing> ConnectAsync(IRankGroup group, IPAddress local, TimeSpan timeout, CancellationToken ct)
    {
        if (group.Size == 1) return new TcpRing(0, 1, null, [], []);
        using var mine = Listen(local);
        // Under the same limit as every other collective: a rank that took the request and went silent must not hold
        // the others here for the whole request's time.
        IReadOnlyList<byte[]> all;
        try { all = await group.AllGatherAsync(mine.Entry, ct).WaitAsync(timeout, ct); }
        catch (TimeoutException) { throw new TimeoutException($"the other ranks did not answer within {timeout.TotalSeconds:0.#} s (the ring's addresses): a rank died or stalled"); }
        return await mine.ConnectAsync(group.Rank, all, timeout, ct);
    }

    /// <summary>
    /// Listens on <paramref name="local"/> for a ring whose ranks learn each other's <see cref="Listening.Entry"/> in a
    /// collective of the caller's (<see cref="ConnectAsync(IRankGroup, IPAddress, TimeSpan, CancellationToken)"/> does
    /// it in one all-gather; rings of parts of a group gather theirs in one too).
    /// </summary>
    public static Listening Listen(IPAddress local)
    {
        var listener = new Socket(local.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        try
        {
            listener.Bind(new IPEndPoint(local, 0));
            listener.Listen(16);
            var secret = RandomNumberGenerator.GetBytes(SecretLength);
            var entry = new byte[EntryLength];
            local.MapToIPv6().TryWriteBytes(entry, out _);
            BinaryPrimitives.WriteUInt16BigEndian(entry.AsSpan(16), (ushort)((IPEndPoint)listener.LocalEndPoint!).Port);
            secret.CopyTo(entry, 18);
            return new Listening(listener, secret, entry);
        }
        catch
        {
            listener.Dispose();
            throw;
        }
    }

    /// <summary>Bytes of one rank's <see cref="Listening.Entry"/>.</summary>
    public const int EntryBytes = EntryLength;

    /// <summary>A ring's listening socket and what the other ranks need to reach it, until it is connected.</summary>
    public sealed class Listening : IDisposable
    {
        private Socket? _listener;
        private readonly byte[] _secret;

        internal Listening(Socket listener, byte[] secret, byte[] entry) => (_listener, _secret, Entry) = (listener, secret, entry);

        /// <summary>Address, port and secret: what every other rank of the ring must be given.</summary>
        public byte[] Entry { get; }

        /// <summary>Connects to the right neighbour and accepts the left one, as rank <paramref name="rank"/> of the
        /// ranks whose entries are <paramref name="entries"/> (this one's among them); the ring owns the socket then.
        /// With a <paramref name="route"/> that has leaves, the links are those the route sends and receives over instead.</summary>
        public async Task<TcpRing> ConnectAsync(int rank, IReadOnlyList<byte[]> entries, TimeSpan timeout, CancellationToken ct, RingRoute? route = null)
        {
            if (route is not null && route.Size != entries.Count) throw new ArgumentException($"a route of {route.Size} ranks for {entries.Count} entries", nameof(route));
            var listener = Interlocked.Exchange(ref _listener, null) ?? throw new InvalidOperationException("this ring is already connected");
            if (entries.Count < 2) { listener.Dispose(); return new TcpRing(0, 1, null, [], []); }
            var ring = new TcpRing(rank, entries.Count, listener, entries.ToArray(), _secret);
            try
            {
                if (route is { HasLeaves: true }) await ring.OpenAsync(route.SendsTo(rank), route.ReceivesFrom(rank), timeout, ct);
                else await ring.OpenAsync([(rank + 1) % entries.Count], [(rank - 1 + entries.Count) % entries.Count], timeout, ct);
                return ring;
            }
            catch
            {
                await ring.DisposeAsync();
                throw;
            }
        }

        public void Dispose() => Interlocked.Exchange(ref _listener, null)?.Dispose();
    }

    /// <summary>Connects to the ranks in <paramref name="sendTo"/> and accepts those in <paramref name="receiveFrom"/>
    /// that have no link yet; from then on only a bypass (<see cref="AcceptBypasses"/>) may connect.</summary>
    public async Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct)
    {
        if (Size > 1) await OpenAsync(sendTo, receiveFrom, timeout, ct);
    }

    public void AcceptBypasses(BypassHandler handler)
    {
        if (_listener is null || !_bypasses.IsCompleted) return;
        var listener = _listener;
        _bypasses = Task.Run(async () =>
        {
            var checks = new List<Task>();
            try
            {
                while (!_closing.IsCancellationRequested)
                {
                    var socket = await listener.AcceptAsync(_closing.Token);
                    checks.RemoveAll(t => t.IsCompleted);
                    checks.Add(AnswerBypassAsync(socket, handler));
                }
            }
            catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException) { }
            await Task.WhenAll(checks);
        });
    }

    /// <summary>
    /// A bypass: the member's secret and the asker's rank with <see cref="BypassFlag"/>, the ranks it skips; the answer is
    /// a length and this member's have-map (0: refused). The asker's blocks follow on the same connection.
    /// </summary>
    private async Task AnswerBypassAsync(Socket socket, BypassHandler handler)
    {
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(_closing.Token);
        limit.CancelAfter(TimeSpan.FromSeconds(10));
        var installed = false;
        try
        {
            socket.NoDelay = true;
            var hello = new byte[8];
            await ReadExactlyAsync(socket, hello, limit.Token);
            var rank = BinaryPrimitives.ReadInt32LittleEndian(hello);
            var count = BinaryPrimitives.ReadInt32LittleEndian(hello.AsSpan(4));
            if ((rank & BypassFlag) == 0 || count < 1 || count >= Size) return;
            rank &= ~BypassFlag;
            var signed = new byte[8 + count * 4 + ProofLength];
            hello.CopyTo(signed, 0);
            await ReadExactlyAsync(socket, signed.AsMemory(8), limit.Token);
            if (!Proves(_secret, socket, signed.AsSpan(0, 8 + count * 4), signed.AsSpan(8 + count * 4))) return;
            var skipped = signed.AsMemory(8, count * 4);
            var ranks = Enumerable.Range(0, count).Select(i => BinaryPrimitives.ReadInt32LittleEndian(skipped.Span.Slice(i * 4))).ToArray();
            if (rank < 0 || rank >= Size || rank == Rank || ranks.Any(r => r < 0 || r >= Size)) return;
            // Installed before the answer: the receives the handler's caller posts on it wait for the blocks that follow.
            var wire = new Wire(socket) { Answered = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously) };
            var old = _from.TryGetValue(rank, out var previous) ? previous : null;
            _from[rank] = wire;
            var have = await handler(rank, ranks, limit.Token);
            var answer = new byte[4 + (have?.Length ?? 0)];
            BinaryPrimitives.WriteInt32LittleEndian(answer, have?.Length ?? 0);
            have?.CopyTo(answer, 4);
            if (have is null)
            {
                if (old is null) _from.TryRemove(rank, out _);
                else _from[rank] = old;
                await SendAllAsync(socket, answer, limit.Token);
                return;
            }
            await SendAllAsync(socket, answer, limit.Token);
            installed = true;
            wire.Answered.TrySetResult();
        }
        catch (Exception e) when (e is SocketException or EndOfStreamException or OperationCanceledException or ObjectDisposedException) { }
        finally
        {
            if (!installed) socket.Dispose();
        }
    }

    public async Task<byte[]?> BypassAsync(int rank, IReadOnlyList<int> skipped, TimeSpan timeout, CancellationToken ct)
    {
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(timeout);
        var entry = _entries[rank];
        var address = new IPAddress(entry.AsSpan(0, 16));
        if (address.IsIPv4MappedToIPv6) address = address.MapToIPv4();
        var socket = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            await socket.ConnectAsync(new IPEndPoint(address, BinaryPrimitives.ReadUInt16BigEndian(entry.AsSpan(16))), limit.Token);
            var signed = 8 + 4 * skipped.Count;
            var hello = new byte[signed + ProofLength];
            BinaryPrimitives.WriteInt32LittleEndian(hello, Rank | BypassFlag);
            BinaryPrimitives.WriteInt32LittleEndian(hello.AsSpan(4), skipped.Count);
            for (var i = 0; i < skipped.Count; i++) BinaryPrimitives.WriteInt32LittleEndian(hello.AsSpan(8 + 4 * i), skipped[i]);
            Prove(entry.AsSpan(18, SecretLength), socket, connecting: true, hello.AsSpan(0, signed), hello.AsSpan(signed));
            await SendAllAsync(socket, hello, limit.Token);
            var header = new byte[4];
            await ReadExactlyAsync(socket, header, limit.Token);
            var length = BinaryPrimitives.ReadInt32LittleEndian(header);
            if (length == 0)
            {
                socket.Dispose();
                return null;
            }
            if (length < 0 || length > 1 << 24) throw new InvalidDataException($"rank {rank} answered a bypass with {length} bytes");
            var have = new byte[length];
            await ReadExactlyAsync(socket, have, limit.Token);
            foreach (var gone in skipped) Drop(gone);
            _to[rank] = new Wire(socket);
            return have;
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested)
        {
            socket.Dispose();
            throw new TimeoutException($"rank {rank} did not answer a bypass within {timeout.TotalSeconds:0.#} s");
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    public async Task ReportAsync(int rank, byte code)
    {
        if (!_from.TryGetValue(rank, out var wire)) return;
        // After a bypass, the answer goes first: the asker reads it before any report.
        if (wire.Answered is { } answered) await answered.Task.WaitAsync(TimeSpan.FromSeconds(10)).ContinueWith(_ => { }, TaskScheduler.Default);
        try
        {
            lock (wire.Reports) wire.Socket.Send([code]);
        }
        catch (Exception e) when (e is SocketException or ObjectDisposedException) { /* a left neighbour that is gone is routed around */ }
    }

    public async Task<int> ReadReportAsync(int rank, CancellationToken ct)
    {
        var wire = _to.TryGetValue(rank, out var w) ? w : throw new IOException($"rank {Rank} has no link to rank {rank}");
        var one = new byte[1];
        if (await wire.Socket.ReceiveAsync(one, SocketFlags.None, ct) == 0) throw new EndOfStreamException($"rank {rank} closed the ring's link");
        return one[0];
    }

    public void Drop(int rank)
    {
        if (_to.TryRemove(rank, out var to)) to.Socket.Dispose();
        if (_from.TryRemove(rank, out var from)) from.Socket.Dispose();
    }

    public TimeSpan SilenceTo(int rank) => _to.TryGetValue(rank, out var w) ? w.Silence(sending: true) : TimeSpan.Zero;

    public TimeSpan SilenceFrom(int rank) => _from.TryGetValue(rank, out var w) ? w.Silence(sending: false) : TimeSpan.MaxValue;

    private async Task OpenAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct)
    {
        var connect = sendTo.Where(r => !_to.ContainsKey(r)).Distinct().ToList();
        var accept = receiveFrom.Where(r => !_from.ContainsKey(r)).ToHashSet();
        if (connect.Count == 0 && accept.Count == 0) return;
        if (_listener is null) throw new InvalidOperationException("the ring's links were closed to new peers");
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(timeout);
        var accepting = accept.Count == 0 ? Task.FromResult(new Dictionary<int, Socket>()) : AcceptAsync(_listener, accept, _secret, limit.Token);
        var outgoing = new List<(int Rank, Task<Socket> Socket)>();
        try
        {
            outgoing.AddRange(connect.Select(r => (r, ConnectToAsync(_entries[r], Rank, limit.Token))));
            await Task.WhenAll(outgoing.Select(o => o.Socket));
            foreach (var (r, socket) in outgoing) _to[r] = new Wire(socket.Result);
            foreach (var (r, socket) in await accepting) _from[r] = new Wire(socket);
        }
        catch (Exception e)
        {
            limit.Cancel();
            foreach (var (_, socket) in outgoing)
                if (socket.IsCompletedSuccessfully) socket.Result.Dispose();
            try { foreach (var socket in (await accepting).Values) socket.Dispose(); } catch { /* the first failure is the one reported */ }
            if (e is OperationCanceledException && !ct.IsCancellationRequested)
                throw new TimeoutException($"rank {Rank}: the fan-out's TCP links to ranks {string.Join(",", connect)} and from {string.Join(",", accept)} were not up within {timeout.TotalSeconds:0} s");
            throw;
        }
    }

    private static async Task<Socket> ConnectToAsync(byte[] entry, int rank, CancellationToken ct)
    {
        var address = new IPAddress(entry.AsSpan(0, 16));
        if (address.IsIPv4MappedToIPv6) address = address.MapToIPv4();
        var port = BinaryPrimitives.ReadUInt16BigEndian(entry.AsSpan(16));
        var socket = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            await socket.ConnectAsync(new IPEndPoint(address, port), ct);
            // Who we are, proved with the peer's own secret over this connection's two ends: it accepts nobody else on
            // that port, and the secret itself never crosses the wire.
            var hello = new byte[4 + ProofLength];
            BinaryPrimitives.WriteInt32LittleEndian(hello, rank);
            Prove(entry.AsSpan(18, SecretLength), socket, connecting: true, hello.AsSpan(0, 4), hello.AsSpan(4));
            await socket.SendAsync(hello, SocketFlags.None, ct);
            return socket;
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    private static async Task<Dictionary<int, Socket>> AcceptAsync(Socket listener, HashSet<int> from, byte[] secret, CancellationToken ct)
    {
        // Each connection proves itself on its own, so one that connects and says nothing holds up no one.
        var arrived = new Dictionary<int, Socket>();
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var checks = new List<Task>();
        var accepting = AcceptLoop();
        try
        {
            // A listener that fails ends the wait as well as the last peer that arrives.
            await Task.WhenAny(all.Task, accepting);
            if (!all.Task.IsCompleted) await accepting;
            return arrived;
        }
        catch
        {
            lock (arrived) foreach (var socket in arrived.Values) socket.Dispose();
            throw;
        }
        finally
        {
            stop.Cancel();
            try { await accepting; } catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException) { }
            await Task.WhenAll(checks);
        }

        async Task AcceptLoop()
        {
            while (!all.Task.IsCompleted)
            {
                var socket = await listener.AcceptAsync(stop.Token);
                checks.Add(Check(socket));
            }
        }

        async Task Check(Socket socket)
        {
            var hello = new byte[4 + ProofLength];
            try
            {
                socket.NoDelay = true;
                await ReadExactlyAsync(socket, hello, stop.Token);
                var rank = BinaryPrimitives.ReadInt32LittleEndian(hello);
                if (Proves(secret, socket, hello.AsSpan(0, 4), hello.AsSpan(4)) && from.Contains(rank))
                    lock (arrived)
                        if (arrived.TryAdd(rank, socket))
                        {
                            if (arrived.Count == from.Count) all.TrySetResult();
                            return;
                        }
            }
            catch (Exception e) when (e is SocketException or EndOfStreamException or OperationCanceledException) { }
            // Not a peer this rank waits for: closed, and the listener waits on.
            socket.Dispose();
        }
    }

    private const int ProofLength = 32;

    /// <summary>The proof a connecting rank sends: <paramref name="message"/> and both ends of <paramref name="socket"/>
    /// under the listening rank's secret (HMAC-SHA256). A relay sees other ends, and a copied hello proves nothing on
    /// another connection.</summary>
    private static void Prove(ReadOnlySpan<byte> secret, Socket socket, bool connecting, ReadOnlySpan<byte> message, Span<byte> proof)
    {
        var binding = EndpointBinding.Of(socket, connecting);
        var signed = new byte[binding.Length + message.Length];
        binding.CopyTo(signed, 0);
        message.CopyTo(signed.AsSpan(binding.Length));
        HMACSHA256.HashData(secret, signed, proof);
    }

    private static bool Proves(ReadOnlySpan<byte> secret, Socket accepted, ReadOnlySpan<byte> message, ReadOnlySpan<byte> proof)
    {
        Span<byte> expected = stackalloc byte[ProofLength];
        Prove(secret, accepted, connecting: false, message, expected);
        return CryptographicOperations.FixedTimeEquals(expected, proof);
    }

    /// <summary>One direction of one connection: messages go, or are matched, in the order of the calls.</summary>
    private sealed class Wire(Socket socket)
    {
        public readonly Socket Socket = socket;
        public readonly byte[] Header = new byte[4];
        public readonly Lock Order = new();
        public Task Last = Task.CompletedTask;
        /// <summary>When bytes last moved on this wire (<see cref="Environment.TickCount64"/>).</summary>
        public long Moved = Environment.TickCount64;
        /// <summary>Sends queued or under way: silence counts only while something waits to go.</summary>
        public int Pending;
        /// <summary>Reports go the other way on a receiving wire, one whole byte at a time.</summary>
        public readonly Lock Reports = new();
        /// <summary>On a wire a bypass opened: completes when its answer was sent.</summary>
        public TaskCompletionSource? Answered;

        public void Progress() => Volatile.Write(ref Moved, Environment.TickCount64);

        public TimeSpan Silence(bool sending) => sending && Volatile.Read(ref Pending) == 0
            ? TimeSpan.Zero
            : TimeSpan.FromMilliseconds(Environment.TickCount64 - Volatile.Read(ref Moved));
    }

    public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) => SendToAsync((Rank + 1) % Size, message, ct);

    public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => ReceiveFromAsync((Rank - 1 + Size) % Size, buffer, ct);

    /// <summary>A length, then the message. Sends to one rank go out in the order of the calls.</summary>
    public Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct)
    {
        // A link dropped by a bypass that has not yet moved the sender on is a failed send, seen where sends are watched,
        // not an exception thrown past them.
        if (!_to.TryGetValue(rank, out var wire)) return Task.FromException(new IOException($"rank {Rank} has no link to rank {rank}"));
        lock (wire.Order)
        {
            if (Interlocked.Increment(ref wire.Pending) == 1) wire.Progress();
            return wire.Last = SendAfter(wire, wire.Last, message, ct);
        }
    }

    private static async Task SendAfter(Wire wire, Task previous, ReadOnlyMemory<byte> message, CancellationToken ct)
    {
        try
        {
            await previous;
            BinaryPrimitives.WriteInt32LittleEndian(wire.Header, message.Length);
            await SendAllAsync(wire.Socket, wire.Header, ct);
            for (var rest = message; !rest.IsEmpty; rest = rest[Math.Min(SendPiece, rest.Length)..])
            {
                await SendAllAsync(wire.Socket, rest[..Math.Min(SendPiece, rest.Length)], ct);
                wire.Progress();
            }
        }
        finally { Interlocked.Decrement(ref wire.Pending); }
    }

    /// <summary>Receives from one rank match its messages in the order of the calls, as MPI's do.</summary>
    public Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct)
    {
        if (!_from.TryGetValue(rank, out var wire)) return Task.FromException<int>(new IOException($"rank {Rank} has no link from rank {rank}"));
        lock (wire.Order)
        {
            var receive = ReceiveAfter(wire, wire.Last, rank, buffer, ct);
            wire.Last = receive;
            return receive;
        }
    }

    private static async Task<int> ReceiveAfter(Wire wire, Task previous, int rank, Memory<byte> buffer, CancellationToken ct)
    {
        await previous;
        await ReadExactlyAsync(wire.Socket, wire.Header, ct, wire);
        var length = BinaryPrimitives.ReadInt32LittleEndian(wire.Header);
        if (length < 0 || length > buffer.Length)
            throw new InvalidDataException($"rank {rank} sent a message of {length} bytes; at most {buffer.Length} were expected");
        await ReadExactlyAsync(wire.Socket, buffer[..length], ct, wire);
        return length;
    }

    private static async ValueTask SendAllAsync(Socket socket, ReadOnlyMemory<byte> data, CancellationToken ct)
    {
        while (!data.IsEmpty) data = data[await socket.SendAsync(data, SocketFlags.None, ct)..];
    }

    private static async ValueTask ReadExactlyAsync(Socket socket, Memory<byte> buffer, CancellationToken ct, Wire? wire = null)
    {
        while (!buffer.IsEmpty)
        {
            var n = await socket.ReceiveAsync(buffer, SocketFlags.None, ct);
            if (n == 0) throw new EndOfStreamException("the neighbour closed the ring's connection");
            wire?.Progress();
            buffer = buffer[n..];
        }
    }

    /// <summary>
    /// The address this node's peers reach it on: the one its traffic to <paramref name="peer"/> (a cache host, on the
    /// cluster's network) leaves from. No packet is sent; connecting a datagram socket only asks the routing table.
    /// </summary>
    public static IPAddress LocalAddressToward(string host, int port)
    {
        var target = Dns.GetHostAddresses(host).FirstOrDefault() ?? throw new SocketException((int)SocketError.HostNotFound);
        using var probe = new Socket(target.AddressFamily, SocketType.Dgram, ProtocolType.Udp);
        probe.Connect(new IPEndPoint(target, port));
        return ((IPEndPoint)probe.LocalEndPoint!).Address;
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0) return;
        _closing.Cancel();
        _listener?.Dispose();
        try { await _bypasses; } catch { /* bypasses end with the ring */ }
        _closing.Dispose();
        // Sends still in the kernel's buffer are delivered after close: the peer reads them before it finishes.
        foreach (var wire in _to.Values)
        {
            try { await wire.Last; } catch { /* the exchange reported it */ }
            wire.Socket.Dispose();
        }
        foreach (var wire in _from.Values) wire.Socket.Dispose();
    }
}
