using Hpc.Jobs.Tests;
using System.Diagnostics;
using Hpc.CommonData;
using Hpc.CommonData.Cache;

namespace Hpc.Integration.Tests;

/// <summary>The cache-tier client, the stager and the SDK work unchanged against a real redis-server.</summary>
public sealed class RedisInteropTests : IAsyncLifetime
{
    private Process? _redis;
    private int _port;

    public async Task InitializeAsync()
    {
        var exe = new[] { "/usr/bin/redis-server", "/usr/local/bin/redis-server" }.FirstOrDefault(File.Exists)
                  ?? throw new InvalidOperationException("redis-server is not installed: apt-get install redis-server (.ci/run does this)");
        _port = FreePorts.Next();
        _redis = Process.Start(new ProcessStartInfo(exe, ["--port", _port.ToString(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            { RedirectStandardOutput = true, UseShellExecute = false })!;
        var deadline = DateTime.UtcNow.AddSeconds(15);
        while (true)
        {
            try
            {
                await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [$"127.0.0.1:{_port}"], MaxAttempts = 1 });
                var pong = await tier.ExecuteOnAllAsync("PING"u8.ToArray(), []);
                if (pong[0].Text == "PONG") return;
            }
            catch (CacheHostUnavailableException) when (DateTime.UtcNow < deadline) { await Task.Delay(100); }
        }
    }

    public async Task DisposeAsync()
    {
        if (_redis is { HasExited: false }) { _redis.Kill(); await _redis.WaitForExitAsync(); }
        _redis?.Dispose();
    }

    [Fact]
    public async Task Stage_and_read_back_through_redis_server()
    {
        await using var c = new Cluster();
        c.Hosts.Add($"127.0.0.1:{_port}");
        var bytes = Cluster.Csvish(3 * 65536 + 7);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", bytes), "redis/interop");
        var again = await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", bytes), "redis/interop");
        Assert.True(again.Unchanged);

        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } };
        await using (var data = await Dataset.OpenAsync("redis/interop", direct))
        {
            Assert.Equal(staged.Version, data.Version);
            Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
        }

        var (_, pipe, _) = await c.StartAgentAsync();
        await using var viaAgent = await Dataset.OpenAsync("redis/interop", new DatasetOptions { AgentPipe = pipe, Mode = DataAccessMode.Map });
        Assert.True(viaAgent.VerifyHash());
    }

    [Fact]
    public async Task Missing_keys_and_server_errors_are_reported_from_redis()
    {
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [$"127.0.0.1:{_port}"] });
        var e = await Assert.ThrowsAsync<CommonDataException>(() => tier.ResolveAsync("no/such"));
        Assert.Contains("no/such", e.Message);
        var replies = await tier.ExecuteOnAllAsync("NOSUCHCOMMAND"u8.ToArray(), []);
        Assert.Equal(RespKind.Error, replies[0].Kind);
    }

    [Fact]
    public async Task Status_and_list_read_a_redis_server_as_they_read_our_host()
    {
        await using var c = new Cluster();
        c.Hosts.Add($"127.0.0.1:{_port}");
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "s.csv", Cluster.Csvish(2 * 65536)), "redis/status", "--lifetime", "1h");
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList() });
        var (_, manifest) = await tier.ResolveAsync("redis/status");

        var host = Assert.Single(await tier.GetHostStatusAsync());
        Assert.Null(host.Error);
        Assert.StartsWith("redis ", host.Server);
        Assert.True(host.Keys >= manifest.Segments.Count + 2, $"{host.Keys} keys"); // other tests' data may share this server
        Assert.True(host.UsedMemory > 0 && host.BytesReceived >= staged.StoredBytes && host.HitRate > 0);

        var version = Assert.Single(await tier.Catalog.ListAsync(), e => e.Name == "redis/status");
        Assert.Equal((staged.Version, true, 3600L, manifest.Segments.Count), (version.Version, version.Latest, version.LifetimeSeconds!.Value, version.Segments));
    }
}
