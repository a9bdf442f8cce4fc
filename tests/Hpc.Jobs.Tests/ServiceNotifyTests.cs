using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading.Channels;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The cache host and the node agent as systemd <c>Type=notify</c> services. This machine (a container) has no systemd
/// running, so the tests play the service manager's part of sd_notify(3): a Unix datagram socket of their own named by
/// <c>NOTIFY_SOCKET</c>. READY=1 must come only once the component really serves, STOPPING=1 when SIGTERM arrives.
/// </summary>
public sealed class ServiceNotifyTests
{
    private static readonly TimeSpan Wait = TimeSpan.FromSeconds(30);

    /// <summary>The manager's end: every datagram the component sends, in order.</summary>
    private sealed class NotifySocket : IDisposable
    {
        private readonly Socket _socket = new(AddressFamily.Unix, SocketType.Dgram, ProtocolType.Unspecified);
        private readonly Channel<string> _messages = Channel.CreateUnbounded<string>();
        private readonly CancellationTokenSource _stop = new();
        public string Path { get; }

        public NotifySocket(string directory)
        {
            Path = System.IO.Path.Combine(directory, "notify.sock");
            _socket.Bind(new UnixDomainSocketEndPoint(Path));
            _ = Task.Run(async () =>
            {
                var buffer = new byte[4096];
                try
                {
                    while (true)
                    {
                        var n = await _socket.ReceiveAsync(buffer, SocketFlags.None, _stop.Token);
                        foreach (var line in Encoding.UTF8.GetString(buffer, 0, n).Split('\n', StringSplitOptions.RemoveEmptyEntries))
                            _messages.Writer.TryWrite(line);
                    }
                }
                catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException) { _messages.Writer.TryComplete(); }
            });
        }

        /// <summary>Messages up to and including <paramref name="expected"/>; fails the test if it does not come in time.</summary>
        public async Task<List<string>> UntilAsync(string expected, TimeSpan timeout)
        {
            var seen = new List<string>();
            using var cts = new CancellationTokenSource(timeout);
            try
            {
                while (true)
                {
                    var m = await _messages.Reader.ReadAsync(cts.Token);
                    seen.Add(m);
                    if (m == expected) return seen;
                }
            }
            catch (OperationCanceledException)
            {
                Assert.Fail($"no {expected} within {timeout.TotalSeconds:0} s; got: [{string.Join(", ", seen)}]");
                throw;
            }
        }

        public List<string> Drain()
        {
            var all = new List<string>();
            while (_messages.Reader.TryRead(out var m)) all.Add(m);
            return all;
        }

