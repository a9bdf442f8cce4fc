using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Local;
using Stats = Hpc.CommonData.Report.Stats;

namespace Hpc.Bench;

/// <summary>
/// A dataset and its next version, as such data changes (<c>hpcdata generate --data history|history-files</c>), staged
/// and fetched by one node on loopback with content-defined and with fixed-size segments in the same run: what the
/// update moves to the cache tier and to the node, against the least a content-defined scheme can move and against the
/// whole version, and how long it takes against a full staging and a full fetch. Also the chunker alone and the
/// stager's first staging with each chunking.
/// </summary>
public static class UpdateBench
{
    public sealed record Options(long Size, IReadOnlyList<string> Kinds, string WorkDir, int Instruments);

    /// <summary>One kind × chunking. Raw bytes unless named stored.</summary>
    public sealed record Row(string Kind, string Chunking, long RawBytes, long StoredBytes, double FirstStageSeconds, double FullFetchSeconds,
        int Segments, int NewSegments, long NewRawBytes, long SentStoredBytes, double UpdateStageSeconds, long NodeFetchedStoredBytes, long NodeReusedBytes,
        double NodeUpdateSeconds, long ChangedBytes, int EditPlaces, double ChunkerMebibytesPerSecond);

    public static async Task<List<Row>> RunAsync(Options o, CancellationToken ct)
    {
        var rows = new List<Row>();
        foreach (var kind in o.Kinds)
        {
            var v0 = Path.Combine(o.WorkDir, $"{kind}-v0");
            var v1 = Path.Combine(o.WorkDir, $"{kind}-v1");
            Log($"generating {kind} versions 0 and 1 ({ByteSize.Format(o.Size)})");
            Generate(kind, v0, o.Size, 0, o.Instruments);
            Generate(kind, v1, o.Size, 1, o.Instruments);
            var (changed, places) = Edits(kind, v0, v1, o.Instruments);
            var chunker = ChunkerSpeed(v0);
            foreach (var chunking in new[] { "content", "fixed" })
            {
                rows.Add(await RunOneAsync(kind, chunking, v0, v1, changed, places, chunker, o, ct));
                Delete(Path.Combine(o.WorkDir, $"agent-{chunking}"));
            }
            Delete(v0);
            Delete(v1);
        }
        return rows;
    }

    private static async Task<Row> RunOneAsync(string kind, string chunking, string v0, string v1, long changed, int places, double chunker, Options o,
        CancellationToken ct)
    {
        var raw = Size(v1);
        await using var host = ComponentProcess.Start(new CacheHostOptions { Address = "127.0.0.1", Port = 0, MaxMemoryBytes = Math.Max(1L << 30, raw * 3) }, name: "cachehost");
        var endpoint = await host.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
        var tierOptions = new CacheTierOptions { Hosts = [endpoint] };
        var pipe = $"hcdupd{Environment.ProcessId}{chunking}";
        var dataDir = Path.Combine(o.WorkDir, $"agent-{chunking}");
        await using var agent = ComponentProcess.Start(new NodeAgentOptions { Pipe = pipe, DataDirectory = dataDir, Budget = raw * 4, CacheTier = tierOptions }, name: "agent");
        await agent.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
        await using var client = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(10), ct);
        await using var tier = new CacheTierClient(tierOptions);
        var name = $"bench/{kind}";

        Log($"  {kind} {chunking}: staging version 0");
        var (first, firstSeconds) = await StageAsync(v0, name, chunking, endpoint, ct);
        var fetch = Stopwatch.StartNew();
        await client.PrefetchAsync(name, first.Version, pin: null, ct);
        var fullFetch = fetch.Elapsed.TotalSeconds;

        Log($"  {kind} {chunking}: staging version 1");
        var (second, updateSeconds) = await StageAsync(v1, name, chunking, endpoint, ct);
        var (_, m0) = await tier.ResolveAsync(name, first.Version, ct);
        var (_, m1) = await tier.ResolveAsync(name, second.Version, ct);
        var old = m0.SegmentIds.ToHashSet();
        var newRaw = Enumerable.Range(0, m1.Segments.Count).Where(i => !old.Contains(m1.SegmentIds[i])).Sum(i => (long)m1.Segments[i].RawLength);

