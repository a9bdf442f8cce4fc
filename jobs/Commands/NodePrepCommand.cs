using Hpc.CommonData.Fanout;
using System.Diagnostics;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using System.Runtime.InteropServices;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;
using Hpc.Jobs.Fanout;
using Hpc.Mpi;
using Hpc.Jobs.Scheduling;

namespace Hpc.Jobs.Commands;

public sealed class NodePrepOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "nodeprep";

    public static string Summary => "Node preparation task: make sure this node's agent runs, fetch and pin the dataset version for the job, and confirm it landed.";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata nodeprep risk/prices --job $SLURM_JOB_ID",
         "a Slurm prolog: this node gets the latest version, pinned for the job"),
        ("srun --ntasks-per-node=1 hpcdata nodeprep risk/prices --fanout mpi",
         "one rank per node: the nodes share the fetching"),
    ];

    // An agent node prep starts keeps its copies in a directory of its pipe's, not in the agent's own default.
    public NodePrepOptions() => Agent.Options.DataDirectory = "";

    protected override IReadOnlyCollection<string> AgentSwitchNames => AgentSwitches.Start;

    protected override string AgentTitle =>
        "Node agent (its own switches, each also from its variable; all but --pipe are for an agent node prep starts,\n" +
        "  whose --data-dir defaults to /dev/shm/hpcdata-<pipe>)";

    [Switch("", "The dataset, optionally @ a version id (" + DatasetArgument.JobDefault + ", else the latest).", Meta = DatasetArgument.Meta)]
    public string? Dataset { get; set; }

    [Switch("--job", "Job id used as the pin (default: $HPCDATA_JOB_ID, $SLURM_JOB_ID or $CCP_JOBID).", Meta = "ID")]
    public string? Job { get; set; }


    [Switch("--no-start", "Never start an agent; fail when none answers.")]
    public bool NoStart { get; set; }

    [Switch("--start-timeout", "How long a started agent may take to answer.", Meta = "DURATION")]
    public string StartTimeout { get; set; } = "30s";

    [Switch("--timeout", "How long fetching may take.", Meta = "DURATION")]
    public string Timeout { get; set; } = "60m";

    [Switch("--fanout", "auto, none, mpi or agents. mpi: run as one MPI rank per node (mpiexec -ppn 1, srun --ntasks-per-node=1); " +
        "the ranks share the fetching and pass the data on to each other, so the cache tier sends each byte about once. " +
        "Without MPI, or when the exchange fails, the node fetches what it lacks directly. {rank} in --pipe and --data-dir is the rank. " +
        "agents: run once, anywhere: the agents already running on the nodes of --agents (each with --peer-listen) do the same among themselves, " +
        "started in a few round trips instead of a job step; one line per node, then a summary. " +
        "auto: mpi when a launcher started this node prep as one of several ranks, else none (prestage --fanout auto makes that choice for a job).", Meta = "MODE")]
    public string Fanout { get; set; } = "auto";

    [Switch("--agents", "--fanout agents: the nodes' agents, host[:port],… (port " + "6390 by default) or a file of them, one per line (a Slurm job: " +
        "scontrol show hostnames > FILE); their order makes the ranks.", Meta = "LIST|FILE")]
    public string? Agents { get; set; }

    [Switch("--user", "--fanout agents: the user the copies are for: each agent checks that user against the dataset's readers before it fetches, " +
        "and pins the copy as that user's (its pin quota; its noderelease drops it). Default: $SLURM_JOB_USER, else the user running this " +
        "(none when that is root: an operator's warm-up, pinned as the agents' own).", Meta = "NAME")]
    public string? User { get; set; }

    [Switch("--tree-degree", "--fanout agents: children per agent in the tree that carries the request (2 or more): fewer levels against more sends per agent.", Meta = "D")]
    public int TreeDegree { get; set; } = 8;

    [Switch("--peer-key-file", "--fanout agents: file whose first line is the secret the agents share (their --peer-key-file).",
        Environment = NodeAgentOptions.PeerKeyFileVariable, Meta = "PATH")]
    public string? PeerKeyFile { get; set; }

    [Switch("--ring", "--fanout mpi: what carries the blocks between neighbours. tcp: a TCP connection per " +
        "neighbour, set up through MPI, at the link's rate on Ethernet; mpi: the MPI library's own sends (for RDMA fabrics such as InfiniBand).", Meta = "KIND")]
    public string Ring { get; set; } = "tcp";

    /// <summary>The settings a job sets for node prep on its nodes (prestage passes them on as their variables).</summary>
    public NodePrepSwitches NodePrep { get; } = new();

    protected override IEnumerable<NestedSwitches> MoreGroups => [NodePrep.Nested(NodePrepSwitches.Title)];

    [Switch("--stall-timeout", "--fanout mpi: how long MPI's start, or the exchange, may go without anything moving (a rank that never started or died) before this node fetches the rest directly.", Meta = "DURATION")]
    public string StallTimeout { get; set; } = "2m";

    [Switch("--peer-timeout", "--fanout mpi --ring tcp: how long a ring neighbour may take nothing while a block waits for it before it counts as dead or hung and the ring closes around it (the member after it must have heard nothing from it for half as long); --fanout agents: how long a node may be silent before it is lost to the request (its ring routes around it after a fifth of this, at least 1s, and a node that answers again within it is waited for).", Meta = "DURATION")]
    public string PeerTimeout { get; set; } = "5s";

    [Switch("--ring-groups", "--fanout mpi --ring tcp: auto, off, or a group size G (3 or more). With groups, consecutive ranks form rings of " +
        "at least G and the ranks at one place in every group form rings across them, so a block crosses about G + N/G links instead of N - 1 " +
        "(each node still sends about the data once, and the tier sends each byte once). auto: groups of about the square root of N from 64 ranks on; " +
        "off: one ring. Fewer than three groups: one ring.", Meta = "SIZE")]
    public string RingGroups { get; set; } = "auto";

    [Switch("--json", "Print the result as one JSON object (node, dataset, version, bytes, seconds, source, the fan-out's figures, path) instead of the key=value line.")]
    public bool Json { get; set; }

    [Switch(QuietSwitch.Name, QuietSwitch.Help + " (without its line, the exit code alone says whether the node is ready).", Alias = QuietSwitch.Alias)]
    public bool Quiet { get; set; }

}

