using System.Buffers.Binary;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Tests;

namespace Hpc.Integration.Tests;

/// <summary>The node agent's life: restarts, resumed fetches, leases, pins and eviction.</summary>
public class NodeAgentTests
{
    [Fact]
    public async Task After_a_restart_the_agent_reuses_its_verified_copy_without_fetching()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(300_000)), "a/reuse");
        var (agent, pipe, dir) = await c.StartAgentAsync();
        await using (var client = await AgentClient.ConnectAsync(pipe))
            Assert.Equal("fetched", (await client.PrefetchAsync("a/reuse", pin: "job1")).Source);
        await agent.StopAsync(TimeSpan.FromSeconds(10));

        var (_, pipe2, _) = await c.StartAgentAsync(dataDir: dir, pipe: pipe);
        await using var again = await AgentClient.ConnectAsync(pipe2);
        var local = await again.OpenAsync("a/reuse");
        Assert.Equal("local", local.Source);
        var telemetry = File.ReadAllLines(Path.Combine(dir, "telemetry.jsonl")); // one line per fetch, none for reuse
        var fetch = System.Text.Json.JsonDocument.Parse(Assert.Single(telemetry)).RootElement;
        Assert.Equal("fetch", fetch.GetProperty("kind").GetString());
        Assert.Equal(local.Version, fetch.GetProperty("version").GetString());
        Assert.Equal(300_000, fetch.GetProperty("rawBytes").GetInt64());
        Assert.Equal("fetched", fetch.GetProperty("source").GetString());
        var status = await again.StatusAsync();
        Assert.Equal(["job1"], status.Copies.Single().Pins); // pins survive restarts
    }

    [Fact]
    public async Task The_agents_socket_stays_connectable_while_clients_connect_and_close_in_a_tight_loop()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var (_, pipe, _) = await c.StartAgentAsync();
        var path = NodeAgentOptions.SocketPath(pipe);
        var stop = DateTime.UtcNow + TimeSpan.FromSeconds(3);
        var failures = new System.Collections.Concurrent.ConcurrentBag<string>();
        long connects = 0;

        // A plain blocking Unix-socket client, as a third-party program would be: no retry, connect and close at once.
        await Task.WhenAll(Enumerable.Range(0, 4).Select(_ => Task.Run(() =>
        {
            while (DateTime.UtcNow < stop && failures.Count < 20)
            {
                using var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.Unix, System.Net.Sockets.SocketType.Stream,
                    System.Net.Sockets.ProtocolType.Unspecified);
                try
                {
                    socket.Connect(new System.Net.Sockets.UnixDomainSocketEndPoint(path));
                    Interlocked.Increment(ref connects);
                }
                catch (System.Net.Sockets.SocketException e) { failures.Add(e.SocketErrorCode.ToString()); }
            }
        })));

        Assert.True(failures.IsEmpty, $"{failures.Count} of {connects + failures.Count} connects failed: {string.Join(", ", failures.Distinct())}");
        Assert.True(connects > 100, $"only {connects} connects in 3 s");
        // And the agent still answers, once it has closed the burst's connections (it serves at most 256 at once).
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(15);
        while (true)
        {
            try
            {
                await using var client = await AgentClient.ConnectAsync(pipe);
                Assert.Empty((await client.StatusAsync()).Copies);
                break;
            }
            catch (Exception e) when (e is CommonDataException or IOException && DateTime.UtcNow < deadline)
            {
                await Task.Delay(200);
            }
        }
    }

    [Fact]
    public async Task An_agent_opens_its_cache_connections_before_it_is_ready_and_names_a_host_it_cannot_reach()
    {
        await using var c = new Cluster();
        var live = await c.StartCacheHostAsync();
        c.Hosts.Add("127.0.0.1:1");                    // nothing listens there
        var (agent, _, _) = await c.StartAgentAsync();

        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [live] });
        var info = (await tier.ExecuteOnAsync(0, "INFO"u8.ToArray(), ["clients"])).ToString();
        var connected = int.Parse(info.Split("\r\n").Single(l => l.StartsWith("connected_clients:"))["connected_clients:".Length..]);
        Assert.True(connected >= new CacheTierOptions().ConnectionsPerHost + 1, info); // the agent's pool and this client
        // The console logger writes from a queue of its own, so the line may trail the READY line a little.
        for (var i = 0; i < 50 && !agent.StandardErrorTail.Contains("127.0.0.1:1 not reachable"); i++) await Task.Delay(100);
        Assert.Contains("Cache host 127.0.0.1:1 not reachable at start-up", agent.StandardErrorTail);
        Assert.False(agent.HasExited);
    }

    [Fact]
    public async Task An_agent_killed_outright_is_replaced_on_the_same_pipe_and_a_second_agent_is_refused()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(100_000)), "a/crash");
        var (agent, pipe, dir) = await c.StartAgentAsync();
        await using (var client = await AgentClient.ConnectAsync(pipe)) await client.PrefetchAsync("a/crash");
        await agent.KillAsync(); // leaves its socket file behind

        await c.StartAgentAsync(dataDir: dir, pipe: pipe);
        await using (var data = await Dataset.OpenAsync("a/crash", Cluster.Via(pipe)))
            Assert.True(data.VerifyHash());

        var (code, _, stderr) = await c.RunAsync("Hpc.NodeAgent", [.. c.AgentArguments(pipe, Path.Combine(c.Root, "other"))]);
        Assert.Equal(1, code);
        Assert.Contains("already served by a running agent", stderr);
    }

    [Fact]
    public async Task A_bad_agent_command_line_is_refused_with_one_line_and_exit_code_2()
    {
        await using var c = new Cluster();
        var dir = Path.Combine(c.Root, "bad");
        foreach (var (args, says) in new (string[], string)[]
        {
            (["--data-dir", dir, "--cache-hosts", "127.0.0.1:1", "--budget", "lots"], "'lots' is not a size"),
            (["--data-dir", dir, "--cache-hosts", "127.0.0.1:1", "--budget", "0"], "--budget must be more than 0"),
            (["--data-dir", dir, "--cache-hosts", "127.0.0.1:1", "--replicas", "0"], "--replicas must be at least 1"),
            (["--data-dir", dir, "--cache-hosts", "127.0.0.1:1", "--bogus", "1"], "unknown option '--bogus'"),
        })
        {
            var (code, stdout, stderr) = await c.RunAsync("Hpc.NodeAgent", args);
            Assert.Equal(2, code);
            Assert.Empty(stdout);
            var line = Assert.Single(stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries));
            Assert.StartsWith("hpcdata agent: ", line);
            Assert.Contains(says, line);
        }
        var (_, help, _) = await c.RunAsync("Hpc.NodeAgent", ["--help"]);
        Assert.Contains(help, l => l.TrimStart().StartsWith("--budget SIZE", StringComparison.Ordinal));
    }

    [Fact]
    public async Task An_agent_takes_its_budget_in_units_and_reports_fetch_progress_in_its_status()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(3 * 65536 + 100)), "a/units");
        var pipe = $"hcd{Environment.ProcessId}u";
        var agent = c.Track(ComponentProcess.Start("Hpc.NodeAgent",
            ["--pipe", pipe, "--data-dir", Path.Combine(c.Root, "u"), "--cache-hosts", c.HostList, "--budget", "8GB"], name: "agent"));
        await agent.WaitReadyAsync(Cluster.Ready);
        await using var client = await AgentClient.ConnectAsync(pipe);
        await client.PrefetchAsync("a/units");
        var status = await client.StatusAsync();
        Assert.Equal(8L << 30, status.BudgetBytes);
        var copy = Assert.Single(status.Copies);
        Assert.Equal(("complete", staged.Segments, staged.Segments, staged.RawBytes), (copy.State, copy.Segments, copy.SegmentsDone, copy.BytesDone));
    }

    [Fact]
    public async Task A_partial_copy_is_resumed_and_only_unverified_segments_are_fetched()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(10 * 65536)), "a/resume", "--chunking", "fixed");
        var (agent, pipe, dir) = await c.StartAgentAsync();
        await using (var client = await AgentClient.ConnectAsync(pipe)) await client.PrefetchAsync("a/resume");
        await agent.StopAsync(TimeSpan.FromSeconds(10));

        // Turn the complete copy into a crashed partial one: a journal naming segments 0-5, of which 5 is damaged.
        var complete = Path.Combine(dir, "complete", staged.Version + ".data");
        var partial = Path.Combine(dir, "partial", staged.Version + ".data");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(complete, UnixFileMode.UserRead | UnixFileMode.UserWrite);  // the agent publishes copies read-only
        File.Move(complete, partial);
        await using (var f = new FileStream(partial, FileMode.Open, FileAccess.Write))
        {
            f.Position = 5 * 65536 + 10; f.WriteByte(0);
            f.Position = 8 * 65536; f.Write(new byte[65536]);
        }
        var journal = new byte[6 * 4];
        for (var i = 0; i < 6; i++) BinaryPrimitives.WriteInt32LittleEndian(journal.AsSpan(i * 4), i);
        await File.WriteAllBytesAsync(Path.Combine(dir, "partial", staged.Version + ".done"), journal);

        await using var tier = c.Tier();
        var before = await DataPathTests.BytesSent(tier);
        var (_, pipe2, _) = await c.StartAgentAsync(dataDir: dir, pipe: pipe);
        await using var data = await Dataset.OpenAsync("a/resume", Cluster.Via(pipe2));
        var sent = await DataPathTests.BytesSent(tier) - before;
        Assert.True(data.VerifyHash());
        Assert.InRange(sent, 5 * 65536, 6 * 65536 + 32_768); // segments 5-9 only, plus the manifest
        Assert.False(File.Exists(partial));
    }

    [Fact]
    public async Task On_a_small_file_system_a_dataset_that_cannot_fit_is_refused_at_once_and_the_next_one_still_fits()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var big = await c.StageAsync(Cluster.WriteFile(c.Root, "big", Cluster.RandomBytes(48 << 20, seed: 4)), "full/big");
        await c.StageAsync(Cluster.WriteFile(c.Root, "small", Cluster.RandomBytes(4 << 20, seed: 5)), "full/small");
        // A real 32 MB tmpfs under a budget of 1 GB: only the file system says no.
        await using var fs = await SmallFileSystem.MountAsync(Path.Combine(c.Root, "tmpfs"), "32m");
        var (agent, pipe, dir) = await c.StartAgentAsync(dataDir: Path.Combine(fs.Path, "data"));
        await using var client = await AgentClient.ConnectAsync(pipe);

        var refused = await Assert.ThrowsAsync<CommonDataException>(() => client.PrefetchAsync("full/big"));
        Assert.Equal(ErrorCode.NoSpace, refused.Code);
        Assert.Contains($"no space in the data directory {dir}", refused.Message);
        Assert.Contains($"{big.RawBytes} bytes needed", refused.Message);
        // Nothing of it was written, so nothing blocks the next dataset, without a restart.
        Assert.Equal(0, Directory.EnumerateFiles(dir, "*", SearchOption.AllDirectories).Where(f => !f.EndsWith(".json") && !f.EndsWith(".jsonl"))
            .Sum(f => new FileInfo(f).Length));
        Assert.Equal("fetched", (await client.PrefetchAsync("full/small")).Source);
        await agent.StopAsync(TimeSpan.FromSeconds(10));
    }

    [Fact]
    public async Task Past_its_budget_the_agent_evicts_the_least_recently_used_unleased_copy()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        foreach (var n in new[] { "a", "b", "c", "d" })
            await c.StageAsync(Cluster.WriteFile(c.Root, n, Cluster.RandomBytes(1 << 20, seed: n[0])), $"evict/{n}");
        var (_, pipe, _) = await c.StartAgentAsync(budget: (5L << 20) / 2); // room for two copies
        await using var client = await AgentClient.ConnectAsync(pipe);

        await using var leased = await Dataset.OpenAsync("evict/a", Cluster.Via(pipe)); // an open worker is a lease
        await client.PrefetchAsync("evict/b");
        await client.PrefetchAsync("evict/c"); // b is the oldest unleased one
        var names = (await client.StatusAsync()).Copies.Select(x => x.Name).ToList();
        Assert.Equal(["evict/a", "evict/c"], names);
        Assert.Equal(1, leased.GetSpan(0, 1).Length); // the leased mapping is still readable

        await client.PrefetchAsync("evict/b", pin: "job7"); // pinned copies survive too
        var full = await Assert.ThrowsAsync<CommonDataException>(() => client.PrefetchAsync("evict/d"));
        Assert.Equal(ErrorCode.NoSpace, full.Code);

        await client.ReleaseAsync("evict/b", null, "job7", evict: true);
        await client.ReleaseAsync("evict/b", null, "job7", evict: true); // never fails when the data is already gone
        Assert.Equal("fetched", (await client.PrefetchAsync("evict/d")).Source);
    }
}

