using System.Globalization;
using System.Text;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.CommonData.Report;

/// <summary>The settings of one <c>bench cache</c> measurement; <see cref="Commands"/> is what was sent.</summary>
public sealed record CacheConfig(int Requests, int Commands, int Clients, int Pipeline, int Keys, int ValueBytes, int KeysPerCommand);

/// <summary>
/// One measurement of <c>hpcdata bench cache</c> (JSON line kind "cache"): one store × client × command × round. CPU
/// seconds cover the whole measurement call (<see cref="CpuWindowSeconds"/>); machine CPU is every core's busy time,
/// so machine − server − client is what everything else on the machine used meanwhile.
/// </summary>
public sealed record CacheRecord(
    string Kind, int Schema, string Run, DateTimeOffset Time, string Server, string? ServerVersion, string Client, string Op, int Round,
    CacheConfig Config, double Seconds, double Rps, double MegabytesPerSecond, double AvgMs, double P50Ms, double P99Ms,
    double ServerCpuSeconds, double ClientCpuSeconds, double MachineCpuSeconds, double CpuWindowSeconds, double? ClientAllocatedBytesPerCommand,
    MachineInfo Machine)
{
    /// <summary>
    /// <see cref="MegabytesPerSecond"/> (recorded in 10^6 bytes per second, as every recorded run has it) in mebibytes
    /// per second, as the tables and the progress lines show rates.
    /// </summary>
    [System.Text.Json.Serialization.JsonIgnore] public double MebibytesPerSecond => MegabytesPerSecond * 1e6 / Stats.MiB;
}

/// <summary>The Markdown table of cache-store measurements: each store and client, medians over rounds.</summary>
public static class CacheResults
{
    /// <summary>Store names as the records carry them; a store reached over TLS has <see cref="TlsSuffix"/> appended.</summary>
    public const string CacheHost = "cachehost", Redis = "redis-server", Garnet = "garnet-server", TlsSuffix = "+tls";

    public static string Table(IReadOnlyList<CacheRecord> records, IReadOnlyList<string> notes)
    {
        var inv = CultureInfo.InvariantCulture;
        var sb = new StringBuilder();
        sb.AppendLine("| store | client | command | req/s | MiB/s | p50 ms | p99 ms | × redis-server (same client, same transport) | CPU cores: store / client / rest of machine |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|");
        var serverOrder = records.Select(r => r.Server).Distinct().ToList();
        var clientOrder = records.Select(r => r.Client).Distinct().ToList();
        var groups = records.GroupBy(r => (r.Server, r.Client, r.Op))
            .OrderBy(g => serverOrder.IndexOf(g.Key.Server)).ThenBy(g => clientOrder.IndexOf(g.Key.Client)).ThenBy(g => g.Key.Op == "GET" ? 0 : 1);
        foreach (var g in groups)
        {
            var first = g.First();
            string Spread(Func<CacheRecord, double> f, string format)
            {
                var v = g.Select(f).ToList();
                var median = Median(v).ToString(format, inv);
                return v.Count == 1 ? median : $"{median} ({v.Min().ToString(format, inv)}–{v.Max().ToString(format, inv)})";
            }
            var ratios = g.Select(r => records.FirstOrDefault(b => b.Server == CacheResults.Redis + (r.Server.EndsWith(CacheResults.TlsSuffix, StringComparison.Ordinal) ? CacheResults.TlsSuffix : "") && b.Client == r.Client && b.Op == r.Op && b.Round == r.Round))
                .Zip(g, (b, r) => b is null ? double.NaN : r.Rps / b.Rps).Where(x => !double.IsNaN(x)).ToList();
            var ratio = ratios.Count == 0 ? "–"
                : ratios.Count == 1 ? $"{ratios[0].ToString("0.00", inv)}×"
                : $"{Median(ratios).ToString("0.00", inv)}× ({ratios.Min().ToString("0.00", inv)}–{ratios.Max().ToString("0.00", inv)})";
            var store = Median(g.Select(r => r.ServerCpuSeconds / r.CpuWindowSeconds));
            var client = Median(g.Select(r => r.ClientCpuSeconds / r.CpuWindowSeconds));
            var rest = Median(g.Select(r => Math.Max(0, r.MachineCpuSeconds - r.ServerCpuSeconds - r.ClientCpuSeconds) / r.CpuWindowSeconds));
            var command = first.Op == "GET" ? "GET" : $"MGET ({first.Config.KeysPerCommand} keys)";
            sb.AppendLine(inv, $"| {first.Server}{(first.ServerVersion is null ? "" : " " + first.ServerVersion)} | {first.Client} | {command} | " +
                               $"{Spread(r => r.Rps, "0")} | {Median(g.Select(r => r.MebibytesPerSecond)).ToString("0", inv)} | " +
                               $"{Spread(r => r.P50Ms, "0.000")} | {Spread(r => r.P99Ms, "0.000")} | {ratio} | " +
                               $"{store.ToString("0.00", inv)} / {client.ToString("0.00", inv)} / {rest.ToString("0.00", inv)} |");
        }
        var any = records.FirstOrDefault();
        if (any is not null)
        {
            var c = any.Config;
            var get = records.First(r => r.Op == "GET").Config.Commands;
            var mget = records.FirstOrDefault(r => r.Op == "MGET")?.Config.Commands ?? 0;
            sb.AppendLine().AppendLine(inv,
                $"{records.Select(r => r.Round).Distinct().Count()} round(s), medians with the rounds' range. {c.ValueBytes / 1024} KB values, {c.Keys} keys drawn uniformly, " +
                $"{c.Clients} connections, pipeline {c.Pipeline}; {get} GET and {mget} MGET commands per measurement (the same bytes). " +
                $"Loopback on {any.Machine.Cores} cores, {any.Machine.Runtime}, kernel {any.Machine.Kernel}.");
        }
        var secured = records.Where(r => r.Server.EndsWith(CacheResults.TlsSuffix, StringComparison.Ordinal)).ToList();
        if (secured.Count > 0)
        {
            sb.AppendLine().AppendLine("TLS against plain TCP, the same store, client and command in the same round (median of the rounds' req/s ratios):");
            foreach (var g in secured.GroupBy(r => (r.Server, r.Client, r.Op)))
            {
                var plain = g.Key.Server[..^CacheResults.TlsSuffix.Length];
                var ratios = g.Select(r => (r, b: records.FirstOrDefault(b => b.Server == plain && b.Client == r.Client && b.Op == r.Op && b.Round == r.Round)))
                    .Where(x => x.b is not null).Select(x => x.r.Rps / x.b!.Rps).ToList();
                if (ratios.Count > 0)
                    sb.AppendLine(inv, $"- {plain} {g.Key.Client} {g.Key.Op}: {Median(ratios):0.00}× ({ratios.Min():0.00}–{ratios.Max():0.00})");
            }
        }
        foreach (var n in notes) sb.AppendLine().AppendLine("Not measured: " + n);
        return sb.ToString();
    }
}
