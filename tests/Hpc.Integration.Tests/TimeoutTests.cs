using Hpc.CommonData.Hosting;
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
        await stream.ReadAtLeastAsync(buffer, 1, cancellationToken: ct); // the PING every new plain connection opens with
        await stream.WriteAsync("+PONG\r\n"u8.ToArray(), ct);
        await stream.ReadAtLeastAsync(buffer, 1, cancellationToken: ct); // the GET
        if (silent) { await Task.Delay(Timeout.Infinite, ct); return; }
        var value = new byte[65536];
        var reply = Encoding.ASCII.GetBytes($"${value.Length}\r\n").Concat(value).Concat("\r\n"u8.ToArray()).ToArray();
        for (var o = 0; o < reply.Length; o += 2048)
        {
            await stream.WriteAsync(reply.AsMemory(o, Math.Min(2048, reply.Length - o)), ct);
            await Task.Delay(200, ct); // about 6.6 s for the whole reply
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
            // The pieces come 12 times as often as the timeout, so a loaded test machine's stalls do not look like silence.
            Hosts = [$"127.0.0.1:{port}"], OperationTimeout = TimeSpan.FromMilliseconds(2500), MaxAttempts = 1,
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
                Assert.Equal(65536, (await task).Bulk!.Length); // took ~6.6 s, more than twice the timeout
            }
        }
        finally
        {
            stop.Cancel();
            listener.Stop();
            try { await server; } catch (OperationCanceledException) { }
        }
    }

    /// <summary>
    /// A host that accepts connections and reads requests but never answers (what a SIGSTOPped host looks like from
    /// outside): a small request gives up after the response timeout, once, instead of the long exchange timeout five
    /// times; the next request within seconds fails without waiting; data requests keep the long, progress-based timeout.
    /// </summary>
    [Fact]
    public async Task A_host_that_accepts_but_never_answers_is_given_up_on_after_the_response_timeout_without_retries()
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        using var stop = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        var accepted = 0;
        var server = Task.Run(async () =>
        {
            var held = new List<TcpClient>();
            try
            {
                while (true)
                {
                    held.Add(await listener.AcceptTcpClientAsync(stop.Token)); // keeps every connection open, says nothing
                    Interlocked.Increment(ref accepted);
                }
            }
            catch (OperationCanceledException) { }
            finally { foreach (var c in held) c.Dispose(); }
        });
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        await using var tier = new CacheTierClient(new CacheTierOptions
        {
            Hosts = [$"127.0.0.1:{port}"], ResponseTimeout = TimeSpan.FromMilliseconds(800), OperationTimeout = TimeSpan.FromSeconds(30), MaxAttempts = 5,
        });
        try
        {
            var clock = System.Diagnostics.Stopwatch.StartNew();
            var e = await Assert.ThrowsAsync<CacheHostUnavailableException>(() => tier.Catalog.GetLatestAsync("fault/silent"));
            clock.Stop();
            Assert.Contains("sent no answer", e.Message);
            Assert.Contains("not retried", e.Message);
            Assert.Equal(1, Volatile.Read(ref accepted)); // one connection, one attempt: no retry waited out the same silence
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(20), $"gave up after {clock.Elapsed.TotalSeconds:0.0} s: the long timeout was used");

            var again = await Assert.ThrowsAsync<CacheHostUnavailableException>(() => tier.Catalog.GetLatestAsync("fault/silent"));
            Assert.Contains("not tried again yet", again.Message);
            Assert.Equal(1, Volatile.Read(ref accepted));
        }
        finally
        {
            stop.Cancel();
            listener.Stop();
            await server;
        }
    }

    [Fact]
    public async Task A_host_that_never_completes_the_connection_is_reported_as_not_connecting_not_as_silent()
    {
        // A listener whose queue of connections is full and never accepted: the kernel drops further connects' SYNs,
        // as a host that is down or filtered does.
        using var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen(0);
        var port = ((IPEndPoint)listener.LocalEndPoint!).Port;
        var fillers = Enumerable.Range(0, 4).Select(_ => new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp)).ToList();
        using var stop = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var filling = fillers.Select(f => f.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port), stop.Token).AsTask()).ToList();
        await Task.Delay(500);
        try
        {
            await using var tier = new CacheTierClient(new CacheTierOptions
            {
                Hosts = [$"127.0.0.1:{port}"], ConnectTimeout = TimeSpan.FromSeconds(1), ResponseTimeout = TimeSpan.FromSeconds(1), MaxAttempts = 2,
            });
            var e = await Assert.ThrowsAsync<CacheHostUnavailableException>(() => tier.Catalog.GetLatestAsync("fault/unreachable"));
            Assert.Contains("connect timed out", e.Message);
            Assert.DoesNotContain("accepted the connection", e.Message);
        }
        finally
        {
            stop.Cancel();
            foreach (var f in fillers) f.Dispose();
            try { await Task.WhenAll(filling); } catch (Exception) { /* the fillers that never connected */ }
        }
    }

    [Fact]
    public async Task A_host_name_that_does_not_resolve_is_named_as_such_and_not_retried()
    {
        const string name = "no-such-cache-host.invalid";
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [$"{name}:6380"], MaxAttempts = 5 });
        var e = await Assert.ThrowsAsync<CacheHostUnavailableException>(() => tier.Catalog.GetLatestAsync("fault/unresolved"));
        // What this machine's resolver says of a name under .invalid: "no such name", or "try again" where no resolver answers.
        var resolver = await Assert.ThrowsAnyAsync<SocketException>(() => Dns.GetHostAddressesAsync(name));
        if (resolver.SocketErrorCode is SocketError.HostNotFound or SocketError.NoData)
            Assert.Contains("no such host name", e.Message);
        else Assert.Contains("after 5 attempts", e.Message); // a resolver that is down may come back: retried
        if (resolver.SocketErrorCode is SocketError.HostNotFound or SocketError.NoData)
            Assert.Contains("check --cache-hosts or HPCDATA_CACHE_HOSTS); not retried", e.Message);
    }

    [Fact]
    public async Task A_command_given_no_cache_hosts_that_finds_none_at_the_default_address_says_it_is_only_the_default()
    {
        // Only where nothing listens on the default port (a cache host of this machine's own would answer).
        using (var probe = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp))
        {
            try
            {
                await probe.ConnectAsync(new IPEndPoint(IPAddress.Loopback, CacheEndpoint.DefaultPort));
                return;
            }
            catch (SocketException e) when (e.SocketErrorCode == SocketError.ConnectionRefused) { }
        }
        await using var c = new Cluster();
        var (code, _, stderr) = await c.RunAsync("hpcdata", ["list"], new Dictionary<string, string?> { ["HPCDATA_CACHE_HOSTS"] = null });
        Assert.Equal(ExitCodes.Unavailable, code);
        Assert.Contains("127.0.0.1:6380 is only where commands look when given no cache hosts (--cache-hosts or HPCDATA_CACHE_HOSTS)", stderr);
    }
}
