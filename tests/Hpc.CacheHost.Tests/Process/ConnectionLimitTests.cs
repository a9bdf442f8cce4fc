using System.Diagnostics;
using System.Net;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// Connections that never log in do not keep an account's clients out: on a host that requires authentication they are
/// closed after --auth-timeout (5 s), and on any host one address holds at most --max-clients-per-address of them.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class ConnectionLimitTests : IDisposable
{
    private readonly string _usersFile = Path.GetTempFileName();
    private readonly List<CacheHostProcess> _hosts = [];
    private readonly List<RespTestClient> _clients = [];

    public ConnectionLimitTests() => File.WriteAllText(_usersFile, "node reader node-pass\n");

    [Fact]
    public void Idle_connections_that_never_log_in_are_closed_after_five_seconds_and_the_node_account_then_logs_in()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.MaxClients = 200; o.MaxUnauthenticatedPerAddress = 200; });
        // The last tenth of the places is kept for addresses that have logged in before; this one has not.
        for (int i = 0; i < 180; i++)
            _clients.Add(new RespTestClient(host));
        var clock = Stopwatch.StartNew();
        using (var turnedAway = new RespTestClient(host))
            Assert.Equal("ERR max number of clients reached (the last 20 of --max-clients are kept for addresses that have logged in before)",
                Assert.IsType<RespError>(turnedAway.ReadReply()).Message);

        // One attempt per 250 ms for at most 20 s (the earlier host kept the idle connections for good).
        object? reply = null;
        while (clock.Elapsed < TimeSpan.FromSeconds(20))
        {
            try
            {
                using var node = new RespTestClient(host);
                reply = node.Call("AUTH", "node", "node-pass");
                if (reply is "OK") break;
            }
            catch (IOException)
            {
                // Turned away and closed before the AUTH was read.
            }
            Thread.Sleep(250);
        }
        var elapsed = clock.Elapsed;

        Assert.Equal("OK", reply);
        Assert.InRange(elapsed, TimeSpan.FromSeconds(3), TimeSpan.FromSeconds(12));
        Assert.All(_clients, idle => Assert.True(idle.IsClosedByServer()));
        const string closed = "did not authenticate within 00:00:05 and was disconnected";
        Assert.Contains(closed, host.LogOnceItSays(closed));
    }

    [Fact]
    public async Task Connections_that_never_log_in_reconnecting_as_fast_as_they_are_closed_do_not_keep_out_a_node_that_logged_in_before()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.MaxClients = 200; o.AuthTimeout = TimeSpan.FromSeconds(1); });
        var node = IPAddress.Parse("127.0.0.1");
        using (var first = new RespTestClient(host, node))
            Assert.Equal("OK", first.Call("AUTH", "node", "node-pass"));

        // Ten other addresses each try to hold 256 connections that never log in, opening a new one whenever one is
        // refused or closed, for 8 s.
        using var stop = new CancellationTokenSource(TimeSpan.FromSeconds(8));
        var refusals = new System.Collections.Concurrent.ConcurrentBag<string>();
        var churn = Enumerable.Range(1, 10).Select(a => Task.Run(() =>
        {
            var address = IPAddress.Parse($"127.0.1.{a}");
            var held = new List<RespTestClient>();
            try
            {
                while (!stop.IsCancellationRequested)
                {
                    held.RemoveAll(c => { if (!c.IsClosedByServer(TimeSpan.Zero)) return false; c.Dispose(); return true; });
                    while (held.Count < 256 && !stop.IsCancellationRequested)
                    {
                        var c = new RespTestClient(host, address);
                        if (c.TryReadError(TimeSpan.FromMilliseconds(5)) is { } refused) { refusals.Add(refused); c.Dispose(); break; }
                        held.Add(c);
                    }
                    Thread.Sleep(20);
                }
            }
            finally { held.ForEach(c => c.Dispose()); }
        })).ToArray();

        await Task.Delay(1000);
        var logins = 0;
        for (var i = 0; i < 60; i++)
        {
            try
            {
                using var again = new RespTestClient(host, node);
                if (again.Call("AUTH", "node", "node-pass") is "OK") logins++;
            }
            catch (IOException) { /* turned away before the AUTH was read */ }
            await Task.Delay(100);
        }
        await Task.WhenAll(churn);

        Assert.Equal(60, logins);
        // The churn did press on the limits: turned away past its addresses' pending share or at the reserve.
        Assert.True(refusals.Any(r => r.StartsWith("ERR max number of connections not yet logged in reached (32 from 127.0.1.", StringComparison.Ordinal)
                                      || r.StartsWith("ERR max number of clients reached (the last 20", StringComparison.Ordinal))
                    || host.Log.Contains("connections not yet logged in from that address") || host.Log.Contains("clients already connected"),
            $"no connection was turned away; refusals seen: {refusals.Count}");
    }

    [Fact]
    public void A_connection_that_logs_in_stays_open_past_the_auth_timeout_and_an_open_host_closes_nothing()
    {
        var secured = Start(o => { o.UsersFile = _usersFile; o.AuthTimeout = TimeSpan.FromSeconds(1); });
        var open = Start(o => o.AuthTimeout = TimeSpan.FromSeconds(1));
        using var node = new RespTestClient(secured);
        Assert.Equal("OK", node.Call("AUTH", "node", "node-pass"));
        using var idle = new RespTestClient(open);

        Thread.Sleep(TimeSpan.FromSeconds(3));

        Assert.Equal("PONG", node.Call("PING"));
        Assert.Equal("PONG", idle.Call("PING"));
    }

    [Fact]
    public void A_connection_over_the_per_address_cap_is_told_the_limit_in_one_line_and_closed_while_other_addresses_are_served()
    {
        var host = Start(o => o.MaxClientsPerAddress = 4);
        var crowded = IPAddress.Parse("127.0.0.5");
        for (int i = 0; i < 4; i++)
        {
            var client = new RespTestClient(host, crowded);
            _clients.Add(client);
            Assert.Equal("PONG", client.Call("PING"));
        }

        using (var over = new RespTestClient(host, crowded))
        {
            Assert.Equal("ERR max number of clients per address reached (4 from 127.0.0.5; --max-clients-per-address)",
                Assert.IsType<RespError>(over.ReadReply()).Message);
            Assert.True(over.IsClosedByServer());
        }
        using (var other = new RespTestClient(host, IPAddress.Parse("127.0.0.6")))
            Assert.Equal("PONG", other.Call("PING"));

        // A place given up is free again for that address (the host notices the close a moment later).
        _clients[0].Dispose();
        _clients.RemoveAt(0);
        object? reply = null;
        for (var clock = Stopwatch.StartNew(); reply is not "PONG" && clock.Elapsed < TimeSpan.FromSeconds(10); Thread.Sleep(100))
        {
            using var again = new RespTestClient(host, crowded);
            try { reply = again.Call("PING"); }
            catch (IOException) { }
        }
        Assert.Equal("PONG", reply);
    }

    private CacheHostProcess Start(Action<Hpc.CommonData.Hosting.CacheHostOptions> configure)
    {
        var host = CacheHostProcess.Start(configure);
        _hosts.Add(host);
        return host;
    }

    public void Dispose()
    {
        foreach (var client in _clients)
            client.Dispose();
        foreach (var host in _hosts)
            host.Dispose();
        File.Delete(_usersFile);
    }
}
