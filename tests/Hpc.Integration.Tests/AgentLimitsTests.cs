using Hpc.CommonData.Hosting;
using System.Diagnostics;
using System.Runtime.Versioning;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;

namespace Hpc.Integration.Tests;

/// <summary>
/// What one local user can take of the node's agent from the others: its connections, a version's writer turn, the
/// pin budget, another job's pins. A real cache host, stager and agent (as root), clients run as two users the tests
/// create, over the agent's real socket.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class AgentLimitsTests
{
    private const string Alice = AccessTests.Alice, Bob = AccessTests.Bob;

    [RootOnLinuxFact]
    public async Task A_user_holding_hundreds_of_idle_connections_is_refused_past_its_share_naming_the_limit_and_another_users_open_succeeds()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "open.bin", Cluster.RandomBytes(100_000, seed: 31)), "risk/open", "--readers", "all");
        // The idle timeout is long here so that only the per-user share keeps Bob served.
        var (_, pipe, _) = await cluster.StartAgentAsync(configure: o => (o.MaxConnections, o.IdleTimeout) = (256, TimeSpan.FromSeconds(120)));
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        await using var held = await UserScript.StartAsync(run, Alice, HoldConnections, AgentClient.SocketPath(pipe), "300");
        var holding = JsonDocument.Parse(await held.ReadLineAsync()).RootElement;
        Assert.Equal(300, holding.GetProperty("connected").GetInt32());
        Assert.Equal(300 - 64, holding.GetProperty("refused").GetInt32()); // a quarter of --max-connections 256 is served
        Assert.Contains("--max-connections-per-user 64", holding.GetProperty("reply").GetString());

        var bob = await run.AsUserAsync(Bob, [.. run.Worker, "path", "risk/open", "--pipe", pipe]);
        Assert.True(bob.Code == 0, $"another user's open failed while Alice held her connections ({bob.Code}): {bob.Stderr}");

        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "path", "risk/open", "--pipe", pipe]);
        Assert.Equal(ExitCodes.TryLater, alice.Code);
        var line = Assert.Single(alice.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries));
        Assert.Contains("limit reached", line);
        Assert.Contains("--max-connections-per-user", line);
    }

    [RootOnLinuxFact]
    public async Task A_connection_that_sends_nothing_is_closed_after_the_idle_timeout_with_a_line_naming_it()
    {
        AccessTests.EnsureUser(Alice);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var (_, pipe, _) = await cluster.StartAgentAsync(configure: o => o.IdleTimeout = TimeSpan.FromSeconds(1));
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        await using var silent = await UserScript.StartAsync(run, Alice, WaitForClose, AgentClient.SocketPath(pipe));
        var closed = JsonDocument.Parse(await silent.ReadLineAsync()).RootElement;

        Assert.InRange(closed.GetProperty("seconds").GetDouble(), 0.9, 5);
        Assert.Contains("--idle-timeout", closed.GetProperty("reply").GetString());
    }

    [RootOnLinuxFact]
    public async Task A_non_reader_cannot_ingest_a_restricted_version_the_node_lacks()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "secret.bin", Cluster.RandomBytes(300_000, seed: 32)), "risk/secret",
            "--readers", $"user:{Alice}");
        var manifest = await StoredManifestAsync(cluster, staged);
        var (_, pipe, _) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        await using var bob = await UserScript.StartAsync(run, Bob, Ingest, AgentClient.SocketPath(pipe), "risk/secret", staged.Version, manifest, "once");
        var reply = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;

        Assert.False(reply.Ok);
        Assert.Equal(Hpc.CommonData.ErrorCode.AccessDenied, reply.Code);
        Assert.Contains($"'{Bob}'", reply.Error);
        Assert.Contains("not among the readers", reply.Error);
        Assert.Empty((await StatusAsync(pipe)).Copies); // nothing was begun for him
    }

    [RootOnLinuxFact]
    public async Task A_non_reader_asking_for_a_restricted_version_the_node_lacks_is_refused_before_any_of_its_data_moves()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(20 << 20, seed: 34);
        await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "secret.bin", bytes), "risk/secret", "--readers", $"user:{Alice}");
        var (_, pipe, _) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        await using var tier = cluster.Tier();
        var sentBefore = (await tier.GetHostStatusAsync())[0].BytesSent;

        var bob = await run.AsUserAsync(Bob, [.. run.Worker, "path", "risk/secret", "--pipe", pipe]);

        Assert.NotEqual(0, bob.Code);
        Assert.Contains("not among the readers", bob.Stderr);
        // The tier sent the manifest, not the 20 MB, and the node keeps nothing of it.
        Assert.InRange((await tier.GetHostStatusAsync())[0].BytesSent - sentBefore, 0, 256 << 10);
        Assert.Empty((await StatusAsync(pipe)).Copies);
        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "path", "risk/secret", "--pipe", pipe]);
        Assert.True(alice.Code == 0, alice.Stderr);
        Assert.Single((await StatusAsync(pipe)).Copies);
    }

    [RootOnLinuxFact]
    public async Task A_readers_stalled_ingest_does_not_keep_another_reader_waiting_more_than_a_few_seconds()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(400_000, seed: 33);
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "shared.bin", bytes), "risk/shared", "--readers", $"user:{Alice},user:{Bob}");
        var manifest = await StoredManifestAsync(cluster, staged);
        var (_, pipe, _) = await cluster.StartAgentAsync(); // --ingest-stall-timeout 5 s by default
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        // Bob, a reader, begins an ingest of the version the node lacks and then sends nothing.
        await using var bob = await UserScript.StartAsync(run, Bob, Ingest, AgentClient.SocketPath(pipe), "risk/shared", staged.Version, manifest, "stall");
        var begun = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;
        Assert.True(begun.Ok, begun.Error);
        Assert.True(begun.Ingest!.Missing > 0);

        var clock = Stopwatch.StartNew();
        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "path", "risk/shared", "--pipe", pipe]);
        clock.Stop();

        Assert.True(alice.Code == 0, $"the reader's open failed after {clock.Elapsed.TotalSeconds:0.0} s ({alice.Code}): {alice.Stderr}");
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(12), $"the reader waited {clock.Elapsed.TotalSeconds:0.0} s on a stalled ingest");
        Assert.Equal(bytes, File.ReadAllBytes(alice.Text.Trim()));
        var abandoned = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;
        Assert.Equal(Hpc.CommonData.ErrorCode.Timeout, abandoned.Code);
        Assert.Contains("--ingest-stall-timeout", abandoned.Error);
    }

    [RootOnLinuxFact]
    public async Task A_readers_ingest_trickling_one_valid_segment_every_few_seconds_does_not_keep_another_reader_waiting()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(4 << 20, seed: 35);
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "trickled.bin", bytes), "risk/trickled", "--readers", $"user:{Alice},user:{Bob}");
        var manifest = await StoredManifestAsync(cluster, staged);
        // The stored segments Bob will send, one every 3 s: each a valid segment, so each restarted the old stall clock.
        var segments = await StoredSegmentsAsync(cluster, staged);
        var (_, pipe, _) = await cluster.StartAgentAsync(); // --ingest-stall-timeout 5 s, --ingest-min-rate 256 KiB/s by default
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        await using var bob = await UserScript.StartAsync(run, Bob, Ingest, AgentClient.SocketPath(pipe), "risk/trickled", staged.Version, manifest, "trickle", segments);
        var begun = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;
        Assert.True(begun.Ok, begun.Error);

        var clock = Stopwatch.StartNew();
        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "path", "risk/trickled", "--pipe", pipe]);
        clock.Stop();

        Assert.True(alice.Code == 0, $"the reader's open failed after {clock.Elapsed.TotalSeconds:0.0} s ({alice.Code}): {alice.Stderr}");
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(15), $"the reader waited {clock.Elapsed.TotalSeconds:0.0} s on a trickling ingest");
        Assert.Equal(bytes, File.ReadAllBytes(alice.Text.Trim()));
        var abandoned = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;
        Assert.Equal(Hpc.CommonData.ErrorCode.Timeout, abandoned.Code);
        Assert.Contains("--ingest-min-rate", abandoned.Error);
    }

    [RootOnLinuxFact]
    public async Task A_readers_ingest_just_above_the_least_rate_keeps_another_reader_waiting_only_until_its_own_measured_fetch_outpaces_it()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(12 << 20, seed: 36);
        var staged = await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "paced.bin", bytes), "risk/paced", "--readers", $"user:{Alice},user:{Bob}");
        var manifest = await StoredManifestAsync(cluster, staged);
        var segments = await StoredSegmentsAsync(cluster, staged);
        var (_, pipe, _) = await cluster.StartAgentAsync(); // --ingest-stall-timeout 5 s, --ingest-min-rate 256 KiB/s by default
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        // Bob sends every segment, valid, at 400 KiB/s: above the least rate over every window (a pause of a second still
        // leaves 320 KiB/s), so the rate alone never abandons it, and the whole version would take about 31 s.
        const double rate = 400 << 10;
        var wholeVersion = TimeSpan.FromSeconds(new DirectoryInfo(segments).GetFiles().Sum(f => f.Length) / rate);
        await using var bob = await UserScript.StartAsync(run, Bob, Ingest, AgentClient.SocketPath(pipe), "risk/paced", staged.Version, manifest, "pace", segments,
            rate.ToString(System.Globalization.CultureInfo.InvariantCulture));
        var begun = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;
        Assert.True(begun.Ok, begun.Error);

        var clock = Stopwatch.StartNew();
        var alice = await run.AsUserAsync(Alice, [.. run.Worker, "path", "risk/paced", "--pipe", pipe]);
        clock.Stop();

        Assert.True(alice.Code == 0, $"the reader's open failed after {clock.Elapsed.TotalSeconds:0.0} s ({alice.Code}): {alice.Stderr}");
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(15) && clock.Elapsed < wholeVersion / 2,
            $"the reader waited {clock.Elapsed.TotalSeconds:0.0} s on an ingest that needs {wholeVersion.TotalSeconds:0} s for the version");
        Assert.Equal(bytes, File.ReadAllBytes(alice.Text.Trim()));
        var abandoned = JsonSerializer.Deserialize(await bob.ReadLineAsync(), AgentJson.Default.AgentResponse)!;
        Assert.Equal(Hpc.CommonData.ErrorCode.Timeout, abandoned.Code);
        Assert.Contains("slower than the reader's own fetch", abandoned.Error);
        Assert.Contains("own fetch from the cache tier measured", abandoned.Error);
    }

    [RootOnLinuxFact]
    public async Task One_users_pins_stop_at_its_pin_quota_with_a_line_naming_it_and_another_users_nodeprep_still_fits()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        string[] alices = ["risk/a1", "risk/a2", "risk/a3", "risk/a4"];
        foreach (var (name, i) in alices.Append("risk/b1").Select((n, i) => (n, i)))
            await cluster.StageAsync(Cluster.WriteFile(cluster.Root, $"d{i}.bin", Cluster.RandomBytes(250_000, seed: 40 + i)), name, "--readers", "all");
        // Budget for four of them, and the default quota: a quarter of it, room for one.
        var (_, pipe, _) = await cluster.StartAgentAsync(budget: 1_100_000);
        var run = WorkerRunner.Prepare(cluster.Root, Alice);

        var outcomes = new List<WorkerRunner.Outcome>();
        foreach (var name in alices)
            outcomes.Add(await run.AsUserAsync(Alice, [.. run.Worker, "nodeprep", name, "--job", "job-a", "--pipe", pipe, "--no-start"]));

        Assert.True(outcomes[0].Code == 0, outcomes[0].Stderr);
        foreach (var refused in outcomes.Skip(1))
        {
            Assert.NotEqual(0, refused.Code);
            var line = Assert.Single(refused.Stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries));
            Assert.Contains("pin quota", line);
            Assert.Contains("--pin-quota", line);
        }
        var bob = await run.AsUserAsync(Bob, [.. run.Worker, "nodeprep", "risk/b1", "--job", "job-b", "--pipe", pipe, "--no-start"]);
        Assert.True(bob.Code == 0, $"another user's node prep was refused: {bob.Stderr}");
        var pinned = (await StatusAsync(pipe)).Copies.Where(c => c.Pins.Count > 0).Select(c => (c.Name, string.Join(",", c.Pins)));
        Assert.Equal([("risk/a1", "job-a"), ("risk/b1", "job-b")], pinned);
    }

    [RootOnLinuxFact]
    public async Task A_pin_another_user_makes_under_your_job_id_leaves_your_noderelease_releasing_your_own_pin_and_saying_when_you_hold_none()
    {
        AccessTests.EnsureUser(Alice);
        AccessTests.EnsureUser(Bob);
        await using var cluster = new Cluster();
        await cluster.StartCacheHostAsync();
        // Alice's copy sorts first, so a release that stops at the first copy it may not release never reaches Bob's.
        await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "a.bin", Cluster.RandomBytes(100_000, seed: 51)), "risk/a", "--readers", "all");
        await cluster.StageAsync(Cluster.WriteFile(cluster.Root, "b.bin", Cluster.RandomBytes(100_000, seed: 52)), "risk/b", "--readers", "all");
        var (_, pipe, _) = await cluster.StartAgentAsync();
        var run = WorkerRunner.Prepare(cluster.Root, Alice);
        var alicePin = await run.AsUserAsync(Alice, [.. run.Worker, "nodeprep", "risk/a", "--job", "job-b", "--pipe", pipe, "--no-start"]);
        Assert.True(alicePin.Code == 0, alicePin.Stderr);
        var bobPin = await run.AsUserAsync(Bob, [.. run.Worker, "nodeprep", "risk/b", "--job", "job-b", "--pipe", pipe, "--no-start"]);
        Assert.True(bobPin.Code == 0, bobPin.Stderr);

        string[] release = ["noderelease", "--job", "job-b", "--pipe", pipe, "--stop-agent", "never"];
        var bob = await run.AsUserAsync(Bob, [.. run.Worker, .. release]);

        Assert.True(bob.Code == 0, bob.Stderr);
        Assert.Contains("pins=1", bob.Text);
        Assert.DoesNotContain("access denied", bob.Stderr);
        Assert.DoesNotContain("holds no pin", bob.Stderr);
        var copies = (await StatusAsync(pipe)).Copies.ToDictionary(c => c.Name);
        Assert.Empty(copies["risk/b"].Pins);
        Assert.Equal(["job-b"], copies["risk/a"].Pins); // Alice's pin is hers, not the job's

        var again = await run.AsUserAsync(Bob, [.. run.Worker, .. release]);
        Assert.Equal(0, again.Code); // a node release never fails an epilog; it says what it did not do
        Assert.Contains("pins=0", again.Text);
        Assert.Contains($"user '{Bob}'", again.Stderr);
        Assert.Contains("holds no pin 'job-b'", again.Stderr);
    }

    /// <summary>The stored segments of a staged version as the cache tier holds them, one file each named by its index, in a folder every user may read.</summary>
    private static async Task<string> StoredSegmentsAsync(Cluster cluster, Cluster.Staged staged)
    {
        var segments = Directory.CreateDirectory(Path.Combine(cluster.Root, "segments")).FullName;
        await using (var tier = cluster.Tier())
        {
            var (_, parsed) = await tier.ResolveAsync(staged.Name, staged.Version);
            for (var i = 0; i < parsed.SegmentIds.Count; i++)
            {
                var stored = await tier.ExecuteOnAsync(0, "GET"u8.ToArray(), [CacheKeys.Segment(parsed.SegmentIds[i])]);
                var path = Path.Combine(segments, i.ToString(System.Globalization.CultureInfo.InvariantCulture));
                await File.WriteAllBytesAsync(path, stored.Bulk!);
                File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
            }
        }
        File.SetUnixFileMode(segments, (UnixFileMode)0b111_101_101);
        return segments;
    }

    /// <summary>The manifest of a staged version exactly as the cache tier stores it, in a file every user may read.</summary>
    private static async Task<string> StoredManifestAsync(Cluster cluster, Cluster.Staged staged)
    {
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = cluster.Hosts.ToList() });
        var (_, _, bytes) = await tier.Catalog.ResolveWithBytesAsync(staged.Name, staged.Version);
        var path = Path.Combine(cluster.Root, staged.Version + ".manifest");
        await File.WriteAllBytesAsync(path, bytes);
        File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
        return path;
    }

    private static async Task<AgentStatus> StatusAsync(string pipe)
    {
        await using var client = await AgentClient.ConnectAsync(pipe);
        return await client.StatusAsync();
    }

    /// <summary>Opens N connections and sends nothing; prints how many were answered (refused) unasked, and holds them until stdin ends.</summary>
    private const string HoldConnections = """
        import json, socket, sys, time
        path, n = sys.argv[1], int(sys.argv[2])
        held = []
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            held.append(s)
        time.sleep(2)
        refused, reply = 0, ""
        for s in held:
            s.setblocking(False)
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            if data:
                refused += 1
                reply = json.loads(data[4:])["error"]
        print(json.dumps({"connected": len(held), "refused": refused, "reply": reply}), flush=True)
        sys.stdin.read()
        """;

    /// <summary>Connects, sends nothing, and prints after how long the agent closed the connection and what it said.</summary>
    private const string WaitForClose = """
        import json, socket, sys, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(sys.argv[1])
        start = time.monotonic()
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        print(json.dumps({"seconds": time.monotonic() - start, "reply": json.loads(data[4:])["error"] if data else ""}), flush=True)
        """;

    /// <summary>
    /// Sends an ingest request and the manifest frame and prints the agent's answer; with "stall" it then sends nothing
    /// more and prints what the agent says next; with "trickle" it sends the segments in a folder one every 3 s, with
    /// "pace" at a rate in bytes per second (then the end frame), and prints what the agent says next; otherwise it exits.
    /// </summary>
    private const string Ingest = """
        import json, socket, struct, sys
        path, name, version, manifest, mode = sys.argv[1:6]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(path)
        def frame(b): return struct.pack("<I", len(b)) + b
        def read(n):
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                if not chunk: raise EOFError("the agent closed the connection")
                data += chunk
            return data
        def reply(): return read(struct.unpack("<I", read(4))[0]).decode()
        request = json.dumps({"op": "ingest", "dataset": name, "version": version}).encode()
        s.sendall(frame(request) + frame(open(manifest, "rb").read()))
        print(reply(), flush=True)
        if mode == "stall":
            print(reply(), flush=True)
        if mode == "trickle":
            import os, select, time
            directory = sys.argv[6]
            for i in sorted(int(n) for n in os.listdir(directory)):
                stored = open(os.path.join(directory, str(i)), "rb").read()
                try:
                    s.sendall(frame(struct.pack("<ii", i, len(stored)) + stored))
                except OSError:
                    break
                if select.select([s], [], [], 3)[0]:
                    break  # the agent answered (abandoned the ingest) before the next segment was due
            print(reply(), flush=True)
        if mode == "pace":
            import os, select, time
            directory, rate = sys.argv[6], float(sys.argv[7])
            start, sent, answered = time.monotonic(), 0, False
            for i in sorted(int(n) for n in os.listdir(directory)):
                stored = open(os.path.join(directory, str(i)), "rb").read()
                try:
                    s.sendall(frame(struct.pack("<ii", i, len(stored)) + stored))
                except OSError:
                    answered = True
                    break
                sent += len(stored)
                if select.select([s], [], [], max(0.0, start + sent / rate - time.monotonic()))[0]:
                    answered = True
                    break  # the agent answered (abandoned the ingest) before the next segment was due
            if not answered:
                s.sendall(frame(b""))
            print(reply(), flush=True)
        """;

    /// <summary>A Python script run as another user, its stdout read line by line; killed when disposed.</summary>
    private sealed class UserScript : IAsyncDisposable
    {
        private readonly Process _process;
        private readonly string _name;

        private UserScript(Process process, string name) => (_process, _name) = (process, name);

        public static Task<UserScript> StartAsync(WorkerRunner run, string user, string script, params string[] args)
        {
            var info = new ProcessStartInfo("setpriv")
            {
                RedirectStandardInput = true, RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false,
                WorkingDirectory = run.WorkingDirectory,
            };
            foreach (var a in new[] { $"--reuid={user}", $"--regid={user}", "--init-groups", "--", "/usr/bin/python3", "-c", script }.Concat(args))
                info.ArgumentList.Add(a);
            return Task.FromResult(new UserScript(Process.Start(info)!, $"{user}'s script"));
        }

        /// <summary>The script's next line; fails the test (with its stderr) if it ends or says nothing within a minute.</summary>
        public async Task<string> ReadLineAsync()
        {
            string? line;
            try { line = await _process.StandardOutput.ReadLineAsync().WaitAsync(TimeSpan.FromSeconds(60)); }
            catch (TimeoutException) { line = null; }
            if (line is null)
            {
                _process.Kill(entireProcessTree: true);
                Assert.Fail($"{_name} printed nothing: {await _process.StandardError.ReadToEndAsync()}");
            }
            return line;
        }

        public async ValueTask DisposeAsync()
        {
            try { _process.Kill(entireProcessTree: true); }
            catch (InvalidOperationException) { } // already exited
            await _process.WaitForExitAsync();
            _process.Dispose();
        }
    }
}
