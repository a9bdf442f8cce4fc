using System.Diagnostics;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;
using Hpc.Jobs.Scheduling;

using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class PrestageOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "prestage";

    public static string Trailing => "-- COMMAND [ARGS…]";

    public static string Summary => "Stage a dataset if it changed, then run or submit a job whose nodes get it first: hpcdata prestage PATH|NAME [options] -- command args…";

    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata prestage ./prices.csv --name risk/prices --nodes 2 -- python3 risk.py",
         "stage if changed, then run the job on two local nodes"),
        ("hpcdata prestage ./prices.csv -n risk/prices --scheduler slurm --nodes 64 -- srun ./risk",
         "submit a Slurm job whose 64 nodes get the data first (the cache hosts from the client settings file)"),
    ];

    protected override IReadOnlyCollection<string> AgentSwitchNames => AgentSwitches.Pipe;

    // The submitting shell's HPCDATA_AGENT_PIPE is this machine's agent, not the nodes': only a --pipe given goes into the job.
    protected override string AgentTitle => "Node agent (slurm, hpcpack: the nodes' agents; default: the nodes' own setting, not this shell's variable)";

    [Switch("", "A file or directory to stage, or the name of an already staged dataset.", Meta = "SOURCE", Required = true)]
    public string Source { get; set; } = "";

    [Switch("--scheduler", "local (this machine), slurm, or hpcpack.", Meta = "KIND")]
    public string Scheduler { get; set; } = "local";

    [Switch("--nodes", "Nodes.")]
    public int Nodes { get; set; } = 1;

    [Switch("--hosts-per-node", "Service-host processes per node.")]
    public int HostsPerNode { get; set; } = 1;

    [Switch("--client", "SOA client command, run once every service host printed READY; the job ends with it.", Meta = "COMMAND")]
    public string? Client { get; set; }

    [Switch("--cache-host-count", "local: cache hosts to start on this machine when no --cache-hosts are given.")]
    public int CacheHostCount { get; set; } = 1;

    [Switch("--lifetime", "job (remove the version when the job ends, unless another job uses it) or a TTL such as 12h.", Meta = "job|TTL")]
    public string? Lifetime { get; set; }

    [Switch("--job", "local: the job id the nodes pin the data with (default: local-<time>-<pid>).", Meta = "ID")]
    public string? Job { get; set; }

    [Switch("--evict", "Node release also deletes the nodes' copies.")]
    public bool Evict { get; set; }

    [Switch("--fanout", "auto, none, or mpi: node prep runs as one MPI rank per node and the nodes share the fetching " +
        "(local: mpiexec.hydra on this machine; slurm: the srun step; needs an MPI on the nodes, else each node fetches directly). auto: " +
        "whichever the cost model says is faster for the nodes, cache hosts, stored size and link rate, said in one line.", Meta = "MODE")]
    public string Fanout { get; set; } = "auto";

    /// <summary>
    /// The stager's own switches that a stage of SOURCE takes (name, codec, chunking, readers, …), nested rather than
    /// declared again, so each reads and says here what it does for <c>hpcdata stage</c>. Its <c>--link-rate</c> also
    /// feeds <c>--fanout auto</c>. Not its <c>--lifetime</c>: prestage's also takes <c>job</c>.
    /// </summary>
    public StagerOptions Staging { get; } = new();

    /// <summary>The stager's switches prestage takes (<see cref="Staging"/>).</summary>
    public static readonly IReadOnlyCollection<string> StagingSwitches =
        ["--name", "--codec", "--no-compress", "--chunking", "--segment-size", "--link-rate", "--unpublished-lifetime", "--readers", "--skip-unreadable", "--no-space-check"];

    /// <summary>Node prep's settings for the job's nodes: the job sets them as node prep's variables.</summary>
    public NodePrepSwitches NodePrep { get; } = new();

    protected override IEnumerable<NestedSwitches> MoreGroups =>
        [new("Staging a path (the stager's own switches, as hpcdata stage takes them)", Staging, StagingSwitches), NodePrep.Nested(NodePrepSwitches.Title)];

    [Switch(QuietSwitch.Name, QuietSwitch.Help + ". What the job's own commands print is still printed, --dry-run's job text too, " +
        "and of a submitted job only its id, alone on a line.", Alias = QuietSwitch.Alias)]
    public bool Quiet { get; set; }

    [Switch("--json", "One JSON object on stdout for scripts: the job's id, dataset version, fan-out and exit code (local: with its timings; " +
        "slurm, hpcpack: the script submitted, or with --dry-run its text). The job's own commands then print to stderr.")]
    public bool Json { get; set; }

    [Switch("--slurm-staging", "slurm: step (the job's first step prepares its nodes), agents (the nodes' agents run as a service with --peer-listen: " +
        "the batch script asks its node's agent, which has the job's nodes exchange the data as this user, no job step) or burst-buffer (the site's Slurm " +
        "runs deploy/slurm/burst_buffer.lua: the job names its data with a '#BB_LUA hpcdata NAME@VERSION' line and the controller has the nodes' agents " +
        "exchange it before the job starts). A site sets it once in /etc/hpcdata/client.conf (slurm-staging = …).",
        Environment = ClientConfig.SlurmStagingVariable, Meta = "step|agents|burst-buffer")]
    public string SlurmStaging { get; set; } = "step";

    [Switch("--dry-run", "slurm, hpcpack: print the job instead of submitting it.")]
    public bool DryRun { get; set; }

    [Switch("--hpcdata", "slurm, hpcpack: how nodes run hpcdata (default: the installed tool: this launcher by absolute path, else hpcdata on PATH; from a build without one, this build).", Meta = "COMMAND")]
    public string? Hpcdata { get; set; }

    /// <summary>The stager this prestage runs for <paramref name="path"/>: its own switches and the whole cache tier, on <paramref name="hosts"/>.</summary>
    public StagerOptions Stager(string path, string name, IReadOnlyList<string> hosts)
    {
        var stager = new StagerOptions();
        SwitchGroup.Of(typeof(StagerOptions), StagingSwitches).CopyTo(Staging, stager);
        stager.Path = path;
        stager.Name = name;
        stager.CacheTier = CacheTierFor(hosts);
        stager.Json = true;
        stager.Verbose = Verbose;
        stager.Lifetime = Lifetime is { } l && l != "job" ? l : null;
        return stager;
    }

    [Switch("--work-dir", "local: scratch directory for the nodes' data (default under /dev/shm; removed afterwards unless given). slurm, hpcpack: where the job script is written (default: here).", Meta = "DIR")]
    public string? WorkDir { get; set; }
}