/// <summary>
/// Exit codes: 0 ready; else the failure's kind (<see cref="ExitCodes"/>), so a prolog can tell the job's fault from the
/// node's and the tier's: 66 not staged, 69 the cache tier or the agent unreachable, 75 timed out or a limit, 65 the copy
/// did not verify (released and evicted), 73 no room on the node or a data directory that cannot be created, 77 denied
/// (an agent it starts that the tier refuses too: its class, not "unreachable"); 2 bad usage, 130 cancelled.
/// Safe to run again: a second run finds the copy local and only re-confirms it.
/// </summary>
public static class NodePrepCommand
{
    public static async Task<int> RunAsync(NodePrepOptions o, CancellationToken stop)
    {
        using var cancel = CancellationTokenSource.CreateLinkedTokenSource(stop);
        var (name, version) = DatasetArgument.OrJob(o.Dataset) is { } selected ? (selected.Name, selected.Version) : (null, null);
        var job = JobVariables.JobIdFromEnvironment(o.Job);
        var pipe = o.Agent.PipeName;
        if (name is null) throw CommandException.Usage("no dataset (NAME or HPCDATA_DATASET)");
        if (job is null) throw CommandException.Usage("no job id to pin the data with (--job, HPCDATA_JOB_ID, SLURM_JOB_ID or CCP_JOBID)");
        if (!DatasetName.TryValidate(name, out var nameError)) throw CommandException.Usage(nameError!);
        if (version == "latest") version = null;
        TimeSpan startTimeout, fetchTimeout, stallTimeout, peerTimeout;
        try
        {
            (startTimeout, fetchTimeout, stallTimeout, peerTimeout) =
                (Durations.Parse(o.StartTimeout), Durations.Parse(o.Timeout), Durations.Parse(o.StallTimeout), Durations.Parse(o.PeerTimeout));
        }
        catch (FormatException e) { throw CommandException.Usage(e.Message); }
        if (peerTimeout <= TimeSpan.Zero) throw CommandException.Usage($"--peer-timeout must be more than 0 (got {o.PeerTimeout})");
        try { RingGrid.ParseGroupSize(o.RingGroups); }
        catch (FormatException e) { throw CommandException.Usage(e.Message); }
        if (o.Fanout is not ("auto" or "none" or "mpi" or "agents")) throw CommandException.Usage($"--fanout '{o.Fanout}' is not one of auto, none, mpi, agents");
        if (o.Fanout == "agents")
            return await AgentsNodePrep.RunAsync(o, name, version, job, new ExchangeSettings(stallTimeout, peerTimeout, o.NodePrep.LinkProbe, o.RingGroups), fetchTimeout, cancel.Token);
        if (o.Agents is not null) throw CommandException.Usage("--agents is for --fanout agents");
        // The cache tier's settings are checked before anything starts (a missing password file, a bad host).
        try { o.CacheTier(); }
        catch (ArgumentException e) { throw CommandException.Usage(e.Message); }
        if (o.Ring is not ("tcp" or "mpi")) throw CommandException.Usage($"--ring '{o.Ring}' is not one of tcp, mpi");
        if (o.Fanout == "auto") o.Fanout = LaunchedRanks() > 1 ? "mpi" : "none";

        var clock = Stopwatch.StartNew();
        var pinned = false;
        // MPI initializes while the node's agent is reached (or started): neither waits for the other. A pipe named per
        // rank ({rank}) needs the rank first, which the launcher's variables give before MPI does.
        // A rank that never starts, or dies before it joins, would keep MPI_Init waiting in the others for good: the
        // wait is bounded like the exchange's, and the node goes on by direct fetch.
        var joining = o.Fanout == "mpi" ? JoinWithinAsync(Task.Run(() => JoinRanks(controlOnly: o.Ring == "tcp")), stallTimeout) : Task.FromResult<(MpiRankGroup? Ranks, bool TimedOut)>((null, false));
        var started = o.Agent.Options;
        if (pipe.Contains("{rank}", StringComparison.Ordinal) || started.DataDirectory.Contains("{rank}", StringComparison.Ordinal))
            if ((LaunchedRank() ?? (await joining).Ranks?.Rank) is { } rank)
            {
                pipe = pipe.Replace("{rank}", rank.ToString(System.Globalization.CultureInfo.InvariantCulture));
                started.DataDirectory = started.DataDirectory.Replace("{rank}", rank.ToString(System.Globalization.CultureInfo.InvariantCulture));
            }
        var connecting = ReachAgentAsync();
        var (joinedRanks, joinTimedOut) = await joining;
        using var ranks = joinedRanks;
        var joined = clock.Elapsed;
        var fanout = joinTimedOut ? " fanout=failed" : "";
        Task? leavesServed = null;
        try
        {
            var (agent, status, agentSeconds, agentStarted) = await connecting;
            await using var _ = agent;
            using var fetchTimer = CancellationTokenSource.CreateLinkedTokenSource(cancel.Token);
            fetchTimer.CancelAfter(fetchTimeout);
            if (ranks is not null)
            {
                // The exchange never publishes; the prefetch below verifies and publishes, fetching whatever it missed.
                try
                {
                    var (summary, served) = await ExchangeAsync(ranks, o, pipe, name, version, stallTimeout, fetchTimer.Token);
                    version = summary.Version;
                    // The line below is this node's time; the process still waits at the end for the other ranks.
                    // Leaves take their own link's time, so the ranks may wait that long for each other at the end.
                    ranks.ClosingLimit = summary.HadLeaves ? fetchTimeout : MpiRankGroup.ClosingLimitAfter(TimeSpan.FromSeconds(summary.Seconds), summary.Ring.MemberLost);
                    // A rank this one routed around died: the closing barrier can never complete, and the launcher has
                    // already seen a rank of the step end, so whatever it does to the others it does without this wait.
                    if (summary.Ring.NeighbourDied) ranks.Abandon();
                    leavesServed = served;
                    fanout = $" fanout=mpi ranks={summary.Ranks} ring={o.Ring} {NodeExchange.Fields(summary)}";
                    foreach (var warning in NodeExchange.Warnings(summary, r => $"rank {r}"))
                        Console.Error.WriteLine($"hpcdata nodeprep: warning: {warning}");
                }
                catch (Exception e) when (!cancel.IsCancellationRequested)
                {
                    ranks.Abandon();
                    Console.Error.WriteLine($"hpcdata nodeprep: fan-out stopped on {status.Node} ({e.Message}); completing by direct fetch");
                    fanout = " fanout=failed";
                }
            }

            // Fetch without the pin first: if we are cancelled mid-fetch, the agent finishes the fetch on its own
            // and no pin is left behind. Pinning an already-local copy takes milliseconds.
            LocalDataset fetched;
            var fetchStart = clock.Elapsed;
            var progress = ProgressLine.ForTerminal(o.Quiet);
            try
            {
                await using (progress is null ? null : new AgentFetchProgress(progress, pipe, name))
                    fetched = await agent.PrefetchAsync(name, version, pin: null, fetchTimer.Token);
            }
            finally
            {
                progress?.Clear();
            }
            // The start of an id was resolved by the agent: from here on the version is the one it fetched.
            if (VersionPrefix.IsPrefix(version) && fetched.Version.StartsWith(version!, StringComparison.OrdinalIgnoreCase)) version = fetched.Version;
            if (ranks is not null)
                fanout += $" publish-seconds={(clock.Elapsed - fetchStart).TotalSeconds:0.000} startup-seconds={StartupSeconds(clock):0.000} " +
                          $"join-seconds={joined.TotalSeconds:0.000} agent-seconds={agentSeconds:0.000}";
            // The node's CPU for this dataset: this process's, and the agent's over the fetch (all of it when started here).
            var agentCpu = (await agent.StatusAsync(fetchTimer.Token)).CpuSeconds - (agentStarted ? 0 : status.CpuSeconds);
            fanout += $" cpu-seconds={Environment.CpuUsage.TotalTime.TotalSeconds:0.000} agent-cpu-seconds={agentCpu:0.000}";
            pinned = true;
            var local = await agent.PrefetchAsync(name, fetched.Version, pin: job, CancellationToken.None);
            cancel.Token.ThrowIfCancellationRequested();

            var confirmStart = clock.Elapsed;
            var problem = await ConfirmAsync(pipe, name, version ?? fetched.Version, local, cancel.Token);
            if (ranks is not null) fanout += $" confirm-seconds={(clock.Elapsed - confirmStart).TotalSeconds:0.000}";
            if (problem is not null)
            {
                await ReleaseQuietlyAsync(pipe, name, local.Version, job, evict: true);
                throw CommandException.Failed($"{name} version {local.Version} did not land intact on {status.Node}: {problem}; the copy was released and evicted", ErrorCode.Integrity);
            }
            // After a fan-out the agent finds the ring's segments in the partial copy: the data came by the fan-out.
            var source = ranks is not null && fanout.StartsWith(" fanout=mpi", StringComparison.Ordinal) && fetched.Source == "resumed" ? "fanout" : fetched.Source;
            var kept = $"{(fetched.ResumedBytes > 0 && source == "resumed" ? $" resumed-bytes={fetched.ResumedBytes}" : "")}{(fetched.ReusedBytes > 0 ? $" reused-bytes={fetched.ReusedBytes}" : "")}";
            if (!o.Quiet)
                LineOutput.WriteLine(o.Json
                    ? JsonFields.Object([("node", status.Node), ("dataset", name), ("version", local.Version), ("bytes", local.Length),
                        ("seconds", Math.Round(clock.Elapsed.TotalSeconds, 3)), ("source", source), .. JsonFields.Parse(kept + fanout), ("path", local.Path)])
                    : $"node={status.Node} dataset={name} version={local.Version} bytes={local.Length} seconds={clock.Elapsed.TotalSeconds:0.000} source={source}{kept}{fanout} path={local.Path}");
            if (leavesServed is not null)
            {
                // This node is ready; the leaves still get this member's share before the process (and MPI) goes.
                try { await leavesServed.WaitAsync(fetchTimeout, cancel.Token); }
                catch (Exception e) when (e is not OperationCanceledException || !cancel.IsCancellationRequested)
                {
                    ranks?.Abandon();
                    Console.Error.WriteLine($"hpcdata nodeprep: sending this node's share to the slow nodes stopped ({e.Message}); they fetch the rest directly");
                }
            }
            return 0;
        }
        catch (OperationCanceledException) when (cancel.IsCancellationRequested)
        {
            if (pinned) await ReleaseQuietlyAsync(pipe, name, version, job, evict: false);
            throw CommandException.Cancelled("cancelled; no pin was left on the node");
        }
        catch (OperationCanceledException)
        {
            throw CommandException.Failed($"fetching {name} took longer than {fetchTimeout.TotalMinutes:0.#} min (--timeout); nothing was pinned", ErrorCode.Timeout);
        }
        catch (CommonDataException e)
        {
            throw CommandException.Failed(e.Code switch
            {
                ErrorCode.NotFound => $"{e.Message} (was it staged? check the name and the agent's cache hosts)",
                ErrorCode.Unavailable => $"the cache tier is unreachable from this node: {e.Message}",
                _ => e.Message,
            }, e.Code);
        }
        catch (Exception e) when (e is IOException or TimeoutException or UnauthorizedAccessException or InvalidDataException or ArgumentException)
        {
            throw CommandException.From(e);
        }

        async Task<(AgentClient Agent, AgentStatus Status, double Seconds, bool Started)> ReachAgentAsync()
        {
            var started = Stopwatch.StartNew();
            var (agent, startedHere) = await ConnectOrStartAsync(o, pipe, startTimeout, cancel.Token);
            try { return (agent, await agent.StatusAsync(cancel.Token), started.Elapsed.TotalSeconds, startedHere); }
            catch
            {
                await agent.DisposeAsync();
                throw;
            }
        }
    }

