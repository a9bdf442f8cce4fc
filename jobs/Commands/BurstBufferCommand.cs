
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
                                    "'#BB_LUA hpcdata NAME[@VERSION]' lines (or 'stage PATH [NAME]': a file or directory staged as the user's first) are checked at submit, kept on the cache tier while the job waits, " +
                                    "and exchanged among the running agents of the job's nodes before it starts.";

    public static bool Hidden => true;

    [Switch("", "job-process (at submit), setup (pending: readers and the job's references), data-in (pending: the files it names staged as " +
                "its user's), paths (the job's environment), pre-run (the agents of the job's nodes exchange the data) or teardown (the references dropped).",
        Meta = "HOOK", Required = true)]
    public string? Hook { get; set; }

    [Switch("--script", "The job's script, as Slurm hands it to the hook.", Meta = "PATH")]
    public string? Script { get; set; }

    [Switch("--job", "The job's id.", Meta = "ID")]
    public string? Job { get; set; }

    [Switch("--uid", "The submitting user's id (job-process, setup; setup needs it where the job stages files).", Meta = "UID")]
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

    [Switch("--peer-timeout", "pre-run: how long a node may be silent before it is lost to the job (the others' rings route around it after a fifth of this, at least 1s, and go on; a node that answers again within it is waited for).", Meta = "DURATION")]
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
                "data-in" => await DataInAsync(o, ct),
                "paths" => Paths(o),
                "pre-run" => await PreRunAsync(o, ct),
                "teardown" => await TeardownAsync(o, ct),
                _ => throw CommandException.Usage($"'{o.Hook}' is not a hook (job-process, setup, data-in, paths, pre-run, teardown)"),
            };
        }
        catch (CommonDataException e) { throw CommandException.Failed(e.Message, e.Code); }
        catch (IOException e) { throw CommandException.Failed(e.Message, ErrorCode.Unavailable); }
    }

    /// <summary>The data a job script asks for: one per <c>#BB_LUA hpcdata NAME[@VERSION]</c> or <c>#BB_LUA hpcdata stage PATH
    /// [NAME]</c> line. Lines of the prefix for other tools are left to them; a malformed one of ours is a
    /// <see cref="FormatException"/> naming its line.</summary>
    public static IReadOnlyList<BurstBufferDirective> Directives(IEnumerable<string> script)
    {
        var found = new List<BurstBufferDirective>();
        var number = 0;
        foreach (var line in script)
        {
            number++;
            if (!line.StartsWith(Prefix, StringComparison.Ordinal)) continue;
            // Another tool's line is left to it whatever its quoting; ours is read as a shell would split it.
            var rest = line[Prefix.Length..];
            if (rest.Split((char[]?)null, 2, StringSplitOptions.RemoveEmptyEntries) is not ["hpcdata", ..]) continue;
            var words = Words(rest, number);
            var directive = words.Length > 1 && words[1] == StageWord ? StagedFile(words, line, number) : NamedDataset(words, line, number);
            if (found.FirstOrDefault(f => f.Key == directive.Key) is not null)
                throw new FormatException($"line {number}: dataset '{directive.Key}' is named twice");
            found.Add(directive);
        }
        return found;
    }

    /// <summary>
    /// A directive's words as a shell splits them, so a path with spaces is written as the user would type it: in single
    /// quotes (taken as they are), in double quotes (where <c>\"</c> and <c>\\</c> stand for themselves), or with a
    /// backslash before each space. Nothing is expanded: no variable, no <c>~</c>, no glob.
    /// </summary>
    internal static string[] Words(string text, int number)
    {
        var words = new List<string>();
        var word = new System.Text.StringBuilder();
        var inWord = false;
        for (var i = 0; i < text.Length; i++)
        {
            var c = text[i];
            if (char.IsWhiteSpace(c))
            {
                if (inWord) words.Add(word.ToString());
                word.Clear();
                inWord = false;
                continue;
            }
            inWord = true;
            if (c == '\\' && i + 1 < text.Length) word.Append(text[++i]);
            else if (c is '\'' or '"')
            {
                var close = i + 1;
                for (; close < text.Length && text[close] != c; close++)
                {
                    if (c == '"' && text[close] == '\\' && close + 1 < text.Length && text[close + 1] is '"' or '\\') close++;
                    word.Append(text[close]);
                }
                if (close >= text.Length) throw new FormatException($"line {number}: the quote {c} at column {i + 1 + Prefix.Length} is not closed");
                i = close;
            }
            else word.Append(c);
        }
        if (inWord) words.Add(word.ToString());
        return [.. words];
    }

    /// <summary>The word that makes a directive stage a file first.</summary>
    public const string StageWord = "stage";

    private static BurstBufferDirective NamedDataset(string[] words, string line, int number)
    {
        if (words.Length != 2)
            throw new FormatException($"line {number}: '{line.Trim()}' is not '{Prefix} hpcdata NAME[@VERSION]' (one dataset per line) or '{Prefix} hpcdata {StageWord} PATH [NAME]'");
        DatasetArgument argument;
        try { argument = DatasetArgument.Parse(words[1]); }
        catch (Exception e) when (e is ArgumentException or CommandException) { throw new FormatException($"line {number}: {e.Message}"); }
        if (!DatasetName.TryValidate(argument.Name, out var error)) throw new FormatException($"line {number}: {error}");
        return new BurstBufferDirective(argument);
    }

    /// <summary><c>stage PATH [NAME]</c>: an absolute path (the controller reads it, not the job's directory) and the name
    /// the job's user will own it as, the file's or directory's own name by default.</summary>
    private static BurstBufferDirective StagedFile(string[] words, string line, int number)
    {
        if (words.Length is not (3 or 4))
            throw new FormatException($"line {number}: '{line.Trim()}' is not '{Prefix} hpcdata {StageWord} PATH [NAME]' (one file or directory per line; quote a path with spaces)");
        var path = words[2];
        if (!path.StartsWith('/')) throw new FormatException($"line {number}: '{path}' is not an absolute path (the controller stages it, not the job's directory)");
        var name = words.Length == 4 ? words[3] : BurstBufferDirective.NameOfFile(path);
        if (name.Contains('/') || !DatasetName.TryValidate($"owner/{name}", out _))
            throw new FormatException($"line {number}: '{name}' cannot name the staged file (a-z 0-9 . _ -, at most {DatasetName.MaxPartLength}, not starting with '.'; " +
                                      "its owner is the job's user)");
        return new BurstBufferDirective(null, path, name);
    }

    private static IReadOnlyList<BurstBufferDirective> DirectivesOf(BurstBufferOptions o)
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
    /// checked against the user's read access, referenced for the job on the cache tier and kept for the later hooks; the
    /// files it stages checked as its user's, for stage-in.</summary>
    private static async Task<int> SetupAsync(BurstBufferOptions o, CancellationToken ct)
    {
        var job = o.Job ?? throw CommandException.Usage("--job is required");
        var wanted = DirectivesOf(o);
        if (wanted.Count == 0) return 0;
        var uid = Uid(o);
        if (uid is null && wanted.Any(w => w.SourcePath is not null)) throw CommandException.Usage("--uid is required to stage a file for the job");
        var resolved = await ResolveAsync(o, wanted, uid, ct);
        await using (var tier = new CacheTierClient(o.CacheTier(), o.TierLog))
            foreach (var r in resolved) await tier.Catalog.AddJobAsync(r.Version, JobKey(job), ct);
        WriteState(o, job, resolved, wanted.Any(w => w.SourcePath is not null) ? uid : null);
        return 0;
    }

    /// <summary>
    /// Stage-in, still pending: each file the job names staged as its user's (<see cref="StageForJobAsync"/>) and
    /// referenced for the job like the named datasets, which keep their place in the script's order.
    /// </summary>
    private static async Task<int> DataInAsync(BurstBufferOptions o, CancellationToken ct)
    {
        var job = o.Job ?? throw CommandException.Usage("--job is required");
        var wanted = DirectivesOf(o);
        if (!wanted.Any(w => w.SourcePath is not null)) return 0;
        var (resolved, uid) = State(o, job);
        if (uid is not { } owner) throw CommandException.Failed($"job {job} was not set up to stage files (no user in its state)", ErrorCode.NotFound);
        var all = new List<Resolved>();
        await using var tier = new CacheTierClient(o.CacheTier(), o.TierLog);
        foreach (var w in wanted)
        {
            if (w.Dataset is { } named)
            {
                all.Add(resolved.FirstOrDefault(r => r.Name == named.Name) ?? throw CommandException.Failed($"job {job}: dataset '{named.Name}' was not set up", ErrorCode.NotFound));
                continue;
            }
            var staged = await StageForJobAsync(o, tier, w, owner, job, ct);
            if (all.Any(r => r.Name == staged.Name)) throw CommandException.Usage($"#BB_LUA directive: dataset '{staged.Name}' is named twice");
            await tier.Catalog.AddJobAsync(staged.Version, JobKey(job), ct);
            all.Add(staged);
            // Kept as each lands, so teardown drops the references of what was staged before a later file failed.
            WriteState(o, job, [.. all, .. resolved.Where(r => !all.Contains(r))], owner);
        }
        WriteState(o, job, all, owner);
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
        // For slurmctld's log: when the controller started this hook after the allocation, and how long it took.
        using var self = System.Diagnostics.Process.GetCurrentProcess();
        var started = self.StartTime.ToUniversalTime();
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"job={job} hook-started={(started - DateTime.UnixEpoch).TotalSeconds:0.000} hook-seconds={(DateTime.UtcNow - started).TotalSeconds:0.000}"));
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

    /// <summary>
    /// The named datasets resolved, and the user allowed to read each, where Slurm gives the uid (from 23.02 at submit;
    /// always at setup); the files the job stages opened and checked as that user's. Without a uid, files are checked at setup.
    /// </summary>
    private static async Task<IReadOnlyList<Resolved>> ResolveAsync(BurstBufferOptions o, IReadOnlyList<BurstBufferDirective> wanted, uint? uid, CancellationToken ct)
    {
        var options = o.CacheTier();
        options.MaxAttempts = 2;
        await using var tier = new CacheTierClient(options, o.TierLog);
        var resolved = new List<Resolved>();
        foreach (var w in wanted)
        {
            if (w.Dataset is not { } named)
            {
                if (uid is { } owner) using (OpenForUser(w.SourcePath!, owner)) { }
                continue;
            }
            var (version, manifest) = await tier.Catalog.ResolveAsync(named.Name, named.Version, ct);
            if (uid is { } u && manifest.Readers is { } readers && u != 0 && !readers.Admits(u, OperatingSystem.IsLinux() ? UnixAccounts.GroupsOf(u) : []))
                throw new CommonDataException(ErrorCode.AccessDenied, $"user {NameOf(u)} is not among the readers of dataset '{named.Name}'");
            resolved.Add(new Resolved(named.Name, version, DatasetFiles.IsTreeLayout(manifest)));
        }
        return resolved;
    }

    /// <summary>
    /// A file or a directory tree the job names, staged as <c>USER/NAME</c> with its user as the only reader. The stager
    /// runs here with the controller's rights on the user's behalf (<see cref="StagerOptions.ForUser"/>): the file, or
    /// every directory and file of the tree, is checked as the user may read it on the very file it opened and reads.
    /// </summary>
    private static async Task<Resolved> StageForJobAsync(BurstBufferOptions o, CacheTierClient tier, BurstBufferDirective w, uint uid, string job, CancellationToken ct)
    {
        var path = w.SourcePath!;
        var user = OperatingSystem.IsLinux() ? UnixAccounts.UserName(uid) : null;
        var name = user is null ? null : w.NameFor(user);
        if (name is null || !DatasetName.TryValidate(name, out _))
            throw CommandException.Failed($"user {user ?? uid.ToString(CultureInfo.InvariantCulture)} cannot own a dataset name, so '{path}' cannot be staged for them: " +
                                          "stage it with hpcdata stage and name the dataset in the directive", ErrorCode.AccessDenied);
        // Refused here with the reason Slurm shows; the stager checks again on what it opens.
        OpenForUser(path, uid).Dispose();
        var stager = new StagerOptions
        {
            Path = path, ForUser = uid.ToString(CultureInfo.InvariantCulture), Name = name, Readers = $"user:{uid}", CacheTier = o.CacheTier(), Json = true,
        };
        StageResult staged;
        try { staged = await ComponentProcess.StageAsync(stager, TimeSpan.FromHours(2), ct); }
        catch (CommonDataException e) { throw CommandException.Failed($"staging '{path}' for job {job} as {name}: {e.Message}", e.Code); }
        // A file or a tree as the stager found it, not as the path looks now.
        var (_, manifest) = await tier.Catalog.ResolveAsync(name, staged.Version, ct);
        return new Resolved(name, staged.Version, DatasetFiles.IsTreeLayout(manifest));
    }

    /// <summary>
    /// The file or directory at <paramref name="path"/>, open, once the user may read it (a directory: list and search
    /// it); a one-line refusal naming why otherwise.
    /// </summary>
    private static Microsoft.Win32.SafeHandles.SafeFileHandle OpenForUser(string path, uint uid)
    {
        if (!OperatingSystem.IsLinux()) throw CommandException.Usage("the stage form needs Linux");
        Microsoft.Win32.SafeHandles.SafeFileHandle file;
        try { file = UnixFileAccess.Open(path); }
        catch (FileNotFoundException) { throw CommandException.Failed($"nothing to stage: '{path}' does not exist", ErrorCode.NotFound); }
        catch (UnauthorizedAccessException)
        {
            throw CommandException.Failed($"the controller (user {NameOf(UnixAccounts.EffectiveUserId)}) cannot read '{path}': stage it with hpcdata stage and name the dataset instead",
                ErrorCode.AccessDenied);
        }
        catch (IOException e) { throw CommandException.Usage($"{e.Message}: the stage form takes a file or a directory"); }
        var why = UnixFileAccess.WhyNotReadableTree(file, path, uid, UnixAccounts.GroupsOf(uid));
        if (why is null) return file;
        file.Dispose();
        throw CommandException.Failed($"user {NameOf(uid)} may not stage '{path}': {why}", ErrorCode.AccessDenied);
    }

    private static uint? Uid(BurstBufferOptions o) =>
        string.IsNullOrEmpty(o.Uid) || o.Uid == "nil" ? null
        : uint.TryParse(o.Uid, NumberStyles.None, CultureInfo.InvariantCulture, out var uid) ? uid : throw CommandException.Usage($"--uid '{o.Uid}' is not a user id");

    private static string NameOf(uint uid) => (OperatingSystem.IsLinux() ? UnixAccounts.UserName(uid) : null) ?? uid.ToString(CultureInfo.InvariantCulture);

    /// <summary>The job's reference on the cache tier: distinct from a prestaged job's own, which its end step drops.</summary>
    private static string JobKey(string job) => $"slurm-{job}";

    private static string StateFile(BurstBufferOptions o, string job) =>
        Path.Combine(o.StateDir, (int.TryParse(job, NumberStyles.None, CultureInfo.InvariantCulture, out _) ? job : throw CommandException.Usage($"--job '{job}' is not a job id")) + ".datasets");

    private static IReadOnlyList<Resolved> Staged(BurstBufferOptions o, string job) => State(o, job).Datasets;

    /// <summary>The job's datasets in the script's order (<c>NAME VERSION tree|file</c> lines) and, where it stages files,
    /// its user (a <c>#uid UID</c> line).</summary>
    private static (IReadOnlyList<Resolved> Datasets, uint? Uid) State(BurstBufferOptions o, string job)
    {
        var file = StateFile(o, job);
        if (!File.Exists(file)) return ([], null);
        var lines = File.ReadAllLines(file);
        var uid = lines.Where(l => l.StartsWith(UidLine, StringComparison.Ordinal))
            .Select(l => uint.TryParse(l[UidLine.Length..], NumberStyles.None, CultureInfo.InvariantCulture, out var u) ? (uint?)u : null).FirstOrDefault();
        var datasets = lines.Where(l => !l.StartsWith('#')).Select(l => l.Split(' ')).Where(p => p.Length == 3).Select(p => new Resolved(p[0], p[1], p[2] == "tree")).ToList();
        return (datasets, uid);
    }

    private const string UidLine = "#uid ";

    private static void WriteState(BurstBufferOptions o, string job, IEnumerable<Resolved> datasets, uint? uid)
    {
        Directory.CreateDirectory(o.StateDir);
        var lines = datasets.Select(r => $"{r.Name} {r.Version} {(r.Tree ? "tree" : "file")}");
        if (uid is { } u) lines = lines.Prepend(UidLine + u.ToString(CultureInfo.InvariantCulture));
        // Written whole, then renamed: teardown never reads half a state.
        var file = StateFile(o, job);
        File.WriteAllLines(file + ".new", lines);
        File.Move(file + ".new", file, overwrite: true);
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
        // Both answer from the node list alone, and each is a process start on the controller inside the job's pre-run
        // time: asked together.
        var expanding = ScontrolAsync(["show", "hostnames", nodeList], ct);
        // Slurm reaches a node at its NodeAddr, which a site sets where the name does not resolve to the node's network.
        var showing = ScontrolAsync(["show", "node", "-o", nodeList], ct);
        // Both ended before either answer is read, so a failure of one never leaves the other unobserved.
        await Task.WhenAll(expanding, showing).ContinueWith(_ => { }, TaskScheduler.Default);
        var hosts = (await expanding).Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        if (hosts.Length == 0) throw new CommonDataException(ErrorCode.Unavailable, $"job {job} has no nodes yet (NodeList={nodeList})");
        var addresses = (await showing).Split('\n', StringSplitOptions.RemoveEmptyEntries)
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

/// <summary>
/// One <c>#BB_LUA hpcdata</c> line of a job script: a dataset by name (<see cref="Dataset"/>), or a file or directory the controller
/// stages for the job first (<see cref="SourcePath"/>), owned by the job's user as <c>USER/<see cref="StagedName"/></c>.
/// A user's staged files live under their own name, so no job can replace a dataset another user or a team stages.
/// </summary>
public sealed record BurstBufferDirective(DatasetArgument? Dataset, string? SourcePath = null, string? StagedName = null)
{
    /// <summary>What tells two directives apart before the job's user is known: the dataset's name, or the staged name.</summary>
    public string Key => Dataset?.Name ?? StagedName!;

    /// <summary>The dataset's name for the job of <paramref name="user"/>.</summary>
    public string NameFor(string user) => Dataset?.Name ?? $"{user}/{StagedName}";

    /// <summary>A file's or a directory's own name as a dataset name's part: lower case, other characters than a-z 0-9 . _ - as '-'.</summary>
    public static string NameOfFile(string path)
    {
        var chars = Path.GetFileName(path.TrimEnd('/')).ToLowerInvariant().Select(c => c is (>= 'a' and <= 'z') or (>= '0' and <= '9') or '.' or '_' or '-' ? c : '-').ToArray();
        var name = new string(chars).TrimStart('.');
        return name.Length == 0 ? "data" : name[..Math.Min(name.Length, DatasetName.MaxPartLength)];
    }
}
