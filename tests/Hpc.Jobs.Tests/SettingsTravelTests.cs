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

        // prestage → the job's script: every setting as a variable, a secret nowhere in it.
        var job = new JobSpec("hpcdata-risk-x", "risk/x", new string('a', 64), prestage.CacheTierFor(hosts), 2, 1, ["hpcdata", "worker"]);
        var slurm = SlurmScript.Generate(job);
        var hpcPack = HpcPackCommands.Generate(job);
        if (attribute.Secret)
        {
            Assert.DoesNotContain(sample, slurm);
            Assert.DoesNotContain(sample, hpcPack);
            Assert.Contains($"# {attribute.Environment} is not written here", slurm);
        }
        else
        {
            Assert.Contains($"\nexport {attribute.Environment}={Quote.Sh(expected!)}\n", slurm);
            Assert.Contains($"/jobenv:{attribute.Environment}={expected}", hpcPack);
        }
        var local = LocalScheduler.JobEnvironment(job, "job-1", "pipe-1");
        Assert.Equal(expected, local[attribute.Environment!]);

        // The job's environment (the script's exports, and a secret as sbatch passes it) → node prep on a node → the agent it starts.
        var jobEnvironment = job.CacheTierVariables.Concat(job.CacheTierSecrets).ToDictionary(kv => kv.Key, kv => kv.Value);
        var (nodePrep, nodeProblem) = VerbContract<NodePrepOptions>.Parse(["--fanout", "none"], v => jobEnvironment.GetValueOrDefault(v));
        Assert.Null(nodeProblem);
        Assert.Equal(expected, SettingValues.Format(property.GetValue(nodePrep.CacheTierSwitches)));
        var agent = NodePrepCommand.AgentFor(nodePrep, "pipe-1", Path.Combine(_dir, "node"));
        Assert.Equal(expected, Arrived(ProgramContract<NodeAgentOptions>.ToArguments(agent), ProgramContract<NodeAgentOptions>.SecretEnvironment(agent),
            attribute, sample, (args, env) => BindProgram<NodeAgentOptions>(args, env).CacheTier, property));
    }

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
        var parsed = ProgramContract<T>.Parse(args);
        Assert.Null(parsed.Error);
        var settings = new Dictionary<string, string?>(ProgramContract<T>.FromEnvironment(v => environment.TryGetValue(v, out var x) ? x : null), StringComparer.OrdinalIgnoreCase);
        foreach (var (k, v) in parsed.Settings) settings[k] = v;
        var configuration = new ConfigurationBuilder().AddInMemoryCollection(settings).Build();
        ProgramContract<T>.Bind(configuration, settings, out var options);
        return options;
    }
}
