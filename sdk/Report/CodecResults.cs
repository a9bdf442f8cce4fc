using System.Globalization;
using Hpc.CommonData;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.CommonData.Report;

/// <summary>One measured run of <c>hpcdata bench codec</c> (JSON line kind "codec").</summary>
public sealed record CodecRecord(
    string Kind, int Schema, DateTimeOffset Time, string Data, long RawBytes, long StoredBytes, int Cores, bool Pinned, int Hosts, int Run,
    double CodecSeconds, double CodecCpuSeconds, double StagerSeconds, double StagerProcessSeconds, double StagerCpuSeconds,
    double CacheHostCpuSeconds, MachineInfo Machine, string? Chunking = null, string? Stager = null, string? Codec = null);

/// <summary>The Markdown table of codec runs: the stager against the raw codec, medians with the runs' range.</summary>
public static class CodecResults
{
    public static string Table(IReadOnlyList<CodecRecord> records)
    {
        var inv = CultureInfo.InvariantCulture;
        var sb = new System.Text.StringBuilder();
        sb.AppendLine("| data | codec | size | segments | stored | cores | runs | raw codec MiB/s | stager MiB/s | stager / codec | codec CPU-s per GiB | stager CPU-s per GiB | cache hosts CPU-s per GiB |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        foreach (var g in records.GroupBy(r => (r.Data, Codec: r.Codec ?? "lz4", r.RawBytes, r.Cores, r.Pinned, Chunking: r.Chunking ?? "fixed", r.Stager)))
        {
            double Med(Func<CodecRecord, double> f) => Median(g.Select(f));
            var gb = g.Key.RawBytes / GiB;
            var codec = Med(r => MiBps(r.RawBytes, r.CodecSeconds));
            var stager = Med(r => MiBps(r.RawBytes, r.StagerSeconds));
            sb.AppendLine(inv, $"| {g.Key.Data}{(g.Key.Stager is { } label ? $" ({label}{(label == "baseline" ? " stager" : "")})" : "")} | {g.Key.Codec} | {ByteSize.Format(g.Key.RawBytes)} | {g.Key.Chunking} | {100.0 * g.First().StoredBytes / g.Key.RawBytes:0.0}% | " +
                               $"{CoresLabel(g.Key.Cores, g.Key.Pinned)} | {g.Count()} | " +
                               $"{codec:0} ({g.Min(r => MiBps(r.RawBytes, r.CodecSeconds)):0}–{g.Max(r => MiBps(r.RawBytes, r.CodecSeconds)):0}) | " +
                               $"{stager:0} ({g.Min(r => MiBps(r.RawBytes, r.StagerSeconds)):0}–{g.Max(r => MiBps(r.RawBytes, r.StagerSeconds)):0}) | " +
                               $"{100 * Med(r => r.CodecSeconds / r.StagerSeconds):0}% | {Med(r => r.CodecCpuSeconds) / gb:0.00} | {Med(r => r.StagerCpuSeconds) / gb:0.00} | {Med(r => r.CacheHostCpuSeconds) / gb:0.00} |");
        }
        if (records.Count > 0)
            sb.AppendLine().AppendLine("cores: \"all N shared\" = codec on N threads, and stager and cache hosts (loopback) sharing every core; " +
                "\"N pinned\" = codec on N threads, stager pinned to N cores, cache hosts to the others. " +
                "Rows \"to redis-server\": the same stager sending to redis-server in place of each cache host; the last column is then redis-server's. " +
                "Stager MiB/s from its own clock (process start excluded), its CPU seconds include start-up; medians with the runs' range.");
        return sb.ToString();
    }
}
