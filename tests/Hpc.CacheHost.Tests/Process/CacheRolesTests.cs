using System.Diagnostics;
using System.Security.Cryptography;
using System.Text;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// Accounts with roles on the real host: nodes read, stagers write, only administrators remove shared data. The
/// accounts come from a users file; secrets may be stored hashed.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class CacheRolesTests : IDisposable
{
    private static readonly (string Key, byte[] Bytes, Hpc.CommonData.Format.ManifestSegment Entry) Stored = StoredObjects.Segment("segment");

    private readonly string _usersFile = Path.GetTempFileName();
    private readonly CacheHostProcess _host;

    public CacheRolesTests()
    {
        var writerHash = Convert.ToHexStringLower(SHA256.HashData(Encoding.UTF8.GetBytes("w-pass")));
        File.WriteAllText(_usersFile, $"""
            # name  role    secret
            node    reader  r-pass
            stager  writer  sha256:{writerHash}
            ops     admin   a-pass
            """);
        _host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
    }

    [Fact]
    public void A_reader_reads_but_cannot_write_or_flush()
    {
        using var stager = Login("stager", "w-pass");
        Assert.Equal("OK", stager.Call("SET", Stored.Key, Stored.Bytes));
        using var node = Login("node", "r-pass");

        Assert.Equal(Stored.Bytes, node.Call("GET", Stored.Key));
        Assert.Equal(1L, node.Call("EXISTS", Stored.Key));
        Assert.Equal("NOPERM User node has no permissions to run the 'set' command", Assert.IsType<RespError>(node.Call("SET", Stored.Key, "x")).Message);
        Assert.StartsWith("NOPERM", Assert.IsType<RespError>(node.Call("FLUSHALL")).Message);
        Assert.StartsWith("NOPERM", Assert.IsType<RespError>(node.Call("DEL", "hcd:staging:1")).Message);
        Assert.Equal(Stored.Bytes, node.Call("GET", Stored.Key));
    }

    [Fact]
    public void A_writer_stages_and_keeps_its_own_bookkeeping_but_only_an_admin_removes_shared_keys()
    {
        using var stager = Login("stager", "w-pass");
        Assert.Equal("OK", stager.Call("SET", Stored.Key, Stored.Bytes));
        Assert.Equal("OK", stager.Call("SET", "hcd:staging:stager:lease1", "me", "PX", "60000"));
        Assert.Equal(1L, stager.Call("PEXPIRE", "hcd:staging:stager:lease1", "120000"));
        Assert.Equal(1L, stager.Call("DEL", "hcd:staging:stager:lease1"));

        var refused = Assert.IsType<RespError>(stager.Call("DEL", Stored.Key));
        Assert.StartsWith("NOPERM User stager has no permissions to delete shared keys", refused.Message);
        Assert.StartsWith("NOPERM", Assert.IsType<RespError>(stager.Call("DEL", "hcd:staging:stager:x", "hcd:m:v1")).Message);
        Assert.StartsWith("NOPERM", Assert.IsType<RespError>(stager.Call("FLUSHDB")).Message);

        using var ops = Login("ops", "a-pass");
        Assert.Equal(1L, ops.Call("DEL", Stored.Key));
        Assert.Equal("OK", ops.Call("FLUSHALL"));
    }

    [Fact]
    public void Only_an_administrator_may_reset_the_statistics_and_a_reset_starts_the_totals_over()
    {
        using var node = Login("node", "r-pass");
        using var stager = Login("stager", "w-pass");
        using var ops = Login("ops", "a-pass");

        Assert.Equal("NOPERM User node has no permissions to run the 'config|resetstat' command", Assert.IsType<RespError>(node.Call("CONFIG", "RESETSTAT")).Message);
        Assert.Equal("NOPERM User stager has no permissions to run the 'config|resetstat' command", Assert.IsType<RespError>(stager.Call("CONFIG", "RESETSTAT")).Message);
        Assert.Equal("OK", stager.Call("SET", Stored.Key, Stored.Bytes));
        node.Call("GET", Stored.Key);
        node.Call("GET", "missing");
        var before = node.ReadStringOf("INFO")!;
        Assert.Contains("keyspace_hits:1\r\n", before);
        Assert.Contains("keyspace_misses:1\r\n", before);

        Assert.Equal("OK", ops.Call("CONFIG", "RESETSTAT"));

        // The running totals start over; what is stored now, and who is connected now, are not totals and stay.
        var after = node.ReadStringOf("INFO")!;
        Assert.Contains("keyspace_hits:0\r\n", after);
        Assert.Contains("keyspace_misses:0\r\n", after);
        Assert.Contains("db0:keys=1,", after);
        Assert.Matches(@"connected_clients:[3-9]\r\n", after);
        Assert.Matches(@"total_commands_processed:[0-2]\r\n", after);
        Assert.Equal(Stored.Bytes, node.Call("GET", Stored.Key));
        // The refusal leaves the connection usable, and reading the configuration stays open to every role.
        Assert.IsType<object?[]>(node.Call("CONFIG", "GET", "maxclients"));
    }

    [Fact]
    public void Wrong_names_and_passwords_are_refused_alike_and_the_default_user_does_not_exist_without_a_password()
    {
        using var client = new RespTestClient(_host);
        Assert.StartsWith("NOAUTH", Assert.IsType<RespError>(client.Call("GET", "k")).Message);
        Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(client.Call("AUTH", "node", "a-pass")).Message);
        Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(client.Call("AUTH", "nobody", "r-pass")).Message);
        Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(client.Call("AUTH", "r-pass")).Message);
        Assert.Equal("OK", client.Call("AUTH", "node", "r-pass"));
        Assert.Equal("node", client.ReadStringOf("ACL", "WHOAMI"));
    }

    [Fact]
    public void Redis_cli_logs_in_with_user_and_password()
    {
        Assert.Equal("OK", RedisCli("stager", "w-pass", "SET", "greeting", "hello").Trim());
        Assert.Equal("hello", RedisCli("node", "r-pass", "GET", "greeting").Trim());
        Assert.Equal("node", RedisCli("node", "r-pass", "ACL", "WHOAMI").Trim());
        Assert.Contains("NOPERM", RedisCli("node", "r-pass", "SET", "greeting", "bye"));
        Assert.Contains("WRONGPASS", RedisCli("node", "w-pass", "GET", "greeting"));
    }

    [Fact]
    public void A_malformed_users_file_stops_the_host_at_start_naming_the_line()
    {
        var bad = Path.GetTempFileName();
        try
        {
            File.WriteAllText(bad, "node reader r-pass\nstager superuser x\n");
            var (exit, _, log) = CacheHostProcess.RunToExit("--port", "0", "--users-file", bad);
            Assert.Equal(2, exit);
            Assert.Contains("line 2: role 'superuser' is not one of reader, writer, admin", log);

            foreach (var (line, says) in new[]
            {
                ("names nobody risk/*", "line 3: names for account 'nobody', which no line of this file defines"),
                ("names node risk/*", "line 3: names for account 'node', a reader: only writers are given dataset names"),
                ("names stager ri*sk/x", "line 3: pattern 'ri*sk/x' may hold '*' only at its end"),
                ("names stager Risk/*", "line 3: pattern 'Risk/*': dataset name 'Risk/x' contains 'R'"),
                ("names stager", "line 3: expected names ACCOUNT PATTERN..."),
            })
            {
                File.WriteAllText(bad, $"node reader r-pass\nstager writer w-pass\n{line}\n");
                (exit, _, log) = CacheHostProcess.RunToExit("--port", "0", "--users-file", bad);
                Assert.Equal(2, exit);
                Assert.Contains(says, log);
            }
        }
        finally
        {
            File.Delete(bad);
        }
    }

    private RespTestClient Login(string user, string password) => RespTestClient.LoggedIn(_host, user, password);

    /// <summary>The password goes in REDISCLI_AUTH, the way a script keeps it out of the process list.</summary>
    private string RedisCli(string user, string password, params string[] args)
    {
        var start = new ProcessStartInfo("redis-cli") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in (string[])["-h", _host.Host, "-p", _host.Port.ToString(), "--user", user, .. args])
            start.ArgumentList.Add(a);
        start.Environment["REDISCLI_AUTH"] = password;
        using var process = System.Diagnostics.Process.Start(start)!;
        var output = process.StandardOutput.ReadToEndAsync();
        var error = process.StandardError.ReadToEndAsync();
        Assert.True(process.WaitForExit(TimeSpan.FromSeconds(60)), "redis-cli did not finish");
        return output.Result + error.Result;
    }

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
