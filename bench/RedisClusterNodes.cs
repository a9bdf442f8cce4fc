using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Cache;

namespace Hpc.Bench;

/// <summary>
/// A real Redis Cluster on loopback: Debian's redis-server nodes with cluster mode on, joined by
/// <c>redis-cli --cluster create</c> into masters with (by default) one replica each. Killed and its files removed on
/// dispose. Tests fail it over; <c>bench fetch --tier redis-cluster</c> fetches from it.
/// </summary>
public sealed class RedisClusterNodes : IAsyncDisposable
{
    private readonly string _dir = Path.Combine(Path.GetTempPath(), $"hcd-rc-{Environment.ProcessId}-{Guid.NewGuid():n}");
    private readonly Dictionary<int, Process> _nodes = [];

    public IReadOnlyList<int> Ports => _nodes.Keys.Order().ToList();
    public IReadOnlyList<string> Seeds => Ports.Select(p => $"127.0.0.1:{p}").ToList();

    /// <summary>Client options for this cluster, given only its first node as a seed (the rest is learned).</summary>
    public CacheTierOptions Options(int attempts = 3) => new() { Hosts = [Seeds[0]], Cluster = true, MaxAttempts = attempts };

    /// <summary>The nodes' process ids (what their CPU is read by).</summary>
    public IReadOnlyList<int> ProcessIds => _nodes.Values.Where(p => !p.HasExited).Select(p => p.Id).ToList();

    public static async Task<RedisClusterNodes> StartAsync(int masters = 3, int replicasPerMaster = 1, int nodeTimeoutMs = 1000)
    {
        var cluster = new RedisClusterNodes();
        try
        {
            Directory.CreateDirectory(cluster._dir);
            foreach (var port in FreeClusterPorts(masters * (1 + replicasPerMaster)))
                cluster._nodes[port] = Process.Start(new ProcessStartInfo(Executable("redis-server"),
                [
                    "--port", port.ToString(), "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file", $"nodes-{port}.conf",
                    "--cluster-node-timeout", nodeTimeoutMs.ToString(), "--save", "", "--appendonly", "no", "--dir", cluster._dir,
                ]) { RedirectStandardOutput = true, UseShellExecute = false })!;
            foreach (var port in cluster.Ports) await cluster.CliAsync(port, "PING");
            var create = await RunAsync(Executable("redis-cli"), ["--cluster", "create", .. cluster.Seeds, "--cluster-replicas", replicasPerMaster.ToString(), "--cluster-yes"]);
            if (create.Code != 0) throw new InvalidOperationException($"redis-cli --cluster create failed: {create.Output}");
            await cluster.WaitHealthyAsync(masters * (1 + replicasPerMaster));
            return cluster;
        }
        catch
        {
            await cluster.DisposeAsync();
            throw;
        }
    }

    /// <summary>Waits until every slot is served and <paramref name="nodes"/> nodes, masters and replicas, are online.</summary>
    public async Task WaitHealthyAsync(int nodes, TimeSpan? within = null)
    {
        var deadline = DateTime.UtcNow + (within ?? TimeSpan.FromSeconds(30));
        foreach (var port in Ports.Where(p => _nodes[p] is { HasExited: false }))
            while (true)
            {
                var info = await CliAsync(port, "CLUSTER", "INFO");
                var slots = await CliAsync(port, "CLUSTER", "SHARDS");
                var healthy = slots.Split('\n').Count(l => l.Trim() == "online");
                if (info.Contains("cluster_state:ok") && healthy >= nodes) break;
                if (DateTime.UtcNow > deadline) throw new TimeoutException($"Redis Cluster on {port} not healthy: {info} {slots}");
                await Task.Delay(100);
            }
    }

    /// <summary>Waits until every replica has every write its master acknowledged (a failover then loses nothing).</summary>
    public async Task WaitReplicatedAsync()
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(30);
        foreach (var port in Ports)
        {
            while (true)
            {
                var info = await CliAsync(port, "INFO", "replication");
                if (!info.Contains("role:master")) break;
                var offset = Field(info, "master_repl_offset");
                var replicas = info.Split('\n').Where(l => l.StartsWith("slave", StringComparison.Ordinal) && l.Contains("offset=")).ToList();
                if (replicas.Count > 0 && replicas.All(l => l.Split(',').Any(f => f == $"offset={offset}"))) break;
                if (DateTime.UtcNow > deadline) throw new TimeoutException($"replicas of {port} did not catch up: {info}");
                await Task.Delay(50);
            }
        }
    }

    /// <summary>The masters' ports, as the nodes currently say.</summary>
    public async Task<IReadOnlyList<int>> MastersAsync()
    {
        var masters = new List<int>();
        foreach (var port in Ports.Where(p => !_nodes[p].HasExited))
            if ((await CliAsync(port, "INFO", "replication")).Contains("role:master")) masters.Add(port);
        return masters;
    }

    public async Task<long> KeyCountAsync(int port) => long.Parse((await CliAsync(port, "DBSIZE")).Trim());

    /// <summary>Kills a node outright (SIGKILL): no goodbye to the cluster, connections reset.</summary>
    public void Kill(int port)
    {
        _nodes[port].Kill();
        _nodes[port].WaitForExit();
    }

    public async Task<string> CliAsync(int port, params string[] args)
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(15);
        while (true)
        {
            var (code, output) = await RunAsync(Executable("redis-cli"), ["-p", port.ToString(), .. args]);
            if (code == 0 && !output.StartsWith("Could not connect", StringComparison.Ordinal)) return output;
            if (DateTime.UtcNow > deadline) throw new InvalidOperationException($"redis-cli -p {port} {string.Join(' ', args)}: {output}");
            await Task.Delay(50);
        }
    }

    private static string Field(string info, string name) =>
        info.Split('\n').Select(l => l.Trim()).FirstOrDefault(l => l.StartsWith(name + ":", StringComparison.Ordinal))?[(name.Length + 1)..] ?? "";

    private static string Executable(string name) =>
        new[] { $"/usr/bin/{name}", $"/usr/local/bin/{name}" }.FirstOrDefault(File.Exists)
        ?? throw new InvalidOperationException($"{name} is not installed: apt-get install redis-server redis-tools (.ci/run does this)");

    private static async Task<(int Code, string Output)> RunAsync(string exe, string[] args)
    {
        var psi = new ProcessStartInfo(exe, args) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        using var p = Process.Start(psi)!;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        var stdout = p.StandardOutput.ReadToEndAsync(timeout.Token);
        var stderr = p.StandardError.ReadToEndAsync(timeout.Token);
        await p.WaitForExitAsync(timeout.Token);
        return (p.ExitCode, await stdout + await stderr);
    }

    /// <summary>Free ports whose cluster bus port (port + 10000) is free as well.</summary>
    private static List<int> FreeClusterPorts(int count)
    {
        var ports = new List<int>();
        for (var candidate = 20000 + Random.Shared.Next(0, 20000); ports.Count < count && candidate < 55000; candidate += 1 + Random.Shared.Next(0, 7))
            if (IsFree(candidate) && IsFree(candidate + 10000)) ports.Add(candidate);
        return ports;
    }

    private static bool IsFree(int port)
    {
        try
        {
            using var l = new TcpListener(IPAddress.Loopback, port);
            l.Start();
            return true;
        }
        catch (SocketException) { return false; }
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var p in _nodes.Values)
        {
            if (!p.HasExited) { p.Kill(); await p.WaitForExitAsync(); }
            p.Dispose();
        }
        try { Directory.Delete(_dir, recursive: true); } catch (IOException) { }
    }
}