/// <summary>Exit codes: the job's own exit code; staging, preparation or submission failing, its kind's (<see cref="ExitCodes"/>); 2 bad usage; 130 cancelled.</summary>
public sealed class PrestageCommand(PrestageOptions o, IReadOnlyList<string> command)
{
    private readonly List<ComponentProcess> _cacheHosts = [];

    /// <summary>Everything after "--" is the service-host command, passed through untouched.</summary>
    public static Task<int> RunAsync(string[] args)
    {
        var split = Array.IndexOf(args, "--");
        var (own, command) = split < 0 ? (args, Array.Empty<string>()) : (args[..split], args[(split + 1)..]);
        return VerbContract<PrestageOptions>.RunAsync("hpcdata prestage", own, (o, ct) => new PrestageCommand(o, command).RunAsync(ct));
    }

    public async Task<int> RunAsync(CancellationToken stop)
    {
        if (Validate() is { } usage) throw CommandException.Usage(usage);
        using var cancel = CancellationTokenSource.CreateLinkedTokenSource(stop);
        var local = o.Scheduler == "local";
        var root = o.WorkDir ?? Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"hpcdata-job-{Environment.ProcessId}");
        var jobId = o.Job ?? (local ? $"local-{DateTime.UtcNow:yyyyMMdd-HHmmss}-{Environment.ProcessId}" : null);
        string? version = null, datasetName = null;
        CacheTierOptions? tierOptions = null;
        var clock = Stopwatch.StartNew();
        try
        {
            var (path, name) = ResolveSource();
            datasetName = name;
            if (local) Directory.CreateDirectory(root);
            var size = path is null ? 1L << 30 : PathSize(path);
            var hosts = await CacheHostsAsync(local, path is null, size, cancel.Token);
            o.CacheTierSwitches.Hosts = hosts.ToList();
            tierOptions = o.CacheTier();
            var (v, how) = path is not null ? await StageAsync(path, name, hosts, cancel.Token) : (await LatestAsync(name, tierOptions, cancel.Token), "already staged");
            version = v;
            Say($"prestage: {name} version {version} ({how})");

            var lifetimeJob = o.Lifetime == "job";
            var fanoutMpi = o.Fanout == "mpi";
            if (o.Fanout == "auto")
            {
                var choice = await ChooseFanoutAsync(tierOptions, name, version, hosts.Count, cancel.Token);
                Say($"prestage: fan-out auto → {choice.Reason}");
                fanoutMpi = choice.Mpi;
            }
            // The nodes get the cache tier whole, as this command was given it (files by full path), on the hosts used here.
            var job = new JobSpec($"hpcdata-{name.Replace('/', '-')}", name, version, o.CacheTierFor(hosts), o.Nodes, o.HostsPerNode, command,
                o.Client is null ? null : SplitCommand(o.Client), Hpcdata(), o.Origins.Gave("--pipe", SettingSource.CommandLine) ? o.Agent.PipeName : null, o.Evict, lifetimeJob, FanoutMpi: fanoutMpi,
                NodePrep: o.NodePrep.Copy(), Verbose: o.Verbose, SlurmStaging: o.SlurmStaging);

            if (!local) return await SubmitAsync(job, tierOptions, cancel.Token);

            if (lifetimeJob) await WithTier(tierOptions, t => t.Catalog.AddJobAsync(version, jobId!, cancel.Token));
            Say($"prestage: job {jobId}: {o.Nodes} node(s) × {o.HostsPerNode} service host(s)");
            // The job's commands print to the terminal whatever --quiet says; only the scheduler's own lines are dropped.
            // With --json stdout is the one object, so what the job's commands print goes to stderr.
            var scheduler = new LocalScheduler(o.Json ? Console.Error : Console.Out, Console.Error, o.Quiet || o.Json ? TextWriter.Null : Console.Out);
            var code = await scheduler.RunAsync(job, jobId!, root, Math.Max(size * 2, 256L << 20), cancel.Token);
            var t = scheduler.LastTimings;
            if (o.Json)
                Console.WriteLine(JsonFields.Object([("scheduler", o.Scheduler), ("job", jobId), ("dataset", name), ("version", version), ("fanout", fanoutMpi ? "mpi" : "none"),
                    ("nodes", o.Nodes), ("exitCode", cancel.IsCancellationRequested ? 130 : code), ("prepareSeconds", t?.PrepareSeconds), ("runSeconds", t?.RunSeconds),
                    ("releaseSeconds", t?.ReleaseSeconds), ("seconds", clock.Elapsed.TotalSeconds)]));
            Say($"prestage: job {jobId} {(code == 0 ? "succeeded" : $"failed (exit {code})")}: nodes prepared in {t?.PrepareSeconds:0.00} s, " +
                              $"job ran {t?.RunSeconds:0.00} s, released in {t?.ReleaseSeconds:0.00} s, {clock.Elapsed.TotalSeconds:0.00} s in all");
            return cancel.IsCancellationRequested ? 130 : code;
        }
        catch (OperationCanceledException) when (cancel.IsCancellationRequested)
        {
            throw CommandException.Cancelled($"cancelled{(jobId is null ? "" : $"; job {jobId}'s nodes were released")}");
        }
        catch (Exception e) when (e is IOException or InvalidOperationException or ArgumentException or FormatException or TimeoutException
                                       or CommonDataException or UnauthorizedAccessException)
        {
            throw CommandException.From(e);
        }
        finally
        {
            if (local && o.Lifetime == "job" && version is not null && tierOptions is not null && jobId is not null)
                await EndJobLifetimeAsync(tierOptions, datasetName!, version, jobId);
            await Task.WhenAll(_cacheHosts.Select(h => h.DisposeAsync().AsTask()));
            if (local && o.WorkDir is null) try { Directory.Delete(root, recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
        }
    }

    private string? Validate()
    {
        if (o.Scheduler is not ("local" or "slurm" or "hpcpack")) return $"--scheduler '{o.Scheduler}' is not one of local, slurm, hpcpack";
        if (o.Nodes < 1 || o.HostsPerNode < 1) return "--nodes and --hosts-per-node must be at least 1";
        if (o.Fanout is not ("auto" or "none" or "mpi")) return $"--fanout '{o.Fanout}' is not one of auto, none, mpi";
        if (o.SlurmStaging is not ("step" or "agents" or "burst-buffer")) return $"--slurm-staging '{o.SlurmStaging}' is not one of step, agents, burst-buffer";
        if (o.Fanout == "mpi" && o.Scheduler == "hpcpack") return "--fanout mpi is not available for hpcpack yet: its node-preparation task runs on each node alone";
        if (command.Count == 0) return "no job command: put it after --, e.g. hpcdata prestage data.csv --name risk/prices -- hpcdata worker";
        if (o.Lifetime is not null && o.Lifetime != "job")
            try { Durations.Parse(o.Lifetime); } catch (FormatException e) { return $"--lifetime: {e.Message} (or 'job')"; }
        if (StagerOptions.CheckUnpublishedLifetime(o.Staging.UnpublishedLifetime) is { } unpublished) return unpublished;
        if (o.Staging.Name.Length > 0 && !DatasetName.TryValidate(o.Staging.Name, out var e2)) return e2;
        return null;
    }

    /// <summary>A path that exists is staged; otherwise the source must name a staged dataset.</summary>
    private (string? Path, string Name) ResolveSource()
    {
        if (File.Exists(o.Source) || Directory.Exists(o.Source))
            return (o.Source, o.Staging.Name is { Length: > 0 } name ? name : throw new ArgumentException($"'{o.Source}' is a path: give the dataset's name with --name owner/name"));
        if (o.Staging.Name.Length == 0 && !o.Source.StartsWith('.') && !o.Source.StartsWith('/') && DatasetName.TryValidate(o.Source, out _))
            return (null, o.Source);
        throw new FileNotFoundException($"'{o.Source}' does not exist (and is not a dataset name)");
    }

    private async Task<IReadOnlyList<string>> CacheHostsAsync(bool local, bool named, long size, CancellationToken ct)
    {
        var given = o.CacheHosts;
        if (given is not null) return CacheEndpoint.ParseList(given).Select(h => h.ToString()).ToList();
        if (!local) throw new ArgumentException($"the {o.Scheduler} scheduler needs the cluster's cache hosts: --cache-hosts or HPCDATA_CACHE_HOSTS");
        if (named) throw new CommonDataException(ErrorCode.NotFound, $"'{o.Source}' is not a path, and a dataset of that name can only be found on existing cache hosts (--cache-hosts); the local scheduler's own cache tier starts empty");
        var hosts = new List<string>();
        for (var h = 0; h < o.CacheHostCount; h++)
        {
            var p = ComponentProcess.Start(new CacheHostOptions { Port = 0, MaxMemoryBytes = (long)(size * 1.5) + (64L << 20) }, name: $"cachehost{h + 1}");
            _cacheHosts.Add(p);
            hosts.Add(await p.WaitReadyAsync(TimeSpan.FromSeconds(30), ct));
        }
        return hosts;
    }

    private async Task<(string Version, string How)> StageAsync(string path, string name, IReadOnlyList<string> hosts, CancellationToken ct)
    {
        var r = await ComponentProcess.StageAsync(o.Stager(path, name, hosts), TimeSpan.FromHours(2), ct);
        var how = r.Unchanged ? "unchanged: nothing moved" : $"staged {ByteSize.Format(r.RawBytes)} in {r.Seconds:0.00} s";
        return (r.Version, how);
    }

    /// <summary>The cost model's choice for this job; the link rate as given, else measured against the tier from here.</summary>
    private async Task<FanoutChoice> ChooseFanoutAsync(CacheTierOptions tierOptions, string name, string version, int cacheHosts, CancellationToken ct)
    {
        await using var tier = new CacheTierClient(tierOptions, o.TierLog);
        var manifest = (await tier.ResolveAsync(name, version, ct)).Manifest;
        var (rate, source) = o.Staging.LinkRate is { IsUnlimited: false } given
            ? (given.BytesPerSecond, "--link-rate")
            : (await FanoutChoice.MeasureLinkAsync(tier, manifest, 16L << 20, TimeSpan.FromSeconds(3), ct), "measured from here");
        // The nodes' cores are not known from here: this machine's stand for them (the reason line says how many were taken).
        return FanoutChoice.Decide(o.Nodes, cacheHosts, manifest.StoredLength, rate, source, MpiUnavailable(), Environment.ProcessorCount);
    }

    /// <summary>Why this job's node prep cannot run as MPI ranks, or null when it can.</summary>
    private string? MpiUnavailable() => o.Scheduler switch
    {
        "hpcpack" => "hpcpack's node-preparation task runs on each node alone",
        "local" when FindOnPath("mpiexec.hydra") is null => "no mpiexec.hydra on this machine",
        _ => null, // slurm: the srun step launches the ranks; a node without MPI fetches directly
    };

    private async Task<string> LatestAsync(string name, CacheTierOptions options, CancellationToken ct)
    {
        await using var tier = new CacheTierClient(options, o.TierLog);
        return await tier.GetLatestAsync(name, ct)
               ?? throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' has not been staged on {string.Join(", ", tier.Hosts)} (and '{name}' is not a path here)");
    }

    private async Task<int> SubmitAsync(JobSpec job, CacheTierOptions? tier, CancellationToken ct)
    {
        var text = o.Scheduler == "slurm" ? SlurmScript.Generate(job) : HpcPackCommands.Generate(job);
        var submitter = o.Scheduler == "slurm" ? "sbatch" : "job";
        // The end step removes the version with the account of the node it runs on: the password this command was given
        // does not go with the job.
        if (job.LifetimeJob && job.CacheTierSecrets.Count > 0 && string.IsNullOrEmpty(job.CacheTier.PasswordFile))
            Console.Error.WriteLine("hpcdata prestage: warning: the job carries no cache password, so its end step removes the version with the cache-tier " +
                                    "settings of the node it runs on; give the password as a file (--cache-password-file, a file that node reads) for it to be yours");
        if (o.DryRun || FindOnPath(submitter) is null)
        {
            if (!o.DryRun) Console.Error.WriteLine($"hpcdata prestage: '{submitter}' is not on PATH here; printing the job instead of submitting it");
            if (o.Json) Console.WriteLine(JsonFields.Object([.. Fields(job), ("submitted", false), ("scriptText", text)]));
            else Console.Write(text);
            return o.DryRun ? 0 : 1;
        }
        var directory = Path.GetFullPath(o.WorkDir ?? Directory.GetCurrentDirectory());
        Directory.CreateDirectory(directory);
        var file = Path.Combine(directory, $"{job.JobName}.{(o.Scheduler == "slurm" ? "sbatch" : "cmd")}");
        await File.WriteAllTextAsync(file, text, ct);
        var info = o.Scheduler == "slurm" ? new ProcessStartInfo("sbatch") { ArgumentList = { "--parsable", file } } : new ProcessStartInfo("cmd") { ArgumentList = { "/c", file } };
        info.RedirectStandardOutput = info.RedirectStandardError = true;
        info.WorkingDirectory = directory; // where Slurm writes slurm-<id>.out
        // sbatch hands its environment to the job (--export=ALL), which Slurm keeps with the job: not the password.
        foreach (var name in JobSpec.SecretVariables) info.Environment.Remove(name);
        using var p = Process.Start(info)!;
        var stdout = await p.StandardOutput.ReadToEndAsync(ct);
        var stderr = await p.StandardError.ReadToEndAsync(ct);
        await p.WaitForExitAsync(ct);
        if (p.ExitCode != 0) throw CommandException.Failed($"{submitter} refused the job ({file}): {stderr.Trim()}");
        var id = stdout.Trim().Split(';')[0];
        // Quiet, the id alone: what a script that submits the job needs back, as sbatch --parsable gives it.
        Console.WriteLine(o.Json ? JsonFields.Object([.. Fields(job), ("submitted", true), ("job", id), ("script", file)])
            : o.Quiet ? id : $"prestage: submitted job {id} ({file})");
        if (job.LifetimeJob && tier is not null)
            await WithTier(tier, t => t.Catalog.AddJobAsync(job.Version, id, ct));
        return 0;
    }

    private async Task EndJobLifetimeAsync(CacheTierOptions options, string name, string version, string jobId)
    {
        try
        {
            await WithTier(options, async t =>
            {
                var others = await t.Catalog.RemoveJobAsync(version, jobId);
                if (others.Count > 0) { Say($"prestage: version {version} kept for job(s) {string.Join(", ", others)}"); return; }
                await t.Catalog.RemoveVersionAsync(name, version);
                Say($"prestage: removed {name} version {version} from the cache tier (lifetime: job)");
            });
        }
        catch (Exception e) when (e is IOException or TimeoutException or CommonDataException)
        {
            Console.Error.WriteLine($"hpcdata prestage: could not drop the job's version {version}: {e.Message}");
        }
    }

    /// <summary>One of prestage's own lines of what it did, which --quiet drops (and --json, whose object says it).</summary>
    private void Say(string line)
    {
        if (!o.Quiet && !o.Json) Console.WriteLine(line);
    }

    /// <summary>What --json says of a job handed to a scheduler.</summary>
    private (string, object?)[] Fields(JobSpec job) =>
        [("scheduler", o.Scheduler), ("dataset", job.Dataset), ("version", job.Version), ("fanout", job.FanoutMpi ? "mpi" : "none"), ("nodes", o.Nodes)];

    private async Task WithTier(CacheTierOptions options, Func<CacheTierClient, Task> action)
    {
        await using var tier = new CacheTierClient(options, o.TierLog);
        await action(tier);
    }

    private string Hpcdata() => o.Hpcdata ?? InstalledHpcdata(NativeHandoff.LauncherPath, ComponentLocator.IsBuildTree(AppContext.BaseDirectory), FindOnPath) ?? Quote.Sh(ComponentLocator.Command("hpcdata"));

    /// <summary>
    /// How a job's nodes run hpcdata when --hpcdata does not say: the installed tool, never a build tree, when there is
    /// one. Running as the installed tool (its launcher, e.g. /opt/hpcdata/hpcdata from <c>dotnet tool install
    /// --tool-path /opt/hpcdata</c>), that launcher by absolute path: nodes install to the same path. Running from a
    /// build but with the tool on PATH, plain <c>hpcdata</c>: the nodes' own installation. Null: only a build tree.
    /// </summary>
    public static string? InstalledHpcdata(string? processPath, bool fromBuildTree, Func<string, string?> findOnPath)
    {
        if (!fromBuildTree && processPath is not null && Path.GetFileNameWithoutExtension(processPath).Equals("hpcdata", StringComparison.OrdinalIgnoreCase))
            return Quote.Sh([processPath]);
        return findOnPath(OperatingSystem.IsWindows() ? "hpcdata.exe" : "hpcdata") is not null ? "hpcdata" : null;
    }

    private static long PathSize(string path) =>
        File.Exists(path) ? new FileInfo(path).Length : new DirectoryInfo(path).EnumerateFiles("*", SearchOption.AllDirectories).Sum(f => f.Length);

    public static string? FindOnPath(string program) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "").Split(Path.PathSeparator).Select(d => Path.Combine(d, program)).FirstOrDefault(File.Exists);

    /// <summary>Splits a command line on spaces, honouring single and double quotes.</summary>
    public static List<string> SplitCommand(string text)
    {
        var words = new List<string>();
        var current = new System.Text.StringBuilder();
        char? quote = null;
        var inWord = false;
        foreach (var c in text)
        {
            if (quote is not null) { if (c == quote) quote = null; else current.Append(c); continue; }
            if (c is '\'' or '"') { quote = c; inWord = true; continue; }
            if (char.IsWhiteSpace(c)) { if (inWord) { words.Add(current.ToString()); current.Clear(); inWord = false; } continue; }
            current.Append(c);
            inWord = true;
        }
        if (quote is not null) throw new FormatException($"unbalanced quote in '{text}'");
        if (inWord) words.Add(current.ToString());
        return words;
    }

}
