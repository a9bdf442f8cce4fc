using System.Globalization;
using System.Text.Json.Serialization;

namespace Hpc.CommonData.Cache;

/// <summary>
/// One cache host as its INFO describes it. Only fields that Redis and our host both report (plus our <c>hpc_*</c>
/// extras when present), so <c>hpcdata status --cache-hosts</c> reads a site's Redis or Valkey as well.
/// </summary>
public sealed record CacheHostStatus
{
    [JsonPropertyName("host")] public required string Host { get; init; }
    /// <summary>Why the host could not be read; the other fields are then zero.</summary>
    [JsonPropertyName("error")] public string? Error { get; init; }
    /// <summary>The class of <see cref="Error"/>: a host that refused the login is no unreachable host.</summary>
    [JsonIgnore] public ErrorCode ErrorKind { get; init; } = ErrorCode.Unavailable;
    /// <summary><c>hpc-cachehost VERSION</c>, or <c>redis VERSION</c> for anything else speaking INFO.</summary>
    [JsonPropertyName("server")] public string? Server { get; init; }
    [JsonPropertyName("uptimeSeconds")] public long UptimeSeconds { get; init; }
    [JsonPropertyName("usedMemory")] public long UsedMemory { get; init; }
    /// <summary>The budget; 0 when the host has none (a Redis without maxmemory).</summary>
    [JsonPropertyName("maxMemory")] public long MaxMemory { get; init; }
    [JsonPropertyName("keys")] public long Keys { get; init; }
    [JsonPropertyName("hits")] public long Hits { get; init; }
    [JsonPropertyName("misses")] public long Misses { get; init; }
    [JsonPropertyName("bytesReceived")] public long BytesReceived { get; init; }
    [JsonPropertyName("bytesSent")] public long BytesSent { get; init; }
    [JsonPropertyName("clients")] public long Clients { get; init; }
    /// <summary>Writes refused past the budget (our host's hpc_rejected_writes_oom); 0 for a Redis.</summary>
    [JsonPropertyName("refusedWrites")] public long RefusedWrites { get; init; }

    /// <summary>Hits over lookups; null before the first lookup.</summary>
    [JsonPropertyName("hitRate")] public double? HitRate => Hits + Misses == 0 ? null : (double)Hits / (Hits + Misses);

    /// <summary>Reads the fields out of an INFO reply (sections of <c>field:value</c> lines).</summary>
    public static CacheHostStatus FromInfo(string host, string info)
    {
        var fields = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var line in info.Split('\n'))
        {
            var l = line.TrimEnd('\r');
            var colon = l.IndexOf(':');
            if (colon > 0 && l[0] != '#') fields[l[..colon]] = l[(colon + 1)..];
        }
        long Long(string key) => fields.TryGetValue(key, out var v) && long.TryParse(v, NumberStyles.Integer, CultureInfo.InvariantCulture, out var n) ? n : 0;
        // db0:keys=12,expires=0,avg_ttl=0
        long keys = 0;
        if (fields.TryGetValue("db0", out var db0))
            foreach (var part in db0.Split(','))
                if (part.StartsWith("keys=", StringComparison.Ordinal)) long.TryParse(part.AsSpan(5), NumberStyles.Integer, CultureInfo.InvariantCulture, out keys);
        return new CacheHostStatus
        {
            Host = host,
            Server = fields.TryGetValue("hpc_cachehost_version", out var ours) ? $"hpc-cachehost {ours}"
                : fields.TryGetValue("redis_version", out var redis) ? $"redis {redis}" : null,
            UptimeSeconds = Long("uptime_in_seconds"),
            UsedMemory = Long("used_memory"),
            MaxMemory = Long("maxmemory"),
            Keys = keys,
            Hits = Long("keyspace_hits"),
            Misses = Long("keyspace_misses"),
            BytesReceived = Long("total_net_input_bytes"),
            BytesSent = Long("total_net_output_bytes"),
            Clients = Long("connected_clients"),
            RefusedWrites = Long("hpc_rejected_writes_oom"),
        };
    }
}

/// <summary>One dataset version on the cache tier, as <c>hpcdata list</c> shows it.</summary>
public sealed record CatalogEntry
{
    [JsonPropertyName("name")] public required string Name { get; init; }
    [JsonPropertyName("version")] public required string Version { get; init; }
    /// <summary>The version the dataset's "latest" pointer names.</summary>
    [JsonPropertyName("latest")] public bool Latest { get; init; }
    [JsonPropertyName("rawBytes")] public long RawBytes { get; init; }
    [JsonPropertyName("storedBytes")] public long StoredBytes { get; init; }
    [JsonPropertyName("segments")] public int Segments { get; init; }
    [JsonPropertyName("files")] public int Files { get; init; }
    [JsonPropertyName("created")] public DateTimeOffset Created { get; init; }
    /// <summary>The lifetime it was staged with (<c>--lifetime</c>); null: until removed, or for as long as jobs use it.</summary>
    [JsonPropertyName("lifetimeSeconds")] public long? LifetimeSeconds { get; init; }
    /// <summary>When the tier drops it (created + lifetime); null when it has no lifetime.</summary>
    [JsonPropertyName("expires")] public DateTimeOffset? Expires => LifetimeSeconds is { } s ? Created.AddSeconds(s) : null;
    /// <summary>Jobs that keep it (<c>--lifetime job</c>): it goes when the last one ends.</summary>
    [JsonPropertyName("jobs")] public IReadOnlyList<string> Jobs { get; init; } = [];
    /// <summary>How many hosts hold its manifest (every host should).</summary>
    [JsonPropertyName("hosts")] public int Hosts { get; init; }
    /// <summary>Why its manifest could not be read (damaged); the sizes are then unknown.</summary>
    [JsonPropertyName("problem")] public string? Problem { get; init; }
}

[JsonSerializable(typeof(CacheHostStatus[]))]
[JsonSerializable(typeof(CatalogEntry[]))]
[JsonSourceGenerationOptions(WriteIndented = false, DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
public sealed partial class CacheStatusJson : JsonSerializerContext;
