using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// Real processes on this machine: cache hosts on free ports, node agents with their own pipes and data
/// directories, the stager and sample workers. Everything started here is stopped and removed on dispose.
/// </summary>
public sealed class Cluster : IAsyncDisposable
{
    private static int _counter;
    private readonly List<ComponentProcess> _processes = [];
    public string Root { get; }
    public List<string> Hosts { get; } = [];
    public string HostList => string.Join(",", Hosts);
    public static readonly TimeSpan Ready = TimeSpan.FromSeconds(30);

    /// <summary>The repository these tests were built from (for its samples).</summary>
    public static string RepositoryRoot
    {
        get
        {
            for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
                if (File.Exists(Path.Combine(dir.FullName, "Hpc.sln"))) return dir.FullName;
            throw new InvalidOperationException("not run from a build of the repository");
        }
    }

    public Cluster()
    {
        Root = Path.Combine(Path.GetTempPath(), $"hcd-it-{Environment.ProcessId}-{Interlocked.Increment(ref _counter)}");
        Directory.CreateDirectory(Root);
    }

    public IReadOnlyList<ComponentProcess> Processes { get { lock (_processes) return _processes.ToList(); } }

    public ComponentProcess Track(ComponentProcess p) { lock (_processes) _processes.Add(p); return p; }

    /// <summary>Starts a cache host on a free port; <paramref name="configure"/> changes its defaults (the command line is
    /// built from the options, the password passed in the environment).</summary>
    public async Task<string> StartCacheHostAsync(Action<CacheHostOptions>? configure = null)
    {
        var options = new CacheHostOptions { Port = 0 };
        configure?.Invoke(options);
        var p = Track(ComponentProcess.Start("Hpc.CacheHost", ProgramContract<CacheHostOptions>.ToArguments(options),
            new Dictionary<string, string?>(ProgramContract<CacheHostOptions>.SecretEnvironment(options)), name: "cachehost"));
        var address = await p.WaitReadyAsync(Ready);
        Hosts.Add(address);
        return address;
    }

    /// <param name="configure">Changes the agent's other settings (its command line is built from them).</param>
    public async Task<(ComponentProcess Process, string Pipe, string DataDir)> StartAgentAsync(string? dataDir = null, long budget = 1L << 30, string? pipe = null,
        Action<NodeAgentOptions>? configure = null)
    {
        pipe ??= $"hcd{Environment.ProcessId}x{Interlocked.Increment(ref _counter)}";
        dataDir ??= Path.Combine(Root, pipe);
        var p = Track(ComponentProcess.Start("Hpc.NodeAgent", AgentArguments(pipe, dataDir, budget, configure), name: "agent"));
        await p.WaitReadyAsync(Ready);
        return (p, pipe, dataDir);
    }

    /// <summary>The agent's command line for this cluster's cache hosts, built from its options type.</summary>
    public IReadOnlyList<string> AgentArguments(string pipe, string dataDir, long budget = 1L << 30, Action<NodeAgentOptions>? configure = null)
    {
        var options = new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = dataDir, Budget = budget, CacheTier = new CacheTierOptions { Hosts = Hosts.ToList() },
        };
        configure?.Invoke(options);
        return ProgramContract<NodeAgentOptions>.ToArguments(options);
    }

    public sealed record Staged(string Name, string Version, long RawBytes, long StoredBytes, long SentBytes, int Segments, int SkippedSegments, bool Unchanged, string Hash,
        string Codec = "lz4", string? CodecReason = null);

    public async Task<Staged> StageAsync(string path, string name, params string[] extra)
    {
        var (code, stdout, stderr) = await RunStagerAsync([path, "--name", name, "--cache-hosts", HostList, "--json", .. extra]);
        Assert.True(code == 0, $"stager failed ({code}): {stderr}");
        return JsonSerializer.Deserialize<Staged>(stdout.Last(), JsonSerializerOptions.Web)!;
    }

    public async Task<(int Code, List<string> Stdout, string Stderr)> RunStagerAsync(string[] args, string? stdin = null) =>
        await RunAsync("Hpc.Stager", args, null, stdin);

    public async Task<(int Code, List<string> Stdout, string Stderr)> RunAsync(string assembly, string[] args, IDictionary<string, string?>? env = null, string? stdinFile = null)
    {
        await using var p = ComponentProcess.Start(assembly, args, env);
        if (stdinFile is not null)
        {
            await using var input = File.OpenRead(stdinFile);
            await p.SendInputAsync(input);
        }
        var code = await p.WaitForExitAsync(TimeSpan.FromMinutes(3));
        return (code, p.StandardOutput.ToList(), p.StandardErrorTail);
    }

    /// <summary>SDK options that reach the data only through this agent (the cache tier address is deliberately dead).</summary>
    public static Hpc.CommonData.DatasetOptions Via(string pipe, Hpc.CommonData.DataAccessMode mode = Hpc.CommonData.DataAccessMode.Map) =>
        new() { AgentPipe = pipe, Mode = mode, CacheTier = new CacheTierOptions { Hosts = ["127.0.0.1:1"] } };

    public CacheTierClient Tier(int attempts = 5) => new(new CacheTierOptions { Hosts = Hosts.ToList(), MaxAttempts = attempts });

    public static string WriteFile(string dir, string name, byte[] data)
    {
        var path = Path.Combine(dir, name);
        Directory.CreateDirectory(Path.GetDirectoryName(path)!);
        File.WriteAllBytes(path, data);
        return path;
    }

    public static byte[] Csvish(int bytes, int seed = 7)
    {
        var r = new Random(seed);
        var sb = new System.Text.StringBuilder();
        while (sb.Length < bytes) sb.Append($"2024-01-{r.Next(1, 29):00},INST{r.Next(0, 5000):00000},{r.Next(10, 500)}.{r.Next(0, 9999):0000}\n");
        return System.Text.Encoding.ASCII.GetBytes(sb.ToString(0, bytes));
    }

    /// <summary>The environment that makes a client program log in to the cache tier as <paramref name="user"/>.</summary>
    public static Dictionary<string, string?> As(string user, string password) =>
        new() { [CacheTierOptions.UserVariable] = user, [CacheTierOptions.PasswordVariable] = password };

    public static byte[] RandomBytes(int n, int seed = 3) { var b = new byte[n]; new Random(seed).NextBytes(b); return b; }

    public async ValueTask DisposeAsync()
    {
        await Task.WhenAll(_processes.Select(p => p.DisposeAsync().AsTask()));
        try { Directory.Delete(Root, recursive: true); } catch (IOException) { } catch (UnauthorizedAccessException) { }
    }
}
