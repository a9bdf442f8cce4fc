using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary><c>hpcdata status</c> (the node, the cache hosts) and <c>hpcdata list</c> (the versions on the tier), run as users run them.</summary>
public sealed class StatusListTests
{
    [Fact]
    public async Task A_socket_file_nothing_listens_on_is_said_to_be_stale_at_once_not_waited_on_until_a_timeout()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        var path = Path.Combine(s.Root, "stale.sock");
        // What an agent that was killed leaves: the socket's file with nothing listening on it (bound, never listening;
        // the runtime would remove the file if this socket were closed here).
        using var gone = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.Unix, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Unspecified);
        gone.Bind(new System.Net.Sockets.UnixDomainSocketEndPoint(path));
        Assert.True(File.Exists(path));
        Assert.True(AgentClient.SocketStale(path));

        var r = await s.HpcdataAsync(["status", "--pipe", path], timeout: TimeSpan.FromSeconds(60));

        Assert.NotEqual(0, r.Code);
        Assert.Contains($"no node agent answers on pipe '{path}' (stale socket {path}: nothing listens on it", r.Stderr);
        Assert.DoesNotContain("timed out", r.Stderr);
    }

    [Fact]
    public async Task Version_names_this_hpcdata_the_nodes_agent_and_each_cache_host_and_says_what_does_not_answer()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        var agent = s.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(s.Root, "node"), CacheTier = s.NodeTier(),
        }), name: "agent"));
        await agent.WaitReadyAsync(Sandbox.Ready);

        var json = await s.HpcdataAsync(["version", "--pipe", pipe, "--cache-hosts", $"{s.HostList},127.0.0.1:1", "--json"]);
        Assert.True(json.Code == 0, json.Stderr);
        var doc = JsonDocument.Parse(string.Join("\n", json.Stdout)).RootElement;
        var client = doc.GetProperty("client").GetString()!;
        Assert.Contains('+', client);   // the release and the commit it was built from
        Assert.Equal(client, doc.GetProperty("agent").GetProperty("version").GetString());
        var hosts = doc.GetProperty("hosts").EnumerateArray().ToDictionary(h => h.GetProperty("host").GetString()!);
        Assert.Equal($"hpc-cachehost {client}", hosts[s.Hosts[0]].GetProperty("server").GetString());
        Assert.False(hosts["127.0.0.1:1"].TryGetProperty("server", out _));
        Assert.True(hosts["127.0.0.1:1"].TryGetProperty("error", out _));

        // No agent on the pipe: a row that says so and why on stderr, not a failure.
        var none = await s.HpcdataAsync(["version", "--pipe", s.NewPipe(), "--cache-hosts", s.HostList]);
        Assert.True(none.Code == 0, none.Stderr);
        Assert.Contains(none.Stdout, l => l.StartsWith("agent", StringComparison.Ordinal) && l.Contains("not answering"));
        Assert.Contains(none.Stdout, l => l.StartsWith("cache host", StringComparison.Ordinal) && l.Contains(s.Hosts[0]) && l.Contains($"hpc-cachehost {client}"));
        Assert.Contains("no node agent answers", none.Stderr);
        Assert.DoesNotContain("warning", none.Stderr);
    }

    /// <summary>Every <c>--json</c> names its fields one way, camelCase, as <c>status</c> and <c>list</c> print them.</summary>
    [Fact]
    public async Task Stage_json_is_camelCase_like_status_and_list_and_reads_back()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var r = await s.RunAsync("Hpc.Stager", [s.WriteFile("a.bin", Sandbox.RandomBytes(65536 + 5, seed: 4)), "--name", "risk/cased", "--cache-hosts", s.HostList, "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var line = JsonDocument.Parse(r.Stdout.Last()).RootElement;
        Assert.All(line.EnumerateObject(), p => Assert.True(char.IsLower(p.Name[0]), $"stage --json prints '{p.Name}'"));
        Assert.Equal(65536 + 5, line.GetProperty("rawBytes").GetInt64());
        var read = JsonSerializer.Deserialize(r.Stdout.Last(), ContractJson.Default.StageResult)!;
        Assert.Equal((line.GetProperty("version").GetString(), 65536L + 5), (read.Version, read.RawBytes));

        var list = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList, "--json"]);
        Assert.All(JsonDocument.Parse(list.Stdout.Last()).RootElement[0].EnumerateObject(), p => Assert.True(char.IsLower(p.Name[0]), $"list --json prints '{p.Name}'"));
    }

    /// <summary>A launcher reading a line a stager or worker of an earlier release printed (PascalCase) still reads it.</summary>
    [Fact]
    public void A_PascalCase_line_of_an_earlier_release_still_reads()
    {
        var stage = JsonSerializer.Deserialize("""{"Name":"risk/a","Version":"v1","RawBytes":7,"StoredBytes":3,"SentBytes":3,"Segments":1,"SkippedSegments":0,"Unchanged":false,"Seconds":0.1,"Hash":"h"}""",
            ContractJson.Default.StageResult)!;
        Assert.Equal(("v1", 7L, 3L), (stage.Version, stage.RawBytes, stage.StoredBytes));
        var worker = Hpc.CommonData.Cli.WorkerProbe.ReadResult("""{"Pid":1,"Mode":"map","Version":"v1","Bytes":7,"AttachMs":1,"WarmAttachMs":0,"VerifyMs":0,"ComputeMs":0,"Verified":true}""")!;
        Assert.Equal(("map", 7L, true), (worker.Mode, worker.Bytes, worker.Verified));
        var printed = JsonSerializer.Serialize(worker, ContractJson.Default.WorkerResult);
        Assert.Contains("\"attachMs\":1", printed);
        Assert.DoesNotContain("\"Pid\"", printed);
    }

    [Fact]
    public async Task Verbose_says_on_stderr_which_cache_host_was_connected_and_how_and_leaves_stdout_as_it_was()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(10_000)), "risk/verbose");

        var plain = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList]);
        var verbose = await s.HpcdataAsync(["list", "-v", "--cache-hosts", s.HostList]);
        Assert.True(plain.Code == 0 && verbose.Code == 0, plain.Stderr + verbose.Stderr);
        Assert.DoesNotContain("Connected to", plain.Stderr);
        Assert.Matches($@"hpcdata: debug: Connected to {System.Text.RegularExpressions.Regex.Escape(s.HostList)} in \d+\.\d ms", verbose.Stderr);
        Assert.Equal(plain.Out, verbose.Out);
        var copy = Path.Combine(s.Root, "copy.bin");
        var get = await s.HpcdataAsync(["get", "risk/verbose", copy, "--verbose", "--cache-hosts", s.HostList], new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() });
        Assert.True(get.Code == 0, get.Stderr);
        Assert.Contains("Connected to", get.Stderr);
    }

    [Fact]
    public async Task List_shows_every_version_with_sizes_latest_lifetime_and_the_jobs_keeping_it()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StartCacheHostAsync();
        var first = await s.StageAsync(s.WriteFile("a1.bin", Sandbox.RandomBytes(5 * 65536, seed: 1)), "risk/a");
        var r = await s.RunAsync("Hpc.Stager", [s.WriteFile("a2.bin", Sandbox.RandomBytes(3 * 65536, seed: 2)), "--name", "risk/a", "--lifetime", "12h",
            "--cache-hosts", s.HostList, "--json"]);
        Assert.Equal(0, r.Code);
        var second = JsonSerializer.Deserialize<Sandbox.Staged>(r.Stdout.Last(), JsonSerializerOptions.Web)!;
        var other = await s.StageAsync(s.WriteFile("b.bin", Sandbox.RandomBytes(65536 + 7, seed: 3)), "risk/b");
        int newestSegments;
        await using (var tier = new CacheTierClient(s.NodeTier()))
        {
            await tier.Catalog.AddJobAsync(other.Version, "job-9");
            newestSegments = (await tier.ResolveAsync("risk/a", second.Version)).Manifest.Segments.Count;
        }

        var json = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList, "--json"]);
        Assert.True(json.Code == 0, json.Stderr);
        var entries = JsonSerializer.Deserialize(json.Stdout.Last(), CacheStatusJson.Default.CatalogEntryArray)!;
        Assert.Equal([("risk/a", second.Version), ("risk/a", first.Version), ("risk/b", other.Version)], entries.Select(e => (e.Name, e.Version)));
        var (newest, oldest, b) = (entries[0], entries[1], entries[2]);
        Assert.True(newest.Latest);
        Assert.False(oldest.Latest);
        Assert.Equal((3 * 65536L, newestSegments, 2), (newest.RawBytes, newest.Segments, newest.Hosts));
        Assert.Equal(12 * 3600, newest.LifetimeSeconds);
        Assert.Equal(newest.Created.AddHours(12), newest.Expires);
        Assert.Null(oldest.LifetimeSeconds);
        Assert.Equal(["job-9"], b.Jobs);

        var text = await s.HpcdataAsync(["list", "risk/a", "--cache-hosts", s.HostList]);
        Assert.Equal(0, text.Code);
        var rows = text.Stdout.Where(l => l.StartsWith("risk/", StringComparison.Ordinal)).ToList();
        Assert.Equal(2, rows.Count);
        Assert.Contains("latest", rows[0]);
        Assert.Contains("12h, 11h", rows[0]);
        Assert.Contains("until removed", rows[1]);
        AssertFits(text.Stdout);
        AssertFits((await s.HpcdataAsync(["list", "--cache-hosts", s.HostList])).Stdout);
    }

    /// <summary>A table for people fits a standard terminal: no line wider than 100 columns.</summary>
    private static void AssertFits(List<string> lines)
    {
        var widest = lines.MaxBy(l => l.Length) ?? "";
        Assert.True(widest.Length <= 100, $"{widest.Length} columns: {widest}\n{string.Join("\n", lines)}");
    }

    [Fact]
    public async Task Status_of_the_cache_hosts_reports_memory_keys_hit_rate_and_traffic_and_names_a_dead_host()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(4 * 65536)), "risk/st");
        int segments;
        await using (var tier = new CacheTierClient(s.NodeTier()))
            segments = (await tier.ResolveAsync("risk/st")).Manifest.Segments.Count; // lookups that hit

        var r = await s.HpcdataAsync(["status", "--cache-hosts", $"{s.HostList},127.0.0.1:1", "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var hosts = JsonSerializer.Deserialize(r.Stdout.Last(), CacheStatusJson.Default.CacheHostStatusArray)!;
        Assert.Equal(2, hosts.Length);
        var live = hosts.Single(h => h.Host == s.Hosts[0]);
        Assert.Null(live.Error);
        Assert.StartsWith("hpc-cachehost", live.Server);
        Assert.Equal(segments + 2, live.Keys); // segments, the manifest, latest
        Assert.Equal(512L << 20, live.MaxMemory);
        Assert.True(live.UsedMemory >= 4 * 65536, $"used {live.UsedMemory}");
        Assert.True(live.HitRate > 0);
        Assert.True(live.BytesReceived >= 4 * 65536);
        Assert.NotNull(hosts.Single(h => h.Host == "127.0.0.1:1").Error);

        var text = await s.HpcdataAsync(["status", "--cache-hosts", $"{s.HostList},127.0.0.1:1"]);
        Assert.Equal(0, text.Code);
        Assert.Contains(text.Stdout, l => l.StartsWith(s.Hosts[0], StringComparison.Ordinal) && l.Contains("cachehost 1.") && l.Contains("512 MiB"));
        Assert.Contains(text.Stdout, l => l.StartsWith("127.0.0.1:1", StringComparison.Ordinal) && l.Contains("unreachable"));
        Assert.Contains("127.0.0.1:1: ", text.Stderr);   // why, below the table rather than in a column as wide as the reason
        AssertFits(text.Stdout);

        var dead = await s.HpcdataAsync(["status", "--cache-hosts", "127.0.0.1:1"]);
        Assert.Equal(ExitCodes.Unavailable, dead.Code);
    }

    [Fact]
    public async Task Status_on_a_node_shows_the_agents_copies_with_pins_by_job_and_leases()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(3 * 65536 + 5)), "risk/node");
        var pipe = s.NewPipe();
        var agent = s.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(s.Root, "node"), CacheTier = s.NodeTier(),
        }), name: "agent"));
        await agent.WaitReadyAsync(Sandbox.Ready);
        await using var client = await AgentClient.ConnectAsync(pipe);
        await client.PrefetchAsync("risk/node", pin: "job-42");
        await client.OpenAsync("risk/node"); // a lease, held while this connection is open

        var r = await s.HpcdataAsync(["status", "--pipe", pipe, "--json"]);
        Assert.True(r.Code == 0, r.Stderr);
        var status = JsonSerializer.Deserialize(r.Stdout.Last(), AgentJson.Default.AgentStatus)!;
        var copy = Assert.Single(status.Copies);
        Assert.Equal(("risk/node", staged.Version, "complete", 3 * 65536L + 5), (copy.Name, copy.Version, copy.State, copy.Length));
        Assert.Equal(["job-42"], copy.Pins);
        Assert.Equal(1, copy.Leases);

        var text = await s.HpcdataAsync(["status", "--pipe", pipe]);
        Assert.Equal(0, text.Code);
        Assert.Contains(text.Stdout, l => l.StartsWith("risk/node", StringComparison.Ordinal) && l.Contains(staged.Version[..12]) && l.Contains("job-42") && l.Contains("100%"));
        // The column holds the jobs that pinned the copy, and is named for them, not as if it counted pins.
        var header = text.Stdout.Single(l => l.StartsWith("DATASET", StringComparison.Ordinal));
        Assert.Contains("PINNED BY", header);
        Assert.Equal(header.IndexOf("PINNED BY", StringComparison.Ordinal), text.Stdout.Single(l => l.StartsWith("risk/node", StringComparison.Ordinal)).IndexOf("job-42", StringComparison.Ordinal));
        AssertFits(text.Stdout);

        var none = await s.HpcdataAsync(["status", "--pipe", s.NewPipe()]);
        Assert.Equal(ExitCodes.Unavailable, none.Code);
        Assert.Contains("no node agent answers", none.Stderr);
    }

    [Fact]
    public async Task A_version_is_taken_by_the_twelve_digits_status_and_list_print_or_any_unique_start_of_eight_or_more()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var first = await s.StageAsync(s.WriteFile("v1.bin", Sandbox.RandomBytes(2 * 65536, seed: 1)), "risk/short");
        var second = await s.StageAsync(s.WriteFile("v2.bin", Sandbox.RandomBytes(2 * 65536, seed: 2)), "risk/short");
        var listed = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList]);
        Assert.Contains(listed.Stdout, l => l.Contains(first.Version[..12]));

        // On the tier, with no agent: get and remove take the start of the id and name the whole one.
        var noAgent = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() };
        var get = await s.HpcdataAsync(["get", $"risk/short@{first.Version[..12]}", Path.Combine(s.Root, "out.bin"), "--cache-hosts", s.HostList], noAgent);
        Assert.True(get.Code == 0, get.Stderr);
        Assert.Contains($"version {first.Version}:", get.Out);
        Assert.Equal(File.ReadAllBytes(Path.Combine(s.Root, "v1.bin")), File.ReadAllBytes(Path.Combine(s.Root, "out.bin")));

        // On the node: node prep, path and node release take it too; path prints the copy of the version meant.
        var pipe = s.NewPipe();
        var agent = s.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(s.Root, "node"), CacheTier = s.NodeTier(),
        }), name: "agent"));
        await agent.WaitReadyAsync(Sandbox.Ready);
        var prep = await s.HpcdataAsync(["nodeprep", $"risk/short@{first.Version[..8]}", "--job", "j1", "--pipe", pipe, "--no-start"]);
        Assert.True(prep.Code == 0, prep.Stderr);
        var path = await s.HpcdataAsync(["path", $"risk/short@{first.Version[..12].ToUpperInvariant()}", "--pipe", pipe]);
        Assert.True(path.Code == 0, path.Stderr);
        Assert.Equal(first.Version, Path.GetFileNameWithoutExtension(Assert.Single(path.Stdout)));
        var latest = await s.HpcdataAsync(["path", "risk/short", "--pipe", pipe]);
        Assert.Contains(second.Version, Assert.Single(latest.Stdout));

        var tooShort = await s.HpcdataAsync(["path", $"risk/short@{first.Version[..7]}", "--pipe", pipe]);
        Assert.Equal(ExitCodes.NotFound, tooShort.Code);
        Assert.Contains($"version '{first.Version[..7]}' is not a version id: give its 64 hex digits or at least the first 8", tooShort.Stderr);
        var unknown = await s.HpcdataAsync(["path", "risk/short@0123456789ab", "--pipe", pipe]);
        Assert.NotEqual(0, unknown.Code);
        Assert.Contains("no version", unknown.Stderr);
        Assert.Contains("starts with '0123456789ab'", unknown.Stderr);

        Assert.Equal(0, (await s.HpcdataAsync(["noderelease", $"risk/short@{first.Version[..12]}", "--job", "j1", "--pipe", pipe])).Code);
        Assert.DoesNotContain("j1", (await s.HpcdataAsync(["status", "--pipe", pipe])).Out);

        var removed = await s.HpcdataAsync(["remove", $"risk/short@{first.Version[..10]}", "--cache-hosts", s.HostList]);
        Assert.True(removed.Code == 0, removed.Stderr);
        Assert.Contains($"removed risk/short version {first.Version}", removed.Out);
    }
}
