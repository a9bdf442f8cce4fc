using System.Net;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Tests;

/// <summary>
/// What a client hears when the address in --cache-hosts is wrong (another service answers there) or its credentials
/// are: what answered or what was refused, and which switch or variable to change. Neither is retried.
/// </summary>
public class CacheHostRefusalTests
{
    /// <summary>A server that answers every connection's first bytes with <paramref name="answer"/> and hangs up; it counts connections.</summary>
    private sealed class OneAnswerServer : IAsyncDisposable
    {
        private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
        private readonly CancellationTokenSource _stop = new();
        private readonly Task _loop;
        private int _connections;

        public OneAnswerServer(string answer)
        {
            _listener.Start();
            _loop = Task.Run(async () =>
            {
                while (!_stop.IsCancellationRequested)
                {
                    using var client = await _listener.AcceptTcpClientAsync(_stop.Token);
                    Interlocked.Increment(ref _connections);
                    var stream = client.GetStream();
                    await stream.ReadAtLeastAsync(new byte[4096], 1, throwOnEndOfStream: false, _stop.Token);
                    await stream.WriteAsync(Encoding.ASCII.GetBytes(answer), _stop.Token);
                    client.Client.Shutdown(SocketShutdown.Send);
                }
            });
        }

        public string Host => $"127.0.0.1:{((IPEndPoint)_listener.LocalEndpoint).Port}";
        public int Connections => Volatile.Read(ref _connections);

        public async ValueTask DisposeAsync()
        {
            _stop.Cancel();
            _listener.Stop();
            try { await _loop; } catch (Exception e) when (e is OperationCanceledException or SocketException or ObjectDisposedException) { }
        }
    }

    private static CacheTierOptions Tier(string host, string? password = null, string? user = null) =>
        new() { Hosts = [host], Password = password, User = user, RetryBaseDelay = TimeSpan.FromMilliseconds(10) };

    [Fact]
    public async Task A_web_server_on_the_port_is_said_to_be_no_cache_host_showing_its_answer_and_is_asked_once()
    {
        await using var web = new OneAnswerServer("HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>bad</html>");
        await using var tier = new CacheTierClient(Tier(web.Host));

        var e = await Assert.ThrowsAnyAsync<CommonDataException>(() => tier.GetLatestAsync("risk/x"));

        Assert.Equal(ErrorCode.Protocol, e.Code);
        Assert.Contains($"{web.Host} is not a cache host: it answered \"HTTP/1.1 400 Bad Request\" to PING, which is not RESP", e.Message);
        Assert.Contains(CacheTierOptions.HostsVariable, e.Message);
        Assert.DoesNotContain("0x48", e.Message);
        Assert.Equal(1, web.Connections);
    }

    [Fact]
    public async Task A_greeting_that_is_not_resp_is_shown_as_text_cut_at_its_first_line()
    {
        await using var ssh = new OneAnswerServer("SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n\u0000\u0001binary");
        await using var tier = new CacheTierClient(Tier(ssh.Host, password: "secret"));

        var e = await Assert.ThrowsAnyAsync<CommonDataException>(() => tier.GetLatestAsync("risk/x"));

        Assert.Contains("it answered \"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\" to AUTH", e.Message);
        Assert.Equal(1, ssh.Connections);
    }

    [Fact]
    public async Task A_host_that_wants_a_password_names_the_switches_and_variables_that_give_one()
    {
        await using var host = new OneAnswerServer("-NOAUTH Authentication required.\r\n");
        await using var tier = new CacheTierClient(Tier(host.Host));

        var e = await Assert.ThrowsAnyAsync<CommonDataException>(() => tier.GetLatestAsync("risk/x"));

        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.StartsWith($"{host.Host}: NOAUTH Authentication required.", e.Message);
        foreach (var name in new[] { "--cache-password-file", CacheTierOptions.PasswordVariable, CacheTierOptions.PasswordFileVariable, "--cache-user", CacheTierOptions.UserVariable })
            Assert.Contains(name, e.Message);
        Assert.Equal(1, host.Connections);
    }

    [Fact]
    public async Task A_refused_password_names_where_the_password_and_the_account_come_from()
    {
        await using var host = new OneAnswerServer("-WRONGPASS invalid username-password pair or user is disabled.\r\n");
        await using var tier = new CacheTierClient(Tier(host.Host, password: "wrong", user: "node"));

        var e = await Assert.ThrowsAnyAsync<CommonDataException>(() => tier.GetLatestAsync("risk/x"));

        Assert.Equal(ErrorCode.AccessDenied, e.Code);
        Assert.Contains("WRONGPASS invalid username-password pair or user is disabled. (as user 'node')", e.Message);
        foreach (var name in new[] { "--cache-password-file", "--cache-password", CacheTierOptions.PasswordVariable, CacheTierOptions.PasswordFileVariable, "--cache-user", CacheTierOptions.UserVariable })
            Assert.Contains(name, e.Message);
        Assert.Equal(1, host.Connections);
    }
}
