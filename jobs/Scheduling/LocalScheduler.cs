using Hpc.Jobs.Cli;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Agent;
using System.Diagnostics;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Scheduling;

/// <summary>
/// The embedded scheduler: every "node" is a node agent with its own pipe and data directory on this machine, node
/// prep and node release run as their own <c>hpcdata</c> processes as a scheduler would run them, and service hosts
/// are local processes. Node release runs on every node however the job ends, and everything started is stopped.
/// </summary>
/// <param name="output">Where the job's own commands print.</param>
/// <param name="summaries">Where the scheduler's lines of what it did go (each node's node prep and release; default: <paramref name="output"/>).</param>
public sealed class LocalScheduler(TextWriter output, TextWriter errors, TextWriter? summaries = null)
{
    private readonly TextWriter _summaries = summaries ?? output;

    public static readonly TimeSpan ReadyTimeout = TimeSpan.FromSeconds(60);

    public sealed record Timings(double PrepareSeconds, double RunSeconds, double ReleaseSeconds);

    public Timings? LastTimings { get; private set; }

    public async Task<int> RunAsync(JobSpec job, string jobId, string root, long agentBudget, CancellationToken ct)
    {
        var agents = new List<ComponentProcess>();
        var hosts = new List<JobProcess>();
        // The pipe of node n ends in n−1, so a fan-out rank finds its node's agent as "{rank}".
        var pipePrefix = $"hd{Environment.ProcessId}{jobId.GetHashCode() & 0xffff:x}n";
        var pipes = Enumerable.Range(0, job.Nodes).Select(n => pipePrefix + n).ToList();
        double prepare = 0, run = 0;
        var clock = Stopwatch.StartNew();
        try
        {
            for (var n = 0; n < job.Nodes; n++)
            {
                var options = new NodeAgentOptions { Pipe = pipes[n], DataDirectory = Path.Combine(root, $"node{n + 1}"), NodeName = $"node{n + 1}", Budget = agentBudget };
                CacheClientOptions.Group.CopyTo(job.CacheTier, options.CacheTier);
                var agent = ComponentProcess.Start(options, name: $"agent{n + 1}");
                agents.Add(agent);
                await agent.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            }

            var preps = job.FanoutMpi
                ? await FanoutPrepAsync(job, jobId, pipePrefix, ct)
                : await Task.WhenAll(Enumerable.Range(0, job.Nodes).Select(n => RunHpcdataAsync([.. JobSpec.DirectNodePrepArguments, "--job", jobId], JobEnvironment(job, jobId, pipes[n]), ct)));
            prepare = clock.Elapsed.TotalSeconds;
            var failed = false;
            for (var n = 0; n < job.Nodes; n++)
            {
                if (preps[n].Code == 0) { _summaries.WriteLine($"  nodeprep  {preps[n].Stdout}"); }
                else { failed = true; errors.WriteLine($"hpcdata prestage: node prep failed on node{n + 1} (exit {preps[n].Code}): {preps[n].Stderr}"); }
            }
            ct.ThrowIfCancellationRequested();
            if (failed) return ExitCodes.Failed;

            var paths = await Task.WhenAll(pipes.Select(p => DatasetPathAsync(job, p, ct)));
            clock.Restart();
            for (var n = 0; n < job.Nodes; n++)
                for (var k = 0; k < job.HostsPerNode; k++)
                    hosts.Add(JobProcess.Start(job.Command, JobEnvironment(job, jobId, pipes[n], paths[n]), $"node{n + 1}.{k + 1}", output));
            int code;
            if (job.ClientCommand is null)
            {
                var codes = await Task.WhenAll(hosts.Select(h => h.WaitForExitAsync(ct)));
                code = codes.FirstOrDefault(c => c != 0);
            }
            else
            {
                var endpoints = await Task.WhenAll(hosts.Select(h => h.WaitReadyAsync(ReadyTimeout, ct)));
                var env = JobEnvironment(job, jobId, pipes[0], paths[0]);
                env[JobVariables.ServiceEndpoints] = string.Join(",", endpoints);
                await using var client = JobProcess.Start(job.ClientCommand, env, "client", output);
                code = await client.WaitForExitAsync(ct);
            }
            run = clock.Elapsed.TotalSeconds;
            return code;
        }
        catch (InvalidOperationException e) when (!ct.IsCancellationRequested)
        {
            errors.WriteLine($"hpcdata prestage: {e.Message}");
            return ExitCodes.Failed;
        }
        finally
        {
            await Task.WhenAll(hosts.Select(h => h.DisposeAsync().AsTask()));
            clock.Restart();
            // Release on every node that may hold a pin, also after a failure or Ctrl-C: never with the job's token.
            var releases = await Task.WhenAll(Enumerable.Range(0, agents.Count).Select(n => ReleaseAsync(job, jobId, pipes[n])));
            foreach (var r in releases.Where(r => r.Length > 0)) _summaries.WriteLine($"  release   {r}");
            LastTimings = new Timings(prepare, run, clock.Elapsed.TotalSeconds);
            await Task.WhenAll(agents.Select(a => a.DisposeAsync().AsTask()));
        }
    }

