using System.Reflection;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Cli;
using Hpc.Jobs.Commands;
using Hpc.Jobs.Scheduling;
using Microsoft.Extensions.Configuration;

namespace Hpc.Jobs.Tests;

/// <summary>
/// A cache-tier switch given once, to the command a user types, takes effect in every process it configures: the
/// stager prestage runs, the job prestage writes (Slurm, HPC Pack, the local scheduler), node prep on each node reading
/// the job's variables, and the agent node prep starts. Each hop is the code that hop runs; the other side of each is
/// read by that program's own parser. Secrets travel in environments, never in argv or a script.
/// </summary>
public sealed class SettingsTravelTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("hpcdata-travel-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    public static TheoryData<string> CacheTierSwitches() => [.. CacheClientOptions.Group.Switches.Select(s => s.Name)];

    [Fact]
    public void The_walk_covers_every_switch_the_cache_tier_declares() =>
        Assert.Equal(typeof(CacheTierOptions).GetProperties().Count(p => p.GetCustomAttribute<SwitchAttribute>() is not null), CacheTierSwitches().Count);

    [Theory]
    [InlineData(new[] { "--link-rate", "10mbit" }, null)]
    [InlineData(new string[0], "10mbit")] // the site's setting, in the environment prestage runs in
    public void The_link_rate_given_to_prestage_reaches_the_stager_for_its_codec_choice(string[] given, string? site)
    {
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x", .. given],
            v => v == StagerOptions.LinkRateVariable ? site : null);
        Assert.Null(problem);
        var stager = prestage.Stager(Path.Combine(_dir, "data.bin"), "risk/x", ["cache1:6380"]);
        var arrived = BindProgram<StagerOptions>(ProgramContract<StagerOptions>.ToArguments(stager), new Dictionary<string, string?>());
        Assert.Equal(ByteRate.Parse("10mbit"), arrived.LinkRate);
        Assert.True(arrived.AutoCodec);
    }

    [Fact]
    public void Prestage_takes_the_stager_s_own_switches_and_hands_them_to_the_stager_as_given()
    {
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "-n", "risk/x", "--codec", "zstd:3", "--chunking", "fixed",
            "--segment-size", "128KB", "--skip-unreadable", "--no-space-check", "--readers", "all"], NoVariables);
        Assert.Null(problem);
        var stager = prestage.Stager(Path.Combine(_dir, "data.bin"), "risk/x", ["cache1:6380"]);
        var arrived = BindProgram<StagerOptions>(ProgramContract<StagerOptions>.ToArguments(stager), new Dictionary<string, string?>());
        Assert.Equal(("risk/x", "zstd:3", "fixed", 128L << 10), (arrived.Name, arrived.Codec, arrived.Chunking, arrived.SegmentSize.Bytes));
        Assert.True(arrived.SkipUnreadable && arrived.NoSpaceCheck);
        Assert.Equal("all", arrived.Readers);
        // Each is the stager's declaration: prestage's help shows it with the stager's words.
        Assert.Contains("--chunking", VerbContract<PrestageOptions>.Help("hpcdata prestage"));
        Assert.Contains(ProgramContract<StagerOptions>.Switches.Single(x => x.Name == "--chunking").Help[..40],
            System.Text.RegularExpressions.Regex.Replace(VerbContract<PrestageOptions>.Help("hpcdata prestage"), @"\s+", " "));
    }

    [Fact]
    public void A_link_rate_of_0_means_not_known_to_prestage_as_to_the_stager()
    {
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x"], v => v == StagerOptions.LinkRateVariable ? "0" : null);
        Assert.Null(problem);
        Assert.True(prestage.Staging.LinkRate.IsUnlimited);
        var stager = prestage.Stager(Path.Combine(_dir, "data.bin"), "risk/x", ["cache1:6380"]);
        Assert.True(BindProgram<StagerOptions>(ProgramContract<StagerOptions>.ToArguments(stager), new Dictionary<string, string?>()).LinkRate.IsUnlimited);
    }

    [Fact]
    public void The_unpublished_lifetime_given_to_prestage_reaches_the_stager_and_a_bad_one_is_refused_before_anything_starts()
    {
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x", "--unpublished-lifetime", "20m"], NoVariables);
        Assert.Null(problem);
        var stager = prestage.Stager(Path.Combine(_dir, "data.bin"), "risk/x", ["cache1:6380"]);
        Assert.Equal("20m", BindProgram<StagerOptions>(ProgramContract<StagerOptions>.ToArguments(stager), new Dictionary<string, string?>()).UnpublishedLifetime);
        Assert.Equal("--unpublished-lifetime '0s' is not a duration of at least 1s (examples: 90s, 15m, 12h)", StagerOptions.CheckUnpublishedLifetime("0s"));
        Assert.Null(StagerOptions.CheckUnpublishedLifetime("1h"));
    }

    [Theory]
    [MemberData(nameof(CacheTierSwitches))]
    public void A_cache_tier_switch_given_to_prestage_reaches_the_stager_the_job_node_prep_and_the_agent(string name)
    {
        var (property, attribute, sample) = Sample(name);
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(
            property.PropertyType == typeof(bool) ? ["data.bin", "--name", "risk/x", name] : ["data.bin", "--name", "risk/x", name, sample], NoVariables);
        Assert.Null(problem);
        var expected = SettingValues.Format(Normalise(attribute, property.GetValue(prestage.CacheTierSwitches)));
        Assert.NotEqual(SettingValues.Format(property.GetValue(new CacheTierOptions())), expected);
        var hosts = prestage.CacheTierSwitches.Hosts.Count > 0 ? prestage.CacheTierSwitches.Hosts : ["cache1:6380"];

        // prestage → the stager it runs.
        var stager = prestage.Stager(Path.Combine(_dir, "data.bin"), "risk/x", hosts);
        Assert.Equal(expected, Arrived(ProgramContract<StagerOptions>.ToArguments(stager), ProgramContract<StagerOptions>.SecretEnvironment(stager),
            attribute, sample, (args, env) => BindProgram<StagerOptions>(args, env).CacheTier, property));

        // prestage → the job's script: every setting as a variable, a secret nowhere in it (unset, should the job
        // inherit one), nor a setting of the submitting machine's own (an address of its own would be one the nodes lack).
        var job = new JobSpec("hpcdata-risk-x", "risk/x", new string('a', 64), prestage.CacheTierFor(hosts), 2, 1, ["hpcdata", "worker"]);
        var slurm = SlurmScript.Generate(job);
        var hpcPack = HpcPackCommands.Generate(job);
        if (attribute.ThisMachine)
        {
            Assert.DoesNotContain($"export {attribute.Environment}=", slurm);
            Assert.Contains($"\nunset {attribute.Environment} ", slurm);   // sbatch would pass the submitting machine's on
            Assert.DoesNotContain(attribute.Environment!, hpcPack);
            Assert.False(LocalScheduler.JobEnvironment(job, "job-1", "pipe-1").ContainsKey(attribute.Environment!));
            // On a node, given there (its own address): node prep → the agent it starts on the same node.
            var (onNode, onNodeProblem) = VerbContract<NodePrepOptions>.Parse(["--fanout", "none", name, sample], NoVariables);
            Assert.Null(onNodeProblem);
            var nodeAgent = NodePrepCommand.AgentFor(onNode, "pipe-1", Path.Combine(_dir, "node"));
            Assert.Equal(expected, Arrived(ProgramContract<NodeAgentOptions>.ToArguments(nodeAgent), ProgramContract<NodeAgentOptions>.SecretEnvironment(nodeAgent),
                attribute, sample, (args, env) => BindProgram<NodeAgentOptions>(args, env).CacheTier, property));
            return;
        }
        if (attribute.Secret)
        {
            Assert.DoesNotContain(sample, slurm);
            Assert.DoesNotContain(sample, hpcPack);
            Assert.Contains($"\nunset {attribute.Environment} # a job carries no password", slurm);
        }
        else
        {
            Assert.Contains($"\nexport {attribute.Environment}={Quote.Sh(expected!)}\n", slurm);
            Assert.Contains($"/jobenv:{attribute.Environment}={expected}", hpcPack);
        }
        var local = LocalScheduler.JobEnvironment(job, "job-1", "pipe-1");
        Assert.Equal(expected, local[attribute.Environment!]);

        // The local scheduler's job environment (the exports, and a secret: its processes run on this machine) → node prep → the agent it starts.
        var jobEnvironment = job.CacheTierVariables.Concat(job.CacheTierSecrets).ToDictionary(kv => kv.Key, kv => kv.Value);
        var (nodePrep, nodeProblem) = VerbContract<NodePrepOptions>.Parse(["--fanout", "none"], v => jobEnvironment.GetValueOrDefault(v));
        Assert.Null(nodeProblem);
        Assert.Equal(expected, SettingValues.Format(property.GetValue(nodePrep.CacheTierSwitches)));
        var agent = NodePrepCommand.AgentFor(nodePrep, "pipe-1", Path.Combine(_dir, "node"));
        Assert.Equal(expected, Arrived(ProgramContract<NodeAgentOptions>.ToArguments(agent), ProgramContract<NodeAgentOptions>.SecretEnvironment(agent),
            attribute, sample, (args, env) => BindProgram<NodeAgentOptions>(args, env).CacheTier, property));
    }

    public static TheoryData<string> NodePrepSwitchNames() => [.. Hpc.Jobs.Cli.NodePrepSwitches.Group.Switches.Select(s => s.Name)];

    [Fact]
    public void The_walk_covers_every_node_prep_switch_and_each_is_a_switch_of_nodeprep_and_of_prestage()
    {
        var declared = typeof(Hpc.Jobs.Cli.NodePrepSwitches).GetProperties().Where(p => p.GetCustomAttribute<SwitchAttribute>() is not null).ToList();
        Assert.Contains(declared, p => p.GetCustomAttribute<SwitchAttribute>()!.Name == "--link-probe");
        Assert.Equal(declared.Count, NodePrepSwitchNames().Count);
        foreach (var name in NodePrepSwitchNames())
        {
            Assert.Contains(name, VerbContract<NodePrepOptions>.SwitchNames());
            Assert.Contains(name, VerbContract<PrestageOptions>.SwitchNames());
        }
    }

    /// <summary>
    /// A node-prep switch given to prestage, unlike its default, is what node prep reads on every node: the job built as
    /// prestage builds it, its Slurm script's exports, its HPC Pack job environment and the local scheduler's
    /// environment, each read by node prep's own parser with the arguments the job runs it with.
    /// </summary>
    [Theory]
    [MemberData(nameof(NodePrepSwitchNames))]
    public void A_node_prep_switch_given_to_prestage_reaches_node_prep_on_the_nodes_of_every_scheduler(string name)
    {
        var property = typeof(Hpc.Jobs.Cli.NodePrepSwitches).GetProperties().Single(p => p.GetCustomAttribute<SwitchAttribute>()?.Name == name);
        var attribute = property.GetCustomAttribute<SwitchAttribute>()!;
        var unlike = property.PropertyType == typeof(bool) ? (bool)property.GetValue(new Hpc.Jobs.Cli.NodePrepSwitches())! ? "off" : "on"
            : throw new NotSupportedException($"{name}: give the walk a sample value of {property.PropertyType.Name}");
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x", name, unlike], NoVariables);
        Assert.Null(problem);
        var expected = SettingValues.Format(property.GetValue(prestage.NodePrep));
        Assert.NotEqual(SettingValues.Format(property.GetValue(new Hpc.Jobs.Cli.NodePrepSwitches())), expected);

        foreach (var fanout in new[] { false, true })
        {
            var job = new JobSpec("hpcdata-risk-x", "risk/x", new string('a', 64), prestage.CacheTierFor(["cache1:6380"]), 3, 1, ["hpcdata", "worker"],
                FanoutMpi: fanout, NodePrep: prestage.NodePrep.Copy());
            var variable = attribute.Environment!;
            var slurm = SlurmScript.Generate(job);
            Assert.Contains($"\nexport {variable}={Quote.Sh(expected!)}\n", slurm);
            var hpcPack = HpcPackCommands.Generate(job);
            Assert.Contains($"/jobenv:{variable}={expected}", hpcPack);

            var environments = new Dictionary<string, IReadOnlyDictionary<string, string?>>
            {
                ["slurm"] = Exports(slurm),
                ["hpcpack"] = JobEnv(hpcPack),
                ["local"] = LocalScheduler.JobEnvironment(job, "job-1", "pipe-1"),
            };
            foreach (var (scheduler, environment) in environments)
            foreach (var arguments in new[] { job.NodePrepArguments, JobSpec.DirectNodePrepArguments })
            {
                var (nodePrep, nodeProblem) = VerbContract<NodePrepOptions>.Parse([.. arguments.Skip(1)], v => environment.GetValueOrDefault(v));
                Assert.Null(nodeProblem);
                Assert.True(expected == SettingValues.Format(property.GetValue(nodePrep.NodePrep)),
                    $"{scheduler} ({string.Join(' ', arguments)}): node prep read {SettingValues.Format(property.GetValue(nodePrep.NodePrep))}, prestage was given {expected}");
            }
        }
    }

    [Fact]
    public void A_job_given_no_node_prep_switch_sets_none_of_their_variables()
    {
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x"], NoVariables);
        Assert.Null(problem);
        var job = new JobSpec("j", "risk/x", new string('a', 64), prestage.CacheTierFor(["cache1:6380"]), 3, 1, ["hpcdata", "worker"], NodePrep: prestage.NodePrep.Copy());
        Assert.Empty(job.NodePrepVariables);
        Assert.DoesNotContain(Hpc.Jobs.Cli.NodePrepSwitches.LinkProbeVariable, SlurmScript.Generate(job));
        var (nodePrep, _) = VerbContract<NodePrepOptions>.Parse([], v => LocalScheduler.JobEnvironment(job, "job-1", "pipe-1").GetValueOrDefault(v));
        Assert.True(nodePrep.NodePrep.LinkProbe);
    }

    [Theory]
    [InlineData("-v")]
    [InlineData("--verbose")]
    public void Prestage_verbose_makes_the_stager_it_runs_and_node_prep_on_every_node_verbose(string verbose)
    {
        var (prestage, problem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x", verbose], NoVariables);
        Assert.Null(problem);
        var stager = ProgramContract<StagerOptions>.ToArguments(prestage.Stager("/data.bin", "risk/x", ["cache1:6380"])).ToList();
        var at = stager.IndexOf(VerboseSwitch.Name);
        Assert.True(at >= 0 && (at == stager.Count - 1 || stager[at + 1] != "false"), string.Join(' ', stager));

        var job = new JobSpec("j", "risk/x", new string('a', 64), prestage.CacheTierFor(["cache1:6380"]), 3, 1, ["hpcdata", "worker"],
            NodePrep: prestage.NodePrep.Copy(), Verbose: prestage.Verbose);
        var environments = new Dictionary<string, IReadOnlyDictionary<string, string?>>
        {
            ["slurm"] = Exports(SlurmScript.Generate(job)),
            ["hpcpack"] = JobEnv(HpcPackCommands.Generate(job)),
            ["local"] = LocalScheduler.JobEnvironment(job, "job-1", "pipe-1"),
        };
        foreach (var (scheduler, environment) in environments)
        {
            var (nodePrep, nodeProblem) = VerbContract<NodePrepOptions>.Parse([.. job.NodePrepArguments.Skip(1)], v => environment.GetValueOrDefault(v));
            Assert.Null(nodeProblem);
            Assert.True(nodePrep.Verbose, $"{scheduler}: node prep was not verbose");
        }

        // Without it, neither is.
        var (quiet, _) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x"], NoVariables);
        Assert.False(quiet.Stager("/data.bin", "risk/x", ["cache1:6380"]).Verbose);
        Assert.DoesNotContain(VerboseSwitch.Variable, SlurmScript.Generate(job with { Verbose = false }));
    }

    [Theory]
    [InlineData(new[] { "--link-probe", "off" }, false)]
    [InlineData(new[] { "--link-probe", "on" }, true)]
    [InlineData(new[] { "--link-probe=off" }, false)]
    [InlineData(new[] { "--link-probe", "0" }, false)]
    [InlineData(new[] { "--link-probe", "no" }, false)]
    [InlineData(new[] { "--link-probe", "false" }, false)]
    [InlineData(new[] { "--link-probe" }, true)]
    [InlineData(new string[0], true)]
    public void Link_probe_reads_every_spelling_of_on_and_off(string[] args, bool on)
    {
        var (nodePrep, problem) = VerbContract<NodePrepOptions>.Parse(args, NoVariables);
        Assert.Null(problem);
        Assert.Equal(on, nodePrep.NodePrep.LinkProbe);
        var (prestage, prestageProblem) = VerbContract<PrestageOptions>.Parse(["data.bin", "--name", "risk/x", .. args], NoVariables);
        Assert.Null(prestageProblem);
        Assert.Equal(on, prestage.NodePrep.LinkProbe);
    }

    [Fact]
    public void Link_probe_from_its_variable_gives_way_to_the_switch_and_a_value_nobody_reads_is_refused_with_the_shared_words()
    {
        string? Off(string v) => v == Hpc.Jobs.Cli.NodePrepSwitches.LinkProbeVariable ? "off" : null;
        Assert.False(VerbContract<NodePrepOptions>.Parse([], Off).Options.NodePrep.LinkProbe);
        Assert.True(VerbContract<NodePrepOptions>.Parse(["--link-probe", "on"], Off).Options.NodePrep.LinkProbe);

        var (_, problem) = VerbContract<NodePrepOptions>.Parse(["--link-probe=sometimes"], NoVariables);
        Assert.Equal("--link-probe: 'sometimes' is not on or off (1/0, true/false, yes/no, on/off)", problem);
        var (_, variableProblem) = VerbContract<NodePrepOptions>.Parse([], v => v == Hpc.Jobs.Cli.NodePrepSwitches.LinkProbeVariable ? "sometimes" : null);
        Assert.Equal($"environment variable {Hpc.Jobs.Cli.NodePrepSwitches.LinkProbeVariable}: 'sometimes' is not on or off (1/0, true/false, yes/no, on/off)", variableProblem);
    }

    /// <summary>The variables a Slurm script exports, as a node's shell has them (quoting undone).</summary>
    private static Dictionary<string, string?> Exports(string script)
    {
        var exports = new Dictionary<string, string?>();
        foreach (var line in script.Split('\n').Where(l => l.StartsWith("export ", StringComparison.Ordinal) && l.Contains('=')))
        {
            var (name, value) = (line[7..line.IndexOf('=')], line[(line.IndexOf('=') + 1)..]);
            exports[name] = value.Length > 1 && value[0] == '\'' ? value[1..^1].Replace("'\\''", "'") : value;
        }
        return exports;
    }

    /// <summary>The variables an HPC Pack job's <c>/jobenv:</c> arguments set.</summary>
    private static Dictionary<string, string?> JobEnv(string commands) =>
        System.Text.RegularExpressions.Regex.Matches(commands, @"/jobenv:(?<name>[A-Z_]+)=(?<value>[^ '""]*)")
            .ToDictionary(m => m.Groups["name"].Value, m => (string?)m.Groups["value"].Value);

    [Theory]
    [InlineData("1", true)]
    [InlineData("0", false)]
    [InlineData("true", true)]
    [InlineData("True", true)]
    [InlineData("false", false)]
    [InlineData("yes", true)]
    [InlineData("no", false)]
    [InlineData("on", true)]
    [InlineData("OFF", false)]
    public void A_boolean_variable_means_the_same_to_verbs_daemons_and_workers(string text, bool on)
    {
        var environment = new Dictionary<string, string?> { [CacheTierOptions.TlsVariable] = text, [CacheTierOptions.ClusterVariable] = text };
        string? Read(string v) => environment.GetValueOrDefault(v);

        var (verb, problem) = VerbContract<ListOptions>.Parse([], Read);
        Assert.Null(problem);
        var daemon = BindProgram<NodeAgentOptions>([], environment).CacheTier;
        var worker = CacheTierOptions.FromEnvironment(Read);

        Assert.All(new[] { verb.CacheTierSwitches, daemon, worker }, tier => Assert.Equal((on, on), (tier.Tls, tier.Cluster)));
    }

    [Fact]
    public void A_boolean_variable_nobody_can_read_is_refused_by_verbs_and_workers_with_the_same_words()
    {
        string? Read(string v) => v == CacheTierOptions.TlsVariable ? "maybe" : null;
        var (_, problem) = VerbContract<ListOptions>.Parse([], Read);
        var worker = Assert.Throws<ArgumentException>(() => CacheTierOptions.FromEnvironment(Read));
        Assert.Equal($"environment variable {CacheTierOptions.TlsVariable}: 'maybe' is not on or off (1/0, true/false, yes/no, on/off)", problem);
        Assert.Equal(problem, worker.Message);
    }

    private static string? NoVariables(string _) => null;

    /// <summary>A value for the switch unlike its default; files exist, since programs check them.</summary>
    private (PropertyInfo Property, SwitchAttribute Switch, string Text) Sample(string name)
    {
        var property = typeof(CacheTierOptions).GetProperties().Single(p => p.GetCustomAttribute<SwitchAttribute>()?.Name == name);
        var attribute = property.GetCustomAttribute<SwitchAttribute>()!;
        var file = Path.Combine(_dir, name.TrimStart('-') + ".txt");
        File.WriteAllText(file, "pw-from-file\n");
        var type = Nullable.GetUnderlyingType(property.PropertyType) ?? property.PropertyType;
        var text = name switch
        {
            "--cache-hosts" => "cacheA:7001,cacheB:7002",
            "--cache-password" => "s3cret-Pw",
            "--cache-password-file" or "--cache-ca" => file,
            "--cache-source-address" => "127.0.0.2",
            _ when type == typeof(bool) => "true",
            _ when type == typeof(int) => "2",
            _ when type == typeof(ByteRate) => "100mbit",
            _ => "node-reader",
        };
        return (property, attribute, text);
    }

    private static object? Normalise(SwitchAttribute s, object? value) => s.Meta == "PATH" && value is string path ? Path.GetFullPath(path) : value;

    /// <summary>
    /// The value the receiving program reads for the switch. A secret must be in the environment it is given and not in
    /// its arguments; anything else on its command line.
    /// </summary>
    private static string? Arrived(IReadOnlyList<string> args, IReadOnlyDictionary<string, string?> secrets, SwitchAttribute s, string sample,
        Func<IReadOnlyList<string>, IReadOnlyDictionary<string, string?>, CacheTierOptions> read, PropertyInfo property)
    {
        if (s.Secret)
        {
            Assert.DoesNotContain(args, a => a.Contains(sample, StringComparison.Ordinal));
            Assert.Equal(sample, secrets[s.Environment!]);
        }
        var tier = read(args, s.Secret ? new Dictionary<string, string?> { [$"{s.Environment}"] = secrets[s.Environment!] } : new Dictionary<string, string?>());
        return SettingValues.Format(property.GetValue(tier));
    }

    /// <summary>The options a program binds from <paramref name="args"/> and its environment, as its Main does (no settings file).</summary>
    private static T BindProgram<T>(IReadOnlyList<string> args, IReadOnlyDictionary<string, string?> environment) where T : class, IProgramOptions, new()
    {
        // The program's own resolve, as its Main runs it, with no settings file.
        var resolved = ProgramContract<T>.Resolve(args, v => environment.TryGetValue(v, out var x) ? x : null, []);
        Assert.Null(resolved.Problem);
        return resolved.Options;
    }
}