    /// <summary>This process's rank as its launcher's variables give it (hydra, Open MPI, PMIx, srun), before MPI is up.</summary>
    internal static int? LaunchedRank()
    {
        foreach (var variable in new[] { "PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID" })
            if (int.TryParse(Environment.GetEnvironmentVariable(variable), System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var n))
                return n;
        return null;
    }

    /// <summary>
    /// How many ranks the launcher that started this process started in all (the process-management interface's
    /// variables that mpiexec.hydra, Open MPI's mpirun and srun set), or null when no launcher did.
    /// </summary>
    internal static int? LaunchedRanks()
    {
        foreach (var variable in new[] { "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE" })
            if (int.TryParse(Environment.GetEnvironmentVariable(variable), System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var n))
                return n;
        return null;
    }

    /// <summary>From the process's start until <paramref name="clock"/> started: the runtime's own start-up.</summary>
    private static double StartupSeconds(Stopwatch clock)
    {
        using var self = Process.GetCurrentProcess();
        return Math.Max(0, (DateTime.Now - self.StartTime).TotalSeconds - clock.Elapsed.TotalSeconds);
    }

    /// <summary>The ranks once MPI is up, or none and whether that is because it did not come up within <paramref name="limit"/>.</summary>
    private static async Task<(MpiRankGroup? Ranks, bool TimedOut)> JoinWithinAsync(Task<MpiRankGroup?> joining, TimeSpan limit)
    {
        try { return (await joining.WaitAsync(limit), false); }
        catch (TimeoutException)
        {
            // MPI_Init cannot be called off: its thread is left waiting, and the process exits without it.
            Console.Error.WriteLine($"hpcdata nodeprep: MPI did not start within {Durations.Format((long)limit.TotalSeconds)} (--stall-timeout): a rank " +
                                    "never started or died before joining; completing by direct fetch");
            return (null, true);
        }
    }

