using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Real processes for one test: cache hosts, the stager, and <c>hpcdata</c> itself, with a private state directory
/// and pipe names so node agents that nodeprep starts are found again and always stopped on dispose. Each program
/// started here reaches the cache tier from a node address of its own (<see cref="NodeAddresses"/>), as the nodes of
/// a cluster do, and so does every agent or job it starts in turn.
/// </summary>
public sealed class Sandbox : IAsyncDisposable
{
    private static int _counter;
    private readonly List<ComponentProcess> _processes = [];
    public static readonly TimeSpan Ready = TimeSpan.FromSeconds(30);

    public string Root { get; }
    public string StateDirectory => Path.Combine(Root, "state");
    public List<string> Hosts { get; } = [];
    public string HostList => string.Join(",", Hosts);

    public Sandbox()
    {
        Root = Path.Combine(Path.GetTempPath(), $"hcd-jobs-{Environment.ProcessId}-{Interlocked.Increment(ref _counter)}");
        Directory.CreateDirectory(Root);
    }

    /// <summary>A pipe name for this test only; on Linux a socket path under the sandbox.</summary>
    public string NewPipe() => $"hj{Environment.ProcessId}x{Interlocked.Increment(ref _counter)}";

    public async Task<string> StartCacheHostAsync(int port = 0, Action<CacheHostOptions>? configure = null)
    {
        var options = new CacheHostOptions { Port = port, MaxMemoryBytes = ByteSize.Parse("512MB") };
        configure?.Invoke(options);
        var p = Track(ComponentProcess.Start(options, name: "cachehost"));
        var address = await p.WaitReadyAsync(Ready);
        Hosts.Add(address);
        return address;
    }

    /// <summary>The cache tier as one more node reaches it: these hosts, from a node address of its own.</summary>
    public CacheTierOptions NodeTier() => new() { Hosts = [.. Hosts], SourceAddress = NodeAddresses.Next() };

    public ComponentProcess Track(ComponentProcess p) { lock (_processes) _processes.Add(p); return p; }

    public async Task StopCacheHostsAsync()
    {
        foreach (var p in _processes.Where(p => p.Name == "cachehost")) await p.StopAsync(TimeSpan.FromSeconds(10));
    }

    public sealed record Staged(string Name, string Version, long RawBytes, bool Unchanged, string Hash, int Segments);

    public async Task<Staged> StageAsync(string path, string name)
    {
        var r = await RunAsync("Hpc.Stager", [path, "--name", name, "--cache-hosts", HostList, "--json"]);
        Assert.True(r.Code == 0, $"stager failed ({r.Code}): {r.Stderr}");
        return JsonSerializer.Deserialize<Staged>(r.Stdout.Last(), JsonSerializerOptions.Web)!;
    }

    public sealed record Result(int Code, List<string> Stdout, string Stderr)
    {
        public string Out => string.Join("\n", Stdout);
    }

    /// <summary>Runs <c>hpcdata</c> with the sandbox's state directory.</summary>
    public Task<Result> HpcdataAsync(string[] args, IDictionary<string, string?>? env = null, TimeSpan? timeout = null)
    {
        var all = NodeAddresses.OwnNode(env);
        all["HPCDATA_STATE_DIR"] = StateDirectory;
        // This machine's client settings files stay out of the tests unless a test names one.
        all.TryAdd(ClientConfig.FileVariable, "/dev/null");
        return RunAsync("hpcdata", args, all, timeout);
    }

    public ComponentProcess StartHpcdata(string[] args, IDictionary<string, string?>? env = null)
    {
        var all = NodeAddresses.OwnNode(env);
        all["HPCDATA_STATE_DIR"] = StateDirectory;
        all.TryAdd(ClientConfig.FileVariable, "/dev/null");
        return Track(ComponentProcess.Start("hpcdata", args, all, name: "hpcdata " + args[0]));
    }

    public async Task<Result> RunAsync(string assembly, string[] args, IDictionary<string, string?>? env = null, TimeSpan? timeout = null)
    {
        await using var p = ComponentProcess.Start(assembly, args, NodeAddresses.OwnNode(env));
        var code = await p.WaitForExitAsync(timeout ?? TimeSpan.FromMinutes(3));
        return new Result(code, p.StandardOutput.ToList(), p.StandardErrorTail);
    }

