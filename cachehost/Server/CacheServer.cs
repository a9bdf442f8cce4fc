using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.CacheHost.Server;

/// <summary>
/// Listens for clients and runs one <see cref="ClientSession"/> per connection. Binding happens in StartAsync so a
/// taken port fails the host's start, and the READY line is printed only once connections can be accepted.
/// </summary>
internal sealed class CacheServer(ServerContext server, ILogger<CacheServer> logger) : BackgroundService
{
    private static readonly TimeSpan SessionDrainTimeout = TimeSpan.FromSeconds(5);

    private const int IpProtocolTcp = 6;
    private const int TcpNotSentLowWatermark = 25; // TCP_NOTSENT_LOWAT in linux/tcp.h
    private const int UnsentLowWatermarkBytes = 32 * 1024;

    private readonly ConcurrentDictionary<long, (ClientSession Session, Task Run)> _sessions = new();
    private Socket? _listener;

    public override async Task StartAsync(CancellationToken cancellationToken)
    {
        var options = server.Options;
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
        _listener = listener;

        var bound = (IPEndPoint)listener.LocalEndPoint!;
        server.Port = bound.Port;
        Log.Listening(logger, bound, server.Store.MaxBytes, options.MaxFrameBytes.Bytes, server.Users.Required ? $"required ({server.Users.Count} account(s))" : "off");
        // The one line on stdout: launchers and tests wait for it to learn the port.
        Console.Out.WriteLine($"READY {bound}");
        Console.Out.Flush();

        await base.StartAsync(cancellationToken);
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
            listener.Dispose();
            await CloseSessionsAsync();
        }
    }

    private void Admit(Socket client, CancellationToken stoppingToken)
    {
        long id = server.Stats.TryAdmit(server.Options.MaxClients);
        if (id == 0)
        {
            Log.MaxClientsReached(logger, client.RemoteEndPoint, server.Options.MaxClients);
            _ = RefuseAsync(client);
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
        // Registered before it starts, so the session's own cleanup always finds its entry to remove.
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var run = RunSessionAsync(session, started.Task, stoppingToken);
        _sessions[id] = (session, run);
        started.SetResult();
    }

    private async Task RunSessionAsync(ClientSession session, Task registered, CancellationToken stoppingToken)
    {
        await registered;
        try
        {
            await session.RunAsync(stoppingToken);
        }
        finally
        {
            _sessions.TryRemove(session.Id, out _);
            server.Stats.ClientLeft();
        }
    }

    private static async Task RefuseAsync(Socket client)
    {
        try
        {
            await client.SendAsync("-ERR max number of clients reached\r\n"u8.ToArray(), SocketFlags.None);
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
