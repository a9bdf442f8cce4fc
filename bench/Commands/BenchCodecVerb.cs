using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.Bench;

namespace Hpc.Bench.Commands;

public sealed class BenchCodecOptions : IVerbOptions
{
    public static string Verb => "codec";

    public static string Summary => "The stager (its own process, real cache hosts on loopback) against the raw LZ4 + BLAKE3 codec on the same data, cores and run.";

    [Switch("--size", "Bytes of each kind of data.")]
    public string Size { get; set; } = "256MB";

    [Switch("--data", "csv (market history, compressible), random (incompressible), or both.")]
    public string Data { get; set; } = "csv,random";

    [Switch("--repeat", "Measured runs of each (after one codec warm-up); the table shows medians.")]
    public int Repeat { get; set; } = 3;

    [Switch("--cache-host-count", "Cache hosts the stager sends to (fresh ones every run).")]
    public int Hosts { get; set; } = 1;

    [Switch("--stager-cores", "Give the stager and the codec the same N cores (taskset) and the cache hosts the others; 0 = all share all.")]
    public int StagerCores { get; set; }

    [Switch("--codec", "The stager's codecs, comma-separated (lz4, zstd, zstd:LEVEL, none), each against its own raw codec pass.")]
    public string Codec { get; set; } = "lz4";

    [Switch("--chunking", "The stager's segment boundaries: content, fixed, or content,fixed (both in the same run, alternating).")]
    public string Chunking { get; set; } = "content";

    [Switch("--baseline-stager", "Folder of another stager build (Hpc.Stager.dll, or a native Hpc.Stager or hpcdata) to run as well in every run, alternating with this one, recorded as the baseline.")]
    public string? BaselineStager { get; set; }

    [Switch("--as-writer", "Also stage, in every run, to cache hosts with accounts as a writer account (the hosts then verify every segment a writer sends); recorded as stager \"as writer\".")]
    public bool AsWriter { get; set; }

    [Switch("--to-redis", "Also stage, in every run, to Debian's redis-server in place of each cache host (same cores), recorded as stager \"to redis-server\": what receiving the same segments costs the reference store.")]
    public bool ToRedis { get; set; }

    [Switch("--out", "Directory to append results.jsonl to (kind \"codec\").")]
    public string? Out { get; set; }
}

public static class BenchCodecVerb
{
    public static async Task<int> RunAsync(BenchCodecOptions o, CancellationToken ct)
    {
        try
        {
            return await RunCoreAsync(o, ct);
        }
        catch (FormatException e)
        {
            Console.Error.WriteLine($"hpcdata bench codec: {e.Message}");
            return 2;
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine("hpcdata bench codec: interrupted; everything it started was stopped");
            return 130;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or TimeoutException or FileNotFoundException)
        {
            Console.Error.WriteLine($"hpcdata bench codec: {e.Message}");
            return 1;
        }
    }

    private static async Task<int> RunCoreAsync(BenchCodecOptions o, CancellationToken ct)
    {
        var kinds = o.Data.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Distinct().ToList();
        if (kinds.Count == 0 || kinds.Any(k => k is not ("csv" or "random"))) throw new FormatException($"--data '{o.Data}': use csv, random or csv,random");
        if (o.Repeat is < 1 or > 50) throw new FormatException("--repeat must be between 1 and 50");
        if (o.Hosts is < 1 or > 16) throw new FormatException("--cache-host-count must be between 1 and 16");
        if (o.StagerCores < 0 || o.StagerCores > Environment.ProcessorCount)
            throw new FormatException($"--stager-cores must be between 0 and the {Environment.ProcessorCount} cores this process may use");
        var size = ByteSize.Parse(o.Size);
        if (size < 1 << 20) throw new FormatException("--size must be at least 1MB");
        var work = Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"hpcdata-codec-{Environment.ProcessId}");
        try
        {
            var chunkings = o.Chunking.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Distinct().ToList();
            if (chunkings.Count == 0 || chunkings.Any(c => c is not ("content" or "fixed")))
            {
                Console.Error.WriteLine("hpcdata bench codec: --chunking must be content, fixed or content,fixed");
                return 2;
            }
            // The stager's assembly, its own native build, or a native hpcdata (which has the stager in it).
            if (o.BaselineStager is { } b && !new[] { "Hpc.Stager.dll", "Hpc.Stager", "Hpc.Stager.exe", "hpcdata", "hpcdata.exe" }.Any(f => File.Exists(Path.Combine(b, f))))
                throw new FormatException($"--baseline-stager '{b}': no Hpc.Stager.dll, no native Hpc.Stager and no native hpcdata there");
            var baseline = o.BaselineStager is null ? null : Path.GetFullPath(o.BaselineStager);
            if (o.ToRedis && CacheBenchTools.RedisServer() is { Path: null } redis) throw new FormatException($"--to-redis: redis-server {redis.Missing}");
            var codecs = new List<Hpc.CommonData.Format.SegmentCompression>();
            foreach (var name in o.Codec.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Distinct())
            {
                if (!Hpc.CommonData.Format.SegmentCompression.TryParse(name, out var c, out var error))
                {
                    Console.Error.WriteLine($"hpcdata bench codec: --codec: {error}");
                    return 2;
                }
                codecs.Add(c);
            }
            var records = await CodecBench.RunAsync(new CodecBench.Options(size, kinds, o.Repeat, o.Hosts, o.Out, work, o.StagerCores, chunkings, baseline, o.AsWriter, codecs, o.ToRedis), ct);
            Console.WriteLine(CodecResults.Table(records));
            return 0;
        }
        finally
        {
            try { Directory.Delete(work, recursive: true); } catch (DirectoryNotFoundException) { }
        }
    }
}