    private static MpiRankGroup? JoinRanks(bool controlOnly)
    {
        try
        {
            return MpiRankGroup.Start(controlOnly);
        }
        catch (Exception e) when (e is MpiUnavailableException or MpiException)
        {
            Console.Error.WriteLine($"hpcdata nodeprep: no MPI for the fan-out here ({e.Message}); fetching directly");
            return null;
        }
    }

    /// <returns>The summary, and a task that ends once the leaves have this member's share and the ring's links and
    /// the cache-tier client are closed: both outlive the exchange while slow nodes are still being served.</returns>
    private static async Task<(FanoutSummary Summary, Task Served)> ExchangeAsync(MpiRankGroup ranks, NodePrepOptions o, string pipe, string name, string? version,
        TimeSpan stallTimeout, CancellationToken ct)
    {
        var tierOptions = o.CacheTier();
        var tier = new CacheTierClient(tierOptions, o.TierLog);
        try
        {
            var (summary, served) = await NodeExchange.RunAsync(ranks, tier, tierOptions.Hosts, new AgentIngest(pipe), name, version,
                new ExchangeSettings(stallTimeout, Durations.Parse(o.PeerTimeout), o.NodePrep.LinkProbe, o.RingGroups, TcpRing: o.Ring == "tcp"), ct);
            return (summary, CloseAfter(served));
        }
        catch
        {
            await tier.DisposeAsync();
            throw;
        }

        async Task CloseAfter(Task served)
        {
            try { await served; }
            finally { await tier.DisposeAsync(); }
        }
    }

