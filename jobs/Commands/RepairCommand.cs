using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class RepairOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "repair";

    public static string Summary => "Copy onto the cache hosts what they lack from the tier's own copies (manifests, latest pointers, segments on the hosts --replicas places them on), after a host restarted empty or hosts were added or lost. Takes the admin role; safe to interrupt and run again.";

    [Switch("--dry-run", "Only report what is under-replicated, misplaced or lost; copy nothing.")]
    public bool DryRun { get; set; }

    [Switch("--json", "One JSON object on stdout: versions audited, what was unhealthy (one line each), hosts unreachable, and what was copied.")]
    public bool Json { get; set; }
}

/// <summary>
/// Exit codes: 0 every version is whole on the hosts its placement names; 1 something could not be repaired (segments
/// no host holds, a host that refused or could not be reached), the account lacks the admin role, or the tier failed;
/// 2 bad usage.
/// </summary>
public static class RepairCommand
{
    public static async Task<int> RunAsync(RepairOptions o, CancellationToken ct)
    {
        var options = o.CacheTier();
        try
        {
            await using var tier = new CacheTierClient(options, o.TierLog);
            if (!o.DryRun && await new SegmentCollector(tier).MayCollectAsync(ct) is { } denial)
                throw CommandException.Failed($"repair needs an account with the admin role on the cache tier; {tier.Hosts[0]} refused it: {denial}", ErrorCode.AccessDenied);
            var repair = new TierRepair(tier);
            var versions = await repair.AuditAsync(ct);
            foreach (var host in repair.Unreachable) Console.Error.WriteLine($"hpcdata repair: warning: {host} cannot be reached: its copies are not counted and it gets none");
            var unhealthy = versions.Where(v => !v.Healthy).ToList();
            var described = unhealthy.Select(v => CacheTierReport.Describe(v, tier.Replicas)).ToList();
            (string, object?)[] Audit() => [("versions", versions.Count), ("unhealthy", described), ("unreachable", repair.Unreachable.Select(h => h.ToString()).ToList()), ("replicas", tier.Replicas)];
            if (!o.Json) foreach (var description in described) Console.WriteLine(description);
            if (unhealthy.Count == 0 || o.DryRun)
            {
                if (o.Json) Console.WriteLine(JsonFields.Object([.. Audit(), ("dryRun", o.DryRun)]));
                else if (unhealthy.Count == 0)
                    Console.WriteLine($"{versions.Count} version(s) whole on {tier.Hosts.Count - repair.Unreachable.Count} host(s) with {tier.Replicas} replica(s) each; nothing to copy");
                return unhealthy.Count == 0 && repair.Unreachable.Count == 0 ? 0 : 1;
            }

            var line = ProgressLine.ForTerminal();
            var started = System.Diagnostics.Stopwatch.StartNew();
            var result = await repair.RepairAsync((done, total, bytes) => line?.Show("repair: segments copied", done, total), ct);
            line?.Clear();
            foreach (var failure in result.Failures.Take(10)) Console.Error.WriteLine($"hpcdata repair: not copied: {failure}");
            if (result.Failures.Count > 10) Console.Error.WriteLine($"hpcdata repair: … and {result.Failures.Count - 10} more");
            Console.WriteLine(o.Json
                ? JsonFields.Object([.. Audit(), ("dryRun", false), ("segmentsCopied", result.SegmentsCopied), ("bytesCopied", result.BytesCopied),
                    ("manifestsCopied", result.ManifestsCopied), ("pointersSet", result.PointersSet), ("segmentsLost", result.SegmentsLost),
                    ("failures", result.Failures.Count), ("seconds", started.Elapsed.TotalSeconds)])
                : $"repaired in {started.Elapsed.TotalSeconds:0.0} s: {result.SegmentsCopied} segment cop{(result.SegmentsCopied == 1 ? "y" : "ies")} " +
                  $"({ByteSize.Format(result.BytesCopied)}), {result.ManifestsCopied} manifest(s), {result.PointersSet} latest pointer(s)");
            if (result.SegmentsLost > 0)
                Console.Error.WriteLine($"hpcdata repair: {result.SegmentsLost} segment(s) are on no reachable host; the owner's re-stage from the source files brings them back");
            return result.Failures.Count == 0 && result.SegmentsLost == 0 && repair.Unreachable.Count == 0 ? 0 : 1;
        }
        catch (Exception e) when (e is IOException or TimeoutException or ArgumentException or FormatException or CommonDataException)
        {
            throw CommandException.From(e);
        }
    }
}

/// <summary>How status and repair describe a version whose copies are not where they should be.</summary>
internal static class CacheTierReport
{
    public static string Describe(VersionCopies v, int replicas)
    {
        var parts = new List<string>();
        if (v.Lost > 0) parts.Add($"{v.Lost} segment(s) on no reachable host");
        if (v.UnderReplicated > 0) parts.Add($"{v.UnderReplicated} on fewer than {replicas} host(s)");
        if (v.Misplaced > 0) parts.Add($"{v.Misplaced} not where today's placement looks first");
        if (v.LackManifest.Count > 0) parts.Add($"manifest missing on {string.Join(", ", v.LackManifest)}");
        foreach (var (host, missing) in v.LackSegments) parts.Add($"{host} holds the manifest but lacks {missing} of the segments placed on it");
        return $"under-replicated {v.Name}@{StatusCommand.Short(v.Version)}: {string.Join("; ", parts)} (of {v.Segments} segments)";
    }
}
