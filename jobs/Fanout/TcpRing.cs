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
public sealed class TcpRing : IRingLink, IAsyncDisposable
{
    private const int SecretLength = 16;
    /// <summary>Address (IPv6 or IPv4-mapped), port, secret: every rank's entry in the all-gather.</summary>
    private const int EntryLength = 16 + 2 + SecretLength;
    private readonly Socket? _right, _left;
    private readonly byte[] _sendHeader = new byte[4];
    private readonly byte[] _receiveHeader = new byte[4];
    private Task _lastSend = Task.CompletedTask, _lastReceive = Task.CompletedTask;
    private readonly Lock _order = new();

    private TcpRing(int rank, int size, Socket? right, Socket? left) => (Rank, Size, _right, _left) = (rank, size, right, left);

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
        if (group.Size == 1) return new TcpRing(0, 1, null, null);
        // Closed once both links are up: nobody else gets to connect after that.
        using var listener = new Socket(local.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(local, 0));
        listener.Listen(16);
        var secret = RandomNumberGenerator.GetBytes(SecretLength);
        var mine = new byte[EntryLength];
        local.MapToIPv6().TryWriteBytes(mine, out _);
        BinaryPrimitives.WriteUInt16BigEndian(mine.AsSpan(16), (ushort)((IPEndPoint)listener.LocalEndPoint!).Port);
        secret.CopyTo(mine, 18);
        var all = await group.AllGatherAsync(mine, ct);
        var right = (group.Rank + 1) % group.Size;
        var left = (group.Rank - 1 + group.Size) % group.Size;

        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(timeout);
        var accepting = AcceptAsync(listener, left, secret, limit.Token);
        Socket? outgoing = null;
        try
        {
            outgoing = await ConnectRightAsync(all[right], group.Rank, limit.Token);
            return new TcpRing(group.Rank, group.Size, outgoing, await accepting);
        }
        catch (Exception e)
        {
            outgoing?.Dispose();
            limit.Cancel();
            try { (await accepting).Dispose(); } catch { /* the first failure is the one reported */ }
            if (e is OperationCanceledException && !ct.IsCancellationRequested)
                throw new TimeoutException($"rank {group.Rank}: the ring's TCP links to ranks {right} and {left} were not up within {timeout.TotalSeconds:0} s");
            throw;
        }
    }

    private static async Task<Socket> ConnectRightAsync(byte[] entry, int rank, CancellationToken ct)
    {
        var address = new IPAddress(entry.AsSpan(0, 16));
        if (address.IsIPv4MappedToIPv6) address = address.MapToIPv4();
        var port = BinaryPrimitives.ReadUInt16BigEndian(entry.AsSpan(16));
        var socket = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try
        {
            await socket.ConnectAsync(new IPEndPoint(address, port), ct);
            // The right neighbour's own secret, then who we are: it accepts nobody else on that port.
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

    private static async Task<Socket> AcceptAsync(Socket listener, int left, byte[] secret, CancellationToken ct)
    {
        // Each connection proves itself on its own, so one that connects and says nothing holds up no one.
        var winner = new TaskCompletionSource<Socket>(TaskCreationOptions.RunContinuationsAsynchronously);
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var checks = new List<Task>();
        var accepting = AcceptLoop();
        try
        {
            // A listener that fails ends the wait as well as a neighbour that arrives.
            await Task.WhenAny(winner.Task, accepting);
            if (!winner.Task.IsCompleted) await accepting;
            return await winner.Task;
        }
        finally
        {
            stop.Cancel();
            try { await accepting; } catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException) { }
            await Task.WhenAll(checks);
        }

        async Task AcceptLoop()
        {
            while (!winner.Task.IsCompleted)
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
                if (CryptographicOperations.FixedTimeEquals(hello.AsSpan(0, SecretLength), secret) &&
                    BinaryPrimitives.ReadInt32LittleEndian(hello.AsSpan(SecretLength)) == left && winner.TrySetResult(socket))
                    return;
            }
            catch (Exception e) when (e is SocketException or EndOfStreamException or OperationCanceledException) { }
            // Not the left neighbour: closed, and the listener waits on.
            socket.Dispose();
        }
    }

    /// <summary>A length, then the message. Sends go out in the order of the calls.</summary>
    public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct)
    {
        lock (_order) return _lastSend = SendAfter(_lastSend, message, ct);
    }

    private async Task SendAfter(Task previous, ReadOnlyMemory<byte> message, CancellationToken ct)
    {
        await previous;
        BinaryPrimitives.WriteInt32LittleEndian(_sendHeader, message.Length);
        await SendAllAsync(_right!, _sendHeader, ct);
        await SendAllAsync(_right!, message, ct);
    }

    /// <summary>Receives match messages in the order of the calls, as MPI's do.</summary>
    public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct)
    {
        lock (_order)
        {
            var receive = ReceiveAfter(_lastReceive, buffer, ct);
            _lastReceive = receive;
            return receive;
        }
    }

    private async Task<int> ReceiveAfter(Task previous, Memory<byte> buffer, CancellationToken ct)
    {
        await previous;
        await ReadExactlyAsync(_left!, _receiveHeader, ct);
        var length = BinaryPrimitives.ReadInt32LittleEndian(_receiveHeader);
        if (length < 0 || length > buffer.Length)
            throw new InvalidDataException($"rank {(Rank - 1 + Size) % Size} sent a message of {length} bytes; at most {buffer.Length} were expected");
        await ReadExactlyAsync(_left!, buffer[..length], ct);
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
        // Sends still in the kernel's buffer are delivered after close: the neighbour reads them before it finishes.
        try { await _lastSend; } catch { /* the exchange reported it */ }
        _right?.Dispose();
        _left?.Dispose();
    }
}
