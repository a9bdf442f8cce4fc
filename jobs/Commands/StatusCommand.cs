using Hpc.CommonData;
using Hpc.CommonData.Hosting;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class StatusOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "status";

    public static string Summary => "This node's agent: its copies (dataset, version, size, state, fetch progress, leases, pins by job); with --cache-hosts or --cache-tier: each cache host's memory, keys, hit rate and traffic.";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata status",
         "this node's agent: its copies, pins and budget"),
        ("hpcdata status --cache-hosts cache1:6380,cache2:6380 --json",
         "each cache host's memory, keys and traffic, for scripts"),
    ];

    protected override IReadOnlyCollection<string> AgentSwitchNames => AgentSwitches.Pipe;

    [Switch("--cache-tier", "Report the cache hosts of $HPCDATA_CACHE_HOSTS instead of the node.")]
    public bool WholeCacheTier { get; set; }

    [Switch("--json", "One JSON document on stdout (the agent's AgentStatus, or an array of CacheHostStatus), for scripts.")]
    public bool Json { get; set; }
}

/// <summary>Exit codes: 0 reported; 69 the agent or every cache host could not be reached; 77 every host refused the login; 2 bad usage.</summary>
public static class StatusCommand
{
    public static Task<int> RunAsync(StatusOptions o, CancellationToken ct) =>
        o.Origins.Gave("--cache-hosts", SettingSource.CommandLine) || o.WholeCacheTier ? CacheHostsAsync(o, ct) : NodeAsync(o, ct);

    private static async Task<int> NodeAsync(StatusOptions o, CancellationToken ct)
    {
        var answer = await o.Agent.QueryStatusAsync(ct);
        if (answer.Failure is { } failure) throw CommandException.From(failure, o.Agent.Problem(failure));
        var status = answer.Status!;
        if (o.Json)
        {
            Console.WriteLine(JsonSerializer.Serialize(status, AgentJson.Default.AgentStatus));
            return 0;
        }
        Console.WriteLine($"node {status.Node}: {ByteSize.Format(status.UsedBytes)} of {ByteSize.Format(status.BudgetBytes)} budget in {status.DataDirectory}, {status.Copies.Count} cop{(status.Copies.Count == 1 ? "y" : "ies")}");
        if (status.Copies.Count == 0) return 0;
        // A copy's pins are the jobs that pinned it (AgentCopy.Pins holds job ids), so the column names them.
        var now = DateTimeOffset.UtcNow;
        var table = new TextTable("DATASET", "VERSION", "SIZE", "STATE", "DONE", "LEASES", "PINNED BY", "LAST USED");
        foreach (var c in status.Copies.OrderBy(c => c.Name, StringComparer.Ordinal).ThenByDescending(c => c.LastAccess))
            table.Add(c.Name, Short(c.Version), ByteSize.Format(c.Length), c.State,
                c.State == "complete" ? "100%" : $"{(c.Length == 0 ? 100 : 100.0 * c.BytesDone / c.Length):0.0}% ({c.SegmentsDone}/{c.Segments})",
                c.Leases.ToString(System.Globalization.CultureInfo.InvariantCulture), c.Pins.Count == 0 ? "-" : string.Join(",", c.Pins),
                TextTable.When(c.LastAccess, now));
        table.WriteTo(Console.Out);
        return 0;
    }

    private static async Task<int> CacheHostsAsync(StatusOptions o, CancellationToken ct)
    {
        var options = o.CacheTier();
        CacheHostStatus[] hosts;
        IReadOnlyList<(string Name, IReadOnlyList<(CacheEndpoint Host, string? Version)> Hosts)> disagree = [];
        IReadOnlyList<string> unhealthy = [];
        try
        {
            // A status must answer quickly: one attempt per host, a host that does not answer is a row, not a wait.
            options.MaxAttempts = 1;
            options.ConnectionsPerHost = 1;
            options.OperationTimeout = TimeSpan.FromSeconds(5);
            await using var tier = new CacheTierClient(options, o.TierLog);
            hosts = await tier.GetHostStatusAsync(ct);
            if (!o.Json && hosts.All(h => h.Error is null)) disagree = await tier.Catalog.DisagreementsAsync(ct);
            if (!o.Json && !tier.IsCluster && hosts.Any(h => h.Error is null))
                unhealthy = (await new TierRepair(tier).AuditAsync(ct)).Where(v => !v.Healthy).Select(v => CacheTierReport.Describe(v, tier.Replicas)).ToList();
        }
        catch (Exception e) when (e is IOException or ArgumentException or FormatException or CommonDataException)
        {
            throw CommandException.From(e);
        }
        if (o.Json) Console.WriteLine(JsonSerializer.Serialize(hosts, CacheStatusJson.Default.CacheHostStatusArray));
        else
        {
            // Sizes in at most eight characters, memory against MAX without a percentage of its own (its two sizes say it) and an
            // unreachable host's reason below the table keep a row within TextTable.Width.
            var table = new TextTable("HOST", "SERVER", "MEMORY", "MAX", "KEYS", "HITS", "SENT", "RECV", "CLIENTS", "REFUSED");
            foreach (var h in hosts)
            {
                if (h.Error is not null) { table.Add(h.Host, h.ErrorKind == ErrorCode.Unavailable ? "unreachable" : "refused", "-", "-", "-", "-", "-", "-", "-", "-"); continue; }
                table.Add(h.Host, Server(h.Server), ByteSize.Format(h.UsedMemory), h.MaxMemory == 0 ? "-" : ByteSize.Format(h.MaxMemory),
                    Num(h.Keys),
                    h.HitRate is { } r ? $"{100 * r:0}%" : "-", ByteSize.Format(h.BytesSent), ByteSize.Format(h.BytesReceived), Num(h.Clients), Num(h.RefusedWrites));
            }
            table.WriteTo(Console.Out);
            foreach (var h in hosts.Where(h => h.Error is not null)) Console.Error.WriteLine($"{h.Host}: {h.Error}");
            // Hosts that restarted empty, were added, or missed a stage: readers still get the newest verified version,
            // but one host fewer holds it. The owner's re-stage of the same data repairs it.
            foreach (var (name, answers) in disagree)
                Console.WriteLine($"hosts disagree on {name}: {string.Join(", ", answers.Select(a => $"{a.Host} {(a.Version is { } v ? Short(v) : "(none)")}"))}; hpcdata repair (or the owner's re-stage) repairs it");
            // Counted against --replicas: the copies each segment should have on the hosts that answer.
            foreach (var line in unhealthy) Console.WriteLine($"{line}; hpcdata repair --replicas {options.Replicas} copies what the tier still holds");
        }
        // Every host failing for one reason (a wrong password) exits with that reason's class, else as unreachable.
        return hosts.All(h => h.Error is not null)
            ? hosts.Select(h => h.ErrorKind).Distinct().Count() == 1 ? ExitCodes.For(hosts[0].ErrorKind) : ExitCodes.Unavailable
            : ExitCodes.Ok;
    }

    /// <summary>The server and its version without build metadata; our own host as users call it (hpcdata cache-host).</summary>
    private static string Server(string? server) => server?.Split('+')[0] is { } s
        ? s.StartsWith("hpc-cachehost ", StringComparison.Ordinal) ? s["hpc-".Length..] : s
        : "?";

    internal static string Short(string version) => version.Length > 12 ? version[..12] : version;
    private static string Num(long n) => n.ToString(System.Globalization.CultureInfo.InvariantCulture);
}
