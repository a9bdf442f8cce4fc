using System.Text.Json;

namespace Hpc.CommonData.Report;

/// <summary>
/// Reads bench results and cluster telemetry (JSON lines, docs/benchmarks.md). Tolerant by design: an interrupted run
/// leaves a truncated last line, other tools may add fields or kinds; those lines are counted and skipped, never fatal.
/// </summary>
public static class ResultReader
{
    public sealed class Data
    {
        public List<BenchRecord> Records { get; } = [];
        /// <summary><c>bench codec</c> and <c>bench cache</c> measurements, shown as the verbs themselves show them.</summary>
        public List<CodecRecord> Codecs { get; } = [];
        public List<CacheRecord> Caches { get; } = [];
        public int Lines { get; set; }
        public int Unreadable { get; set; }
        public int UnknownKinds { get; set; }
        public List<string> Files { get; } = [];
    }

    /// <summary>A fetch record written by a node agent on a real cluster: one node's copy of one version.</summary>
    public sealed class FetchTelemetry
    {
        public DateTimeOffset Time { get; set; }
        public string Node { get; set; } = "";
        public string Dataset { get; set; } = "";
        public string Version { get; set; } = "";
        public long RawBytes { get; set; }
        public long StoredBytes { get; set; }
        public double Seconds { get; set; }
        public string? Source { get; set; }
        public int? Hosts { get; set; }
        public int? RateMbit { get; set; }
        public string? Job { get; set; }
    }

    public static Data Read(string path)
    {
        var data = new Data();
        var files = Directory.Exists(path) ? Directory.GetFiles(path, "*.jsonl").Order(StringComparer.Ordinal).ToArray()
            : File.Exists(path) ? [path] : throw new FileNotFoundException($"no results at {path}");
        var fetches = new List<FetchTelemetry>();
        foreach (var f in files)
        {
            data.Files.Add(f);
            using var reader = new StreamReader(new FileStream(f, FileMode.Open, FileAccess.Read, FileShare.ReadWrite));
            while (reader.ReadLine() is { } line) ReadLine(line, data, fetches);
        }
        data.Records.AddRange(FromTelemetry(fetches));
        return data;
    }

    public static Data ReadLines(IEnumerable<string> lines)
    {
        var data = new Data();
        var fetches = new List<FetchTelemetry>();
        foreach (var line in lines) ReadLine(line, data, fetches);
        data.Records.AddRange(FromTelemetry(fetches));
        return data;
    }

    private static void ReadLine(string line, Data data, List<FetchTelemetry> fetches)
    {
        if (string.IsNullOrWhiteSpace(line)) return;
        data.Lines++;
        try
        {
            using var doc = JsonDocument.Parse(line);
            var kind = doc.RootElement.ValueKind == JsonValueKind.Object && doc.RootElement.TryGetProperty("kind", out var k) && k.ValueKind == JsonValueKind.String ? k.GetString() : null;
            switch (kind)
            {
                case "cluster" or "calibration" or "skipped":
                    var r = doc.RootElement.Deserialize(ReportJson.Default.BenchRecord);
                    if (r is null || r.Config is null) { data.Unreadable++; return; }
                    r.Nodes ??= [];
                    data.Records.Add(r);
                    break;
                case "codec":
                    if (doc.RootElement.Deserialize(ReportJson.Default.CodecRecord) is { RawBytes: > 0 } codec) data.Codecs.Add(codec);
                    else data.Unreadable++;
                    break;
                case "cache":
                    if (doc.RootElement.Deserialize(ReportJson.Default.CacheRecord) is { Rps: > 0, Config: not null } cache) data.Caches.Add(cache);
                    else data.Unreadable++;
                    break;
                case "fetch":
                    if (doc.RootElement.Deserialize(ReportJson.Default.FetchTelemetry) is { Version.Length: > 0 } t) fetches.Add(t);
                    else data.Unreadable++;
                    break;
                default:
                    data.UnknownKinds++;
                    break;
            }
        }
        catch (JsonException) { data.Unreadable++; }
    }

    /// <summary>
    /// All fetches of one version make one run: it starts when the first node started and ends when the last finished,
    /// the same clock a bench run uses. The limit is known only when the telemetry carries hosts and link rate.
    /// </summary>
    private static IEnumerable<BenchRecord> FromTelemetry(List<FetchTelemetry> fetches)
    {
        foreach (var g in fetches.Where(f => f.Source != "local").GroupBy(f => (f.Version, f.Job)))
        {
            var start = g.Min(f => f.Time - TimeSpan.FromSeconds(f.Seconds));
            var first = g.First();
            var nodes = g.GroupBy(f => f.Node).Select(n => n.OrderBy(f => f.Time).Last())
                .Select(f => new NodeTime(f.Node, (f.Time - start).TotalSeconds, f.Seconds, f.RawBytes, f.Source)).ToList();
            var measured = nodes.Max(n => n.WallSeconds);
            var hosts = first.Hosts ?? 0;
            var rate = first.RateMbit ?? 0;
            var limit = hosts > 0 && rate > 0 ? Limits.DirectFetch(nodes.Count, hosts, first.StoredBytes, rate) : double.NaN;
            yield return new BenchRecord
            {
                Kind = "cluster", Run = $"telemetry {first.Dataset} {first.Version[..Math.Min(12, first.Version.Length)]}", Time = start, Note = "telemetry",
                Config = new RunConfig { Nodes = nodes.Count, Hosts = hosts, SizeBytes = first.RawBytes, RateMbit = rate, Compress = first.StoredBytes < first.RawBytes, Data = first.Dataset },
                Dataset = new DatasetInfo(first.Version, first.RawBytes, first.StoredBytes, 0, double.NaN),
                MeasuredSeconds = measured, LimitSeconds = limit, Efficiency = limit / measured, Nodes = nodes,
            };
        }
    }
}
