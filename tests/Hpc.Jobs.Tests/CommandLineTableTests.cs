using System.Reflection;
using System.Text.Json.Nodes;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Every program's command line — each verb of hpcdata and the worker probe (<see cref="VerbContract{T}"/>) and the
/// stager, node agent and cache host (<see cref="ProgramContract{T}"/>) — is read by one engine, so the same inputs mean
/// the same everywhere. Each row below runs through every program, on the switch it is about: <c>--cache-hosts</c>
/// where the program takes the cache tier, else its first switch with a variable, and its first on/off flag.
/// </summary>
public sealed class CommandLineTableTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("hpcdata-table-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    /// <summary>One program as the table drives it: its switches, and its command line, variables and settings file read into options.</summary>
    public abstract class Program(string name)
    {
        public string Name { get; } = name;
        public abstract Type OptionsType { get; }
        /// <summary>The options the arguments, variables and settings file give, or the problem with them.</summary>
        public abstract (object? Options, string? Problem) Read(string[] args, IReadOnlyDictionary<string, string> variables, string? fileSwitch, string? fileValue, string dir);
        public abstract IEnumerable<(SwitchAttribute Switch, PropertyInfo Property)> Switches { get; }
        public abstract IReadOnlyList<(string Command, string What)> Examples { get; }
        public abstract string Help { get; }
        public override string ToString() => Name;
    }

    private sealed class Verb<T>(string name) : Program(name) where T : class, IVerbOptions, new()
    {
        public override Type OptionsType => typeof(T);
        public override IReadOnlyList<(string Command, string What)> Examples => T.Examples;
        public override string Help => VerbContract<T>.Help(Name);

        public override IEnumerable<(SwitchAttribute, PropertyInfo)> Switches =>
            Declared(typeof(T)).Concat(((new T() as ISwitchGroups)?.Groups ?? []).SelectMany(g => Declared(g.Target.GetType()).Where(s => g.Only is null || g.Only.Contains(s.Item1.Name))));

        public override (object?, string?) Read(string[] args, IReadOnlyDictionary<string, string> variables, string? fileSwitch, string? fileValue, string dir)
        {
            var environment = new Dictionary<string, string>(variables);
            if (fileSwitch is not null)
            {
                // The client's settings file, as a user's ~/.config/hpcdata/client.conf would hold it.
                var file = Path.Combine(dir, "client.conf");
                File.WriteAllText(file, $"# written by the table\n{fileSwitch.TrimStart('-')} = {fileValue}\n");
                environment[ClientConfig.FileVariable] = file;
            }
            Func<string, string?> read = v => environment.GetValueOrDefault(v);
            ClientConfig files;
            try { files = ClientConfig.Load(read); }
            catch (FormatException e) { return (null, e.Message); }
            var (options, problem) = VerbContract<T>.Parse(args, read, files);
            return (options, problem);
        }
    }

    private sealed class Daemon<T>(string name) : Program(name) where T : class, IProgramOptions, new()
    {
        public override Type OptionsType => typeof(T);
        public override IReadOnlyList<(string Command, string What)> Examples => T.Examples;
        public override string Help => ProgramContract<T>.Help();

        public override IEnumerable<(SwitchAttribute, PropertyInfo)> Switches => Declared(typeof(T), nested: true);

        public override (object?, string?) Read(string[] args, IReadOnlyDictionary<string, string> variables, string? fileSwitch, string? fileValue, string dir)
        {
            // The program's own resolve, as its Main runs it; the settings file is its appsettings.json, holding the
            // setting at the keys its switch sets (parsed without the program's argument: the keys are there, whatever
            // else the line lacks).
            var files = new List<SettingsFile>();
            if (fileSwitch is not null)
            {
                var file = Path.Combine(dir, "appsettings.json");
                var key = ProgramContract<T>.SettingsKey(fileSwitch);
                var isList = SettingValues.IsList(Switches.First(s => s.Item1.Name == fileSwitch).Item2.PropertyType);
                File.WriteAllText(file, Json(isList
                    ? fileValue!.Split(',').Select((item, i) => new KeyValuePair<string, string?>($"{key}:{i}", item))
                    : [new(key, fileValue)]));
                files.Add(new SettingsFile(file, Optional: false));
            }
            var resolved = ProgramContract<T>.Resolve(args, v => variables.GetValueOrDefault(v), files);
            // The options' own checks speak of settings this table does not give; only the reading counts here.
            return (resolved.Problem is null ? resolved.Options : null, resolved.Problem);
        }

    }

    [Fact]
    public void A_key_in_a_programs_settings_file_that_no_setting_has_is_a_warning_naming_the_nearest_one_and_the_rest_is_read()
    {
        IReadOnlyList<string> Warnings<T>(string[] args, string json, Func<T, object?> read, object? expected) where T : class, IProgramOptions, new()
        {
            var file = Path.Combine(_dir, $"{typeof(T).Name}.json");
            File.WriteAllText(file, json);
            var resolved = ProgramContract<T>.Resolve(args, _ => null, [new SettingsFile(file, Optional: false)]);
            Assert.Null(resolved.Problem);
            Assert.Equal(expected, read(resolved.Options));
            return resolved.Warnings;
        }

        var stager = Warnings<StagerOptions>(["data.bin"], """{ "Stager": { "Chunkng": "fixed", "CacheTier": { "Hostz": [ "a:1" ], "Replicas": 2 } } }""", o => o.CacheTier.Replicas, 2);
        var agent = Warnings<NodeAgentOptions>([], """{ "Agent": { "DataDirectry": "/x", "NodeName": "n7" }, "Logging": { "LogLevel": { "Default": "Debug" } } }""", o => o.NodeName, "n7");
        var host = Warnings<CacheHostOptions>([], """{ "CacheHost": { "MaxClientz": 5, "MaxClients": 9 } }""", o => o.MaxClients, 9);

        Assert.Equal(["settings key 'Stager:CacheTier:Hostz' is not a setting of hpcdata stage, so it was ignored (did you mean Stager:CacheTier:Hosts?)",
                      "settings key 'Stager:Chunkng' is not a setting of hpcdata stage, so it was ignored (did you mean Stager:Chunking?)"], stager);
        Assert.Equal("settings key 'Agent:DataDirectry' is not a setting of hpcdata agent, so it was ignored (did you mean Agent:DataDirectory?)", Assert.Single(agent));
        Assert.Contains("did you mean CacheHost:MaxClients?", Assert.Single(host));
    }

    public static TheoryData<Program> Programs => new()
    {
        new Verb<Commands.PrestageOptions>("hpcdata prestage"), new Verb<Commands.NodePrepOptions>("hpcdata nodeprep"),
        new Verb<Commands.NodeReleaseOptions>("hpcdata noderelease"), new Verb<Commands.RemoveOptions>("hpcdata remove"),
        new Verb<Commands.GcOptions>("hpcdata gc"), new Verb<Commands.RepairOptions>("hpcdata repair"), new Verb<Commands.GetOptions>("hpcdata get"),
        new Verb<Commands.PathOptions>("hpcdata path"), new Verb<Commands.StatusOptions>("hpcdata status"), new Verb<Commands.ListOptions>("hpcdata list"),
        new Verb<Commands.VersionOptions>("hpcdata version"), new Verb<Commands.DoctorOptions>("hpcdata doctor"),
        new Verb<Commands.TlsInitOptions>("hpcdata tls-init"), new Verb<Commands.GenerateOptions>("hpcdata generate"),
        new Verb<WorkerOptions>("hpcdata worker"), new Verb<Hpc.CommonData.Report.ReportOptions>("hpcdata report"),
        new Daemon<StagerOptions>("stager (hpcdata stage)"), new Daemon<NodeAgentOptions>("node agent (hpcdata agent)"),
        new Daemon<CacheHostOptions>("cache host (hpcdata cache-host)"),
    };

    [Theory]
    [MemberData(nameof(Programs))]
    public void A_switch_reads_the_same_in_every_form_and_wins_over_its_variable_which_wins_over_the_settings_file(Program program)
    {
        var (s, property) = Probe(program);
        var baseline = Baseline(program);
        string Value(int k) => Sample(property.PropertyType, k);
        string? Got(string[] args, Dictionary<string, string>? variables = null, string? file = null)
        {
            var (options, problem) = program.Read([.. baseline, .. args], variables ?? [], file is null ? null : s.Name, file, _dir);
            Assert.True(problem is null, $"{program}: {string.Join(' ', args)}: {problem}");
            return ReadBack(options!, s.Name);
        }
        var expected = Enumerable.Range(0, 5).Select(k => SettingValues.Format(SettingValues.Parse(property.PropertyType, Value(k)))).ToArray();

        Assert.Equal(expected[1], Got([s.Name, Value(1)]));
        Assert.Equal(expected[1], Got([$"{s.Name}={Value(1)}"]));
        Assert.Equal(expected[1], Got([s.Name.ToUpperInvariant(), Value(1)]));
        Assert.Equal(expected[2], Got([s.Name, Value(1), s.Name, Value(2)]));
        // A response file: one token per line, read where it stands.
        var response = Path.Combine(_dir, "args.rsp");
        File.WriteAllLines(response, [s.Name, Value(3)]);
        Assert.Equal(expected[3], Got([$"@{response}"]));
        if (s.Environment is { } variable)
        {
            Assert.Equal(expected[3], Got([], new() { [variable] = Value(3) }));
            Assert.Equal(expected[1], Got([s.Name, Value(1)], new() { [variable] = Value(3) }));
            if ((program is Daemon<StagerOptions> or Daemon<NodeAgentOptions> or Daemon<CacheHostOptions> || ClientConfig.Keys.Contains(s.Name.TrimStart('-'), StringComparer.OrdinalIgnoreCase)))
            {
                Assert.Equal(expected[4], Got([], file: Value(4)));
                Assert.Equal(expected[3], Got([], new() { [variable] = Value(3) }, file: Value(4)));
                Assert.Equal(expected[1], Got([s.Name, Value(1)], new() { [variable] = Value(3) }, file: Value(4)));
            }
        }
    }

    [Theory]
    [MemberData(nameof(Programs))]
    public void A_flag_stands_for_on_and_takes_on_or_off_after_it_only_when_that_word_is_one(Program program)
    {
        var flag = program.Switches.FirstOrDefault(x => x.Switch.Name.Length > 0 && x.Property.PropertyType == typeof(bool)).Switch;
        if (flag is null) return; // a program without flags (none of ours today) has nothing here
        var baseline = Baseline(program);
        string? Got(params string[] args)
        {
            var (options, problem) = program.Read([.. baseline, .. args], new Dictionary<string, string>(), null, null, _dir);
            Assert.True(problem is null, $"{program}: {string.Join(' ', args)}: {problem}");
            return ReadBack(options!, flag.Name);
        }
        Assert.Equal("true", Got(flag.Name));
        Assert.Equal("false", Got(flag.Name, "off"));
        Assert.Equal("false", Got($"{flag.Name}=no"));
        Assert.Equal("true", Got(flag.Name, "yes"));
        var (_, bad) = program.Read([.. baseline, $"{flag.Name}=maybe"], new Dictionary<string, string>(), null, null, _dir);
        Assert.NotNull(bad);
        Assert.Contains(flag.Name, bad);
        Assert.Contains("'maybe'", bad);
    }

    [Theory]
    [MemberData(nameof(Programs))]
    public void A_bad_command_line_is_one_line_naming_what_is_wrong(Program program)
    {
        var (s, _) = Probe(program);
        var baseline = Baseline(program);
        string Problem(params string[] args)
        {
            var (_, problem) = program.Read([.. baseline, .. args], new Dictionary<string, string>(), null, null, _dir);
            Assert.True(problem is not null, $"{program}: {string.Join(' ', args)} was accepted");
            Assert.DoesNotContain('\n', problem);
            return problem!;
        }
        Assert.Contains("unknown option '--no-such-switch'", Problem("--no-such-switch", "1"));
        Assert.Contains("unknown option '-z'", Problem("-z"));
        Assert.Contains($"{s.Name} needs a value", Problem(s.Name));
        Assert.Contains($"{s.Name} needs a value", Problem(s.Name, "--", "x"));
        var suggestion = Problem(s.Name.Remove(3, 1));
        Assert.Contains($"did you mean {s.Name}", suggestion);
    }

    [Theory]
    [MemberData(nameof(Programs))]
    public void The_help_s_examples_are_command_lines_the_program_accepts_and_no_help_line_is_wider_than_a_hundred_columns(Program program)
    {
        var help = program.Help;
        Assert.All(help.Split('\n'), line => Assert.True(line.Length <= 100, $"{program}: {line.Length} columns: {line}"));
        Assert.Equal(program.Examples.Count > 0, help.Contains("Examples:\n", StringComparison.Ordinal));
        foreach (var (command, what) in program.Examples)
        {
            Assert.Contains(command, help);
            Assert.Contains(what.Split(' ')[0], help);
            // The words after "hpcdata VERB" (or the daemon's "hpcdata stage"), up to a shell pipe's end; a job's command after "--" is the job's.
            var words = command.Split(' ', StringSplitOptions.RemoveEmptyEntries).ToList();
            var me = program.Name.Split(' ')[0] == "hpcdata" ? program.Name.Split(' ') : program.Name.Split('(', ')')[1].Split(' ');
            var at = Enumerable.Range(0, words.Count - 1).First(i => words[i] == me[0] && words[i + 1] == me[1]);
            var args = words.Skip(at + 2).ToList();
            if (args.IndexOf("--") is var dashes and >= 0 && program is Verb<Commands.PrestageOptions>) args = args[..dashes];
            var (_, problem) = program.Read([.. args], new Dictionary<string, string>(), null, null, _dir);
            Assert.True(problem is null, $"{program}: example '{command}': {problem}");
        }
    }

    /// <summary>The switch a program's rows are about.</summary>
    private static (SwitchAttribute Switch, PropertyInfo Property) Probe(Program program)
    {
        var named = program.Switches.Where(x => x.Switch.Name.Length > 0 && !x.Switch.Secret && x.Property.PropertyType != typeof(bool)).ToList();
        return named.FirstOrDefault(x => x.Switch.Name == "--cache-hosts") is { Switch: not null } hosts ? hosts
            : named.FirstOrDefault(x => x.Switch.Environment is not null) is { Switch: not null } withVariable ? withVariable : named.First();
    }

    /// <summary>What a program needs on every line: its required arguments and switches.</summary>
    private static string[] Baseline(Program program)
    {
        var args = new List<string>();
        foreach (var (s, p) in program.Switches.Where(x => x.Switch.Required && x.Switch.Name.Length > 0)) args.AddRange([s.Name, Sample(p.PropertyType, 0)]);
        var positionals = program.Switches.Where(x => x.Switch.Name.Length == 0
            && (x.Switch.Required || program.OptionsType.GetInterface(nameof(IProgramOptions)) is not null && x.Switch.Meta is { } m && !m.EndsWith(']'))).ToList();
        return [.. positionals.Select((_, i) => $"risk/table{i}"), .. args];
    }

    private static string Sample(Type type, int k)
    {
        var t = Nullable.GetUnderlyingType(type) ?? type;
        if (SettingValues.IsList(t)) return $"h{k}.example:{6380 + k}";
        if (t == typeof(string)) return $"value{k}";
        if (t == typeof(int) || t == typeof(long)) return $"{11 + k}";
        if (t == typeof(double)) return $"{1.5 + k}";
        if (t == typeof(TimeSpan)) return $"{11 + k}s";
        if (t == typeof(ByteSize)) return $"{11 + k}MB";
        if (t == typeof(ByteRate)) return $"{11 + k}MB/s";
        if (t.IsEnum) return Enum.GetNames(t)[k % Enum.GetNames(t).Length];
        throw new InvalidOperationException($"no sample value for {t}");
    }

    /// <summary>The value the options hold for a switch, wherever its property is (nested groups included), as settings text.</summary>
    private static string? ReadBack(object options, string name)
    {
        foreach (var target in Targets(options))
            foreach (var (s, p) in Declared(target.GetType()))
                if (s.Name == name) return SettingValues.Format(p.GetValue(target));
        throw new InvalidOperationException($"{options.GetType().Name} holds no switch {name}");
    }

    private static IEnumerable<object> Targets(object root)
    {
        yield return root;
        foreach (var g in (root as ISwitchGroups)?.Groups ?? []) yield return g.Target;
        foreach (var p in root.GetType().GetProperties(BindingFlags.Public | BindingFlags.Instance))
            if (p.GetIndexParameters().Length == 0 && p.PropertyType.IsClass && p.PropertyType != typeof(string) && SwitchGroup.IsGroup(p.PropertyType) && p.GetValue(root) is { } nested)
                foreach (var t in Targets(nested)) yield return t;
    }

    private static IEnumerable<(SwitchAttribute Switch, PropertyInfo Property)> Declared(Type type, bool nested = false)
    {
        foreach (var p in type.GetProperties(BindingFlags.Public | BindingFlags.Instance))
        {
            if (p.GetCustomAttribute<SwitchAttribute>() is { } s) yield return (s, p);
            else if (nested && p.PropertyType.IsClass && p.PropertyType != typeof(string) && SwitchGroup.IsGroup(p.PropertyType))
                foreach (var x in Declared(p.PropertyType, nested)) yield return x;
        }
    }

    /// <summary>Configuration keys (<c>Stager:CacheTier:Hosts:0</c>) as the JSON of a settings file.</summary>
    private static string Json(IEnumerable<KeyValuePair<string, string?>> settings)
    {
        var root = new JsonObject();
        foreach (var (key, value) in settings)
        {
            var parts = key.Split(':');
            JsonNode node = root;
            for (var i = 0; i < parts.Length - 1; i++)
            {
                var nextIsIndex = int.TryParse(parts[i + 1], out _);
                if (node is JsonObject o)
                    node = o[parts[i]] ??= nextIsIndex ? new JsonArray() : new JsonObject();
            }
            if (node is JsonArray array) array.Add(value);
            else ((JsonObject)node)[parts[^1]] = value;
        }
        return root.ToJsonString();
    }
}
