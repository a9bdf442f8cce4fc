using System.Text.Json;
using CommandLine;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.Stager;
using Microsoft.Extensions.Logging;

return await Parser.Default.ParseArguments<StageCommand>(args).MapResult(c => c.RunAsync(), _ => Task.FromResult(2));

/// <summary><c>hpcdata-stage PATH --name owner/name [--cache-hosts h:p,…]</c>: stage a file, a directory or "-" (stdin).</summary>
public sealed class StageCommand
{
    [Value(0, MetaName = "path", Required = true, HelpText = "File or directory to stage, or - for standard input.")]
    public string Path { get; set; } = "";

    [Option('n', "name", Required = true, HelpText = "Dataset name, owner/name (a-z 0-9 . _ -).")]
    public string Name { get; set; } = "";

    [Option("cache-hosts", HelpText = "Cache hosts, host:port,… (default: $HPCDATA_CACHE_HOSTS or 127.0.0.1:6380).")]
    public string? CacheHosts { get; set; }

    [Option("replicas", Default = 0, HelpText = "Copies of each segment (default: $HPCDATA_CACHE_REPLICAS or 1).")]
    public int Replicas { get; set; }

    [Option("segment-size", Default = "64KB", HelpText = "Raw bytes per segment.")]
    public string SegmentSize { get; set; } = "64KB";

    [Option("no-compress", HelpText = "Store segments uncompressed.")]
    public bool NoCompress { get; set; }

    [Option("lifetime", HelpText = "Cache-tier lifetime of the version, e.g. 3600s, 90m, 12h.")]
    public string? Lifetime { get; set; }

    [Option("json", HelpText = "Print the summary as one JSON object (for scripts).")]
    public bool Json { get; set; }

    public async Task<int> RunAsync()
    {
        using var loggerFactory = LoggerFactory.Create(b => b.SetMinimumLevel(LogLevel.Warning)
            .AddConsole(o => o.LogToStandardErrorThreshold = LogLevel.Trace));
        var log = loggerFactory.CreateLogger("stager");
        using var cancel = new CancellationTokenSource();
        Console.CancelKeyPress += (_, e) => { e.Cancel = true; cancel.Cancel(); };
        try
        {
            var tierOptions = CacheTierOptions.FromEnvironment();
            if (CacheHosts is not null) tierOptions.Hosts = CacheEndpoint.ParseList(CacheHosts).Select(h => h.ToString()).ToList();
            if (Replicas > 0) tierOptions.Replicas = Replicas;
            await using var tier = new CacheTierClient(tierOptions, log);
            using var source = StageSource.Open(Path);
            var options = new StageOptions
            {
                Name = Hpc.CommonData.Format.DatasetName.Validate(Name), SegmentSize = (int)ByteSize.Parse(SegmentSize),
                Compress = !NoCompress, Lifetime = Lifetime is null ? null : Durations.Parse(Lifetime),
            };
            var progress = Console.IsErrorRedirected ? null : new TerminalProgress();
            var result = await new StagingPipeline(tier, log).StageAsync(source, options, progress, cancel.Token);
            progress?.Finish();
            if (Json) Console.WriteLine(JsonSerializer.Serialize(result));
            else
            {
                Console.WriteLine($"staged {result.Name} version {result.Version}{(result.Unchanged ? " (unchanged: nothing new published)" : "")}");
                Console.WriteLine($"  raw {ByteSize.Format(result.RawBytes)}, stored {ByteSize.Format(result.StoredBytes)} (ratio {result.Ratio:P1}), " +
                                  $"{result.Segments} segments ({result.SkippedSegments} already cached), sent {ByteSize.Format(result.SentBytes)}");
                Console.WriteLine($"  {result.Seconds:0.00} s, {result.MegabytesPerSecond:0} MB/s, hash {result.Hash}");
            }
            return 0;
        }
        catch (Exception e) when (e is CommonDataException or IOException or ArgumentException or FormatException or UnauthorizedAccessException or RespErrorException or OperationCanceledException)
        {
            Console.Error.WriteLine($"hpcdata-stage: {e.Message}");
            return 1;
        }
    }
}

/// <summary>One self-overwriting progress line on the terminal, at most four times a second.</summary>
internal sealed class TerminalProgress : IProgress<StageProgress>
{
    private long _lastTicks;
    public void Report(StageProgress p)
    {
        var now = Environment.TickCount64;
        if (now - Interlocked.Read(ref _lastTicks) < 250) return;
        Interlocked.Exchange(ref _lastTicks, now);
        var pct = p.TotalBytes is > 0 ? $"{100.0 * p.RawBytes / p.TotalBytes.Value,5:0.0}% " : "";
        Console.Error.Write($"\r  {pct}{ByteSize.Format(p.RawBytes)} read, {p.Segments} segments stored, {p.RawBytes / 1e6 / Math.Max(p.Elapsed.TotalSeconds, 1e-9):0} MB/s   ");
    }
    public void Finish() => Console.Error.Write("\r" + new string(' ', 79) + "\r");
}
