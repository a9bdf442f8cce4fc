using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;

namespace Hpc.Bench.Commands;

public sealed class BenchFetchOptions : IVerbOptions
{
    public static string Verb => "fetch";

    public static string Summary => "The node agent (its own process, warm, a real cache host on loopback) fetching a version, against the raw decode path (verify, decode, write) on the same data, cores and run.";

    [Switch("--size", "Bytes of each kind of data.")]
    public string Size { get; set; } = "256MB";

    [Switch("--data", "csv (market history, compressible), random (incompressible), or both.")]
    public string Data { get; set; } = "csv,random";

    [Switch("--repeat", "Measured runs of each (after one warm-up of each side); the table shows medians.")]
    public int Repeat { get; set; } = 3;

    [Switch("--agent-cores", "Give the agent and the decode baseline the same N cores (taskset) and the cache host the others; 0 = all share all.")]
    public int AgentCores { get; set; }

    [Switch("--codec", "The codec the data is staged with (lz4, zstd, zstd:LEVEL, none), for the agent and the baseline alike.")]
    public string Codec { get; set; } = "lz4";

    [Switch("--tier", "What the agent fetches from: cachehost (ours, one process) or redis-cluster (Debian's redis-server, 3 masters, slots learned by the client).")]
    public string Tier { get; set; } = "cachehost";

    [Switch("--load", "quiet (nothing else runs), loaded (2 CPU-bound loops and 2 processes writing and reading tmpfs files and loopback sockets run beside the agent and the baseline), or both.")]
    public string Load { get; set; } = "quiet,loaded";

    [Switch("--out", "Directory to append results.jsonl to (kind \"fetch\").")]
    public string? Out { get; set; }
}

public static class BenchFetchVerb
{
    public static async Task<int> RunAsync(BenchFetchOptions o, CancellationToken ct)
    {
        try
        {
            var kinds = o.Data.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Distinct().ToList();
            if (kinds.Count == 0 || kinds.Any(k => k is not ("csv" or "random"))) throw new FormatException($"--data '{o.Data}': use csv, random or csv,random");
            var loads = o.Load.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).Distinct().ToList();
            if (loads.Count == 0 || loads.Any(l => l is not (FetchBench.Quiet or FetchBench.Loaded)))
                throw new FormatException($"--load '{o.Load}': use {FetchBench.Quiet}, {FetchBench.Loaded} or {FetchBench.Quiet},{FetchBench.Loaded}");
            if (o.Repeat is < 1 or > 50) throw new FormatException("--repeat must be between 1 and 50");
            if (o.AgentCores < 0 || o.AgentCores > Environment.ProcessorCount)
                throw new FormatException($"--agent-cores must be between 0 and the {Environment.ProcessorCount} cores this process may use");
            if (!Hpc.CommonData.Format.SegmentCompression.TryParse(o.Codec, out var codec, out var codecError)) throw new FormatException($"--codec: {codecError}");
            if (o.Tier is not (FetchBench.OurHost or FetchBench.RedisCluster)) throw new FormatException($"--tier '{o.Tier}': use {FetchBench.OurHost} or {FetchBench.RedisCluster}");
            var size = ByteSize.Parse(o.Size);
            if (size < 1 << 20) throw new FormatException("--size must be at least 1MB");
            var work = Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"hpcdata-fetch-{Environment.ProcessId}");
            try
            {
                var records = await FetchBench.RunAsync(new FetchBench.Options(size, kinds, o.Repeat, o.Out, work, o.AgentCores, codec, o.Tier, loads), ct);
                Console.WriteLine(FetchBench.Table(records));
                return 0;
            }
            finally
            {
                try { Directory.Delete(work, recursive: true); } catch (DirectoryNotFoundException) { }
            }
        }
        catch (FormatException e)
        {
            Console.Error.WriteLine($"hpcdata bench fetch: {e.Message}");
            return 2;
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine("hpcdata bench fetch: interrupted; everything it started was stopped");
            return 130;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or TimeoutException or CommonDataException)
        {
            Console.Error.WriteLine($"hpcdata bench fetch: {e.Message}");
            return 1;
        }
    }
}
