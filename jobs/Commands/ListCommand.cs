using Hpc.CommonData.Hosting;
using System.Globalization;
using System.Text.Json;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class ListOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "list";

    public static string Summary => "The datasets and versions on the cache tier: sizes, which is latest, created, lifetime and expiry, the jobs keeping them.";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata list --cache-hosts cache1:6380",
         "every dataset on the cache tier with its latest version"),
    ];

    [Switch("", "Only this dataset, optionally only @ this version.", Meta = DatasetArgument.Meta)]
    public string? Name { get; set; }

    [Switch("--json", "One JSON array of CatalogEntry on stdout, for scripts.")]
    public bool Json { get; set; }
}

/// <summary>Exit codes: 0 listed (an empty tier too); 66 NAME has no version on the tier; 69 no cache host could be read; 2 bad usage.</summary>
public static class ListCommand
{
    public static async Task<int> RunAsync(ListOptions o, CancellationToken ct)
    {
        var only = o.Name is null ? (DatasetArgument?)null : DatasetArgument.Parse(o.Name);
        var options = o.CacheTier();
        IReadOnlyList<CatalogEntry> entries;
        try
        {
            options.MaxAttempts = 2;
            await using var tier = new CacheTierClient(options, o.TierLog);
            entries = await tier.Catalog.ListAsync(ct);
        }
        catch (Exception e) when (e is IOException or ArgumentException or FormatException or CommonDataException)
        {
            Console.Error.WriteLine($"hpcdata list: {e.Message}");
            return ExitCodes.Of(e);
        }
        if (only is { } filter) entries = entries.Where(e => e.Name == filter.Name && (filter.Version is null || e.Version == filter.Version)).ToList();
        // A named dataset that is not there is an answer scripts must be able to tell from a listing, as get and path do.
        if (only is { } missing && entries.Count == 0)
        {
            Console.Error.WriteLine($"hpcdata list: {(missing.Version is null ? $"dataset '{missing.Name}' has no version" : $"dataset '{missing.Name}' has no version {missing.Version}")} on the cache tier");
            return ExitCodes.NotFound;
        }
        if (o.Json)
        {
            Console.WriteLine(JsonSerializer.Serialize(entries.ToArray(), CacheStatusJson.Default.CatalogEntryArray));
            return 0;
        }
        if (entries.Count == 0)
        {
            Console.WriteLine("no dataset versions on the cache tier");
            return 0;
        }
        var now = DateTimeOffset.UtcNow;
        // Sizes in at most eight characters and times as ls -l writes them keep a row within TextTable.Width for ordinary names.
        var table = new TextTable("DATASET", "VERSION", "LATEST", "SIZE", "STORED", "SEGS", "CREATED", "LIFETIME", "JOBS");
        foreach (var e in entries)
            table.Add(e.Name, StatusCommand.Short(e.Version), e.Latest ? "latest" : "", e.Problem is null ? ByteSize.Format(e.RawBytes) : "?",
                e.Problem is null ? ByteSize.Format(e.StoredBytes) : "?", e.Segments.ToString(CultureInfo.InvariantCulture),
                e.Problem is null ? TextTable.When(e.Created, now) : "",
                Lifetime(e, now), e.Jobs.Count == 0 ? "" : string.Join(",", e.Jobs));
        table.WriteTo(Console.Out);
        foreach (var e in entries.Where(e => e.Problem is not null)) Console.Error.WriteLine($"version {e.Version}: {e.Problem}");
        var total = entries.Sum(e => e.StoredBytes);
        Console.WriteLine($"{entries.Count} version(s) of {entries.Select(e => e.Name).Distinct().Count()} dataset(s), {ByteSize.Format(total)} stored (a segment shared by versions counts in each)");
        return 0;
    }

    private static string Lifetime(CatalogEntry e, DateTimeOffset now) => e switch
    {
        { Expires: { } x } when x <= now => "expired",
        { Expires: { } x } => $"{Durations.Format(e.LifetimeSeconds!.Value)}, {Durations.Format((long)(x - now).TotalSeconds)} left",
        { Jobs.Count: > 0 } => "while jobs use it",
        _ => "until removed",
    };
}