    public async Task<AgentStatus> StatusAsync(string pipe)
    {
        await using var agent = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(5));
        return await agent.StatusAsync();
    }

    /// <summary>Bytes the cache hosts have sent so far, summed from their INFO (what a fan-out must keep near one copy).</summary>
    public static async Task<long> BytesSentAsync(Hpc.CommonData.Cache.CacheTierClient tier) =>
        (await tier.ExecuteOnAllAsync("INFO"u8.ToArray(), [])).Sum(r => long.Parse(System.Text.Encoding.UTF8.GetString(r.Bulk!).Split("\r\n")
            .First(l => l.StartsWith("total_net_output_bytes:"))["total_net_output_bytes:".Length..]));

    public string WriteFile(string name, byte[] data)
    {
        var path = Path.Combine(Root, name);
        File.WriteAllBytes(path, data);
        return path;
    }

    public static byte[] RandomBytes(int n, int seed = 3) { var b = new byte[n]; new Random(seed).NextBytes(b); return b; }

    /// <summary>Processes whose command line mentions <paramref name="text"/> (e.g. a pipe name): orphans, if any.</summary>
    public static List<int> ProcessesMentioning(string text)
    {
        var found = new List<int>();
        foreach (var dir in Directory.EnumerateDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), out var pid) || pid == Environment.ProcessId) continue;
            try
            {
                var stat = File.ReadAllText(Path.Combine(dir, "stat"));
                if (stat[(stat.LastIndexOf(')') + 2)] == 'Z') continue;
                if (File.ReadAllText(Path.Combine(dir, "cmdline")).Replace('\0', ' ').Contains(text)) found.Add(pid);
            }
            catch (IOException) { }
            catch (UnauthorizedAccessException) { }
        }
        return found;
    }

    /// <summary>
    /// Waits until an MPI node prep whose command line mentions <paramref name="marker"/> has handed some node's agent
    /// segments, then SIGKILLs the process of the given rank. Returns its pid, or 0 if nothing moved in time.
    /// </summary>
    /// <summary>
    /// Kills the node-prep rank <paramref name="rank"/> (of <paramref name="ranks"/>) of the job that <paramref name="job"/> runs once some agent of
    /// that job holds a verified segment. Returns the killed process id; when none was killed, says why: the job ended
    /// first (with its output), or no agent of it held a segment within <paramref name="limit"/>.
    /// </summary>
    public static async Task<int> KillRankOnceTheExchangeMovesAsync(string marker, int rank, int ranks, TimeSpan limit, ComponentProcess job)
    {
        var deadline = DateTime.UtcNow + limit;
        var seen = new HashSet<string>();
        while (DateTime.UtcNow < deadline && !job.HasExited)
        {
            foreach (var pid in ProcessesMentioning(marker))
            {
                string[] args, environ;
                try
                {
                    args = File.ReadAllText($"/proc/{pid}/cmdline").Split('\0');
                    environ = File.ReadAllText($"/proc/{pid}/environ").Split('\0');
                }
                catch (IOException) { continue; }
                var at = Array.IndexOf(args, "--pipe");
                if (!args.Contains("nodeprep") || at < 0 || at + 1 >= args.Length) continue;
                if (!environ.Any(v => v == $"PMI_RANK={rank}" || v == $"OMPI_COMM_WORLD_RANK={rank}")) continue;
                seen.Add($"rank {rank} (pid {pid})");
                if (!await AnyAgentHasSegmentsAsync(args[at + 1], ranks)) continue;
                System.Diagnostics.Process.GetProcessById(pid).Kill();
                return pid;
            }
            await Task.Delay(50);
        }
        var output = string.Join("\n", job.StandardOutput);
        Assert.Fail(job.HasExited
            ? $"the job ended (exit {job.ExitCode}) before a rank was seen exchanging data; seen: {string.Join(", ", seen)}\n{output}\n{job.StandardErrorTail}"
            : $"no agent of the job held a segment within {limit.TotalSeconds:0} s; seen: {string.Join(", ", seen)}\n{output}\n{job.StandardErrorTail}");
        return 0;
    }

    private static async Task<bool> AnyAgentHasSegmentsAsync(string pipeTemplate, int ranks)
    {
        // Each rank's agent in turn; one that is not up yet (or busy past the short wait) is skipped, not the end of the look.
        for (var r = 0; r < ranks; r++)
        {
            try
            {
                await using var agent = await Hpc.CommonData.Agent.AgentClient.ConnectAsync(pipeTemplate.Replace("{rank}", r.ToString()),
                    TimeSpan.FromSeconds(1), CancellationToken.None);
                if ((await agent.StatusAsync(CancellationToken.None)).Copies.Any(c => c.SegmentsDone > 0)) return true;
            }
            catch (Exception e) when (e is CommonDataException or TimeoutException or IOException) { }
            if (!pipeTemplate.Contains("{rank}")) break;
        }
        return false;
    }

    public async ValueTask DisposeAsync()
    {
        await Task.WhenAll(_processes.Select(p => p.DisposeAsync().AsTask()));
        // Agents that nodeprep started outlive it by design: stop every one this sandbox recorded, as hpcdata does. Its
        // stop signals a recorded pid only while that pid still runs the agent on the recorded pipe: pids are reused (32,768
        // of them on a CI machine, where a test run starts many more processes), and the agent of a test that ended long
        // ago may have left its pid to a rank of a test running now.
        if (Directory.Exists(StateDirectory))
            await Task.WhenAll(Directory.GetFiles(StateDirectory, "*.json").Select(async file =>
            {
                try
                {
                    if (JsonSerializer.Deserialize(File.ReadAllText(file), Hpc.Jobs.Scheduling.StartedAgentJson.Default.StartedAgent) is { } agent)
                        await Hpc.Jobs.Scheduling.NodeAgentLauncher.StopAsync(agent, TimeSpan.FromSeconds(5));
                }
                catch (Exception e) when (e is IOException or JsonException or UnauthorizedAccessException) { }
            }));
        try { Directory.Delete(Root, recursive: true); } catch (IOException) { } catch (UnauthorizedAccessException) { }
    }
}
