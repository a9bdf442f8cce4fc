using System.Text.Json;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.Stager;

/// <summary>Runs one staging from validated options and prints its summary; failures are one line and exit 1.</summary>
public static class StageCommand
{
    public static async Task<int> RunAsync(StagerOptions o)
    {
        ILogger log = new LineLogger(StagerOptions.ProgramName, o.Verbose ? LogLevel.Debug : LogLevel.Warning);
        using var cancel = new CancellationTokenSource();
        // SIGTERM as Ctrl-C: a scheduler's stop, or `hpcdata stage` passing a Ctrl-C on, ends the stage with its line and 130.
        using var signals = Signals.CancelOn(cancel);
        OpenTelemetry.Metrics.MeterProvider? exporter;
        try
        {
            exporter = Hpc.CommonData.Telemetry.MetricsExport.Start(o.Metrics, HpcMetrics.StagerMeter);
        }
        catch (Hpc.CommonData.CommonDataException e)
        {
            return ProgramContract<StagerOptions>.Fail(e);
        }
        // Disposed last, after the staging's counts are in: an OTLP push of a short-lived stager happens here.
        using var metricsExport = exporter;
        try
        {
            o.CacheTier.LoadPasswordFile();
            await using var tier = new CacheTierClient(o.CacheTier, log, StagerMetrics.Instance);
            using var source = StageSource.Open(o.Path, log, o.SkipUnreadable, o.ForUserId);
            var options = new StageOptions
            {
                Name = o.Name, SegmentSize = (int)o.SegmentSize.Bytes, Compression = o.Compression, AutoCodec = o.AutoCodec, LinkRate = o.LinkRate.IsUnlimited ? null : o.LinkRate,
                Lifetime = o.Lifetime is null ? null : Durations.Parse(o.Lifetime), CheckSpace = !o.NoSpaceCheck,
                UnpublishedLifetime = Durations.Parse(o.UnpublishedLifetime),
                ContentDefined = o.Chunking == "content", AllowEmpty = o.AllowEmpty,
                Readers = Hpc.CommonData.Access.ReaderSpec.Resolve(o.Readers),
            };
            var progress = Console.IsErrorRedirected || o.Quiet ? null : new TerminalProgress();
            var result = await new StagingPipeline(tier, log).StageAsync(source, options, progress, cancel.Token);
            progress?.Finish();
            StagerMetrics.Instance.StageDuration.Record(result.Seconds);
            if (o.Json) Console.WriteLine(JsonSerializer.Serialize(result, ContractJson.Default.StageResult));
            else if (!o.Quiet)
            {
                Console.WriteLine($"staged {result.Name} version {result.Version}{(result.Unchanged ? " (unchanged: nothing new published)" : "")}");
                if (result.RepairedHosts.Count > 0)
                    Console.WriteLine($"  repaired {string.Join(", ", result.RepairedHosts)}: given this version's manifest and latest pointer, which they lacked");
                Console.WriteLine($"  raw {ByteSize.Format(result.RawBytes)}, stored {ByteSize.Format(result.StoredBytes)} (ratio {result.Ratio:P1}), " +
                                  $"{result.Segments} segments: {result.Segments - result.SkippedSegments} new ({ByteSize.Format(result.NewRawBytes)} raw), " +
                                  $"{result.SkippedSegments} already on the cache tier; sent {ByteSize.Format(result.SentBytes)}");
                Console.WriteLine($"  {result.Seconds:0.00} s, {ByteRate.Format(result.RawBytes / Math.Max(result.Seconds, 1e-9))}, hash {result.Hash}");
                Console.WriteLine($"  codec {(result.CodecReason is { } why ? $"auto → {why}" : result.Codec)}");
                if (result.KeptInOtherEncoding > 0)
                    Console.WriteLine($"  {result.KeptInOtherEncoding} of the segments already on the cache tier are stored in another encoding than " +
                                      $"{result.Codec.ToLowerInvariant()} and were kept so, not re-encoded (the stored size above counts them as they are " +
                                      "stored; versions staged before read them as they are)");
            }
            return 0;
        }
        catch (OperationCanceledException) when (cancel.IsCancellationRequested)
        {
            Console.Error.WriteLine($"{StagerOptions.ProgramName}: cancelled; nothing was published");
            return ExitCodes.Cancelled;
        }
        catch (Exception e) when (e is CommonDataException or IOException or ArgumentException or FormatException or UnauthorizedAccessException)
        {
            if (e is CommonDataException { Code: ErrorCode.NoSpace or ErrorCode.AccessDenied } refusal) StagerMetrics.Instance.Refused(refusal.Code);
            Console.Error.WriteLine($"{StagerOptions.ProgramName}: {e.Message}");
            return e is SourceChangedException ? ExitCodes.IoError : ExitCodes.Of(e);
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
        Console.Error.Write($"\r  {pct}{ByteSize.Format(p.RawBytes)} read, {p.Segments} segments stored, {ByteRate.Format(p.RawBytes / Math.Max(p.Elapsed.TotalSeconds, 1e-9))}   ");
    }
    public void Finish() => Console.Error.Write("\r" + new string(' ', 79) + "\r");
}