        var before = await OutputBytesAsync(tier, ct);
        fetch.Restart();
        var update = await client.PrefetchAsync(name, second.Version, pin: null, ct);
        var nodeSeconds = fetch.Elapsed.TotalSeconds;
        var fetched = await OutputBytesAsync(tier, ct) - before;
        return new Row(kind, chunking, raw, second.StoredBytes, firstSeconds, fullFetch, second.Segments, second.Segments - second.SkippedSegments, newRaw,
            second.SentBytes, updateSeconds, fetched, update.ReusedBytes, nodeSeconds, changed, places, chunker);
    }

    private static async Task<(StageResult Result, double Seconds)> StageAsync(string path, string name, string chunking, string endpoint, CancellationToken ct)
    {
        var clock = Stopwatch.StartNew();
        await using var stager = ComponentProcess.Start(new StagerOptions
        {
            Path = path, Name = name, Chunking = chunking, Json = true, CacheTier = { Hosts = [endpoint] },
        }, name: "stager");
        if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(30), ct) != 0) throw new InvalidOperationException($"staging {path} failed:\n{stager.StandardErrorTail}");
        var seconds = clock.Elapsed.TotalSeconds;
        return (JsonSerializer.Deserialize(stager.StandardOutput.Last(), ContractJson.Default.StageResult)!, seconds);
    }

    private static async Task<long> OutputBytesAsync(CacheTierClient tier, CancellationToken ct)
    {
        var reply = await tier.ExecuteOnAsync(0, "INFO"u8.ToArray(), ["stats"], ct);
        var text = reply.Bulk is null ? "" : Encoding.UTF8.GetString(reply.Bulk);
        var line = text.Split("\r\n").First(l => l.StartsWith("total_net_output_bytes:", StringComparison.Ordinal));
        return long.Parse(line[(line.IndexOf(':') + 1)..], CultureInfo.InvariantCulture);
    }

    private static void Generate(string kind, string path, long size, int version, int instruments)
    {
        if (kind == "history") MarketHistory.GenerateByInstrument(path, size, version, instruments);
        else MarketHistory.GenerateInstrumentFiles(path, size, version, instruments);
    }

    /// <summary>
    /// What changed and in how many places, read from the two versions: for the single file, the bytes outside the
    /// common prefix and suffix of each instrument's rows; for the directory, the bytes of files that differ (a
    /// replaced file counts whole, an appended one its new row). A place is an instrument (or file) that changed.
    /// </summary>
    private static (long ChangedBytes, int Places) Edits(string kind, string v0, string v1, int instruments)
    {
        if (kind == "history-files")
        {
            long bytes = 0;
            var places = 0;
            foreach (var file in Directory.EnumerateFiles(v1))
            {
                var a = File.ReadAllBytes(Path.Combine(v0, Path.GetFileName(file)));
                var b = File.ReadAllBytes(file);
                var diff = Difference(a, b);
                if (diff > 0) { bytes += diff; places++; }
            }
            return (bytes, places);
        }
        var rowsA = GroupByInstrument(File.ReadAllBytes(v0));
        var rowsB = GroupByInstrument(File.ReadAllBytes(v1));
        long changed = 0;
        var edited = 0;
        foreach (var (instrument, b) in rowsB)
        {
            var diff = Difference(rowsA.GetValueOrDefault(instrument, []), b);
            if (diff > 0) { changed += diff; edited++; }
        }
        // A revised close inside an instrument's rows is a second place besides its new day at the end.
        var revisions = rowsB.Count(kv => rowsA.TryGetValue(kv.Key, out var a) && Prefix(a, kv.Value) < a.Length - 40);
        return (changed, edited + revisions);
    }

    /// <summary>Bytes of <paramref name="b"/> outside its common prefix and suffix with <paramref name="a"/>.</summary>
    private static long Difference(byte[] a, byte[] b)
    {
        var prefix = Prefix(a, b);
        var suffix = 0;
        while (suffix < a.Length - prefix && suffix < b.Length - prefix && a[^(suffix + 1)] == b[^(suffix + 1)]) suffix++;
        return b.Length - prefix - suffix;
    }

    private static int Prefix(byte[] a, byte[] b) => a.AsSpan().CommonPrefixLength(b);

    private static Dictionary<int, byte[]> GroupByInstrument(byte[] file)
    {
        var groups = new Dictionary<int, List<byte>>();
        var text = file.AsSpan();
        var start = text.IndexOf((byte)'\n') + 1;
        while (start < text.Length)
        {
            var end = text[start..].IndexOf((byte)'\n');
            var row = text.Slice(start, end < 0 ? text.Length - start : end + 1);
            var instrument = int.Parse(row.Slice(15, 5), CultureInfo.InvariantCulture);
            if (!groups.TryGetValue(instrument, out var list)) groups[instrument] = list = [];
            list.AddRange(row.ToArray());
            start += row.Length;
        }
        return groups.ToDictionary(kv => kv.Key, kv => kv.Value.ToArray());
    }

    /// <summary>MiB/s of the content-defined chunker alone over the first version, in memory (best of three passes).</summary>
    private static double ChunkerSpeed(string path)
    {
        var files = Directory.Exists(path) ? Directory.EnumerateFiles(path).Order(StringComparer.Ordinal).ToList() : [path];
        var data = files.SelectMany(File.ReadAllBytes).ToArray();
        var best = double.MaxValue;
        for (var pass = 0; pass < 3; pass++)
        {
            var clock = Stopwatch.StartNew();
            var rest = data.AsSpan();
            while (!rest.IsEmpty) rest = rest[ContentChunker.Default.NextCut(rest, final: true)..];
            best = Math.Min(best, clock.Elapsed.TotalSeconds);
        }
        return data.Length / Stats.MiB / best;
    }

    private static long Size(string path) =>
        Directory.Exists(path) ? Directory.EnumerateFiles(path, "*", SearchOption.AllDirectories).Sum(f => new FileInfo(f).Length) : new FileInfo(path).Length;

    private static void Delete(string path)
    {
        if (Directory.Exists(path)) Directory.Delete(path, recursive: true);
        else File.Delete(path);
    }

    public static string Table(IReadOnlyList<Row> rows)
    {
        var inv = CultureInfo.InvariantCulture;
        string Mib(long b) => (b / Stats.MiB).ToString("0.0", inv);
        string F(double v) => v.ToString("0.00", inv);
        var sb = new StringBuilder();
        sb.AppendLine("| data | chunking | version raw MiB | changed MiB in places | least a content-defined scheme moves, MiB | new segments, raw MiB (× least, share of version) | stager sent MiB stored | node fetched MiB stored (reused MiB) | stage update s (full s) | node update s (full fetch s) | stager first-staging MiB/s |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|");
        foreach (var r in rows)
        {
            // Changed bytes plus about one average segment per edited place, never more than the version.
            var least = Math.Min(r.RawBytes, r.ChangedBytes + (long)r.EditPlaces * ContentChunker.AverageSize);
            sb.AppendLine(inv, $"| {r.Kind} | {r.Chunking} | {Mib(r.RawBytes)} | {Mib(r.ChangedBytes)} in {r.EditPlaces} | {Mib(least)} | " +
                               $"{Mib(r.NewRawBytes)} ({F((double)r.NewRawBytes / least)}×, {(double)r.NewRawBytes / r.RawBytes:P1}) | {Mib(r.SentStoredBytes)} | " +
                               $"{Mib(r.NodeFetchedStoredBytes)} ({Mib(r.NodeReusedBytes)}) | {F(r.UpdateStageSeconds)} ({F(r.FirstStageSeconds)}) | " +
                               $"{F(r.NodeUpdateSeconds)} ({F(r.FullFetchSeconds)}) | {Stats.MiBps(r.RawBytes, r.FirstStageSeconds).ToString("0", inv)} |");
        }
        var chunkers = rows.GroupBy(r => r.Kind).Select(g => $"{g.Key} {g.First().ChunkerMebibytesPerSecond.ToString("0", inv)} MiB/s");
        sb.AppendLine().AppendLine($"Content-defined chunker alone (in memory, best of 3): {string.Join(", ", chunkers)}.");
        sb.AppendLine().AppendLine(EditCost());
        sb.AppendLine().AppendLine(ManifestCost(10L << 30));
        return sb.ToString();
    }

    /// <summary>
    /// What one insert or delete of a given size costs a re-stage with content-defined segments, on random data (where
    /// no row structure helps the boundaries): the new segments' bytes, from the segment the edit falls in until the
    /// boundaries fall back where they fell before, averaged over places spread at random.
    /// </summary>
    public static string EditCost(int places = 200)
    {
        var data = new byte[64 << 20];
        new Random(5).NextBytes(data);
        var cuts = new List<long> { 0 };
        for (long at = 0; at < data.Length;) cuts.Add(at += ContentChunker.Default.NextCut(data.AsSpan((int)at), final: true));
        var boundaries = cuts.ToHashSet();
        var rng = new Random(9);
        var window = new byte[6 << 20];
        var sb = new StringBuilder(string.Create(CultureInfo.InvariantCulture,
            $"One edit of random data (64 MiB, segments averaging {data.Length / (cuts.Count - 1.0) / 1024:0.0} KiB; {places} places per size), new segments per edit, KiB:"));
        foreach (var edit in new[] { 1, 64, 1024, 4096, 16384, -1, -64, -1024, -4096, -16384 })
        {
            long moved = 0;
            for (var t = 0; t < places; t++)
            {
                var pos = rng.Next(1 << 20, data.Length - (8 << 20));
                var k = cuts.BinarySearch(pos);
                var start = (int)cuts[k < 0 ? ~k - 1 : k];
                // The data after the edit, from the boundary before it: the bytes up to the edit, the inserted bytes or
                // the gap of the deleted ones, then the old bytes.
                var n = pos - start;
                data.AsSpan(start, n).CopyTo(window);
                if (edit > 0) rng.NextBytes(window.AsSpan(n, edit));
                var tail = edit > 0 ? pos : pos - edit;
                var length = n + Math.Max(edit, 0) + (4 << 20);
                data.AsSpan(tail, length - n - Math.Max(edit, 0)).CopyTo(window.AsSpan(n + Math.Max(edit, 0)));
                for (var at = 0; at < length;)
                {
                    var cut = ContentChunker.Default.NextCut(window.AsSpan(at, length - at), final: false);
                    if (cut == 0) throw new InvalidOperationException("boundaries did not fall back in step within 4 MiB");
                    at += cut;
                    moved += cut;
                    // Past the edit, a cut at an old boundary (in the old data's offsets) puts every later one in step.
                    if (at > n + Math.Max(edit, 0) && boundaries.Contains(start + (long)at - edit)) break;
                }
            }
            sb.Append(CultureInfo.InvariantCulture, $" {(edit > 0 ? "insert" : "delete")} {ByteSize.Format(Math.Abs(edit))} {moved / (double)places / 1024:0};");
        }
        sb.Length--;
        return sb.Append('.').ToString();
    }

    /// <summary>What a manifest of a <paramref name="size"/> dataset in 64 KB segments costs in each encoding: bytes, and parsing (best of 3).</summary>
    public static string ManifestCost(long size)
    {
        var count = (int)(size / ContentChunker.AverageSize);
        var rng = new Random(5);
        var segments = new ManifestSegment[count];
        var id = new byte[SegmentId.ByteLength];
        for (var i = 0; i < count; i++)
        {
            rng.NextBytes(id);
            segments[i] = new ManifestSegment(SegmentId.FromBytes(id).ToString(), ContentChunker.AverageSize, 30_000 + i % 9000);
        }
        var m = new Manifest
        {
            Name = "bench/manifest", Hash = new string('a', 32), Segments = segments, RawLength = (long)count * ContentChunker.AverageSize,
            StoredLength = segments.Sum(s => (long)s.StoredLength), Chunking = ContentChunker.Name, Created = DateTimeOffset.UtcNow,
        };
        var (json, binary) = (m.SerializeJson(), m.Serialize());
        double Parse(byte[] bytes)
        {
            var best = double.MaxValue;
            for (var pass = 0; pass < 3; pass++)
            {
                var clock = Stopwatch.StartNew();
                _ = Manifest.Parse(bytes).Offsets[^1];
                best = Math.Min(best, clock.Elapsed.TotalMilliseconds);
            }
            return best;
        }
        var inv = CultureInfo.InvariantCulture;
        var gb = size / (double)(1L << 30);
        return string.Create(inv, $"Manifest of a {ByteSize.Format(size)} dataset ({count:N0} segments): JSON {ByteSize.Format(json.Length)} ({json.Length / Stats.MiB / gb:0.00} MiB per GiB), " +
                                  $"parsed in {Parse(json):0} ms; binary {ByteSize.Format(binary.Length)} ({binary.Length / Stats.MiB / gb:0.00} MiB per GiB), parsed in {Parse(binary):0} ms. " +
                                  $"A manifest is stored as one segment (at most {ByteSize.Format(SegmentCodec.MaxRawLength)}): JSON reaches {SegmentCodec.MaxRawLength / (json.Length / gb) :0} GiB, binary {SegmentCodec.MaxRawLength / (binary.Length / gb):0} GiB.");
    }

    private static void Log(string line) => Console.Error.WriteLine(line);
}
