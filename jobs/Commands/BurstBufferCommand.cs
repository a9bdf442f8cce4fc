
using System.Globalization;
using Hpc.CommonData;
using Hpc.CommonData.Access;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Fanout;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class BurstBufferOptions : CacheClientOptions, IVerbOptions
{
    public static string Verb => "burst-buffer";

    public static string Summary => "Slurm's burst buffer hooks (deploy/slurm/burst_buffer.lua runs this on the controller as SlurmUser): a job script's " +
                                    "'#BB_LUA hpcdata NAME[@VERSION]' lines are checked at submit, kept on the cache tier while the job waits, " +
                                    "and exchanged among the running agents of the job's nodes before it starts.";

    public static bool Hidden => true;

    [Switch("", "job-process (at submit), setup (pending: readers and the job's references), paths (the job's environment), " +
                "pre-run (the agents of the job's nodes exchange the data) or teardown (the references dropped).", Meta = "HOOK", Required = true)]
    public string? Hook { get; set; }

    [Switch("--script", "The job's script, as Slurm hands it to the hook.", Meta = "PATH")]
    public string? Script { get; set; }

    [Switch("--job", "The job's id.", Meta = "ID")]
    public string? Job { get; set; }

    [Switch("--uid", "The submitting user's id (job-process, setup).", Meta = "UID")]
    public string? Uid { get; set; }

    [Switch("--path-file", "paths: the file whose KEY=VALUE lines Slurm adds to the job's environment.", Meta = "PATH")]
    public string? PathFile { get; set; }

    [Switch("--state-dir", "Where the versions resolved for each pending job are kept until its teardown (SlurmUser's).", Meta = "DIR")]
    public string StateDir { get; set; } = "/var/spool/hpcdata/burst-buffer";

    [Switch("--agents-port", "The agents' --peer-listen port on the job's nodes.", Meta = "PORT")]
    public int AgentsPort { get; set; } = NodeAgentOptions.DefaultPeerPort;

    [Switch("--peer-key-file", "File whose first line is the secret the agents share; readable by SlurmUser and root only.",
        Environment = NodeAgentOptions.PeerKeyFileVariable, Meta = "PATH")]
    public string? PeerKeyFile { get; set; }

    [Switch("--agent-data-dir", "The agents' --data-dir on the nodes, for $HPCDATA_DATASET_PATH.", Meta = "DIR")]
    public string AgentDataDir { get; set; } = new NodeAgentOptions().DataDirectory;

    [Switch("--timeout", "pre-run: how long the nodes' exchange may take.", Meta = "DURATION")]
    public string Timeout { get; set; } = "60m";

    [Switch("--stall-timeout", "pre-run: how long the exchange may go without progress before a node fetches the rest directly.", Meta = "DURATION")]
    public string StallTimeout { get; set; } = "2m";

    [Switch("--peer-timeout", "pre-run: how long a node may take nothing before the others route around it.", Meta = "DURATION")]
    public string PeerTimeout { get; set; } = "5s";

    /// <summary>A site's choice: Slurm requeues a job whose pre-run failed (and holds it after two retries); without
    /// draining, the requeued job may be given the same node again.</summary>
    [Switch("--drain-silent-nodes", "pre-run: drain the job's nodes whose agent did not answer (scontrol update State=DRAIN, the reason naming " +
                                    "hpcdata and the job), so the requeued job and the next ones are placed elsewhere; an operator resumes them.")]
    public bool DrainSilentNodes { get; set; }
}

/// <summary>
/// The work of Slurm's <c>burst_buffer/lua</c> hooks for <c>#BB_LUA hpcdata NAME[@VERSION]</c> directives. Each hook
/// prints nothing on success; a failure is one line on stderr, which the Lua script hands back to Slurm as the reason
/// (the submit's refusal, the job's held reason).
/// Exit codes: 0 done; 2 a malformed directive or bad usage; 66 no such dataset; 69 the cache tier or the agents
/// unreachable; 77 the user is not among the readers; 75 the exchange timed out.
/// </summary>
public static class BurstBufferCommand
{
    public const string Prefix = "#BB_LUA";

