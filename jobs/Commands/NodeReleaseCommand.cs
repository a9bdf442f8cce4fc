using Hpc.CommonData.Hosting;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Format;
using Hpc.Jobs.Scheduling;

using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class NodeReleaseOptions : AgentClientOptions, IVerbOptions
{
    public static string Verb => "noderelease";

    // Slurm's Epilog drains a node whose epilog fails: a typo in client.conf, which release never needs, must not.
    public static bool WithoutSettingsFile => true;

    public static string Summary => "Node release task: drop the job's pin (optionally evict the copy). Never fails because the data is already gone.";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata noderelease --job $SLURM_JOB_ID",
         "a Slurm epilog: drop every pin the job holds on this node"),
        ("hpcdata noderelease risk/prices --evict",
         "drop the job's pin and delete the copy if nothing else uses it"),
    ];

    [Switch("", "The dataset, optionally @ a version id (" + DatasetArgument.JobDefault + "; no version: every version this job pinned; " +
        "no dataset: every copy this job pinned).", Meta = DatasetArgument.Meta)]
    public string? Dataset { get; set; }

    [Switch("--job", "Job id the data was pinned with (default: $HPCDATA_JOB_ID, $SLURM_JOB_ID or $CCP_JOBID).", Meta = "ID")]
    public string? Job { get; set; }


    [Switch("--evict", "Also delete the node's copy when nothing else pins or uses it.")]
    public bool Evict { get; set; }

    [Switch("--stop-agent", "auto: stop the agent when node prep started it and nothing is pinned, leased or fetching; never; always (only an agent node prep started).", Meta = "WHEN")]
    public string StopAgent { get; set; } = "auto";

    [Switch("--json", "One JSON object on stdout (node, dataset, job, pins released, the copy's state), also when nothing was released (with why).")]
    public bool Json { get; set; }

    [Switch("--keep-data", "When stopping an agent node prep started, keep its copies in memory (/dev/shm) for the next job's agent; by default they are deleted with it.")]
    public bool KeepData { get; set; }
}

/// <summary>
/// Exit codes: 0 released (or nothing to release), 2 bad usage. Problems reaching the agent are reported, not failed on,
/// and so is a job for which this user holds no pin on the node (a node release runs in epilogs, where a failure would
/// take the node out of service): one line says so. Only the calling user's pins of that name are released (two users
/// pinning under one job id hold two pins); root, the agent's user and its admin group release every pin of that name.
/// </summary>
public static class NodeReleaseCommand
{
    public static async Task<int> RunAsync(NodeReleaseOptions o, CancellationToken ct)
    {
        var (name, version) = DatasetArgument.OrJob(o.Dataset) is { } selected ? (selected.Name, selected.Version) : (null, null);
        var job = JobVariables.JobIdFromEnvironment(o.Job);
        var pipe = o.Agent.PipeName;
        if (job is null) throw CommandException.Usage("no job id (--job, HPCDATA_JOB_ID, SLURM_JOB_ID or CCP_JOBID)");
        if (o.StopAgent is not ("auto" or "never" or "always")) throw CommandException.Usage($"--stop-agent '{o.StopAgent}' is not one of auto, never, always");

        AgentStatus status;
        int? released = 0;
        try
        {
            await using var agent = await AgentClient.ConnectIfListeningAsync(pipe, TimeSpan.FromSeconds(2));
            if (name is not null) released = await agent.ReleasePinAsync(name, version, job, o.Evict);
            else
                // No dataset named (e.g. a Slurm Epilog): every copy this job pinned that this user may release; another
                // user's pin under the same job id is not this job's.
                foreach (var copy in (await agent.StatusAsync()).Copies.Where(c => (c.Releasable ?? c.Pins).Contains(job)))
                    released += await agent.ReleasePinAsync(copy.Name, copy.Version, job, o.Evict);
            status = await agent.StatusAsync();
        }
        catch (Exception e) when (e is TimeoutException or IOException or UnauthorizedAccessException)
        {
            ForgetDeadAgent(pipe);
            return Notice(o, name, job, "no-agent", $"{AgentClient.NotAnswering(pipe, e)}; nothing to release for job {job}");
        }
        catch (CommonDataException e)
        {
            return Notice(o, name, job, "refused", $"the agent could not release {name} for job {job}: {e.Message}; nothing else done");
        }

        var left = status.Copies.Where(c => (name is null || c.Name == name) && (version is null || c.Version == version)).ToList();
        var state = left.Count == 0 ? (o.Evict ? "evicted" : "not-on-node") : left.Any(c => c.Pins.Count > 0 || c.Leases > 0) ? "in-use" : "cached";
        if (released == 0)
            Console.Error.WriteLine($"hpcdata noderelease: {CurrentUser()} holds no pin '{job}' on {(name is null ? "any copy" : $"dataset '{name}'")} on node {status.Node}; nothing released");
        Console.WriteLine(o.Json
            ? JsonFields.Object([("node", status.Node), ("dataset", name ?? "*"), ("job", job), ("released", released), ("state", state)])
            : $"node={status.Node} dataset={name ?? "*"} job={job} released{(released is { } n ? $" pins={n}" : "")} state={state}");
        await MaybeStopAgentAsync(o.StopAgent, pipe, status, o.KeepData);
        return 0;
    }

