using System.Net;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.Integration.Tests;

/// <summary>The operation timeout catches a silent cache host, not a slow link.</summary>
public class TimeoutTests
{
    /// <summary>A stand-in host that answers every request with a 64 KB bulk string, dribbled out slowly, or not at all.</summary>
    private static async Task ServeAsync(TcpListener listener, bool silent, CancellationToken ct)
    {
        using var client = await listener.AcceptTcpClientAsync(ct);
        var stream = client.GetStream();
        var buffer = new byte[4096];
        await stream.ReadAtLeastAsync(buffer, 1, cancellationToken: ct); // the GET
        if (silent) { await Task.Delay(Timeout.Infinite, ct); return; }
        var value = new byte[65536];
        var reply = Encoding.ASCII.GetBytes($"${value.Length}\r\n").Concat(value).Concat("\r\n"u8.ToArray()).ToArray();
        for (var o = 0; o < reply.Length; o += 4096)
        {
            await stream.WriteAsync(reply.AsMemory(o, Math.Min(4096, reply.Length - o)), ct);
            await Task.Delay(250, ct); // about 4.3 s for the whole reply
        }
        await Task.Delay(Timeout.Infinite, ct);
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_reply_that_keeps_arriving_is_waited_for_and_a_silent_host_times_out(bool silent)
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        using var stop = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var server = ServeAsync(listener, silent, stop.Token);
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        await using var tier = new CacheTierClient(new CacheTierOptions
        {
            Hosts = [$"127.0.0.1:{port}"], OperationTimeout = TimeSpan.FromMilliseconds(1500), MaxAttempts = 1,
        });
        try
        {
            var task = tier.ExecuteOnAsync(0, "GET"u8.ToArray(), ["k"]);
            if (silent)
            {
                var e = await Assert.ThrowsAsync<CacheHostUnavailableException>(() => task);
                Assert.Contains("timed out", e.Message);
                Assert.Contains($"127.0.0.1:{port}", e.Message);
            }
            else
            {
                Assert.Equal(65536, (await task).Bulk!.Length); // took ~4.3 s, more than twice the timeout
            }
        }
        finally
        {
            stop.Cancel();
            listener.Stop();
            try { await server; } catch (OperationCanceledException) { }
        }
    }
}