    public static async Task<int> RunAsync(BurstBufferOptions o, CancellationToken ct)
    {
        try
        {
            return o.Hook switch
            {
                "job-process" => await JobProcessAsync(o, ct),
                "setup" => await SetupAsync(o, ct),
                "paths" => Paths(o),
                "pre-run" => await PreRunAsync(o, ct),
                "teardown" => await TeardownAsync(o, ct),
                _ => throw CommandException.Usage($"'{o.Hook}' is not a hook (job-process, setup, paths, pre-run, teardown)"),
            };
        }
        catch (CommonDataException e) { throw CommandException.Failed(e.Message, e.Code); }
        catch (IOException e) { throw CommandException.Failed(e.Message, ErrorCode.Unavailable); }
    }

    /// <summary>The datasets a job script asks for: one per <c>#BB_LUA hpcdata NAME[@VERSION]</c> line. Lines of the
    /// prefix for other tools are left to them; a malformed one of ours is a <see cref="FormatException"/> naming its line.</summary>
    public static IReadOnlyList<DatasetArgument> Directives(IEnumerable<string> script)
    {
        var found = new List<DatasetArgument>();
        var number = 0;
        foreach (var line in script)
        {
            number++;
            if (!line.StartsWith(Prefix, StringComparison.Ordinal)) continue;
            var words = line[Prefix.Length..].Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries);
            if (words.Length == 0 || words[0] != "hpcdata") continue;
            if (words.Length != 2)
                throw new FormatException($"line {number}: '{line.Trim()}' is not '{Prefix} hpcdata NAME[@VERSION]' (one dataset per line)");
            DatasetArgument argument;
            try { argument = DatasetArgument.Parse(words[1]); }
            catch (Exception e) when (e is ArgumentException or CommandException) { throw new FormatException($"line {number}: {e.Message}"); }
            if (!DatasetName.TryValidate(argument.Name, out var error)) throw new FormatException($"line {number}: {error}");
            if (found.Any(f => f.Name == argument.Name)) throw new FormatException($"line {number}: dataset '{argument.Name}' is named twice");
            found.Add(argument);
        }
        return found;
    }

    private static IReadOnlyList<DatasetArgument> DirectivesOf(BurstBufferOptions o)
    {
        var script = o.Script ?? throw CommandException.Usage("--script is required");
        try { return Directives(File.ReadLines(script)); }
        catch (FormatException e) { throw CommandException.Usage($"#BB_LUA directive: {e.Message}"); }
    }

    /// <summary>At submit: every named dataset resolves, and, where Slurm gives the submitting uid, that user may read it.</summary>
    private static async Task<int> JobProcessAsync(BurstBufferOptions o, CancellationToken ct)
    {
        var wanted = DirectivesOf(o);
        if (wanted.Count > 0) await ResolveAsync(o, wanted, Uid(o), ct);
        return 0;
    }

    /// <summary>While the job is pending: the versions resolved once (the job gets these, whatever is staged later), each
    /// checked against the user's read access, referenced for the job on the cache tier and kept for the later hooks.</summary>
    private static async Task<int> SetupAsync(BurstBufferOptions o, CancellationToken ct)
    {
        var job = o.Job ?? throw CommandException.Usage("--job is required");
        var wanted = DirectivesOf(o);
        if (wanted.Count == 0) return 0;
        var resolved = await ResolveAsync(o, wanted, Uid(o), ct);
        await using (var tier = new CacheTierClient(o.CacheTier(), o.TierLog))
            foreach (var r in resolved) await tier.Catalog.AddJobAsync(r.Version, JobKey(job), ct);
        Directory.CreateDirectory(o.StateDir);
        File.WriteAllLines(StateFile(o, job), resolved.Select(r => $"{r.Name} {r.Version} {(r.Tree ? "tree" : "file")}"));
        return 0;
    }

    /// <summary>The job's environment: <c>HPCDATA_DATASET</c> and <c>HPCDATA_DATASET_PATH</c> of the first dataset, and every
    /// one in <c>HPCDATA_DATASETS</c>, so the script itself needs nothing.</summary>
    private static int Paths(BurstBufferOptions o)
    {
        var job = o.Job ?? throw CommandException.Usage("--job is required");
        var pathFile = o.PathFile ?? throw CommandException.Usage("--path-file is required");
        var staged = Staged(o, job);
        if (staged.Count == 0) return 0;
        var first = staged[0];
        var copy = Path.Combine(o.AgentDataDir, "complete", first.Tree ? first.Version : first.Version + ".data");
        File.AppendAllLines(pathFile,
        [
            $"HPCDATA_DATASET={first.Name}@{first.Version}",
            $"HPCDATA_DATASET_PATH={copy}",
            $"HPCDATA_DATASETS={string.Join(",", staged.Select(s => $"{s.Name}@{s.Version}"))}",
        ]);
        return 0;
    }

    /// <summary>
    /// Once the nodes are allocated: the agents of exactly the job's nodes exchange each version among themselves, pinned
    /// for the job as its user's. The job starts only when every node holds the verified copy; otherwise the hook fails
    /// with the nodes that are not ready, and Slurm holds or requeues the job as the site configures.
    /// </summary>
    private static async Task<int> PreRunAsync(BurstBufferOptions o, CancellationToken ct)
    {
        var job = o.Job ?? throw CommandException.Usage("--job is required");
        var staged = Staged(o, job);
        if (staged.Count == 0) return 0;
        var (nodes, user) = await JobNodesAsync(job, ct);
        TimeSpan timeout, stall, peer;
        try { (timeout, stall, peer) = (Durations.Parse(o.Timeout), Durations.Parse(o.StallTimeout), Durations.Parse(o.PeerTimeout)); }
        catch (FormatException e) { throw CommandException.Usage(e.Message); }
        var prep = new NodePrepOptions
        {
            Agents = string.Join(",", nodes.Select(n => $"{n.Address}:{o.AgentsPort}")), PeerKeyFile = o.PeerKeyFile, User = user, Quiet = false,
        };
        // The reason a user reads names Slurm's node, not only the address it was reached at.
        var names = nodes.Where(n => n.Name != n.Address).ToDictionary(n => $"{n.Address}:{o.AgentsPort}", n => n.Name);
        string Describe(string member) => names.TryGetValue(member, out var node) ? $"{node} at {member}" : member;
        var byMember = nodes.ToDictionary(n => $"{n.Address}:{o.AgentsPort}", n => n.Name);
        async Task DrainAsync(IReadOnlyList<string> silent)
        {
            var drained = silent.Select(m => byMember.GetValueOrDefault(m)).OfType<string>().Distinct().ToList();
            if (!o.DrainSilentNodes || drained.Count == 0) return;
            // Failing to drain must not hide why the job failed: the reason below still goes back to Slurm.
            try { await ScontrolAsync(["update", $"NodeName={string.Join(',', drained)}", "State=DRAIN", $"Reason=hpcdata: agent did not answer (job {job})"], ct); }
            catch (CommonDataException e) { Console.Error.WriteLine($"hpcdata burst-buffer: warning: could not drain {string.Join(',', drained)}: {e.Message}"); }
        }
        foreach (var dataset in staged)
        {
            var code = await AgentsNodePrep.RunAsync(prep, dataset.Name, dataset.Version, job, new ExchangeSettings(stall, peer, prep.NodePrep.LinkProbe, prep.RingGroups), timeout, ct, Describe,
                DrainAsync);
            if (code != 0) return code;
        }
        return 0;
    }

    /// <summary>At the end, also of a cancelled, failed or requeued job: the references dropped and the state gone. The
    /// nodes' pins go with the Epilog's <c>noderelease</c>, as for any job.</summary>
    private static async Task<int> TeardownAsync(BurstBufferOptions o, CancellationToken ct)
    {
        var job = o.Job ?? throw CommandException.Usage("--job is required");
        var staged = Staged(o, job);
        if (staged.Count > 0)
        {
            await using var tier = new CacheTierClient(o.CacheTier(), o.TierLog);
            foreach (var s in staged) await tier.Catalog.RemoveJobAsync(s.Version, JobKey(job), ct);
        }
        File.Delete(StateFile(o, job));
        return 0;
    }

    private sealed record Resolved(string Name, string Version, bool Tree);

    private static async Task<IReadOnlyList<Resolved>> ResolveAsync(BurstBufferOptions o, IReadOnlyList<DatasetArgument> wanted, uint? uid, CancellationToken ct)
    {
        var options = o.CacheTier();
        options.MaxAttempts = 2;
        await using var tier = new CacheTierClient(options, o.TierLog);
        var resolved = new List<Resolved>();
        foreach (var w in wanted)
        {
            var (version, manifest) = await tier.Catalog.ResolveAsync(w.Name, w.Version, ct);
            if (uid is { } u && manifest.Readers is { } readers && u != 0 && !readers.Admits(u, GroupsOf(u)))
                throw new CommonDataException(ErrorCode.AccessDenied, $"user {NameOf(u)} is not among the readers of dataset '{w.Name}'");
            resolved.Add(new Resolved(w.Name, version, DatasetFiles.IsTreeLayout(manifest)));
        }
        return resolved;
    }

    private static uint? Uid(BurstBufferOptions o) =>
        string.IsNullOrEmpty(o.Uid) || o.Uid == "nil" ? null
        : uint.TryParse(o.Uid, NumberStyles.None, CultureInfo.InvariantCulture, out var uid) ? uid : throw CommandException.Usage($"--uid '{o.Uid}' is not a user id");

    private static IEnumerable<uint> GroupsOf(uint uid) =>
        OperatingSystem.IsLinux() && UnixAccounts.UserName(uid) is { } name && UnixAccounts.Account(name) is { } a ? UnixAccounts.GroupsOf(name, a.Gid) : [];

    private static string NameOf(uint uid) => (OperatingSystem.IsLinux() ? UnixAccounts.UserName(uid) : null) ?? uid.ToString(CultureInfo.InvariantCulture);

    /// <summary>The job's reference on the cache tier: distinct from a prestaged job's own, which its end step drops.</summary>
    private static string JobKey(string job) => $"slurm-{job}";

    private static string StateFile(BurstBufferOptions o, string job) =>
        Path.Combine(o.StateDir, (int.TryParse(job, NumberStyles.None, CultureInfo.InvariantCulture, out _) ? job : throw CommandException.Usage($"--job '{job}' is not a job id")) + ".datasets");

    private static IReadOnlyList<Resolved> Staged(BurstBufferOptions o, string job)
    {
        var file = StateFile(o, job);
        if (!File.Exists(file)) return [];
        return File.ReadAllLines(file).Select(l => l.Split(' ')).Where(p => p.Length == 3).Select(p => new Resolved(p[0], p[1], p[2] == "tree")).ToList();
    }

    /// <summary>The job's nodes (expanded, each as Slurm reaches it) and its user's name, from <c>scontrol</c>.</summary>
    private static async Task<(IReadOnlyList<(string Name, string Address)> Nodes, string User)> JobNodesAsync(string job, CancellationToken ct)
    {
        var show = await ScontrolAsync(["show", "job", "-o", job], ct);
        string Field(string key) => show.Split(' ').FirstOrDefault(f => f.StartsWith(key + "=", StringComparison.Ordinal))?[(key.Length + 1)..]
                                    ?? throw new CommonDataException(ErrorCode.Unavailable, $"scontrol show job {job} gives no {key}");
        var nodeList = Field("NodeList");
        var user = Field("UserId");
        user = user.Contains('(') ? user[..user.IndexOf('(')] : user;
        var hosts = (await ScontrolAsync(["show", "hostnames", nodeList], ct)).Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        if (hosts.Length == 0) throw new CommonDataException(ErrorCode.Unavailable, $"job {job} has no nodes yet (NodeList={nodeList})");
        // Slurm reaches a node at its NodeAddr, which a site sets where the name does not resolve to the node's network.
        var addresses = (await ScontrolAsync(["show", "node", "-o", nodeList], ct)).Split('\n', StringSplitOptions.RemoveEmptyEntries)
            .Select(l => l.Split(' ')).Select(f => (Name: Value(f, "NodeName"), Address: Value(f, "NodeAddr")))
            .Where(n => n.Name is not null && !string.IsNullOrEmpty(n.Address)).ToDictionary(n => n.Name!, n => n.Address!);
        return (hosts.Select(h => (h, addresses.GetValueOrDefault(h, h))).ToList(), user);

        static string? Value(string[] fields, string key) => fields.FirstOrDefault(f => f.StartsWith(key + "=", StringComparison.Ordinal))?[(key.Length + 1)..];
    }

    private static async Task<string> ScontrolAsync(string[] args, CancellationToken ct)
    {
        var info = new System.Diagnostics.ProcessStartInfo("scontrol") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in args) info.ArgumentList.Add(a);
        System.Diagnostics.Process p;
        try { p = System.Diagnostics.Process.Start(info)!; }
        catch (System.ComponentModel.Win32Exception e) { throw new CommonDataException(ErrorCode.Unavailable, $"cannot run scontrol: {e.Message}"); }
        using (p)
        {
            var output = p.StandardOutput.ReadToEndAsync(ct);
            var error = p.StandardError.ReadToEndAsync(ct);
            await p.WaitForExitAsync(ct);
            if (p.ExitCode != 0) throw new CommonDataException(ErrorCode.Unavailable, $"scontrol {string.Join(' ', args)}: {(await error).Trim()}");
            return await output;
        }
    }
}