        public void Dispose()
        {
            _stop.Cancel();
            _socket.Dispose();
        }
    }

    [Fact]
    public async Task Cache_host_reports_ready_only_with_its_port_accepting_and_stopping_on_SIGTERM()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        using var manager = new NotifySocket(s.Root);
        var port = FreePorts.Next();
        var host = s.Track(ComponentProcess.Start("Hpc.CacheHost", ["--address", "127.0.0.1", "--port", port.ToString()],
            new Dictionary<string, string?> { ["NOTIFY_SOCKET"] = manager.Path }, name: "cachehost"));

        var beforeReady = await manager.UntilAsync("READY=1", Wait);
        Assert.Equal(["READY=1"], beforeReady);
        // Told ready: a client connecting this very moment is served.
        using (var client = new TcpClient())
        {
            await client.ConnectAsync(IPAddress.Loopback, port);
            var stream = client.GetStream();
            await stream.WriteAsync("*1\r\n$4\r\nPING\r\n"u8.ToArray());
            var reply = new byte[7];
            await stream.ReadExactlyAsync(reply).AsTask().WaitAsync(Wait);
            Assert.Equal("+PONG\r\n", Encoding.ASCII.GetString(reply));
        }

        ComponentProcess.Terminate(host.Id);
        await manager.UntilAsync("STOPPING=1", Wait);
        Assert.Equal(0, await host.WaitForExitAsync(Wait));
    }

    [Fact]
    public async Task Cache_host_that_cannot_bind_never_reports_ready()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        using var manager = new NotifySocket(s.Root);
        using var taken = new TcpListener(IPAddress.Loopback, 0);
        taken.Start();
        var port = ((IPEndPoint)taken.LocalEndpoint).Port;
        var host = s.Track(ComponentProcess.Start("Hpc.CacheHost", ["--address", "127.0.0.1", "--port", port.ToString()],
            new Dictionary<string, string?> { ["NOTIFY_SOCKET"] = manager.Path }, name: "cachehost"));

        Assert.NotEqual(0, await host.WaitForExitAsync(Wait));
        await Task.Delay(200);
        Assert.DoesNotContain("READY=1", manager.Drain());
    }

    [Fact]
    public async Task Agent_reports_ready_only_with_its_pipe_answering_and_stopping_on_SIGTERM()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        using var manager = new NotifySocket(s.Root);
        var pipe = s.NewPipe();
        var agent = s.Track(ComponentProcess.Start(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(s.Root, "node"), CacheTier = { Hosts = [.. s.Hosts] },
        }, new Dictionary<string, string?> { ["NOTIFY_SOCKET"] = manager.Path }));

        Assert.Equal(["READY=1"], await manager.UntilAsync("READY=1", Wait));
        // No retry: the pipe must already be there when the manager hears READY=1.
        await using (var client = await AgentClient.ConnectAsync(pipe, TimeSpan.FromMilliseconds(200)))
            Assert.Empty((await client.StatusAsync()).Copies);

        ComponentProcess.Terminate(agent.Id);
        await manager.UntilAsync("STOPPING=1", Wait);
        Assert.Equal(0, await agent.WaitForExitAsync(Wait));
    }

    /// <summary>
    /// The unit runs <c>hpcdata agent</c> (NotifyAccess=all, KillMode=mixed): the agent is hpcdata's child, its notices
    /// still reach the manager, and the manager's SIGTERM, sent to hpcdata alone, stops the agent cleanly.
    /// </summary>
    [Fact]
    public async Task Through_hpcdata_agent_the_notices_arrive_and_SIGTERM_to_hpcdata_stops_the_agent()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        using var manager = new NotifySocket(s.Root);
        var pipe = s.NewPipe();
        var service = s.Track(ComponentProcess.Start("hpcdata", ["agent", "--pipe", pipe, "--data-dir", Path.Combine(s.Root, "node"), "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["NOTIFY_SOCKET"] = manager.Path }, name: "hpcdata agent"));

        Assert.Equal(["READY=1"], await manager.UntilAsync("READY=1", Wait));
        await using (var client = await AgentClient.ConnectAsync(pipe, TimeSpan.FromMilliseconds(200)))
            await client.StatusAsync();

        ComponentProcess.Terminate(service.Id);
        await manager.UntilAsync("STOPPING=1", Wait);
        Assert.Equal(0, await service.WaitForExitAsync(Wait));
        Assert.Empty(Sandbox.ProcessesMentioning(pipe));
    }

    [Fact]
    public async Task Agent_whose_pipe_is_served_already_exits_1_without_reporting_ready()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        var first = s.Track(ComponentProcess.Start(new NodeAgentOptions { Pipe = pipe, DataDirectory = Path.Combine(s.Root, "a"), CacheTier = { Hosts = [.. s.Hosts] } }));
        await first.WaitReadyAsync(Wait);

        using var manager = new NotifySocket(s.Root);
        var second = s.Track(ComponentProcess.Start(new NodeAgentOptions { Pipe = pipe, DataDirectory = Path.Combine(s.Root, "b"), CacheTier = { Hosts = [.. s.Hosts] } },
            new Dictionary<string, string?> { ["NOTIFY_SOCKET"] = manager.Path }, name: "second agent"));

        Assert.Equal(1, await second.WaitForExitAsync(Wait));
        await Task.Delay(200);
        Assert.DoesNotContain("READY=1", manager.Drain());
        Assert.Contains("already served", second.StandardErrorTail);
    }

    [Fact]
    public async Task Agent_told_to_log_to_a_file_writes_its_output_there()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        var log = Path.Combine(s.Root, "agent.log");
        var agent = s.Track(ComponentProcess.Start(new NodeAgentOptions { Pipe = pipe, DataDirectory = Path.Combine(s.Root, "n"), CacheTier = { Hosts = [.. s.Hosts] } },
            new Dictionary<string, string?> { [NodeAgentOptions.LogVariable] = log }));
        await using (var client = await AgentClient.ConnectAsync(pipe, Wait)) await client.StatusAsync();
        await agent.StopAsync(Wait);

        var text = await File.ReadAllTextAsync(log);
        Assert.Contains($"READY {pipe}", text);
        Assert.Contains("serving pipe", text);
        Assert.Empty(agent.StandardOutput);
    }
}
