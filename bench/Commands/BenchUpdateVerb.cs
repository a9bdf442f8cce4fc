using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;

namespace Hpc.Bench.Commands;

public sealed class BenchUpdateOptions : IVerbOptions
{
    public static string Verb => "update";

    public static string Summary => "A dataset and its next version (hpcdata generate --data history|history-files), staged and fetched by one node on loopback with content-defined and fixed-size segments: what the update moves, against the least possible and the whole version.";

    [Switch("--size", "Size of the first version.")]
    public string Size { get; set; } = "1GB";

    [Switch("--kinds", "history (one CSV ordered by instrument then date), history-files (a directory of per-instrument CSVs), or both.")]
    public string Kinds { get; set; } = "history,history-files";

    [Switch("--instruments", "Instruments (edit places per version).")]
    public int Instruments { get; set; } = 5000;

    [Switch("--work-dir", "Scratch directory (default: under /dev/shm or the temp directory); removed afterwards.")]
    public string? WorkDir { get; set; }
}

public static class BenchUpdateVerb
{
    public static async Task<int> RunAsync(BenchUpdateOptions o, CancellationToken ct)
    {
        var kinds = o.Kinds.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList();
        if (kinds.Count == 0 || kinds.Any(k => k is not ("history" or "history-files")))
        {
            Console.Error.WriteLine("hpcdata bench update: --kinds must be history, history-files or both");
            return 2;
        }
        if (!ByteSize.TryParse(o.Size, out var size) || size.Bytes < 1 << 20)
        {
            Console.Error.WriteLine($"hpcdata bench update: --size '{o.Size}' is not a size of at least 1MB");
            return 2;
        }
        var work = o.WorkDir ?? Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"hpcdata-update-{Environment.ProcessId}");
        Directory.CreateDirectory(work);
        try
        {
            var rows = await UpdateBench.RunAsync(new UpdateBench.Options(size.Bytes, kinds, work, o.Instruments), ct);
            Console.WriteLine(UpdateBench.Table(rows));
            return 0;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or TimeoutException or CommonDataException)
        {
            Console.Error.WriteLine($"hpcdata bench update: {e.Message}");
            return 1;
        }
        finally
        {
            try { Directory.Delete(work, recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
        }
    }
}
