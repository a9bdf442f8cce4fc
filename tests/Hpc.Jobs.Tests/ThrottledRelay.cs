using System.Diagnostics;
using System.Net;
using System.Net.Sockets;

namespace Hpc.Jobs.Tests;

/// <summary>
/// A TCP relay on loopback in front of a real cache host whose replies flow at a fixed rate, so a fetch lasts long
/// enough to be interrupted on any machine. Every connection ends when either side closes or the relay is disposed.
/// </summary>
internal sealed class ThrottledRelay : IAsyncDisposable
{
    private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _accepting;
    private readonly List<Task> _pumps = [];

    /// <param name="holdEachConnection">How long each connection waits before the relay connects it through: a server
    /// that takes connections and answers late.</param>
    public ThrottledRelay(string target, long bytesPerSecond, TimeSpan holdEachConnection = default)
    {
        var colon = target.LastIndexOf(':');
        var (host, port) = (target[..colon], int.Parse(target[(colon + 1)..]));
        _listener.Start();
        _accepting = Task.Run(async () =>
        {
            while (!_stop.IsCancellationRequested)
            {
                TcpClient client;
                try { client = await _listener.AcceptTcpClientAsync(_stop.Token); }
                catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException) { return; }
                lock (_pumps) _pumps.Add(ConnectThroughAsync(client));
            }
        });

        async Task ConnectThroughAsync(TcpClient client)
        {
            var upstream = new TcpClient();
            try
            {
                if (holdEachConnection > TimeSpan.Zero) await Task.Delay(holdEachConnection, _stop.Token);
                await upstream.ConnectAsync(host, port, _stop.Token);
            }
            catch (Exception e) when (e is SocketException or OperationCanceledException)
            {
                // The host behind is gone (or the relay stops): the client sees its connection closed, as it would without the relay.
                upstream.Dispose();
                client.Dispose();
                return;
            }
            await Task.WhenAll(PumpAsync(client, upstream, long.MaxValue), PumpAsync(upstream, client, bytesPerSecond));
        }
    }

    public string Address => $"127.0.0.1:{((IPEndPoint)_listener.LocalEndpoint).Port}";

    private async Task PumpAsync(TcpClient from, TcpClient to, long bytesPerSecond)
    {
        var buffer = new byte[16 << 10];
        var clock = Stopwatch.StartNew();
        long sent = 0;
        try
        {
            // The other direction's pump closes both clients when its side ends, at any moment: a closed client is
            // this pump's end too, whether it is noticed by a read, a write or getting the stream.
            var (input, output) = (from.GetStream(), to.GetStream());
            while (true)
            {
                var n = await input.ReadAsync(buffer, _stop.Token);
                if (n == 0) break;
                await output.WriteAsync(buffer.AsMemory(0, n), _stop.Token);
                sent += n;
                var due = TimeSpan.FromSeconds((double)sent / bytesPerSecond) - clock.Elapsed;
                if (due > TimeSpan.Zero) await Task.Delay(due, _stop.Token);
            }
        }
        catch (Exception e) when (e is OperationCanceledException or IOException or SocketException or ObjectDisposedException or InvalidOperationException) { }
        finally
        {
            from.Close();
            to.Close();
        }
    }

    public async ValueTask DisposeAsync()
    {
        _stop.Cancel();
        _listener.Stop();
        await _accepting;
        Task[] pumps;
        lock (_pumps) pumps = [.. _pumps];
        await Task.WhenAll(pumps);
    }
}
