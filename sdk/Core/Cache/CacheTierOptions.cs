namespace Hpc.CommonData.Cache;

/// <summary>How to reach the cache tier. Bound from configuration section "CacheTier" or from HPCDATA_* variables.</summary>
public sealed class CacheTierOptions
{
    /// <summary>Cache hosts, <c>host:port</c>. The order does not matter: placement is by rendezvous hashing.</summary>
    public List<string> Hosts { get; set; } = [];
    /// <summary>Copies of each segment (1 by default; 2 for high availability).</summary>
    public int Replicas { get; set; } = 1;
    public string? Password { get; set; }
    /// <summary>Connections kept per host; each carries one pipelined batch at a time.</summary>
    public int ConnectionsPerHost { get; set; } = 4;
    /// <summary>Keys per MGET / pipelined SET batch (16 × 64 KB ≈ 1 MB in flight per connection).</summary>
    public int BatchSize { get; set; } = 16;
    public TimeSpan ConnectTimeout { get; set; } = TimeSpan.FromSeconds(3);
    /// <summary>How long an exchange may go without receiving a byte before the host counts as unresponsive.</summary>
    public TimeSpan OperationTimeout { get; set; } = TimeSpan.FromSeconds(30);
    public int MaxAttempts { get; set; } = 5;
    public TimeSpan RetryBaseDelay { get; set; } = TimeSpan.FromMilliseconds(50);
    public TimeSpan RetryMaxDelay { get; set; } = TimeSpan.FromSeconds(2);

    public const string HostsVariable = "HPCDATA_CACHE_HOSTS";
    public const string PasswordVariable = "HPCDATA_CACHE_PASSWORD";
    public const string ReplicasVariable = "HPCDATA_CACHE_REPLICAS";

    /// <summary>Options from the documented environment variables (hosts default to 127.0.0.1:6380).</summary>
    public static CacheTierOptions FromEnvironment()
    {
        var hosts = Environment.GetEnvironmentVariable(HostsVariable);
        var o = new CacheTierOptions
        {
            Hosts = string.IsNullOrWhiteSpace(hosts) ? [$"127.0.0.1:{CacheEndpoint.DefaultPort}"] : CacheEndpoint.ParseList(hosts).Select(e => e.ToString()).ToList(),
            Password = Environment.GetEnvironmentVariable(PasswordVariable),
        };
        if (int.TryParse(Environment.GetEnvironmentVariable(ReplicasVariable), out var r) && r > 0) o.Replicas = r;
        return o;
    }
}
