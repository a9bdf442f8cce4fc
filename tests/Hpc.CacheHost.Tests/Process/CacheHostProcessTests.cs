using System.Text;
using Hpc.CommonData.Hosting;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// The real executable over TCP. Serialised in one collection: each test starts its own process, and the
/// machine these run on is small.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class CacheHostProcessTests : IDisposable
{
    private readonly List<CacheHostProcess> _hosts = [];

    [Fact]
    public void Commands_round_trip_over_tcp_in_multibulk_and_inline_form()
    {
        var host = Start();
        using var client = new RespTestClient(host);

        Assert.Equal("PONG", client.Call("PING"));
        Assert.Equal("OK", client.Call("SET", "k", "v"));
        Assert.Equal("v", Encoding.UTF8.GetString((byte[])client.Call("GET", "k")!));
        client.SendRaw("get k\r\nPING hello\r\n");
        Assert.Equal("v", client.ReadString());
        Assert.Equal("hello", client.ReadString());
        Assert.Null(client.Call("GET", "missing"));
        Assert.Equal(1L, client.Call("DBSIZE"));
    }

    [Fact]
    public void Pipelined_requests_are_answered_in_order_including_large_and_binary_values()
    {
        var host = Start();
        using var client = new RespTestClient(host);
        byte[] large = Enumerable.Range(0, 64 * 1024).Select(i => (byte)i).ToArray();
        byte[] binary = [0, 13, 10, 36, 42, 255];

        for (int i = 0; i < 50; i++)
            client.WriteCommand("SET", $"seg:{i}", i % 2 == 0 ? large : binary);
        client.WriteCommand("MGET", "seg:0", "seg:1", "nope", "seg:48");
        for (int i = 0; i < 50; i++)
            client.WriteCommand("GET", $"seg:{i}");
        client.Flush();

        for (int i = 0; i < 50; i++)
            Assert.Equal("OK", client.ReadReply());
        var mget = Assert.IsType<object?[]>(client.ReadReply());
        Assert.Equal([large, binary, null, large], mget);
        for (int i = 0; i < 50; i++)
            Assert.Equal(i % 2 == 0 ? large : binary, client.ReadReply());
    }

    [Fact]
    public void Replies_owed_are_not_held_back_while_a_large_value_is_still_arriving()
    {
        var host = Start();
        using var client = new RespTestClient(host);
        byte[] value = new byte[512 * 1024];

        // The reply to the first SET may wait for a value that is one read from complete, never for one this large.
        client.WriteCommand("SET", "small", "v");
        client.SendRaw($"*4\r\n$3\r\nSET\r\n$3\r\nbig\r\n${value.Length}\r\n");
        client.SendBytes(value.AsSpan(0, 1000));
        Assert.Equal("OK", client.ReadReply());

        client.SendBytes(value.AsSpan(1000));
        client.SendRaw("\r\n$2\r\nNX\r\n");
        Assert.Equal("OK", client.ReadReply());
        Assert.Equal(value, client.Call("GET", "big"));
    }

    [Fact]
    public void Replies_wait_for_a_value_split_across_writes_and_all_arrive_in_order()
    {
        var host = Start();
        using var client = new RespTestClient(host);
        byte[] value = Enumerable.Range(0, 64 * 1024).Select(i => (byte)(i * 7)).ToArray();

        for (int round = 0; round < 20; round++)
        {
            string key = $"b{round}";
            client.WriteCommand("SET", $"a{round}", "v");
            client.SendRaw($"*3\r\n$3\r\nSET\r\n${key.Length}\r\n{key}\r\n${value.Length}\r\n");
            client.SendBytes(value.AsSpan(0, 100 + round * 1000));
            Thread.Sleep(5);
            client.SendBytes(value.AsSpan(100 + round * 1000));
            client.SendRaw("\r\n");
        }
        for (int round = 0; round < 40; round++)
            Assert.Equal("OK", client.ReadReply());
        Assert.Equal(value, client.Call("GET", "b19"));
    }

    [Fact]
    public void A_malformed_client_is_disconnected_while_another_keeps_being_served()
    {
        var host = Start();
        using var good = new RespTestClient(host);
        using var bad = new RespTestClient(host);
        Assert.Equal("OK", good.Call("SET", "k", "v"));

        bad.SendRaw("*1\r\n$x\r\n");

        var error = Assert.IsType<RespError>(bad.ReadReply());
        Assert.Equal("ERR Protocol error: invalid bulk length", error.Message);
        Assert.True(bad.IsClosedByServer());
        Assert.Equal("v", good.ReadStringOf("GET", "k"));
        using var another = new RespTestClient(host);
        Assert.Equal("PONG", another.Call("PING"));
    }

    [Fact]
    public void An_oversized_bulk_header_is_rejected_before_the_payload_is_sent()
    {
        var host = Start(o => o.MaxFrameBytes = ByteSize.Parse("1MB"));
        using var client = new RespTestClient(host);

        client.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n");

        var error = Assert.IsType<RespError>(client.ReadReply());
        Assert.StartsWith("ERR Protocol error:", error.Message);
        Assert.True(client.IsClosedByServer());
        Assert.False(host.HasExited);
    }

    [Fact]
    public void Unknown_commands_and_wrong_arity_are_errors_that_keep_the_connection()
    {
        var host = Start();
        using var client = new RespTestClient(host);

        Assert.StartsWith("ERR unknown command 'xyz'", Assert.IsType<RespError>(client.Call("xyz", "a")).Message);
        Assert.Equal("ERR wrong number of arguments for 'get' command", Assert.IsType<RespError>(client.Call("GET")).Message);
        Assert.Equal("ERR syntax error", Assert.IsType<RespError>(client.Call("SET", "k", "v", "NX", "XX")).Message);
        Assert.Equal("PONG", client.Call("PING"));
    }

    [Fact]
    public void A_write_past_max_memory_is_refused_with_OOM_and_stored_data_survives()
    {
        var host = Start(o => o.MaxMemoryBytes = ByteSize.Parse("200KB"));
        using var client = new RespTestClient(host);
        byte[] first = Enumerable.Repeat((byte)1, 100 * 1024).ToArray();

        Assert.Equal("OK", client.Call("SET", "a", first));
        var refused = Assert.IsType<RespError>(client.Call("SET", "b", new byte[100 * 1024]));
        Assert.StartsWith("OOM command not allowed when used memory > 'maxmemory'", refused.Message);

        Assert.Equal(first, client.Call("GET", "a"));
        Assert.Null(client.Call("GET", "b"));
        string info = client.ReadStringOf("INFO", "stats")!;
        Assert.Contains("hpc_rejected_writes_oom:1", info);
    }

    [Fact]
    public void Unfinished_frames_on_many_connections_count_against_the_budget_and_one_past_it_is_refused_before_it_is_buffered()
    {
        var host = Start(o => { o.MaxMemoryBytes = ByteSize.Parse("24MB"); o.MaxFrameBytes = ByteSize.Parse("64MB"); });
        using var first = new RespTestClient(host);
        using var second = new RespTestClient(host);
        using var reader = new RespTestClient(host);
        Assert.Equal("OK", reader.Call("SET", "small", "v"));

        // 16 MB declared, 1 MB sent: the host must hold the whole 16 MB for it, so a second such frame cannot fit.
        first.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\na\r\n$16000000\r\n" + new string('x', 1_000_000));
        Assert.True(WaitForInfo(reader, "hpc_frame_bytes:160000"), "the unfinished frame is charged to the budget");
        second.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$16000000\r\n" + new string('y', 1_000_000));

        var refused = Assert.IsType<RespError>(second.ReadReply());
        Assert.StartsWith("OOM command not allowed when used memory > 'maxmemory'", refused.Message);
        Assert.True(second.IsClosedByServer());
        // Reads still work while the budget is taken, and the held frame is visible in INFO.
        Assert.Equal("v", reader.ReadStringOf("GET", "small"));
        Assert.Contains("hpc_frame_bytes:160000", reader.ReadStringOf("INFO", "memory")!);

        // The first connection leaves with its frame unfinished: its charge goes, and a whole value of that size fits.
        first.Dispose();
        Assert.True(WaitForInfo(reader, "hpc_frame_bytes:0\r\n"), "an abandoned frame's charge is released");
        Assert.Equal("OK", reader.Call("SET", "whole", new byte[16_000_000]));
        Assert.Equal(16_000_000, Assert.IsType<byte[]>(reader.Call("GET", "whole")).Length);
    }

    [Fact]
    public void A_large_value_arriving_in_pieces_is_stored_whole_and_the_requests_around_it_are_answered_in_order()
    {
        var host = Start(o => { o.MaxMemoryBytes = ByteSize.Parse("64MB"); o.MaxFrameBytes = ByteSize.Parse("64MB"); });
        using var client = new RespTestClient(host);
        var value = new byte[5_000_000];
        new Random(3).NextBytes(value);
        value[1000] = (byte)'\r';
        value[1001] = (byte)'\n';

        client.SendRaw("PING\r\n*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$5000000\r\n");
        for (var at = 0; at < value.Length; at += 300_000)
        {
            client.SendBytes(value.AsSpan(at, Math.Min(300_000, value.Length - at)));
            Thread.Sleep(5);
        }
        client.SendRaw("\r\nGET big\r\n");

        Assert.Equal("PONG", client.ReadReply());
        Assert.Equal("OK", client.ReadReply());
        Assert.Equal(value, client.ReadReply());
        Assert.Contains("hpc_frame_bytes:0\r\n", client.ReadStringOf("INFO", "memory")!);
    }

    [Fact]
    public void A_large_value_without_its_CRLF_is_a_protocol_error_and_nothing_is_stored()
    {
        var host = Start();
        using var client = new RespTestClient(host);
        client.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200000\r\n" + new string('v', 200_000) + "XX");

        Assert.Equal("ERR Protocol error: expected CRLF after bulk string", Assert.IsType<RespError>(client.ReadReply()).Message);
        Assert.True(client.IsClosedByServer());
        using var other = new RespTestClient(host);
        Assert.Null(other.Call("GET", "k"));
    }

    [Fact]
    public void A_large_value_from_a_client_that_has_not_authenticated_is_refused()
    {
        var host = Start(o => o.Password = "s3cret");
        using var client = new RespTestClient(host);
        client.SendRaw("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$200000\r\n" + new string('v', 200_000) + "\r\n");

        Assert.StartsWith("NOAUTH", Assert.IsType<RespError>(client.ReadReply()).Message);
        Assert.Equal("OK", client.Call("AUTH", "s3cret"));
        Assert.Null(client.Call("GET", "k"));
    }

    private static bool WaitForInfo(RespTestClient client, string expected)
    {
        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (DateTime.UtcNow < deadline)
        {
            if (client.ReadStringOf("INFO", "memory")!.Contains(expected, StringComparison.Ordinal))
                return true;
            Thread.Sleep(20);
        }
        return false;
    }

    [Fact]
    public void With_a_password_every_data_command_needs_AUTH_first()
    {
        // Launchers pass the password in the environment (HPCDATA_CACHE_PASSWORD), never on the command line.
        var host = Start(o => o.Password = "s3cret");
        using var client = new RespTestClient(host);

        Assert.StartsWith("NOAUTH", Assert.IsType<RespError>(client.Call("GET", "k")).Message);
        Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(client.Call("AUTH", "wrong")).Message);
        Assert.Equal("OK", client.Call("AUTH", "s3cret"));
        Assert.Null(client.Call("GET", "k"));
    }

    [Fact]
    public void Wrong_passwords_are_answered_ever_more_slowly_on_that_connection_only_and_a_right_one_still_works()
    {
        var host = Start(o => o.Password = "s3cret");
        using var guesser = new RespTestClient(host);
        using var other = new RespTestClient(host);

        var clock = System.Diagnostics.Stopwatch.StartNew();
        for (var i = 0; i < 6; i++)
            Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(guesser.Call("AUTH", $"guess{i}")).Message);
        // 20 + 40 + 80 + 160 + 320 + 640 ms: six guesses take over a second, not microseconds.
        Assert.True(clock.Elapsed >= TimeSpan.FromMilliseconds(1200), $"six wrong AUTHs answered in {clock.ElapsedMilliseconds} ms");

        var ping = System.Diagnostics.Stopwatch.StartNew();
        Assert.Equal("OK", other.Call("AUTH", "s3cret"));
        Assert.True(ping.Elapsed < TimeSpan.FromMilliseconds(500), $"another connection waited {ping.ElapsedMilliseconds} ms");
        Assert.Equal("OK", guesser.Call("AUTH", "s3cret"));
        Assert.Null(guesser.Call("GET", "k"));
        Assert.Contains("wrong password 3 times", host.LogOnceItSays("wrong password 3 times"));
    }

    [Fact]
    public void The_password_can_come_from_a_file_or_still_from_the_command_line()
    {
        var file = Path.GetTempFileName();
        try
        {
            File.WriteAllText(file, "from-file\n");
            var fromFile = Start(o => o.PasswordFile = file);
            var fromArgv = StartWithArguments("--port", "0", "--password", "on-argv");
            using var a = new RespTestClient(fromFile);
            using var b = new RespTestClient(fromArgv);

            Assert.StartsWith("NOAUTH", Assert.IsType<RespError>(a.Call("GET", "k")).Message);
            Assert.Equal("OK", a.Call("AUTH", "from-file"));
            Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(b.Call("AUTH", "from-file")).Message);
            Assert.Equal("OK", b.Call("AUTH", "on-argv"));
            Assert.Contains("process list", fromArgv.LogOnceItSays("process list"));
        }
        finally
        {
            File.Delete(file);
        }
    }

    [Fact]
    public void Strlen_gives_a_values_stored_length_and_0_for_a_missing_key()
    {
        // How a stager learns the stored size of a segment another stage left, in whatever codec that one used.
        var host = Start();
        using var client = new RespTestClient(host);
        Assert.Equal("OK", client.Call("SET", "k", "twelve bytes"));
        Assert.Equal(12L, client.Call("STRLEN", "k"));
        Assert.Equal(0L, client.Call("STRLEN", "missing"));
    }

    [Fact]
    public void Expiring_keys_disappear_and_report_their_ttl()
    {
        var host = Start();
        using var client = new RespTestClient(host);

        Assert.Equal("OK", client.Call("SET", "k", "v", "PX", "300"));
        Assert.Equal("OK", client.Call("SET", "p", "v", "EX", "100"));
        Assert.InRange(Assert.IsType<long>(client.Call("PTTL", "k")), 1, 300);
        Assert.Equal(100L, client.Call("TTL", "p"));
        Assert.Equal(-2L, client.Call("TTL", "missing"));

        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
        while (client.Call("EXISTS", "k") is 1L && DateTime.UtcNow < deadline)
            Thread.Sleep(50);

        Assert.Equal(0L, client.Call("EXISTS", "k"));
        Assert.Equal(1L, client.Call("PERSIST", "p"));
        Assert.Equal(-1L, client.Call("TTL", "p"));
    }

    [Fact]
    public void INFO_reports_keys_stored_bytes_hits_misses_and_bytes_sent()
    {
        var host = Start();
        using var client = new RespTestClient(host);
        client.Call("SET", "k", new byte[1000]);
        client.Call("SET", "t", "v", "EX", "100");
        client.Call("GET", "k");
        client.Call("GET", "missing");

        string info = client.ReadStringOf("INFO")!;

        Assert.Contains("# Keyspace\r\ndb0:keys=2,expires=1", info);
        Assert.Contains("keyspace_hits:1\r\n", info);
        Assert.Contains("keyspace_misses:1\r\n", info);
        Assert.Contains($"used_memory:{1000 + 1 + 1 + 1 + 2 * Storage.CacheStore.EntryOverheadBytes}\r\n", info);
        Assert.Contains($"tcp_port:{host.Port}\r\n", info);
        Assert.Matches(@"total_net_output_bytes:[1-9]\d*", info);
        Assert.Contains("connected_clients:1\r\n", info);
        Assert.DoesNotContain("# Keyspace", client.ReadStringOf("INFO", "memory"));
    }

    [Fact]
    public void Clients_beyond_max_clients_are_turned_away()
    {
        var host = Start(o => o.MaxClients = 1);
        using var first = new RespTestClient(host);
        Assert.Equal("PONG", first.Call("PING"));

        using var second = new RespTestClient(host);

        Assert.Equal("ERR max number of clients reached", Assert.IsType<RespError>(second.ReadReply()).Message);
        Assert.Equal("PONG", first.Call("PING"));
    }

    [Fact]
    public void SIGTERM_shuts_the_host_down_cleanly_even_with_clients_connected()
    {
        var host = Start();
        using var client = new RespTestClient(host);
        Assert.Equal("PONG", client.Call("PING"));

        int exitCode = host.Terminate(TimeSpan.FromSeconds(20));

        Assert.Equal(0, exitCode);
        Assert.True(client.IsClosedByServer());
    }

    [Fact]
    public void A_site_settings_file_is_read_beneath_the_command_line_and_a_key_no_setting_has_is_named_with_the_nearest()
    {
        var site = Path.Combine(Path.GetTempPath(), $"hpcdata-site-{Guid.NewGuid():N}.json");
        File.WriteAllText(site, """{ "CacheHost": { "MaxClientz": 5, "MaxClientsPerAddress": 7, "Port": 1 } }""");
        try
        {
            var host = CacheHostProcess.StartWithArguments(ProgramContract<CacheHostOptions>.ToArguments(new CacheHostOptions { Port = 0 }),
                new Dictionary<string, string?> { [ServiceHosting.SettingsVariable] = site });
            _hosts.Add(host);

            // The command line's port (0: any free one) won over the file's 1; the file's per-address cap is the host's.
            Assert.NotEqual(1, host.Port);
            var from = System.Net.IPAddress.Parse("127.0.0.77");
            var clients = Enumerable.Range(0, 7).Select(_ => new RespTestClient(host, from)).ToList();
            try
            {
                foreach (var c in clients) Assert.Equal("PONG", c.Call("PING"));
                using var over = new RespTestClient(host, from);
                Assert.Equal("ERR max number of clients per address reached (7 from 127.0.0.77; --max-clients-per-address)",
                    Assert.IsType<RespError>(over.ReadReply()).Message);
            }
            finally { clients.ForEach(c => c.Dispose()); }
            Assert.Contains("warning: settings key 'CacheHost:MaxClientz' is not a setting of", host.Log);
            Assert.Contains("did you mean CacheHost:MaxClients?", host.Log);
        }
        finally { File.Delete(site); }
    }

    [Fact]
    public void A_taken_port_fails_startup_with_a_clear_message()
    {
        var first = Start();

        var (exitCode, _, log) = CacheHostProcess.RunToExit(new CacheHostOptions { Port = first.Port });

        Assert.Equal(1, exitCode);
        Assert.Contains("Address already in use", log);
    }

    [Theory]
    [InlineData("--port", "99999", "--port must be 0..65535, not 99999")]
    [InlineData("--max-memory", "12XB", "'12XB' is not a size")]
    [InlineData("--max-clients", "many", "'many' is not a whole number")]
    [InlineData("--password-file", "/nonexistent/pw", "--password-file '/nonexistent/pw' does not exist")]
    public void Invalid_option_values_are_refused_with_exit_2_and_one_line(string option, string value, string expected)
    {
        var (exitCode, stdout, log) = CacheHostProcess.RunToExit(option, value);

        Assert.Equal(2, exitCode);
        Assert.Equal("", stdout);
        var line = Assert.Single(log.Split('\n', StringSplitOptions.RemoveEmptyEntries));
        Assert.StartsWith("hpcdata cache-host: ", line);
        Assert.Contains(expected, line);
        Assert.Contains(value, line);
    }

    [Fact]
    public void An_unknown_option_is_refused_with_exit_2_and_one_line_naming_it()
    {
        var (exitCode, stdout, log) = CacheHostProcess.RunToExit("--port", "0", "--bogus", "1");

        Assert.Equal(2, exitCode);
        Assert.Equal("", stdout);
        var line = Assert.Single(log.Split('\n', StringSplitOptions.RemoveEmptyEntries));
        Assert.Contains("unknown option '--bogus'", line);
    }

    [Fact]
    public void Help_prints_usage_on_stdout_and_exits_0_without_serving()
    {
        var (exitCode, stdout, log) = CacheHostProcess.RunToExit("--help");

        Assert.Equal(0, exitCode);
        Assert.Contains("usage: hpcdata cache-host [options]", stdout);
        foreach (var option in (string[])["--address", "--port", "--max-memory", "--max-frame", "--max-clients", "--password", "--password-file", "HPCDATA_CACHE_PASSWORD"])
            Assert.Contains(option, stdout);
        Assert.DoesNotContain(stdout.Split('\n'), line => line.StartsWith("READY", StringComparison.Ordinal));
        Assert.Equal("", log);
    }

    private CacheHostProcess Start(Action<CacheHostOptions>? configure = null)
    {
        var host = CacheHostProcess.Start(configure);
        _hosts.Add(host);
        return host;
    }

    private CacheHostProcess StartWithArguments(params string[] args)
    {
        var host = CacheHostProcess.StartWithArguments(args);
        _hosts.Add(host);
        return host;
    }

    public void Dispose()
    {
        foreach (var host in _hosts)
            host.Dispose();
    }
}

internal static class RespTestClientExtensions
{
    public static string? ReadStringOf(this RespTestClient client, params object[] command)
    {
        client.Send(command);
        return client.ReadString();
    }
}

[CollectionDefinition(Collection)]
public sealed class ProcessTests
{
    public const string Collection = "cache host processes";
}