    /// <summary>
    /// An agent node prep started on demand is stopped once idle so it does not outlive the jobs that needed it;
    /// an agent run by a service manager (or by hand) is never touched. The copies of a stopped agent in node prep's
    /// default directory are in memory (/dev/shm) that no one serves from any more: they go with it, unless kept.
    /// A data directory the job named is the job's to keep.
    /// </summary>
    private static async Task MaybeStopAgentAsync(string mode, string pipe, AgentStatus status, bool keepData)
    {
        if (mode == "never" || NodeAgentLauncher.Find(pipe) is not { } started) return;
        var busy = status.Copies.Where(c => c.Pins.Count > 0 || c.Leases > 0 || c.State == "fetching").ToList();
        if (mode == "auto" && busy.Count > 0)
        {
            Console.Error.WriteLine($"hpcdata noderelease: leaving the agent on '{pipe}' running: {string.Join(", ", busy.Select(c => $"{c.Name} ({c.State}, {c.Pins.Count} pins, {c.Leases} leases)"))}");
            return;
        }
        await NodeAgentLauncher.StopAsync(started, TimeSpan.FromSeconds(10));
        Console.Error.WriteLine($"hpcdata noderelease: stopped the node agent node prep had started on '{pipe}' (pid {started.Pid})");
        if (!keepData && IsInMemory(started.DataDirectory) && Path.GetFullPath(started.DataDirectory) == Path.GetFullPath(NodePrepCommand.DefaultDataDirectory(pipe))
            && Directory.Exists(started.DataDirectory) && !NodeAgentLauncher.IsAlive(started.Pid))
        {
            var bytes = new DirectoryInfo(started.DataDirectory).EnumerateFiles("*", SearchOption.AllDirectories).Sum(f => f.Length);
            try
            {
                Directory.Delete(started.DataDirectory, recursive: true);
                Console.Error.WriteLine($"hpcdata noderelease: deleted its copies in {started.DataDirectory} ({Hpc.CommonData.ByteSize.Format(bytes)} of memory; --keep-data keeps them)");
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                Console.Error.WriteLine($"hpcdata noderelease: could not delete the stopped agent's copies in {started.DataDirectory}: {e.Message}");
            }
        }
    }

    private static bool IsInMemory(string directory) =>
        Path.GetFullPath(directory).StartsWith("/dev/shm/", StringComparison.Ordinal);

    private static void ForgetDeadAgent(string pipe)
    {
        if (NodeAgentLauncher.Find(pipe) is { } started && !NodeAgentLauncher.IsAlive(started.Pid))
            _ = NodeAgentLauncher.StopAsync(started, TimeSpan.Zero);
    }

    private static string CurrentUser()
    {
        if (!OperatingSystem.IsLinux()) return $"user '{Environment.UserName}'";
        var uid = Hpc.CommonData.Access.UnixAccounts.EffectiveUserId;
        return $"user '{Hpc.CommonData.Access.UnixAccounts.UserName(uid) ?? uid.ToString()}' (uid {uid})";
    }

    /// <summary>A line on stderr about what was not done, where that is no failure (exit 0); with --json the object says it too.</summary>
    private static int Notice(NodeReleaseOptions o, string? name, string job, string state, string message)
    {
        Console.Error.WriteLine($"hpcdata noderelease: {message}");
        if (o.Json) Console.WriteLine(JsonFields.Object([("dataset", name ?? "*"), ("job", job), ("released", 0), ("state", state), ("message", message)]));
        return ExitCodes.Ok;
    }
}