/// <summary>Replicas, fail-over and authentication across real cache hosts.</summary>
public class CacheTierFailoverTests
{
    [Fact]
    public async Task With_two_replicas_a_node_fetches_everything_while_one_cache_host_is_down()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(40 * 65536);
        await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", bytes), "ha/data", "--replicas", "2");
        var victim = c.Hosts[0];
        var process = c.Processes.First(p => p.ReadyText == victim);
        await process.KillAsync();

        var options = new DatasetOptions
        {
            Mode = DataAccessMode.Direct,
            CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), Replicas = 2, MaxAttempts = 2, RetryBaseDelay = TimeSpan.FromMilliseconds(10) },
        };
        await using var data = await Dataset.OpenAsync("ha/data", options);
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());

        // A reader that does not know about the replicas finds the dead host's share on the other host, a round later.
        options.CacheTier.Replicas = 1;
        await using var again = await Dataset.OpenAsync("ha/data", options);
        Assert.Equal(bytes, again.GetSpan(0, bytes.Length).ToArray());
    }

    [Fact]
    public async Task A_password_protected_tier_is_used_with_the_password_and_refused_without()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => o.Password = "s3cret");
        var env = new Dictionary<string, string?> { [CacheTierOptions.PasswordVariable] = "s3cret" };
        var path = Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(1000));
        var (code, _, stderr) = await c.RunAsync("Hpc.Stager", [path, "--name", "sec/data", "--cache-hosts", c.HostList], env);
        Assert.True(code == 0, stderr);
        var (denied, _, why) = await c.RunAsync("Hpc.Stager", [path, "--name", "sec/other", "--cache-hosts", c.HostList]);
        Assert.Equal(ExitCodes.Denied, denied);
        Assert.Contains("NOAUTH", why, StringComparison.OrdinalIgnoreCase);

        var options = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), Password = "s3cret" } };
        await using var data = await Dataset.OpenAsync("sec/data", options);
        Assert.Equal(1000, data.Length);
    }

    [Fact]
    public async Task With_accounts_the_stager_writes_as_writer_nodes_read_as_reader_the_owner_removes_and_only_an_admin_collects()
    {
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", System.Text.Encoding.UTF8.GetBytes("node reader r-pass\nstager writer w-pass\nother writer o-pass\nops admin a-pass\nnames stager acl/*\n"));
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        var bytes = Cluster.RandomBytes(300_000);
        var path = Cluster.WriteFile(c.Root, "d.bin", bytes);

        var (staged, _, stageErr) = await c.RunAsync("Hpc.Stager", [path, "--name", "acl/data", "--cache-hosts", c.HostList], Cluster.As("stager", "w-pass"));
        Assert.True(staged == 0, stageErr);
        var (refusedStage, _, why) = await c.RunAsync("Hpc.Stager", [path, "--name", "acl/other", "--cache-hosts", c.HostList], Cluster.As("node", "r-pass"));
        Assert.Equal(ExitCodes.Denied, refusedStage);
        Assert.Contains("NOPERM User node has no permissions to run the 'set' command", why);

        // The node's agent holds only the reader's secret, from a file.
        var secret = Cluster.WriteFile(c.Root, "node.secret", System.Text.Encoding.UTF8.GetBytes("r-pass\n"));
        var pipe = $"hcdacl{Environment.ProcessId}";
        var agent = c.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(c.Root, "agent"),
            CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), User = "node", PasswordFile = secret },
        }), name: "agent"));
        await agent.WaitReadyAsync(TimeSpan.FromSeconds(30));
        await using (var data = await Dataset.OpenAsync("acl/data", Cluster.Via(pipe)))
            Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());

        var (otherRemove, _, otherWhy) = await c.RunAsync("hpcdata", ["remove", "acl/data", "--cache-hosts", c.HostList], Cluster.As("other", "o-pass"));
        Assert.NotEqual(0, otherRemove);
        Assert.Contains("NOPERM dataset acl/data is not among the names of account other", otherWhy);

        // The owner removes its version; the node that holds a copy stops serving it, as the tier records the removal.
        var (ownerRemove, ownerSaid, ownerWhy) = await c.RunAsync("hpcdata", ["remove", "acl/data", "--cache-hosts", c.HostList], Cluster.As("stager", "w-pass"));
        Assert.True(ownerRemove == 0, ownerWhy);
        Assert.Contains(ownerSaid, l => l.Contains("its segments stay until an administrator's hpcdata gc"));
        var gone = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("acl/data", Cluster.Via(pipe)));
        Assert.Equal(ErrorCode.NotFound, gone.Code);
        var (collected, _, collectWhy) = await c.RunAsync("hpcdata", ["gc", "--cache-hosts", c.HostList], Cluster.As("ops", "a-pass"));
        Assert.True(collected == 0, collectWhy);
    }

    [Fact]
    public async Task An_agent_restarted_with_credentials_the_tier_refuses_keeps_serving_the_verified_copies_it_holds_and_says_what_to_fix()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => o.Password = "s3cret");
        var right = new Dictionary<string, string?> { [CacheTierOptions.PasswordVariable] = "s3cret" };
        var bytes = Cluster.RandomBytes(300_000, seed: 41);
        foreach (var name in new[] { "risk/held", "risk/other" })
        {
            var (staged, _, why) = await c.RunAsync("Hpc.Stager", [Cluster.WriteFile(c.Root, name.Replace('/', '-'), bytes), "--name", name, "--cache-hosts", c.HostList], right);
            Assert.True(staged == 0, why);
        }
        var pipe = $"hcdrot{Environment.ProcessId}";
        var dir = Path.Combine(c.Root, pipe);
        var first = c.Track(ComponentProcess.Start("Hpc.NodeAgent", c.AgentArguments(pipe, dir), right, name: "agent"));
        await first.WaitReadyAsync(Cluster.Ready);
        await using (var data = await Dataset.OpenAsync("risk/held", Cluster.Via(pipe)))
            Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
        await first.KillAsync();

        // The node's password was rotated on the tier but not yet on the node: the agent starts, and serves what it holds.
        var rotated = c.Track(ComponentProcess.Start("Hpc.NodeAgent", c.AgentArguments(pipe, dir),
            new Dictionary<string, string?> { [CacheTierOptions.PasswordVariable] = "old-password" }, name: "agent"));
        await rotated.WaitReadyAsync(Cluster.Ready);
        await using (var data = await Dataset.OpenAsync("risk/held", Cluster.Via(pipe)))
            Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
        var refused = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("risk/other", Cluster.Via(pipe)));
        Assert.Equal(ErrorCode.AccessDenied, refused.Code);
        Assert.Contains("the cache tier refuses this agent", refused.Message);
        var said = string.Join("\n", rotated.StandardOutput) + rotated.StandardErrorTail;
        Assert.Contains("The cache tier refuses this agent's credentials", said);
        Assert.Contains("WRONGPASS", said);
        Assert.Contains("--cache-password-file", said);
    }

    [Fact]
    public async Task An_agent_whose_credentials_the_tier_refuses_stops_at_start_naming_the_settings_while_an_unreachable_tier_does_not_stop_it()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => o.Password = "s3cret");
        foreach (var (password, refusal) in new[] { ((string?)null, "NOAUTH"), ("guess", "WRONGPASS") })
        {
            var pipe = $"hcdcred{Environment.ProcessId}{refusal}";
            // The whole log, not the tail of stderr: the host's own report of the failed start follows, with a stack trace.
            var log = Path.Combine(c.Root, pipe + ".log");
            var agent = c.Track(ComponentProcess.Start("Hpc.NodeAgent", c.AgentArguments(pipe, Path.Combine(c.Root, pipe)),
                new Dictionary<string, string?> { [CacheTierOptions.PasswordVariable] = password, [NodeAgentOptions.LogVariable] = log }, name: "agent"));

            var code = await agent.WaitForExitAsync(Cluster.Ready);

            Assert.NotEqual(0, code);
            var said = File.ReadAllText(log);
            Assert.DoesNotContain("READY", said);
            Assert.Contains("the cache tier refuses this agent, so it would refuse every fetch", said);
            Assert.Contains(refusal, said);
            Assert.Contains(CacheTierOptions.PasswordVariable, said);
            Assert.Contains("--cache-password-file", said);
            Assert.True(AgentClient.SocketMissing(pipe), "the agent that stopped left its socket behind");
        }

        // With the password it serves; with no cache host reachable it starts as well, to serve the copies it holds.
        var right = $"hcdcred{Environment.ProcessId}right";
        await c.Track(ComponentProcess.Start("Hpc.NodeAgent", c.AgentArguments(right, Path.Combine(c.Root, right)),
            new Dictionary<string, string?> { [CacheTierOptions.PasswordVariable] = "s3cret" }, name: "agent")).WaitReadyAsync(Cluster.Ready);
        var (_, unreachable, _) = await c.StartAgentAsync(configure: o => o.CacheTier.Hosts = ["127.0.0.1:1"]);
        await using var client = await AgentClient.ConnectAsync(unreachable);
        await client.StatusAsync();
    }
}

public class CacheTierOutageTests
{
    [Fact]
    public async Task A_node_with_a_local_copy_keeps_serving_it_while_the_cache_tier_is_down()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(200_000)), "out/age");
        var (_, pipe, _) = await c.StartAgentAsync();
        await using (var client = await AgentClient.ConnectAsync(pipe)) await client.PrefetchAsync("out/age");
        foreach (var p in c.Processes.Where(p => p.Name == "cachehost")) await p.KillAsync();

        await using var data = await Dataset.OpenAsync("out/age", Cluster.Via(pipe));
        Assert.Equal(staged.Version, data.Version);
        var missing = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("never/fetched", Cluster.Via(pipe)));
        Assert.Equal(ErrorCode.Unavailable, missing.Code);
        Assert.Contains(c.Hosts[0], missing.Message);
    }
}

public class SegmentCollectionTests
{
    [Fact]
    public async Task Removing_a_version_frees_only_the_segments_no_other_version_uses()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var shared = Cluster.RandomBytes(8 * 65536, seed: 1);
        var a = await c.StageAsync(Cluster.WriteFile(c.Root, "a.bin", [.. shared, .. Cluster.RandomBytes(4 * 65536, seed: 2)]), "gc/a", "--chunking", "fixed");
        var b = await c.StageAsync(Cluster.WriteFile(c.Root, "b.bin", [.. shared, .. Cluster.RandomBytes(2 * 65536, seed: 3)]), "gc/b", "--chunking", "fixed");
        Assert.Equal(8, b.SkippedSegments);
        await using var tier = c.Tier();
        async Task<int> Segments() => (await tier.KeysAsync(CacheKeys.SegmentPrefix)).Sum(k => k.Count);
        Assert.Equal(14, await Segments());

        var (code, stdout, stderr) = await c.RunAsync("hpcdata", ["remove", "gc/a", "--cache-hosts", c.HostList]);
        Assert.True(code == 0, stderr);
        Assert.Contains("freed 4 segments", string.Join("\n", stdout));
        Assert.Equal(10, await Segments());

        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } };
        await using (var data = await Dataset.OpenAsync("gc/b", direct)) Assert.True(data.VerifyHash());
        Assert.Equal(ErrorCode.NotFound, (await Assert.ThrowsAsync<CommonDataException>(() => tier.ResolveAsync("gc/a"))).Code);
        Assert.NotEqual(a.Version, b.Version);
    }

    [Fact]
    public async Task A_stage_refused_past_the_memory_budget_frees_what_it_sent_gc_frees_other_orphans_and_the_next_stage_fits()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => o.MaxMemoryBytes = new ByteSize(24L << 20));
        var first = await c.StageAsync(Cluster.WriteFile(c.Root, "a.bin", Cluster.RandomBytes(8 << 20, seed: 1)), "budget/a");
        await using var tier = c.Tier();
        async Task<int> Segments() => (await tier.KeysAsync(CacheKeys.SegmentPrefix)).Sum(k => k.Count);
        Assert.Equal(first.Segments, await Segments());

        // Past the pre-send estimate, so the host's own refusal and the clean-up after it are what is exercised.
        var (code, _, stderr) = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "b.bin", Cluster.RandomBytes(40 << 20, seed: 2)), "--name", "budget/b",
            "--cache-hosts", c.HostList, "--no-space-check"]);
        Assert.Equal(ExitCodes.NoSpace, code);
        Assert.Contains("OOM", stderr);
        Assert.Matches(@"freed \d+ segments no version references", stderr);
        Assert.Equal(first.Segments, await Segments()); // only the committed version's segments are left

        // A segment no version references (as a stager killed outright would leave): hpcdata gc frees it.
        var orphan = Cluster.RandomBytes(1000, seed: 9);
        var stored = new byte[SegmentCodec.MaxEncodedLength(orphan.Length)];
        await tier.PutSegmentsAsync([(SegmentId.Of(orphan), stored.AsMemory(0, SegmentCodec.Encode(orphan, stored)))], null, CancellationToken.None);
        Assert.Equal(first.Segments + 1, await Segments());
        var (gcCode, gcOut, gcErr) = await c.RunAsync("hpcdata", ["gc", "--cache-hosts", c.HostList]);
        Assert.True(gcCode == 0, gcErr);
        Assert.Contains($"freed 1 segments; 1 versions reference {first.Segments} segments, kept", string.Join("\n", gcOut));
        Assert.Equal(first.Segments, await Segments());

        var next = await c.StageAsync(Cluster.WriteFile(c.Root, "c.bin", Cluster.RandomBytes(8 << 20, seed: 3)), "budget/c");
        Assert.False(next.Unchanged);
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } };
        await using (var data = await Dataset.OpenAsync("budget/a", direct)) Assert.True(data.VerifyHash());
    }

    [Fact]
    public async Task A_stage_the_cache_tier_clearly_cannot_hold_is_refused_before_anything_is_sent_and_one_that_mostly_exists_is_not()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync(o => o.MaxMemoryBytes = new ByteSize(24L << 20));
        var held = Cluster.RandomBytes(16 << 20, seed: 4);
        await c.StageAsync(Cluster.WriteFile(c.Root, "held.bin", held), "space/held");
        await using var tier = c.Tier();
        async Task<int> Segments() => (await tier.KeysAsync(CacheKeys.SegmentPrefix)).Sum(k => k.Count);
        var before = await Segments();

        var (code, _, stderr) = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "big.bin", Cluster.RandomBytes(16 << 20, seed: 5)), "--name", "space/big",
            "--cache-hosts", c.HostList]);
        Assert.Equal(ExitCodes.NoSpace, code);
        Assert.Contains("needs about", stderr);
        Assert.Contains("Nothing was sent", stderr);
        Assert.Equal(before, await Segments());

        // The same 16 MB with a small edit: the sample finds it already held, so the check lets it through and it fits.
        held[12345] ^= 0xff;
        var edited = await c.StageAsync(Cluster.WriteFile(c.Root, "edited.bin", held), "space/edited");
        Assert.Equal(1, edited.Segments - edited.SkippedSegments);
    }

    [Fact]
    public async Task A_collection_defers_to_a_running_stager()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StageAsync(Cluster.WriteFile(c.Root, "a.bin", Cluster.RandomBytes(3 * 65536)), "gc/x");
        await using var tier = c.Tier();
        await tier.ExecuteOnAllAsync("DEL"u8.ToArray(), [CacheKeys.Manifest((await tier.ResolveAsync("gc/x")).Version)]);
        var collector = new SegmentCollector(tier);
        await using (await collector.BeginStagingAsync())
        {
            var skipped = await collector.CollectAsync();
            Assert.False(skipped.Ran);
            Assert.Contains("stager", skipped.SkippedBecause);
        }
        var ran = await collector.CollectAsync();
        Assert.True(ran.Ran);
        Assert.Equal(3, ran.SegmentsDeleted);
    }
}
