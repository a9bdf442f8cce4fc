using System.Security.Cryptography;
using Hpc.CommonData;
using Hpc.CommonData.Access;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Security;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Commands;

/// <summary>
/// <c>hpcdata nodeprep NAME --fanout agents --agents …</c>: node prep for every listed node as one request to their running
/// agents (<see cref="AgentsRequest"/>). Prints each node's line as it answers and a summary; exits 0 only when every
/// node holds the verified copy, pinned for the job.
/// </summary>
internal static class AgentsNodePrep
{
    /// <param name="describe">How a member that never answered is named in the failure (a scheduler's node name beside
    /// its address); the member itself by default.</param>
    /// <param name="silent">Told the members that never answered (their agent down, silent or unreachable) before the
    /// failure is thrown: a scheduler's hook may take those nodes out of service.</param>
    public static async Task<int> RunAsync(NodePrepOptions o, string name, string? version, string job, ExchangeSettings settings, TimeSpan timeout, CancellationToken ct,
        Func<string, string>? describe = null, Func<IReadOnlyList<string>, Task>? silent = null)
    {
        describe ??= m => m;
        if (string.IsNullOrWhiteSpace(o.Agents)) throw CommandException.Usage("--fanout agents needs --agents: the nodes' agents, host[:port],… or a file of them");
        if (o.TreeDegree < 2) throw CommandException.Usage($"--tree-degree must be 2 or more (got {o.TreeDegree})");
        IReadOnlyList<string> members;
        try { members = Members(o.Agents); }
        catch (Exception e) when (e is ArgumentException or FormatException) { throw CommandException.Usage(e.Message); }
        void Print(NodeOutcome outcome)
        {
            if (o.Quiet) return;
            var line = $"node={outcome.Node} position={outcome.Position} dataset={name} version={outcome.Version} seconds={outcome.Seconds:0.000} {outcome.Detail}";
            if (!outcome.Ready) Console.Error.WriteLine($"hpcdata nodeprep: node {outcome.Node} (position {outcome.Position}) is not ready: {outcome.Detail}");
            else LineOutput.WriteLine(o.Json ? JsonFields.Object([("node", outcome.Node), ("position", outcome.Position), ("dataset", name), ("version", outcome.Version),
                ("seconds", Math.Round(outcome.Seconds, 3)), .. JsonFields.Parse(" " + outcome.Detail)]) : line);
        }
        // Without the cluster's key (a user's job step): this node's agent, which holds it, makes the request for this user.
        var report = string.IsNullOrEmpty(o.PeerKeyFile)
            ? await ThroughLocalAgentAsync(o, name, version, job, members, settings, timeout, Print, ct)
            : await WithKeyAsync(o, name, version, job, members, settings, timeout, Print, ct);
        var failed = report.Outcomes.Select((x, i) => (Outcome: x, Member: report.Members[i])).Where(x => x.Outcome is not { Ready: true }).ToList();
        var versions = report.Outcomes.Where(x => x is { Ready: true }).Select(x => x!.Version).Distinct().ToList();
        if (!o.Quiet)
        {
            var summary = $"nodes={report.Members.Count} ready={report.Ready} failed={failed.Count} dataset={name} version={(versions.Count == 1 ? versions[0] : string.Join(",", versions))} " +
                          $"joined={report.Joined} launch-seconds={report.LaunchSeconds:0.000} seconds={report.Seconds:0.000}";
            LineOutput.WriteLine(o.Json ? JsonFields.Object([("summary", true), .. JsonFields.Parse(" " + summary)]) : summary);
        }
        if (failed.Count == 0) return 0;
        foreach (var (outcome, member) in failed.Where(f => f.Outcome is null).Take(20))
            Console.Error.WriteLine($"hpcdata nodeprep: no answer from the agent at {describe(member)}");
        if (silent is not null && failed.Where(f => f.Outcome is null).Select(f => f.Member).ToList() is { Count: > 0 } unanswered) await silent(unanswered);
        var first = failed.FirstOrDefault(f => f.Outcome is not null).Outcome;
        throw CommandException.Failed(NotReady(report, describe), first is null ? ErrorCode.Unavailable : (ErrorCode)first.Code);
    }

    /// <summary>
    /// The nodes that are not ready, by name, in the one line a prolog or the scheduler shows as the reason: the first
    /// five, each with its own word, or with <c>no answer</c>. A node the survivors' rings went on without (dead, or
    /// silent for the peer timeout) says so: the exchange's own verdict beside the requester's unanswered ask; so does
    /// one that took the request as its first agent and went silent before the start.
    /// </summary>
    internal static string NotReady(AgentsReport report, Func<string, string> describe)
    {
        var lost = report.Outcomes.SelectMany(x => x?.Lost ?? []).ToHashSet();
        var failed = report.Outcomes.Select((x, i) => (Outcome: x, Member: report.Members[i], Position: i)).Where(x => x.Outcome is not { Ready: true }).ToList();
        var named = string.Join(", ", failed.Take(5).Select(f => f.Outcome is { } x ? $"{x.Node} ({Brief(x.Detail)})"
            : $"{describe(f.Member)} ({(lost.Contains(f.Position) ? "lost in the exchange, " : report.SilentRoots.Contains(f.Member) ? "took the request first and went silent, " : "")}no answer)")) + (failed.Count > 5 ? ", …" : "");
        return $"{failed.Count} of {report.Members.Count} nodes are not ready: {named}";
    }

