using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.Jobs.Scheduling;

using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class RemoveOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "remove";

    public static string Summary => "Remove a dataset version from the cache tier (its manifest, and the latest pointer when it points there).";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata remove risk/prices --cache-hosts cache1:6380",
         "remove the latest version from the cache tier"),
    ];

    [Switch("", "The dataset, optionally @ the version to remove (default: the latest).", Meta = DatasetArgument.Meta, Required = true)]
    public string Dataset { get; set; } = "";

    [Switch("--job", "Only drop this job's reference; remove the version when no other job still uses it.", Meta = "ID")]
    public string? Job { get; set; }

    [Switch("--json", "Print the result as one JSON object (dataset, version, removed, wasLatest, segmentsFreed, or why not) on stdout instead of the lines.")]
    public bool Json { get; set; }

}

/// <summary>Exit codes: 0 removed or kept for other jobs; 66 no such dataset or version (as list and get); else the failure's (<see cref="ExitCodes"/>: 77 a reader's account, 69 a host unreachable); 2 bad usage.</summary>
public static class RemoveCommand
{
    public static async Task<int> RunAsync(RemoveOptions o, CancellationToken ct)
    {
        var (name, given) = DatasetArgument.Parse(o.Dataset);
        var options = o.CacheTier();
        try
        {
            await using var tier = new CacheTierClient(options, o.TierLog);
            // A prefix as status and list print ids is resolved first, so the job reference and the output name the whole id.
            var version = given is null ? await tier.GetLatestAsync(name, ct)
                : VersionPrefix.IsPrefix(given) ? await tier.Catalog.ResolveVersionPrefixAsync(name, given, ct) : given;
            // Nothing to remove is not found, as list and get say it: a script removing a misspelt name must learn of it.
            if (version is null) return Notice(o, name, null, $"dataset '{name}' has no latest version on {string.Join(", ", tier.Hosts)}; nothing to remove", ExitCodes.NotFound);
            // A whole id names the version itself, so one no host holds is not found either. A job's end step that
            // comes after the version was removed has nothing left to drop: its reference went with the version.
            if (given is not null && !await tier.Catalog.HoldsManifestAsync(version, ct))
                return o.Job is not null && await tier.Catalog.WasRemovedAsync(name, version, ct)
                    ? Notice(o, name, version, $"{name} version {version} was already removed; job {o.Job}'s reference went with it")
                    : Notice(o, name, version, $"no cache host ({string.Join(", ", tier.Hosts)}) holds {name} version {version}; nothing to remove", ExitCodes.NotFound);
            if (o.Job is not null)
            {
                var others = await tier.Catalog.RemoveJobAsync(version, o.Job, ct);
                if (others.Count > 0) return Notice(o, name, version, $"{name} version {version} is still used by job(s) {string.Join(", ", others)}; kept");
            }
            var (latest, gc) = await tier.Catalog.RemoveVersionAsync(name, version, ct);
            if (o.Json)
            {
                Console.WriteLine(JsonFields.Object([("dataset", name), ("version", version), ("removed", true), ("wasLatest", latest),
                    ("segmentsFreed", gc is { Ran: true } ? gc.SegmentsDeleted : null), ("collection", gc is null ? "needs an administrator's gc" : gc.Ran ? "ran" : gc.SkippedBecause)]));
                return 0;
            }
            Console.WriteLine($"removed {name} version {version}{(latest ? " (it was the latest)" : "")}; " +
                              (gc is null ? "its segments stay until an administrator's hpcdata gc (collection takes the admin role)"
                                  : gc.Ran ? $"freed {gc.SegmentsDeleted} segments no other version uses"
                                  : $"segments not collected now ({gc.SkippedBecause}); the next removal collects them"));
            return 0;
        }
        catch (CommonDataException e) when (e.Code == ErrorCode.AccessDenied && e.Message.Contains("no permissions to run", StringComparison.Ordinal))
        {
            // A reader's account meets the host's command rules before any ownership check: say what that means here.
            var account = options.User is { Length: > 0 } user ? $"the cache-tier account '{user}'" : "the cache tier's default account";
            throw CommandException.Failed($"cannot remove '{name}': {account} may only read; removing takes the account that staged it or an administrator's " +
                                          $"(--cache-user, {CacheTierOptions.UserVariable}) ({e.Message})", ErrorCode.AccessDenied);
        }
        catch (Exception e) when (e is IOException or TimeoutException or ArgumentException or FormatException or CommonDataException)
        {
            throw CommandException.From(e);
        }
    }

    /// <summary>A line on stderr (with --json, the object) about what was not done, and the exit code that says so.</summary>
    private static int Notice(RemoveOptions o, string name, string? version, string message, int exitCode = ExitCodes.Ok)
    {
        if (o.Json) Console.WriteLine(JsonFields.Object([("dataset", name), ("version", version), ("removed", false), ("why", message)]));
        else Console.Error.WriteLine($"hpcdata remove: {message}");
        return exitCode;
    }
}