    private static async Task<(AgentClient Agent, bool Started)> ConnectOrStartAsync(NodePrepOptions o, string pipe, TimeSpan startTimeout, CancellationToken ct)
    {
        // No socket file: nothing to wait for (a connect would wait its whole timeout), so an agent is started at once.
        try
        {
            var running = await AgentClient.ConnectIfListeningAsync(pipe, TimeSpan.FromSeconds(2), ct);
            // What configures an agent node prep starts does nothing to one that runs: said, not silently dropped.
            var agentOnly = CacheClientOptions.Group.Names.Concat(AgentSwitches.Start).Except(AgentSwitches.Pipe).ToHashSet(StringComparer.OrdinalIgnoreCase);
            var ignored = o.Origins.FromCommandLine.Where(agentOnly.Contains).Order(StringComparer.Ordinal).ToList();
            if (ignored.Count > 0 && !o.Quiet)
                Console.Error.WriteLine($"hpcdata nodeprep: the node agent on '{pipe}' was already running, with its own settings: {string.Join(", ", ignored)} " +
                                        $"{(ignored.Count == 1 ? "applies" : "apply")} only to an agent node prep starts{(o.Fanout == "mpi" ? " (and to the fan-out's own fetching)" : "")}; " +
                                        "restart the agent, or its service, to change them");
            return (running, false);
        }
        catch (Exception e) when (e is TimeoutException or IOException or UnauthorizedAccessException)
        {
            if (o.NoStart) throw new IOException($"no node agent answers on pipe '{pipe}' and --no-start was given");
            if (NodeAgentLauncher.ManagedBy() is { } manager)
                throw new IOException($"no node agent answers on pipe '{pipe}', and it is managed by {manager}: not starting another; check that service");
        }
        // Each node prep's agent keeps its copies apart (a directory per pipe) unless the data directory was given.
        var given = o.Agent.Options;
        var dataDir = o.Agent.IsSet("--data-dir") ? given.DataDirectory : DefaultDataDirectory(pipe);
        if (!o.Quiet) Console.Error.WriteLine($"hpcdata nodeprep: no node agent on pipe '{pipe}'; starting one (data in {dataDir})");
        await NodeAgentLauncher.StartAsync(AgentFor(o, pipe, dataDir), startTimeout, ct);
        return (await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(5), ct), true);
    }

