using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Cache;
using Microsoft.Extensions.Logging;
using Xunit.Abstractions;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// No one account fills a host: an account's logged-in connections stop at its share of --max-clients (half by
/// default), writers together leave the last fifth to readers and administrators, and a logged-in connection that
/// sends nothing for --idle-timeout is closed, giving its share back. Measured against the real host, at a test-size
/// --max-clients 200, as the flood was.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class AccountShareTests : IDisposable
{
    private readonly string _usersFile = Path.GetTempFileName();
    private readonly List<CacheHostProcess> _hosts = [];
    private readonly List<RespTestClient> _clients = [];
    private readonly ITestOutputHelper _output;

    public AccountShareTests(ITestOutputHelper output)
    {
        _output = output;
        File.WriteAllText(_usersFile, "node reader node-pass\nmallory writer m-pass\nalice writer a-pass\nops admin ops-pass\n");
    }

    private static readonly IPAddress Flooder = IPAddress.Parse("127.0.2.1");

    [Fact]
    public async Task One_account_is_refused_past_its_share_naming_the_limit_while_sixty_node_logins_all_get_in()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.MaxClients = 200; });

        // The writer takes every connection it is given, and is told the limit at the first one past its share.
        int held = 0;
        string? refusal = null;
        while (refusal is null && held < 200)
        {
            var c = new RespTestClient(host, Flooder);
            var reply = c.Call("AUTH", "mallory", "m-pass");
            if (reply is "OK") { _clients.Add(c); held++; continue; }
            refusal = Assert.IsType<RespError>(reply).Message;
            Assert.True(c.IsClosedByServer(), "a connection refused its account's share is closed");
            c.Dispose();
        }
        Assert.Equal(100, held);
        Assert.Equal("ERR max number of clients per account reached (100 of account mallory; --max-clients-per-account)", refusal);

        // It keeps trying as fast as it is refused, while 60 node logins, each kept open, come from 60 addresses.
        using var stop = new CancellationTokenSource();
        var refusedFlood = 0;
        var flood = Task.Run(() =>
        {
            while (!stop.IsCancellationRequested)
            {
                try
                {
                    using var c = new RespTestClient(host, Flooder);
                    if (c.Call("AUTH", "mallory", "m-pass") is RespError) Interlocked.Increment(ref refusedFlood);
                }
                catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException) { }
            }
        });
        for (var clock = Stopwatch.StartNew(); Volatile.Read(ref refusedFlood) == 0 && clock.Elapsed < TimeSpan.FromSeconds(30);)
            await Task.Delay(50);
        var logins = 0;
        var failures = new List<string>();
        for (var i = 1; i <= 60; i++)
        {
            try
            {
                var node = new RespTestClient(host, IPAddress.Parse($"127.0.3.{i}"));
                _clients.Add(node);
                if (node.Call("AUTH", "node", "node-pass") is "OK" && node.Call("PING") is "PONG") logins++;
                else failures.Add($"node {i}: refused");
            }
            catch (Exception e) when (e is IOException or System.Net.Sockets.SocketException) { failures.Add($"node {i}: {e.Message}"); }
        }
        await stop.CancelAsync();
        await flood;

        _output.WriteLine($"node logins {logins}/60 while mallory held {held} and was refused {refusedFlood} more times");
        Assert.True(logins == 60, string.Join("; ", failures));
        Assert.True(refusedFlood > 0, "the flood went on being refused while the nodes logged in");
        Assert.Contains("refused at login as mallory and disconnected: ERR max number of clients per account reached",
            host.LogOnceItSays("refused at login as mallory"));

        // A place given back is the account's again (the host notices the close a moment later).
        _clients[0].Dispose();
        _clients.RemoveAt(0);
        Assert.Equal("OK", LogInWithin(host, "mallory", "m-pass", Flooder, TimeSpan.FromSeconds(10)));
    }

    [Fact]
    public async Task At_the_default_max_clients_one_writer_holding_all_it_may_leaves_sixty_node_logins_all_getting_in()
    {
        // The default --max-clients is 10,000, so the writer's share is 5,000 connections, each a descriptor here and one
        // in the host. Where the descriptors allowed are fewer, the same is shown at the size they allow.
        int maxClients = Math.Min(10_000, 2 * (OpenFilesAllowed() - 1_000));
        var host = Start(o => { o.UsersFile = _usersFile; if (maxClients != 10_000) o.MaxClients = maxClients; });
        var clock = Stopwatch.StartNew();
        var held = new List<Socket>();
        var writerAddresses = Enumerable.Range(1, 64).Select(i => IPAddress.Parse($"127.0.6.{i}")).ToArray();
        string? refusal = null;
        try
        {
            while (refusal is null && held.Count < maxClients)
            {
                var c = LogInRaw(host, writerAddresses[held.Count % writerAddresses.Length], "mallory", "m-pass", out var reply);
                if (reply == "+OK") held.Add(c);
                else { refusal = reply; c.Dispose(); }
            }
            var filled = clock.Elapsed;
            Assert.Equal(maxClients / 2, held.Count);
            Assert.Equal($"-ERR max number of clients per account reached ({maxClients / 2} of account mallory; --max-clients-per-account)", refusal);

            using var stop = new CancellationTokenSource();
            var refusedFlood = 0;
            var flood = Task.Run(() =>
            {
                for (var i = 0; !stop.IsCancellationRequested; i++)
                {
                    try
                    {
                        using var c = LogInRaw(host, writerAddresses[i % writerAddresses.Length], "mallory", "m-pass", out var reply);
                        if (reply.StartsWith('-')) Interlocked.Increment(ref refusedFlood);
                    }
                    catch (SocketException) { }
                }
            });
            for (var wait = Stopwatch.StartNew(); Volatile.Read(ref refusedFlood) == 0 && wait.Elapsed < TimeSpan.FromSeconds(30);)
                await Task.Delay(50);
            var logins = 0;
            var failures = new List<string>();
            for (var i = 1; i <= 60; i++)
            {
                try
                {
                    var node = LogInRaw(host, IPAddress.Parse($"127.0.7.{i}"), "node", "node-pass", out var reply);
                    held.Add(node);
                    if (reply == "+OK") logins++;
                    else failures.Add($"node {i}: {reply}");
                }
                catch (SocketException e) { failures.Add($"node {i}: {e.Message}"); }
            }
            await stop.CancelAsync();
            await flood;

            _output.WriteLine($"--max-clients {maxClients}: mallory held {held.Count - 60} connections ({filled.TotalSeconds:0.0} s to open), " +
                              $"then was refused {refusedFlood} more while node logins got in {logins} of 60 (each kept open)");
            Assert.True(logins == 60, string.Join("; ", failures));
        }
        finally
        {
            held.ForEach(c => c.Dispose());
        }
    }

    /// <summary>Connects from <paramref name="from"/> and sends AUTH, with no buffers beyond the socket's: thousands are held.</summary>
    private static Socket LogInRaw(CacheHostProcess host, IPAddress from, string user, string password, out string reply)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true, ReceiveTimeout = 15_000, SendTimeout = 15_000 };
        try
        {
            socket.Bind(new IPEndPoint(from, 0));
            socket.Connect(host.Host, host.Port);
            socket.Send(System.Text.Encoding.ASCII.GetBytes($"*3\r\n$4\r\nAUTH\r\n${user.Length}\r\n{user}\r\n${password.Length}\r\n{password}\r\n"));
            var line = new System.Text.StringBuilder();
            var one = new byte[1];
            while (!line.ToString().EndsWith("\r\n", StringComparison.Ordinal))
            {
                if (socket.Receive(one) == 0) break;
                line.Append((char)one[0]);
            }
            reply = line.ToString().TrimEnd();
            return socket;
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    /// <summary>The soft limit of open files (the runtime raises it to the hard limit at start); the host inherits it.</summary>
    private static int OpenFilesAllowed()
    {
        foreach (var line in File.ReadLines("/proc/self/limits"))
            if (line.StartsWith("Max open files", StringComparison.Ordinal))
            {
                var soft = line["Max open files".Length..].Trim().Split(' ', StringSplitOptions.RemoveEmptyEntries)[0];
                return soft == "unlimited" ? int.MaxValue / 4 : int.Parse(soft);
            }
        return 1024;
    }

    [Fact]
    public void Two_writers_together_leave_the_last_fifth_to_readers_and_administrators_and_an_administrator_is_not_held_to_a_share()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.MaxClients = 200; });
        Assert.Equal(100, Fill(host, "mallory", "m-pass", IPAddress.Parse("127.0.2.1"), out var first));
        Assert.Equal(60, Fill(host, "alice", "a-pass", IPAddress.Parse("127.0.2.2"), out var second));
        Assert.Equal("ERR max number of clients per account reached (100 of account mallory; --max-clients-per-account)", first);
        Assert.Equal("ERR max number of clients of writer accounts reached (160 of --max-clients 200, all writers together; the rest is kept for readers and administrators)", second);

        // An administrator and nodes from addresses the host has never seen still get in (a tenth of --max-clients
        // stays open to those at accept), then more nodes from addresses that have logged in before (the last tenth).
        var admin = new RespTestClient(host, IPAddress.Parse("127.0.5.1"));
        _clients.Add(admin);
        Assert.Equal("OK", admin.Call("AUTH", "ops", "ops-pass"));
        for (var i = 1; i <= 30; i++)
        {
            var node = new RespTestClient(host, IPAddress.Parse($"127.0.4.{(i <= 10 ? i : 1)}"));
            _clients.Add(node);
            Assert.Equal("OK", node.Call("AUTH", "node", "node-pass"));
        }
        var info = System.Text.Encoding.UTF8.GetString(Assert.IsType<byte[]>(admin.Call("INFO", "clients")));
        Assert.Contains("hpc_maxclients_per_account:100\r\n", info);
        Assert.Contains("hpc_writer_clients:160\r\n", info);
    }

    [Fact]
    public void A_logged_in_connection_that_sends_nothing_is_closed_after_the_idle_timeout_and_gives_its_share_back()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.MaxClientsPerAccount = 1; o.IdleTimeout = TimeSpan.FromSeconds(2); });
        var idle = new RespTestClient(host);
        _clients.Add(idle);
        Assert.Equal("OK", idle.Call("AUTH", "mallory", "m-pass"));
        using (var second = new RespTestClient(host))
            Assert.Equal(new RespError("ERR max number of clients per account reached (1 of account mallory; --max-clients-per-account)"),
                second.Call("AUTH", "mallory", "m-pass"));
        // Another connection keeps talking, 20 times as often as the limit, and is never closed.
        var busy = new RespTestClient(host);
        _clients.Add(busy);
        Assert.Equal("OK", busy.Call("AUTH", "node", "node-pass"));

        var clock = Stopwatch.StartNew();
        while (!idle.IsClosedByServer(TimeSpan.Zero) && clock.Elapsed < TimeSpan.FromSeconds(30))
        {
            Assert.Equal("PONG", busy.Call("PING"));
            Thread.Sleep(100);
        }

        Assert.True(idle.IsClosedByServer(TimeSpan.Zero), "the idle connection was not closed within 30 s");
        Assert.Equal("PONG", busy.Call("PING"));
        Assert.Contains("(account mallory) sent nothing for 00:00:02 and was disconnected (--idle-timeout)",
            host.LogOnceItSays("sent nothing for"));
        Assert.Equal("OK", LogInWithin(host, "mallory", "m-pass", null, TimeSpan.FromSeconds(10)));
        using var admin = new RespTestClient(host);
        Assert.Equal("OK", admin.Call("AUTH", "ops", "ops-pass"));
        var timeout = Assert.IsType<object?[]>(admin.Call("CONFIG", "GET", "timeout"));
        Assert.Equal("2", System.Text.Encoding.ASCII.GetString(Assert.IsType<byte[]>(timeout[1])));
    }

    [Fact]
    public void A_client_slow_to_read_a_long_reply_is_not_idle_and_keeps_its_connection()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.IdleTimeout = TimeSpan.FromSeconds(1); });
        var value = new byte[32 << 20];
        Random.Shared.NextBytes(value);
        using var admin = new RespTestClient(host, receiveBufferBytes: 64 << 10);
        Assert.Equal("OK", admin.Call("AUTH", "ops", "ops-pass"));
        Assert.Equal("OK", admin.Call("SET", "big", value));

        // Far more than the sockets' buffers hold (the client's is fixed at 64 KB, which also keeps the host's send
        // buffer from growing): the host is still sending the reply when the limit passes, several times over.
        admin.Send("GET", "big");
        Thread.Sleep(TimeSpan.FromSeconds(4));

        Assert.True(value.AsSpan().SequenceEqual(Assert.IsType<byte[]>(admin.ReadReply())), "the reply came back whole");
        Assert.Equal("PONG", admin.Call("PING"));
        Assert.DoesNotContain("sent nothing for", host.Log);
    }

    [Fact]
    public async Task A_pooled_client_connection_the_host_closed_as_idle_is_opened_again_without_a_failure_or_a_retry()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.IdleTimeout = TimeSpan.FromSeconds(1); });
        var log = new ListLogger();
        await using var client = new CacheTierClient(new CacheTierOptions
        {
            Hosts = [$"{host.Host}:{host.Port}"], User = "node", Password = "node-pass", ConnectionsPerHost = 1,
        }, log);

        Assert.Single(await client.KeysAsync("none:"));
        // Until the host has closed the client's connection and counted it gone: then only the one asking is left.
        using (var admin = new RespTestClient(host))
        {
            Assert.Equal("OK", admin.Call("AUTH", "ops", "ops-pass"));
            var clock = Stopwatch.StartNew();
            while (!System.Text.Encoding.ASCII.GetString((byte[])admin.Call("INFO", "clients")!).Contains("connected_clients:1\r\n") && clock.Elapsed < TimeSpan.FromSeconds(30))
                Thread.Sleep(100);
        }
        Assert.Contains("(account node) sent nothing for", host.LogOnceItSays("(account node) sent nothing for"));

        Assert.Single(await client.KeysAsync("none:"));
        var warnings = log.Lines.Where(l => l.Level >= LogLevel.Warning).Select(l => l.Message).ToList();
        Assert.True(warnings.Count == 0, string.Join("\n", warnings));
    }

    [Theory]
    [InlineData("--max-clients-per-account", "-1", "--max-clients-per-account must be 0 (half of --max-clients) or 1 to --max-clients (10000), not -1")]
    [InlineData("--max-clients-per-account", "20000", "--max-clients-per-account must be 0 (half of --max-clients) or 1 to --max-clients (10000), not 20000")]
    [InlineData("--idle-timeout", "30d", "--idle-timeout must be 0 (never) or at most 7d, not 30d")]
    [InlineData("--idle-timeout", "soon", "'soon' is not a duration")]
    public void Bad_share_and_idle_limits_stop_the_host_at_start_in_one_line(string option, string value, string expected)
    {
        var (exitCode, stdout, log) = CacheHostProcess.RunToExit("--port", "0", option, value);

        Assert.Equal(2, exitCode);
        Assert.Equal("", stdout);
        var line = Assert.Single(log.Split('\n', StringSplitOptions.RemoveEmptyEntries));
        Assert.Contains(expected, line);
    }

    [Fact]
    public void An_idle_timeout_of_zero_keeps_idle_connections()
    {
        var host = Start(o => { o.UsersFile = _usersFile; o.IdleTimeout = TimeSpan.Zero; });
        using var node = new RespTestClient(host);
        Assert.Equal("OK", node.Call("AUTH", "node", "node-pass"));
        Thread.Sleep(TimeSpan.FromSeconds(2));
        Assert.Equal("PONG", node.Call("PING"));
    }

    /// <summary>Logs in as <paramref name="user"/> until refused; how many got in, and the refusal.</summary>
    private int Fill(CacheHostProcess host, string user, string password, IPAddress from, out string? refusal)
    {
        refusal = null;
        var held = 0;
        while (held < 200)
        {
            var c = new RespTestClient(host, from);
            var reply = c.Call("AUTH", user, password);
            if (reply is "OK") { _clients.Add(c); held++; continue; }
            refusal = Assert.IsType<RespError>(reply).Message;
            c.Dispose();
            break;
        }
        return held;
    }

    private static object? LogInWithin(CacheHostProcess host, string user, string password, IPAddress? from, TimeSpan bound)
    {
        object? reply = null;
        for (var clock = Stopwatch.StartNew(); reply is not "OK" && clock.Elapsed < bound; Thread.Sleep(100))
        {
            using var again = new RespTestClient(host, from);
            try { reply = again.Call("AUTH", user, password); }
            catch (IOException) { }
        }
        return reply;
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

    private sealed class ListLogger : ILogger
    {
        public ConcurrentQueue<(LogLevel Level, string Message)> Lines { get; } = new();
        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;
        public bool IsEnabled(LogLevel logLevel) => true;
        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter) =>
            Lines.Enqueue((logLevel, formatter(state, exception)));
    }
}
