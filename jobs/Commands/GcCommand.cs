using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cache;

using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class GcOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "gc";

    public static string Summary => "Free the segments no dataset version on the cache tier references (left by removed versions or failed stages).";

    [Switch("--drop-unreadable", "Also delete manifest keys that hold no readable manifest (they are skipped with a warning otherwise).")]
    public bool DropUnreadable { get; set; }

    [Switch("--break-leases", "First delete the staging leases of ACCOUNT (* for every account) that hold the collection back, as gc names them; a stage that was really running sends again, before it publishes, whatever the collection frees.", Meta = "ACCOUNT")]
    public string? BreakLeases { get; set; }

    [Switch("--json", "Print the result as one JSON object (segmentsFreed, versions, segmentsKept, leasesBroken, unreadable) on stdout instead of the line.")]
    public bool Json { get; set; }
}

/// <summary>
/// Exit codes (<see cref="ExitCodes"/>): 0 collected; 77 the account lacks the admin role; 75 the collection could not run
/// now (it says why); 69 a cache host cannot be reached; 2 bad usage.
/// </summary>
public static class GcCommand
{
    public static async Task<int> RunAsync(GcOptions o, CancellationToken ct)
    {
        var options = o.CacheTier();
        try
        {
            await using var tier = new CacheTierClient(options, o.TierLog);
            var collector = new SegmentCollector(tier) { BreakLeasesOf = o.BreakLeases };
            var gc = await collector.CollectAsync(ct, o.DropUnreadable);
            if (collector.LeasesBroken > 0) Console.Error.WriteLine($"hpcdata gc: deleted {collector.LeasesBroken} staging lease(s) of {o.BreakLeases}");
            if (!gc.Ran)
            {
                throw CommandException.Failed($"not collected now: {gc.SkippedBecause}", ErrorCode.Limit);
            }
            foreach (var key in gc.Unreadable ?? [])
                Console.Error.WriteLine(o.DropUnreadable
                    ? $"hpcdata gc: deleted {key}: it held no readable manifest"
                    : $"hpcdata gc: warning: skipped {key}: it holds no readable manifest (delete it with hpcdata gc --drop-unreadable)");
            Console.WriteLine(o.Json
                ? JsonFields.Object([("segmentsFreed", gc.SegmentsDeleted), ("versions", gc.Manifests), ("segmentsKept", gc.SegmentsKept), ("leasesBroken", collector.LeasesBroken),
                    ("unreadable", (IEnumerable<string>)(gc.Unreadable ?? [])), ("unreadableDropped", o.DropUnreadable)])
                : $"freed {gc.SegmentsDeleted} segments; {gc.Manifests} versions reference {gc.SegmentsKept} segments, kept");
            return 0;
        }
        catch (Exception e) when (e is IOException or TimeoutException or ArgumentException or FormatException or CommonDataException)
        {
            throw CommandException.From(e);
        }
    }
}
