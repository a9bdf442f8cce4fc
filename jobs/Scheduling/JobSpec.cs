using Hpc.CommonData.Cli;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Scheduling;

/// <summary>
/// A job as prestage hands it to a scheduler: which data every node needs (by exact version), where it comes from,
/// and what runs on each node.
/// </summary>
/// <param name="Command">The service-host command, run <see cref="HostsPerNode"/> times on every node.</param>
/// <param name="ClientCommand">For a SOA job: run once after every service host is up; the job ends when it ends.</param>
/// <param name="Hpcdata">How nodes invoke hpcdata (e.g. "hpcdata" on PATH, or "dotnet /opt/hpcdata/hpcdata.dll").</param>
/// <param name="AgentPipe">The node agent's pipe on every node (null: the agent default or the node's own setting).</param>
/// <param name="NodePrep">Node prep's settings on every node (null: node prep's defaults).</param>
/// <param name="Verbose">Node prep on every node says what it does on stderr (<c>--verbose</c>, as prestage was given it).</param>
public sealed record JobSpec(
    string JobName,
    string Dataset,
    string Version,
    CacheTierOptions CacheTier,
    int Nodes,
    int HostsPerNode,
    IReadOnlyList<string> Command,
    IReadOnlyList<string>? ClientCommand = null,
    string Hpcdata = "hpcdata",
    string? AgentPipe = null,
    bool EvictOnRelease = false,
    bool LifetimeJob = false,
    string? WorkDirectory = null,
    bool FanoutMpi = false,
    NodePrepSwitches? NodePrep = null,
    bool Verbose = false,
    string SlurmStaging = "step")
{
    /// <summary>
    /// Node prep's own arguments: with the fan-out, one MPI rank per node shares the fetching; without it, a direct fetch
    /// said outright, so node prep's own <c>auto</c> never second-guesses the job's choice (srun's tasks look like ranks).
    /// </summary>
    /// <summary>The site's Slurm stages the data itself (deploy/slurm/burst_buffer.lua): the job only names it.</summary>
    public bool BurstBuffer => SlurmStaging == "burst-buffer";

    public IReadOnlyList<string> NodePrepArguments => FanoutMpi ? ["nodeprep", "--fanout", "mpi"] : DirectNodePrepArguments;

    /// <summary>Node prep fetching directly: the job's choice, or the completion after a fan-out that failed.</summary>
    public static IReadOnlyList<string> DirectNodePrepArguments => ["nodeprep", "--fanout", "none"];

    public string CacheHostList => string.Join(",", CacheTier.Hosts);

    /// <summary>
    /// The cache tier as the job's variables, every switch that was given (hosts, account, password file, TLS, CA,
    /// cluster, replicas, rate): what node prep on every node, and the agent it starts, read. Never the password itself:
    /// a job carries none (<see cref="SecretVariables"/>); the local scheduler's processes, on this machine, get
    /// <see cref="CacheTierSecrets"/> in their environment.
    /// </summary>
    public IReadOnlyList<KeyValuePair<string, string>> CacheTierVariables => Hpc.Jobs.Cli.CacheClientOptions.Group.ToVariables(CacheTier);

    /// <summary>
    /// Node prep's settings as the job's variables, those that differ from node prep's defaults: node prep reads them on
    /// every node, in the fan-out step and in the direct one alike; <c>--verbose</c> when prestage was given it.
    /// </summary>
    public IReadOnlyList<KeyValuePair<string, string>> NodePrepVariables =>
        [.. NodePrepSwitches.Group.ToVariables(NodePrep ?? new NodePrepSwitches()), .. Verbose ? [new(VerboseSwitch.Variable, "true")] : Array.Empty<KeyValuePair<string, string>>()];

    /// <summary>
    /// The variables of the cache tier's settings that belong to the machine they are set on (an address of its own):
    /// a scheduler that passes the submitting environment on (sbatch) must drop them, for the nodes are other machines.
    /// </summary>
    public static IReadOnlyList<string> ThisMachineVariables { get; } =
        [.. Hpc.Jobs.Cli.CacheClientOptions.Group.Switches.Where(s => s.ThisMachine && s.Environment is not null).Select(s => s.Environment!)];

    /// <summary>
    /// The variables of the cache tier's secrets (the password): a scheduler that keeps a job's environment with the job
    /// (sbatch) must not be handed them, nor the job keep one it inherited.
    /// </summary>
    public static IReadOnlyList<string> SecretVariables { get; } =
        [.. Hpc.Jobs.Cli.CacheClientOptions.Group.Switches.Where(s => s.Secret && s.Environment is not null).Select(s => s.Environment!)];

    /// <summary>The cache tier's secrets that were given (the password), as the variables that carry them.</summary>
    public IReadOnlyList<KeyValuePair<string, string>> CacheTierSecrets => Hpc.Jobs.Cli.CacheClientOptions.Group.SecretVariables(CacheTier);

    /// <summary>A command as a node's shell runs it: a first word of "hpcdata" becomes <see cref="Hpcdata"/>.</summary>
    public string ShellCommand(IReadOnlyList<string> command) =>
        command.Count > 0 && command[0] == "hpcdata" ? string.Join(" ", new[] { Hpcdata }.Concat(command.Skip(1).Select(Quote.Sh))) : Quote.Sh(command);

    public string WindowsCommand(IReadOnlyList<string> command) =>
        command.Count > 0 && command[0] == "hpcdata" ? string.Join(" ", new[] { Hpcdata }.Concat(command.Skip(1).Select(Quote.Cmd))) : Quote.Cmd(command);
}