    private static async Task<AgentsReport> WithKeyAsync(NodePrepOptions o, string name, string? version, string job, IReadOnlyList<string> members, ExchangeSettings settings,
        TimeSpan timeout, Action<NodeOutcome> print, CancellationToken ct)
    {
        PeerKey key;
        try { key = PeerKey.Load(o.PeerKeyFile!, "--peer-key-file"); }
        catch (ArgumentException e) { throw CommandException.Usage(e.Message); }
        if (SecretFiles.Exposure("the cluster's peer key", (o.PeerKeyFile, "--peer-key-file")) is { } exposed) Console.Error.WriteLine($"hpcdata: warning: {exposed}");
        var request = new PrepRequest
        {
            Id = Convert.ToHexString(RandomNumberGenerator.GetBytes(8)).ToLowerInvariant(), Name = name, Version = version ?? "", Job = job, User = UserFor(o.User),
            Members = members, Requester = "", Degree = o.TreeDegree, RingGroups = settings.RingGroups, LinkProbe = settings.LinkProbe, PeerTimeout = settings.PeerTimeout,
            StallTimeout = settings.StallTimeout, Timeout = timeout,
        };
        try { return await AgentsRequest.RunAsync(request, key, print, ct); }
        catch (UnauthorizedAccessException e) { throw CommandException.Failed($"{e.Message} (--peer-key-file)", ErrorCode.AccessDenied); }
        catch (CommonDataException e) { throw CommandException.Failed(e.Message, e.Code); }
    }

    /// <summary>The request made by this node's agent for the user running this: no key, no launcher; the agent knows who asks.</summary>
    private static async Task<AgentsReport> ThroughLocalAgentAsync(NodePrepOptions o, string name, string? version, string job, IReadOnlyList<string> members,
        ExchangeSettings settings, TimeSpan timeout, Action<NodeOutcome> print, CancellationToken ct)
    {
        if (!string.IsNullOrEmpty(o.User)) throw CommandException.Usage("--user needs --peer-key-file: through this node's agent the copies are always the caller's");
        // The same exchange as with the key: the agent makes the request with these settings, checked against its bounds.
        var asked = new ExchangeRequestSettings
        {
            PeerTimeout = settings.PeerTimeout, StallTimeout = settings.StallTimeout, Timeout = timeout, RingGroups = settings.RingGroups,
            LinkProbe = settings.LinkProbe, TreeDegree = o.TreeDegree,
        };
        ExchangeReport exchange;
        try
        {
            await using var agent = await AgentClient.ConnectAsync(o.Agent.PipeName, TimeSpan.FromSeconds(5), ct);
            exchange = await agent.ExchangeAsync(name, version, job, members, asked, ct);
        }
        catch (CommonDataException e) { throw CommandException.Failed(e.Message, e.Code); }
        catch (Exception e) when (e is IOException or TimeoutException) { throw CommandException.From(e, o.Agent.NotAnswering(e)); }
        var outcomes = exchange.Outcomes.Select(x => x is null ? null : new NodeOutcome(x.Position, x.Node, x.Code, x.Version, x.Seconds, x.Detail, x.Lost)).ToList();
        foreach (var outcome in outcomes.OfType<NodeOutcome>()) print(outcome);
        return new AgentsReport(exchange.Members, exchange.LaunchSeconds, exchange.Joined, outcomes, exchange.Seconds) { SilentRoots = exchange.SilentRoots ?? [] };
    }

    private static string Brief(string detail) => detail.Length <= 80 ? detail : detail[..77] + "...";

    /// <summary>Who the copies are for: --user, else the job's user, else the caller unless the caller is root.</summary>
    internal static string UserFor(string? user)
    {
        if (!string.IsNullOrWhiteSpace(user)) return user.Trim();
        if (Environment.GetEnvironmentVariable("SLURM_JOB_USER") is { Length: > 0 } jobUser) return jobUser;
        if (!OperatingSystem.IsLinux() || UnixAccounts.EffectiveUserId == 0) return "";
        return UnixAccounts.UserName(UnixAccounts.EffectiveUserId) ?? UnixAccounts.EffectiveUserId.ToString(System.Globalization.CultureInfo.InvariantCulture);
    }

    /// <summary>host[:port],… or a file of them (one per line, # comments); a member without a port gets the agents' default.</summary>
    internal static IReadOnlyList<string> Members(string agents)
    {
        var entries = File.Exists(agents)
            ? File.ReadAllLines(agents).Select(l => l.Split('#')[0].Trim()).Where(l => l.Length > 0)
            : agents.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        var members = entries.Select(e => HasPort(e) ? e : $"{e}:{NodeAgentOptions.DefaultPeerPort}").ToList();
        foreach (var m in members) AgentTree.Endpoint(m);
        if (members.Count == 0) throw new ArgumentException($"--agents '{agents}' names no agent");
        if (members.Distinct(StringComparer.OrdinalIgnoreCase).Count() != members.Count) throw new ArgumentException("--agents names an agent twice");
        return members;
    }

    private static bool HasPort(string entry) =>
        entry.StartsWith('[') ? entry.Contains("]:", StringComparison.Ordinal) : entry.Count(c => c == ':') == 1;
}
