using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.CacheHost.Server;

/// <summary>The listening socket, bound before the host is built (<see cref="CacheServer.ListenAsync"/>).</summary>
internal sealed record BoundListener(Socket Socket);

/// <summary>
/// Listens for clients and runs one <see cref="ClientSession"/> per connection. The socket is bound before the host
/// starts, so a taken port is one line and an exit code rather than a failed start's stack trace, and the READY line is
/// printed only once connections can be accepted.
/// </summary>
internal sealed class CacheServer(ServerContext server, BoundListener bound, ILogger<CacheServer> logger) : BackgroundService
{
    private static readonly TimeSpan SessionDrainTimeout = TimeSpan.FromSeconds(5);

    private const int IpProtocolTcp = 6;
    private const int TcpNotSentLowWatermark = 25; // TCP_NOTSENT_LOWAT in linux/tcp.h
    private const int UnsentLowWatermarkBytes = 32 * 1024;

    private readonly ConcurrentDictionary<long, (ClientSession Session, Task Run)> _sessions = new();
    private readonly ConcurrentDictionary<IPAddress, int> _perAddress = new();
    private Socket? _listener;
    private ITimer? _idleSweep;

    /// <summary>Binds the host's address and port; a <see cref="SocketException"/> says why it cannot.</summary>
    public static async Task<BoundListener> ListenAsync(Hpc.CommonData.Hosting.CacheHostOptions options, CancellationToken cancellationToken)
    {
        var address = await ResolveAsync(options.Address, cancellationToken);
        var listener = new Socket(address.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        try
        {
            if (address.Equals(IPAddress.IPv6Any))
                listener.DualMode = true;
            listener.Bind(new IPEndPoint(address, options.Port));
            listener.Listen(512);
        }
        catch
        {
            listener.Dispose();
            throw;
        }
        return new BoundListener(listener);
    }

    public override async Task StartAsync(CancellationToken cancellationToken)
    {
        var options = server.Options;
        var listener = bound.Socket;
        _listener = listener;

        var endpoint = (IPEndPoint)listener.LocalEndPoint!;
        server.Port = endpoint.Port;
        Log.Listening(logger, endpoint, server.Store.MaxBytes, options.MaxFrameBytes.Bytes, server.Users.Required ? $"required ({server.Users.Count} account(s))" : "off");
        if (CacheUsers.Exposure(options) is { } exposure) Log.SecretsExposed(logger, exposure);
        // The one line on stdout: launchers and tests wait for it to learn the port.
        Console.Out.WriteLine($"READY {endpoint}");
        Console.Out.Flush();

        if (options.IdleTimeout > TimeSpan.Zero)
        {
            // One sweep for all connections rather than a timer per connection reset at every request: a request
            // then costs a timestamp, and a connection is closed between the limit and a tenth of it (10 s at most) later.
            var period = TimeSpan.FromTicks(Math.Clamp(options.IdleTimeout.Ticks / 10, TimeSpan.TicksPerMillisecond * 100, TimeSpan.TicksPerSecond * 10));
            _idleSweep = server.Time.CreateTimer(static s => ((CacheServer)s!).CloseIdleSessions(), this, period, period);
        }

        await base.StartAsync(cancellationToken);
    }

    private void CloseIdleSessions()
    {
        long now = server.Time.GetTimestamp();
        var limit = server.Options.IdleTimeout;
        foreach (var (_, entry) in _sessions)
            entry.Session.CloseIfIdle(now, limit);
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var listener = _listener ?? throw new InvalidOperationException("StartAsync did not bind a listener.");
        try
        {
            while (!stoppingToken.IsCancellationRequested)
            {
                Socket client;
                try
                {
                    client = await listener.AcceptAsync(stoppingToken);
                }
                catch (SocketException ex) when (ex.SocketErrorCode is SocketError.ConnectionAborted or SocketError.ConnectionReset)
                {
                    // The client gave up while still queued; nothing to serve.
                    continue;
                }
                catch (SocketException ex) when (!stoppingToken.IsCancellationRequested)
                {
                    // Out of file descriptors and the like: keep serving the clients we have, try again shortly.
                    Log.AcceptFailed(logger, ex);
                    await Task.Delay(TimeSpan.FromMilliseconds(100), stoppingToken);
                    continue;
                }
                Admit(client, stoppingToken);
            }
        }
        catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
        {
        }
        finally
        {
            _idleSweep?.Dispose();
            listener.Dispose();
            await CloseSessionsAsync();
        }
    }

    private void Admit(Socket client, CancellationToken stoppingToken)
    {
        var address = (client.RemoteEndPoint as IPEndPoint)?.Address;
        if (address is not null && !TryAdmitFrom(address))
        {
            int cap = server.Options.MaxClientsPerAddress;
            if (server.LogGates.MaxClientsPerAddress.TryPass(out long heldBack))
                Log.MaxClientsPerAddressReached(logger, client.RemoteEndPoint, cap, heldBack);
            _ = RefuseAsync(client, Encoding.ASCII.GetBytes($"-ERR max number of clients per address reached ({cap} from {address}; --max-clients-per-address)\r\n"));
            return;
        }
        // On a host that requires logging in: a few connections not yet logged in per address, and the last places
        // for addresses that have logged in before.
        var pending = server.Users.Required && address is not null;
        if (pending && !server.Admission.TryBeginPending(address!, server.Options.MaxUnauthenticatedPerAddress))
        {
            LeftFrom(address!);
            int cap = server.Options.MaxUnauthenticatedPerAddress;
            if (server.LogGates.MaxClientsPerAddress.TryPass(out long heldBack))
                Log.MaxUnauthenticatedReached(logger, client.RemoteEndPoint, cap, heldBack);
            _ = RefuseAsync(client, Encoding.ASCII.GetBytes($"-ERR max number of connections not yet logged in reached ({cap} from {address}; --max-unauthenticated-per-address)\r\n"));
            return;
        }
        var reserve = pending && !server.Admission.HasLoggedInBefore(address!) ? ConnectionAdmission.Reserve(server.Options.MaxClients) : 0;
        long id = server.Stats.TryAdmit(server.Options.MaxClients - reserve);
        if (id == 0)
        {
            if (address is not null) LeftFrom(address);
            if (pending) server.Admission.EndPending(address!);
            if (server.LogGates.MaxClients.TryPass(out long heldBack))
                Log.MaxClientsReached(logger, client.RemoteEndPoint, server.Options.MaxClients, heldBack);
            _ = RefuseAsync(client, reserve > 0 ? ReservedReply(reserve) : MaxClientsReply);
            return;
        }

        client.NoDelay = true;
        if (OperatingSystem.IsLinux())
        {
            // Keep at most this much unsent data queued in the kernel. A deeper queue is pushed out later from
            // whatever context processes the peer's ACKs — on loopback the client's own reads — which measurably
            // slowed redis-benchmark; with this, the host's own send call does its transmission.
            client.SetRawSocketOption(IpProtocolTcp, TcpNotSentLowWatermark, BitConverter.GetBytes(UnsentLowWatermarkBytes));
        }
        var session = new ClientSession(id, client, server, logger);
        if (pending) session.CountAsPending(address!);
        // Registered before it starts, so the session's own cleanup always finds its entry to remove.
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var run = RunSessionAsync(session, address, started.Task, stoppingToken);
        _sessions[id] = (session, run);
        started.SetResult();
    }

    /// <summary>Counts a connection from <paramref name="address"/> unless the address has its share already.</summary>
    private bool TryAdmitFrom(IPAddress address)
    {
        int cap = server.Options.MaxClientsPerAddress;
        while (true)
        {
            if (_perAddress.TryGetValue(address, out int count))
            {
                if (count >= cap) return false;
                if (_perAddress.TryUpdate(address, count + 1, count)) return true;
            }
            else if (_perAddress.TryAdd(address, 1))
            {
                return true;
            }
        }
    }

    private void LeftFrom(IPAddress address)
    {
        while (true)
        {
            int count = _perAddress[address];
            // The last one out removes the entry, so the table holds only addresses with connections.
            if (count == 1 ? _perAddress.TryRemove(new KeyValuePair<IPAddress, int>(address, 1)) : _perAddress.TryUpdate(address, count - 1, count))
                return;
        }
    }

    private async Task RunSessionAsync(ClientSession session, IPAddress? address, Task registered, CancellationToken stoppingToken)
    {
        await registered;
        try
        {
            await session.RunAsync(stoppingToken);
        }
        finally
        {
            _sessions.TryRemove(session.Id, out _);
            session.LeavePending();
            server.Stats.ClientLeft();
            if (address is not null) LeftFrom(address);
        }
    }

    private static readonly byte[] MaxClientsReply = "-ERR max number of clients reached\r\n"u8.ToArray();

    private static byte[] ReservedReply(int reserve) =>
        Encoding.ASCII.GetBytes($"-ERR max number of clients reached (the last {reserve} of --max-clients are kept for addresses that have logged in before)\r\n");

    private static async Task RefuseAsync(Socket client, byte[] reply)
    {
        try
        {
            await client.SendAsync(reply, SocketFlags.None);
        }
        catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
        {
            // The refused client is already gone; there is nobody left to tell.
        }
        finally
        {
            client.Dispose();
        }
    }

    private async Task CloseSessionsAsync()
    {
        var sessions = _sessions.Values.ToArray();
        Log.Stopping(logger, sessions.Length);
        foreach (var (session, _) in sessions)
            session.Abort();
        try
        {
            await Task.WhenAll(sessions.Select(s => s.Run)).WaitAsync(SessionDrainTimeout);
        }
        catch (TimeoutException)
        {
            // Sockets are closed already; a session still finishing its last send cannot delay shutdown further.
        }
    }

    private static async Task<IPAddress> ResolveAsync(string address, CancellationToken cancellationToken)
    {
        if (address is "*")
            return IPAddress.Any;
        if (IPAddress.TryParse(address, out var parsed))
            return parsed;
        var candidates = await Dns.GetHostAddressesAsync(address, cancellationToken);
        return candidates.FirstOrDefault(a => a.AddressFamily == AddressFamily.InterNetwork)
            ?? candidates.FirstOrDefault()
            ?? throw new InvalidOperationException($"Address '{address}' resolves to nothing.");
    }
}
