using System.Globalization;
using System.Runtime.InteropServices;
using System.Text;

namespace Hpc.CacheHost.Server;

/// <summary>
/// INFO in Redis's layout and field names, so existing dashboards and redis-cli read it; fields specific to this
/// host carry an hpc_ prefix. used_memory is the store's byte budget in use, the number the write limit applies to.
/// </summary>
internal static class InfoReport
{
    /// <summary>The Redis release whose RESP2 behaviour this host follows.</summary>
    public static ReadOnlySpan<byte> RedisCompatibleVersion => "7.0.0"u8;

    private static readonly string[] DefaultSections = ["server", "clients", "memory", "stats", "keyspace"];

    public static string Build(ServerContext server, IReadOnlyList<string> requested)
    {
        bool everything = requested.Count == 0
            || requested.Any(s => s.Equals("all", StringComparison.OrdinalIgnoreCase)
                || s.Equals("default", StringComparison.OrdinalIgnoreCase)
                || s.Equals("everything", StringComparison.OrdinalIgnoreCase));
        var text = new StringBuilder(1024);
        foreach (string section in DefaultSections)
        {
            if (!everything && !requested.Any(r => r.Equals(section, StringComparison.OrdinalIgnoreCase)))
                continue;
            if (text.Length > 0)
                text.Append("\r\n");
            AppendSection(text, section, server);
        }
        return text.ToString();
    }

    public static IReadOnlyList<KeyValuePair<string, string>> ConfigParameters(ServerContext server) =>
    [
        new("save", ""),
        new("appendonly", "no"),
        new("maxmemory", server.Store.MaxBytes.ToString(CultureInfo.InvariantCulture)),
        new("maxmemory-policy", "noeviction"),
        new("maxclients", server.Options.MaxClients.ToString(CultureInfo.InvariantCulture)),
        new("port", server.Port.ToString(CultureInfo.InvariantCulture)),
        new("bind", server.Options.Address),
        new("databases", "1"),
        // Redis's name for the idle limit, in seconds; it applies to logged-in connections, so an open host has none.
        new("timeout", (server.Users.Required ? (long)server.Options.IdleTimeout.TotalSeconds : 0).ToString(CultureInfo.InvariantCulture)),
        new("proto-max-bulk-len", server.Options.MaxFrameBytes.Bytes.ToString(CultureInfo.InvariantCulture)),
    ];

    private static void AppendSection(StringBuilder text, string section, ServerContext server)
    {
        var store = server.Store;
        var stats = server.Stats;
        var invariant = CultureInfo.InvariantCulture;
        switch (section)
        {
            case "server":
                long uptime = (long)server.Time.GetElapsedTime(server.StartTimestamp).TotalSeconds;
                text.Append("# Server\r\n")
                    .Append(invariant, $"redis_version:{Encoding.ASCII.GetString(RedisCompatibleVersion)}\r\n")
                    .Append(invariant, $"hpc_cachehost_version:{server.Version}\r\n")
                    .Append(invariant, $"{Publication.InfoField}:1\r\n")
                    .Append("redis_mode:standalone\r\n")
                    .Append(invariant, $"os:{RuntimeInformation.OSDescription} {RuntimeInformation.OSArchitecture}\r\n")
                    .Append(invariant, $"arch_bits:{IntPtr.Size * 8}\r\n")
                    .Append(invariant, $"runtime:{RuntimeInformation.FrameworkDescription}\r\n")
                    .Append(invariant, $"process_id:{Environment.ProcessId}\r\n")
                    .Append(invariant, $"tcp_port:{server.Port}\r\n")
                    .Append(invariant, $"uptime_in_seconds:{uptime}\r\n")
                    .Append(invariant, $"uptime_in_days:{uptime / 86400}\r\n");
                break;
            case "clients":
                text.Append("# Clients\r\n")
                    .Append(invariant, $"connected_clients:{stats.ConnectedClients}\r\n")
                    .Append(invariant, $"maxclients:{server.Options.MaxClients}\r\n")
                    .Append(invariant, $"hpc_maxclients_per_account:{server.Shares.PerAccount}\r\n")
                    .Append(invariant, $"hpc_writer_clients:{server.Shares.Writers}\r\n");
                break;
            case "memory":
                text.Append("# Memory\r\n")
                    .Append(invariant, $"used_memory:{store.UsedBytes}\r\n")
                    .Append(invariant, $"used_memory_human:{Human(store.UsedBytes)}\r\n")
                    .Append(invariant, $"hpc_frame_bytes:{store.FrameBytes}\r\n")
                    .Append(invariant, $"used_memory_rss:{Environment.WorkingSet}\r\n")
                    .Append(invariant, $"used_memory_rss_human:{Human(Environment.WorkingSet)}\r\n")
                    .Append(invariant, $"maxmemory:{store.MaxBytes}\r\n")
                    .Append(invariant, $"maxmemory_human:{Human(store.MaxBytes)}\r\n")
                    .Append("maxmemory_policy:noeviction\r\n")
                    .Append(invariant, $"hpc_entry_overhead_bytes:{Storage.CacheStore.EntryOverheadBytes}\r\n")
                    .Append(invariant, $"hpc_gc_heap_bytes:{GC.GetTotalMemory(forceFullCollection: false)}\r\n");
                break;
            case "stats":
                text.Append("# Stats\r\n")
                    .Append(invariant, $"total_connections_received:{stats.TotalConnections}\r\n")
                    .Append(invariant, $"total_commands_processed:{stats.CommandsProcessed}\r\n")
                    .Append(invariant, $"total_net_input_bytes:{stats.NetInputBytes}\r\n")
                    .Append(invariant, $"total_net_output_bytes:{stats.NetOutputBytes}\r\n")
                    .Append(invariant, $"rejected_connections:{stats.RejectedConnections}\r\n")
                    .Append(invariant, $"expired_keys:{store.ExpiredKeys}\r\n")
                    .Append("evicted_keys:0\r\n")
                    .Append(invariant, $"keyspace_hits:{store.Hits}\r\n")
                    .Append(invariant, $"keyspace_misses:{store.Misses}\r\n")
                    .Append(invariant, $"hpc_rejected_writes_oom:{store.RejectedWrites}\r\n");
                break;
            case "keyspace":
                text.Append("# Keyspace\r\n")
                    .Append(invariant, $"db0:keys={store.Count},expires={store.ExpiringCount},avg_ttl=0\r\n");
                break;
        }
    }

    private static string Human(long bytes)
    {
        string[] units = ["B", "K", "M", "G", "T"];
        double value = bytes;
        int unit = 0;
        while (value >= 1024 && unit < units.Length - 1)
        {
            value /= 1024;
            unit++;
        }
        return unit == 0 ? $"{bytes}B" : string.Create(CultureInfo.InvariantCulture, $"{value:0.00}{units[unit]}");
    }
}
