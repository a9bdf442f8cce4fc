using System.Buffers.Binary;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;

namespace Hpc.Jobs.Fanout;

/// <summary>
/// The ring's links as plain TCP connections between neighbours, set up through the rank group (each rank's listening
/// address and a secret travel in one all-gather). On Ethernet this carries blocks at the link's rate with a copy into
/// the socket and none out of it: no rendezvous round trip per message, no polling thread. The rank group (MPI) still
/// launches the ranks, agrees on the manifest and closes the exchange; an RDMA fabric is better served by the MPI
/// library's own link (<c>--ring mpi</c>).
/// </summary>
/// <remarks>
/// Only this job's ranks learn the secrets: a connection to a rank's port that does not open with that rank's secret is
/// closed without a byte read into the exchange. What does arrive is checked anyway, segment by segment, by the agent.
/// </remarks>
public sealed class TcpRing : IPeerLinks, IAsyncDisposable
{
    private const int SecretLength = 16;
    /// <summary>Address (IPv6 or IPv4-mapped), port, secret: every rank's entry in the all-gather.</summary>
    private const int EntryLength = 16 + 2 + SecretLength;
    private readonly Dictionary<int, Wire> _to = [], _from = [];
    private readonly byte[][] _entries;
    private readonly byte[] _secret;
    // Kept open until the route is known: routing around a slow member needs links beyond the neighbours.
    private Socket? _listener;

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
        var listener = new Socket(local.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        try
        {
            listener.Bind(new IPEndPoint(local, 0));
            listener.Listen(16);
            var secret = RandomNumberGenerator.GetBytes(SecretLength);
            var mine = new byte[EntryLength];
            local.MapToIPv6().TryWriteBytes(mine, out _);
            BinaryPrimitives.WriteUInt16BigEndian(mine.AsSpan(16), (ushort)((IPEndPoint)listener.LocalEndPoint!).Port);
            secret.CopyTo(mine, 18);
            var all = await group.AllGatherAsync(mine, ct);
            var ring = new TcpRing(group.Rank, group.Size, listener, all, secret);
            var right = (group.Rank + 1) % group.Size;
            var left = (group.Rank - 1 + group.Size) % group.Size;
            await ring.OpenAsync([right], [left], timeout, ct);
            return ring;
        }
        catch
        {
            listener.Dispose();
            throw;
        }
    }

    /// <summary>Connects to the ranks in <paramref name="sendTo"/> and accepts those in <paramref name="receiveFrom"/>
    /// that have no link yet; then no one else may connect.</summary>
    public async Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct)
    {
        if (Size > 1) await OpenAsync(sendTo, receiveFrom, timeout, ct);
        _listener?.Dispose();
        _listener = null;
    }

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
            // The peer's own secret, then who we are: it accepts nobody else on that port.
            var hello = new byte[SecretLength + 4];
            entry.AsSpan(18, SecretLength).CopyTo(hello);
            BinaryPrimitives.WriteInt32LittleEndian(hello.AsSpan(SecretLength), rank);
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
            var hello = new byte[SecretLength + 4];
            try
            {
                socket.NoDelay = true;
                await ReadExactlyAsync(socket, hello, stop.Token);
                var rank = BinaryPrimitives.ReadInt32LittleEndian(hello.AsSpan(SecretLength));
                if (CryptographicOperations.FixedTimeEquals(hello.AsSpan(0, SecretLength), secret) && from.Contains(rank))
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

    /// <summary>One direction of one connection: messages go, or are matched, in the order of the calls.</summary>
    private sealed class Wire(Socket socket)
    {
        public readonly Socket Socket = socket;
        public readonly byte[] Header = new byte[4];
        public readonly Lock Order = new();
        public Task Last = Task.CompletedTask;
    }

    public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) => SendToAsync((Rank + 1) % Size, message, ct);

    public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => ReceiveFromAsync((Rank - 1 + Size) % Size, buffer, ct);

    /// <summary>A length, then the message. Sends to one rank go out in the order of the calls.</summary>
    public Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct)
    {
        var wire = _to.TryGetValue(rank, out var w) ? w : throw new InvalidOperationException($"rank {Rank} has no link to rank {rank}");
        lock (wire.Order) return wire.Last = SendAfter(wire, wire.Last, message, ct);
    }

    private static async Task SendAfter(Wire wire, Task previous, ReadOnlyMemory<byte> message, CancellationToken ct)
    {
        await previous;
        BinaryPrimitives.WriteInt32LittleEndian(wire.Header, message.Length);
        await SendAllAsync(wire.Socket, wire.Header, ct);
        await SendAllAsync(wire.Socket, message, ct);
    }

    /// <summary>Receives from one rank match its messages in the order of the calls, as MPI's do.</summary>
    public Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct)
    {
        var wire = _from.TryGetValue(rank, out var w) ? w : throw new InvalidOperationException($"rank {Rank} has no link from rank {rank}");
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
        await ReadExactlyAsync(wire.Socket, wire.Header, ct);
        var length = BinaryPrimitives.ReadInt32LittleEndian(wire.Header);
        if (length < 0 || length > buffer.Length)
            throw new InvalidDataException($"rank {rank} sent a message of {length} bytes; at most {buffer.Length} were expected");
        await ReadExactlyAsync(wire.Socket, buffer[..length], ct);
        return length;
    }

    private static async ValueTask SendAllAsync(Socket socket, ReadOnlyMemory<byte> data, CancellationToken ct)
    {
        while (!data.IsEmpty) data = data[await socket.SendAsync(data, SocketFlags.None, ct)..];
    }

    private static async ValueTask ReadExactlyAsync(Socket socket, Memory<byte> buffer, CancellationToken ct)
    {
        while (!buffer.IsEmpty)
        {
            var n = await socket.ReceiveAsync(buffer, SocketFlags.None, ct);
            if (n == 0) throw new EndOfStreamException("the neighbour closed the ring's connection");
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
        // Sends still in the kernel's buffer are delivered after close: the peer reads them before it finishes.
        foreach (var wire in _to.Values)
        {
            try { await wire.Last; } catch { /* the exchange reported it */ }
            wire.Socket.Dispose();
        }
        foreach (var wire in _from.Values) wire.Socket.Dispose();
        _listener?.Dispose();
    }
}