    /// <summary>The agent node prep starts when none answers: the agent switches it took and the whole cache tier.</summary>
    public static NodeAgentOptions AgentFor(NodePrepOptions o, string pipe, string dataDirectory)
    {
        var given = o.Agent.Options;
        var agent = new NodeAgentOptions { Pipe = pipe, DataDirectory = dataDirectory, Budget = given.Budget, NodeName = given.NodeName };
        o.PassCacheTierTo(agent.CacheTier);
        return agent;
    }

    public static string DefaultDataDirectory(string pipe)
    {
        var leaf = "hpcdata-" + Path.GetFileNameWithoutExtension(NodeAgentLauncher.StateFile(pipe));
        return Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), leaf);
    }

    /// <summary>
    /// Opens the copy as a worker would and checks what the agent says of it: the version and description are what was
    /// pinned and the agent's status counts every segment done. The bytes are not hashed again here: the agent checked
    /// every segment against its content id as it wrote it, and a second pass over the copy would cost the node a read
    /// of all of it for nothing a worker could not ask for itself (<c>VerifyHash()</c>). Returns what is wrong, or null.
    /// </summary>
    private static async Task<string?> ConfirmAsync(string pipe, string name, string expectedVersion, LocalDataset pinned, CancellationToken ct)
    {
        await using var check = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(5), ct);
        var local = await check.OpenAsync(name, expectedVersion, ct); // leased while we check
        if (local.Version != expectedVersion) return $"agent serves version {local.Version}, expected {expectedVersion}";
        if (local.Hash != pinned.Hash || local.Length != pinned.Length) return "agent describes the copy differently on a second open";
        var copy = (await check.StatusAsync(ct)).Copies.FirstOrDefault(c => c.Version == local.Version);
        if (copy is not { State: "complete" } || copy.SegmentsDone != copy.Segments || copy.BytesDone != local.Length)
            return $"the agent's status does not show a complete copy ({copy?.State ?? "absent"}, {copy?.SegmentsDone}/{copy?.Segments} segments)";
        return null;
    }

    internal static async Task ReleaseQuietlyAsync(string pipe, string name, string? version, string job, bool evict)
    {
        try
        {
            await using var agent = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(2));
            await agent.ReleaseAsync(name, version, job, evict);
        }
        catch (Exception e) when (e is IOException or TimeoutException or CommonDataException) { }
    }
}
