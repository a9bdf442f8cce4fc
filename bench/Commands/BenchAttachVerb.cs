using System.Globalization;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.Bench;

namespace Hpc.Bench.Commands;

public sealed class BenchAttachOptions : IVerbOptions
{
    public static string Verb => "attach";

    public static string Summary => "One node on this machine (cache host and node agent on loopback): K workers started together get the node's copy, mapped or streamed; the reference's core-allocation table.";

    [Switch("--sizes", "Dataset sizes (market-history CSV).")]
    public string Sizes { get; set; } = "16MB,64MB,256MB,1GB";

    [Switch("--workers", "Worker processes started together (K), one cell each.")]
    public string Workers { get; set; } = "1,2,4,8";

    [Switch("--modes", "map (the agent's shared copy, memory-mapped), stream (a private copy over the pipe), or both.")]
    public string Modes { get; set; } = "map,stream";

    [Switch("--repeat", "Runs of every cell; the table shows the median of each run's slowest worker.")]
    public int Repeat { get; set; } = 3;

    [Switch("--out", "Directory to append results.jsonl to (one line per size, K, mode and run).", Required = true)]
    public string Out { get; set; } = "";

    [Switch("--work-dir", "Scratch directory for the data and the agent's copies (default: under /dev/shm); must not exist yet, removed afterwards.")]
    public string? WorkDir { get; set; }

    [Switch("--fresh", "Time from launching the K worker processes, their start-up included (split into start-up, open and first touch), " +
                                "instead of from a common go once they have started.")]
    public bool Fresh { get; set; }

    [Switch("--touch", "Map workers' first touch: first (the first byte) or all (a byte of every page of the mapping).")]
    public string Touch { get; set; } = "first";

    [Switch("--verify", "Map workers also re-hash the whole mapping (hpcdata worker --verify), as every worker did before the agent's verification was trusted.")]
    public bool Verify { get; set; }

    [Switch("--worker", "The worker program, started as PROGRAM worker …: hpcdata, or a service with the same worker " +
                                                    "command line, e.g. Hpc.Samples.Native (the sample worker compiled to native code; found through HPCDATA_BIN).")]
    public string Worker { get; set; } = "hpcdata";

    [Switch("--time-limit", "Cells that would start after this are not run and are written as skipped lines.")]
    public string TimeLimit { get; set; } = "90m";
}

public static class BenchAttachVerb
{
    public static async Task<int> RunAsync(BenchAttachOptions o, CancellationToken ct)
    {
        AttachBench.Options options;
        try
        {
            options = Parse(o);
        }
        catch (FormatException e)
        {
            Console.Error.WriteLine($"hpcdata bench attach: {e.Message}");
            return 2;
        }
        // Only a directory this run created is deleted afterwards.
        var created = false;
        try
        {
            if (Directory.Exists(options.WorkDir) && Directory.EnumerateFileSystemEntries(options.WorkDir).Any())
            {
                Console.Error.WriteLine($"hpcdata bench attach: --work-dir {options.WorkDir} exists and is not empty; give a new directory (it is removed afterwards)");
                return 2;
            }
            created = true;
            Directory.CreateDirectory(options.WorkDir);
            var outcome = await AttachBench.RunAsync(options, ct);
            Console.WriteLine(AttachBench.Table(outcome.Records, options.Repeat));
            return outcome.Failures == 0 ? 0 : 1;
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine("hpcdata bench attach: interrupted; everything it started was stopped and removed");
            return 130;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or TimeoutException or InvalidDataException or UnauthorizedAccessException
                                       or CommonDataException)
        {
            Console.Error.WriteLine($"hpcdata bench attach: {e.Message}");
            return 1;
        }
        finally
        {
            if (created)
                try { Directory.Delete(options.WorkDir, recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
        }
    }

    private static AttachBench.Options Parse(BenchAttachOptions o)
    {
        static List<string> Items(string text, string option)
        {
            var items = text.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList();
            return items.Count > 0 ? items : throw new FormatException($"--{option} is empty");
        }
        var sizes = Items(o.Sizes, "sizes").Select(s =>
        {
            long v;
            try { v = ByteSize.Parse(s); }
            catch (FormatException) { throw new FormatException($"--sizes: '{s}' is not a size (examples: 1MB, 256MB, 1GB)"); }
            return v is >= 64 << 10 and <= 64L << 30 ? v : throw new FormatException($"--sizes: '{s}' is outside 64KB…64GB");
        }).Distinct().Order().ToList();
        var workers = Items(o.Workers, "workers").Select(w =>
            int.TryParse(w, NumberStyles.None, CultureInfo.InvariantCulture, out var k) && k is >= 1 and <= 64 ? k
                : throw new FormatException($"--workers: '{w}' is not a worker count from 1 to 64")).Distinct().Order().ToList();
        var modes = Items(o.Modes, "modes").Select(m => m.ToLowerInvariant() is "map" or "stream" ? m.ToLowerInvariant()
            : throw new FormatException($"--modes: '{m}' is not map or stream")).Distinct().OrderBy(m => m == "stream").ToList();
        if (o.Repeat is < 1 or > 100) throw new FormatException($"--repeat {o.Repeat}: must be from 1 to 100");
        if (string.IsNullOrWhiteSpace(o.Out)) throw new FormatException("--out is empty");
        TimeSpan limit;
        try { limit = Durations.Parse(o.TimeLimit); }
        catch (FormatException e) { throw new FormatException($"--time-limit: {e.Message}"); }
        var work = o.WorkDir ?? Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"hpcdata-attach-{Environment.ProcessId}");
        return new AttachBench.Options(sizes, workers, modes, o.Repeat, Path.GetFullPath(o.Out), Path.GetFullPath(work), limit, o.Fresh,
            o.Touch is "first" or "all" ? o.Touch : throw new FormatException($"--touch '{o.Touch}' is not first or all"), o.Verify,
            string.IsNullOrWhiteSpace(o.Worker) ? throw new FormatException("--worker is empty") : o.Worker);
    }
}