    private async Task<string> ReleaseAsync(JobSpec job, string jobId, string pipe)
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        var args = job.EvictOnRelease ? new[] { "noderelease", "--job", jobId, "--evict" } : ["noderelease", "--job", jobId];
        try
        {
            var r = await RunHpcdataAsync(args, JobEnvironment(job, jobId, pipe), timeout.Token);
            return r.Code == 0 ? r.Stdout : $"failed (exit {r.Code}): {r.Stderr}";
        }
        catch (OperationCanceledException) { return "timed out"; }
    }

    /// <summary>Where a prepared node keeps the job's copy (each local "node" has its own data directory).</summary>
    private static async Task<string> DatasetPathAsync(JobSpec job, string pipe, CancellationToken ct)
    {
        await using var agent = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(5), ct);
        return (await agent.PrefetchAsync(job.Dataset, job.Version, pin: null, ct)).Path;
    }

    /// <summary>What every process of a local job sees: the job's variables and the whole cache tier, its secrets too (an environment, never written down).</summary>
    public static Dictionary<string, string?> JobEnvironment(JobSpec job, string jobId, string pipe, string? datasetPath = null)
    {
        var env = new Dictionary<string, string?>
        {
            [JobVariables.DatasetPath] = datasetPath,
            [JobVariables.Dataset] = job.Dataset,
            [JobVariables.Version] = job.Version,
            [JobVariables.AgentPipe] = pipe,
            [JobVariables.JobId] = jobId,
        };
        foreach (var (name, value) in job.CacheTierVariables.Concat(job.CacheTierSecrets).Concat(job.NodePrepVariables)) env[name] = value;
        // A software tree's own activation (a venv's bin/ on PATH, packages on PYTHONPATH), as the Slurm script's eval of `hpcdata path --shell` gives.
        if (datasetPath is not null)
            foreach (var (name, value) in TreeEnvironment.Of(datasetPath).Resolve(Environment.GetEnvironmentVariable)) env[name] = value;
        return env;
    }

    /// <summary>
    /// Node prep as one MPI job on this machine, a rank per "node" (<c>mpiexec.hydra -n N</c>), each rank finding its
    /// node's agent by rank. A rank that dies ends the whole MPI job (the launcher stops the others); the agents keep
    /// every segment they verified, so each node without a result then runs a plain node prep, which fetches only what
    /// is missing. Returns one result per node.
    /// </summary>
    private async Task<(int Code, string Stdout, string Stderr)[]> FanoutPrepAsync(JobSpec job, string jobId, string pipePrefix, CancellationToken ct)
    {
        var environment = JobEnvironment(job, jobId, pipePrefix + "{rank}");
        // Every rank is on this machine, so UCX needs no network device; one that appears or goes while the ranks
        // start (a container or a VM starting beside them) would fail MPI_Init with "init_worker No such device".
        if (string.IsNullOrEmpty(Environment.GetEnvironmentVariable(UcxNetDevices))) environment[UcxNetDevices] = "lo";
        var (code, stdout, stderr) = await RunHpcdataAsync([.. job.NodePrepArguments, "--job", jobId, "--pipe", pipePrefix + "{rank}"],
            environment, ct, launcher: ["mpiexec.hydra", "-n", job.Nodes.ToString(System.Globalization.CultureInfo.InvariantCulture)]);
        var lines = stdout.Split('\n');
        var results = Enumerable.Range(0, job.Nodes).Select(n =>
            lines.FirstOrDefault(l => l.StartsWith($"node=node{n + 1} ", StringComparison.Ordinal)) is { } line ? (0, line, "") : (-1, "", "")).ToArray();
        var missing = Enumerable.Range(0, job.Nodes).Where(n => results[n].Item1 != 0).ToList();
        if (missing.Count == 0) return results;
        ct.ThrowIfCancellationRequested();
        output.WriteLine($"prestage: fan-out ended with exit {code} before {missing.Count} of {job.Nodes} node(s) were prepared; " +
                         $"completing them by direct fetch{(stderr.Length > 0 ? $" ({string.Join(" | ", stderr.Trim().Split('\n').TakeLast(6).Select(l => l.Trim()))})" : "")}");
        var direct = await Task.WhenAll(missing.Select(n => RunHpcdataAsync([.. JobSpec.DirectNodePrepArguments, "--job", jobId], JobEnvironment(job, jobId, pipePrefix + n), ct)));
        for (var i = 0; i < missing.Count; i++) results[missing[i]] = direct[i];
        return results;
    }

    private const string UcxNetDevices = "UCX_NET_DEVICES";

    private static async Task<(int Code, string Stdout, string Stderr)> RunHpcdataAsync(string[] args, IDictionary<string, string?> env, CancellationToken ct,
        IReadOnlyList<string>? launcher = null)
    {
        await using var p = ComponentProcess.Start("hpcdata", args, env, name: $"hpcdata {args[0]}", launcher: launcher);
        int code;
        try { code = await p.WaitForExitAsync(TimeSpan.FromHours(2), ct); }
        catch (OperationCanceledException)
        {
            // Let it clean up after itself (nodeprep drops a pin it just took), then the dispose kills what is left.
            await p.StopAsync(TimeSpan.FromSeconds(10));
            throw;
        }
        return (code, string.Join(launcher is null ? " " : "\n", p.StandardOutput), p.StandardErrorTail);
    }
}
