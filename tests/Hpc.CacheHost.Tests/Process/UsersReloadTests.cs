namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// An operator changes accounts on a running host — SIGHUP (<c>systemctl reload</c>) or <c>ACL LOAD</c> from an admin
/// connection — without a restart, which would empty it. The load is all or nothing; connections act under the new
/// roles and names from their next command, and those of an account the file no longer defines are closed.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class UsersReloadTests : IDisposable
{
    private const string Before = """
        alice   writer  alice-pass
        mallory writer  mallory-pass
        node    reader  node-pass
        ops     admin   ops-pass
        names   alice   risk/*
        """;

    private readonly string _usersFile = Path.GetTempFileName();
    private readonly CacheHostProcess _host;

    public UsersReloadTests()
    {
        File.WriteAllText(_usersFile, Before);
        _host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
    }

    [Fact]
    public void A_users_file_other_users_can_read_is_warned_about_at_start_and_at_each_reload_naming_the_fix()
    {
        // Path.GetTempFileName makes the file 0600: nothing to say.
        Assert.DoesNotContain("holds passwords", _host.Log);

        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(_usersFile, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
        using (var ops = Login("ops", "ops-pass")) Assert.Equal("OK", ops.Call("ACL", "LOAD"));
        Assert.Contains($"--users-file {_usersFile} is readable by every user of this machine (mode 0644): it holds passwords; " +
                        $"make it readable by its owner alone (chmod 600 {_usersFile})", _host.LogOnceItSays("holds passwords"));

        using var restarted = CacheHostProcess.Start(o => o.UsersFile = _usersFile);
        Assert.Contains("(mode 0644): it holds passwords", restarted.LogOnceItSays("holds passwords"));
        using (var ops = new RespTestClient(restarted))
            Assert.Equal("OK", ops.Call("AUTH", "ops", "ops-pass")); // a warning, not a refusal: the tier keeps serving
    }

    [Fact]
    public void An_account_removed_from_the_users_file_loses_its_staging_leases_and_locks_at_the_reload()
    {
        using var mallory = Login("mallory", "mallory-pass");
        using var alice = Login("alice", "alice-pass");
        var lockKey = "hcd:lock:" + new string('a', 64);
        Assert.Equal("OK", mallory.Call("SET", "hcd:staging:mallory:held", "x", "PX", "600000"));
        Assert.Equal("OK", mallory.Call("SET", lockKey, "mallory:token", "NX", "PX", "15000"));
        Assert.Equal("OK", alice.Call("SET", "hcd:staging:alice:own", "x", "PX", "600000"));

        File.WriteAllText(_usersFile, Before.Replace("mallory writer  mallory-pass\n", ""));
        using var ops = Login("ops", "ops-pass");
        Assert.Equal("OK", ops.Call("ACL", "LOAD"));

        // Nobody could renew or release them any more; the remaining account's lease stays.
        Assert.Equal(0L, ops.Call("EXISTS", "hcd:staging:mallory:held"));
        Assert.Equal(0L, ops.Call("EXISTS", lockKey));
        Assert.Equal(1L, ops.Call("EXISTS", "hcd:staging:alice:own"));
        Assert.Contains("2 staging lease(s) and lock(s) of removed accounts dropped", _host.LogOnceItSays("of removed accounts dropped"));
    }

    [Fact]
    public void ACL_LOAD_puts_an_edited_users_file_in_force_for_new_and_open_connections_and_keeps_the_data()
    {
        var segment = StoredObjects.Segment("prices of the day");
        using var alice = Login("alice", "alice-pass");
        Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
        using var mallory = Login("mallory", "mallory-pass");
        using var node = Login("node", "node-pass");
        var version = StoredObjects.Version("risk/ha", segment.Entry);
        Assert.StartsWith("NOPERM dataset risk/ha is not among the names of account mallory", Refusal(mallory.Call("SET", version.Key, version.Stored)));

        // risk/* handed to mallory too, node removed, alice's password changed.
        File.WriteAllText(_usersFile, """
            alice   writer  alice-new
            mallory writer  mallory-pass
            ops     admin   ops-pass
            names   alice   risk/*
            names   mallory risk/*
            """);
        using var ops = Login("ops", "ops-pass");
        Assert.Equal("OK", ops.Call("ACL", "LOAD"));

        // Open connections: mallory's now may, node's is told why and closed, alice's stays logged in.
        Assert.Equal("OK", mallory.Call("SET", version.Key, version.Stored));
        Assert.Equal("NOAUTH account node is no longer in the users file; the connection closes", Refusal(node.Call("GET", segment.Key)));
        Assert.Throws<EndOfStreamException>(() => node.Call("PING"));
        Assert.Equal(segment.Stored, alice.Call("GET", segment.Key));
        // New connections: the new password only.
        using var late = new RespTestClient(_host);
        Assert.StartsWith("WRONGPASS", Refusal(late.Call("AUTH", "alice", "alice-pass")));
        Assert.Equal("OK", late.Call("AUTH", "alice", "alice-new"));
        Assert.Equal(segment.Stored, late.Call("GET", segment.Key));
    }

    [Fact]
    public void A_users_file_with_a_fault_is_refused_whole_naming_the_line_and_the_accounts_in_force_stay()
    {
        File.WriteAllText(_usersFile, "ops admin ops-pass\nalice writer\n");
        using var ops = Login("ops", "ops-pass");
        var refusal = Refusal(ops.Call("ACL", "LOAD"));
        Assert.Contains("line 2: expected NAME ROLE SECRET", refusal);
        Assert.EndsWith("the accounts in force are unchanged", refusal);
        using var node = Login("node", "node-pass");
        Assert.Equal("PONG", node.Call("PING"));
    }

    [Fact]
    public void Only_an_administrator_may_load_the_users_file_again()
    {
        using var alice = Login("alice", "alice-pass");
        Assert.StartsWith("NOPERM User alice has no permissions to run the 'acl|load' command", Refusal(alice.Call("ACL", "LOAD")));
    }

    [Fact]
    public void SIGHUP_loads_the_users_file_again_and_the_host_keeps_serving()
    {
        var segment = StoredObjects.Segment("kept across the reload");
        using (var alice = Login("alice", "alice-pass"))
            Assert.Equal("OK", alice.Call("SET", segment.Key, segment.Stored));
        File.WriteAllText(_usersFile, Before + "\nlate reader late-pass\n");

        _host.HangUp();

        // The log line follows the load (the console logger writes on its own thread). Waited for before the new account
        // logs in: tries at an account not loaded yet are failures that spend this address's budget (10 in a row), and
        // a loaded machine may take longer than that to handle the signal.
        const string Logged = "SIGHUP: accounts loaded again: 5 in force (1 added, 0 removed, 0 changed)";
        for (var tries = 0; tries < 300 && !_host.Log.Contains(Logged); tries++)
            Thread.Sleep(100);
        Assert.Contains(Logged, _host.Log);
        using var late = new RespTestClient(_host);
        Assert.Equal("OK", late.Call("AUTH", "late", "late-pass"));
        Assert.Equal(segment.Stored, late.Call("GET", segment.Key));
        Assert.False(_host.HasExited);
    }

    private static string Refusal(object? reply) => Assert.IsType<RespError>(reply).Message;

    private RespTestClient Login(string user, string password) => RespTestClient.LoggedIn(_host, user, password);

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
