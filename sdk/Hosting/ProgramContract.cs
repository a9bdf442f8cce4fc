using System.Collections;
using System.ComponentModel;
using System.Diagnostics.CodeAnalysis;
using System.Globalization;
using System.Reflection;
using System.Text;
using Microsoft.Extensions.Configuration;

namespace Hpc.CommonData.Hosting;

/// <summary>An options type that is the command line of one program.</summary>
public interface IProgramOptions
{
    /// <summary>The configuration section the options bind from (appsettings.json, environment, command line).</summary>
    static abstract string SectionName { get; }
    /// <summary>The program as users start it, for help and errors.</summary>
    static abstract string ProgramName { get; }
    /// <summary>The program's assembly (<c>Hpc.CacheHost</c>), which launchers start with <see cref="ComponentProcess.Start{T}"/>.</summary>
    static abstract string Assembly { get; }
    static abstract string Summary { get; }
    /// <summary>Command lines the help shows last, each under what it does.</summary>
    static virtual IReadOnlyList<(string Command, string What)> Examples => [];
    /// <summary>A client program (the stager) reads the client's settings files (<see cref="ClientConfig"/>) beneath its variables, as every verb does.</summary>
    static virtual bool ReadsClientFiles => false;
    /// <summary>The prefix of the variables this program alone reads (the agent's <c>HPCDATA_AGENT_</c>): one that no
    /// setting declares is a typo, said as a warning. Null where the program shares its variables with others, whose
    /// settings it does not know.</summary>
    static virtual string? OwnVariables => null;
    /// <summary>Problems with the values, each a sentence naming the switch; empty when the options are usable.</summary>
    IEnumerable<string> Validate();
}

/// <summary>A JSON settings file of a program, and whether it may be missing.</summary>
public sealed record SettingsFile(string Path, bool Optional);

/// <summary>
/// A program's settings resolved from every source (<see cref="ProgramContract{T}.Resolve"/>): the bound options, where
/// each setting came from, and what is wrong: <see cref="Problem"/> (a switch, variable, file or value that does not
/// read), <see cref="Invalid"/> (the options' own checks, each saying where a value came from that the command line did
/// not give), <see cref="Warnings"/> (keys, and the program's own variables, that no setting has).
/// </summary>
public sealed record Resolution<T>(T Options, SettingOrigins Origins, bool HelpRequested,
    string? Problem, IReadOnlyList<string> Invalid, IReadOnlyList<string> Warnings) where T : class;

/// <summary>
/// The command line of a program, derived from its options type <typeparamref name="T"/> once, for both sides of the
/// contract: the program parses its arguments into configuration keys (unknown switches refused, <c>--help</c>
/// answered), and launchers build the arguments from an options object, so a switch is spelled in one place.
/// </summary>
public static class ProgramContract<T> where T : class, IProgramOptions, new()
{
    private sealed record Entry(SwitchAttribute Switch, string Key, PropertyInfo Property, PropertyInfo[] Path);

    private static readonly Entry[] Entries = Collect(typeof(T), T.SectionName, []).ToArray();

    // Options types live in this library, which a native build of this repository's programs keeps whole
    // (TrimmerRootAssembly in Directory.Build.props): their properties, attributes and converters are there for
    // reflection and for the configuration binder. The cache tier's options, which they nest, live in the core library
    // and are kept from here. A program built elsewhere natively must root this library the same way.
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("Trimming", "IL2075", Justification = "options types are kept whole in native builds")]
    [DynamicDependency(DynamicallyAccessedMemberTypes.All, typeof(Hpc.CommonData.Cache.CacheTierOptions))]
    private static IEnumerable<Entry> Collect(Type type, string prefix, PropertyInfo[] path)
    {
        var declared = SwitchAttribute.DeclaredOn(type);
        foreach (var p in type.GetProperties(BindingFlags.Public | BindingFlags.Instance))
        {
            var key = $"{prefix}:{p.Name}";
            if (declared.FirstOrDefault(x => x.Property.Name == p.Name).Switch is { } s) yield return new Entry(s, key, p, [.. path, p]);
            else if (p.PropertyType.IsClass && p.PropertyType != typeof(string) && SwitchAttribute.DeclaredOn(p.PropertyType).Count > 0)
                foreach (var e in Collect(p.PropertyType, key, [.. path, p])) yield return e;
        }
    }

    /// <summary>The key a JSON settings file gives the switch <paramref name="switchName"/>'s value at (<c>CacheHost:MaxClients</c>).</summary>
    public static string SettingsKey(string switchName) => Entries.First(e => e.Switch.Name.Equals(switchName, StringComparison.OrdinalIgnoreCase)).Key;

    /// <summary>The switches, in declaration order (for help and documentation).</summary>
    public static IEnumerable<SwitchAttribute> Switches => Entries.Select(e => e.Switch);

    /// <summary>The command line that makes the program run with <paramref name="options"/>: every setting that
    /// differs from the default or that an environment variable could otherwise change, secrets left out (pass those
    /// with <see cref="SecretEnvironment"/>).</summary>
    public static IReadOnlyList<string> ToArguments(T options)
    {
        var defaults = new T();
        var args = new List<string>();
        foreach (var e in Entries)
        {
            if (e.Switch.Secret) continue;
            var value = Read(e, options);
            if (SettingValues.Format(value) is not { Length: > 0 } text || (text == SettingValues.Format(Read(e, defaults)) && e.Switch.Environment is null)) continue;
            if (e.Switch.Name == "") args.Insert(0, text);
            else if (e.Property.PropertyType == typeof(bool)) { if ((bool)value!) args.Add(e.Switch.Name); else args.AddRange([e.Switch.Name, "false"]); }
            // A value that looks like a switch would be refused as a missing value; the name=value form carries it.
            else if (text.StartsWith("--", StringComparison.Ordinal)) args.Add($"{e.Switch.Name}={text}");
            else args.AddRange([e.Switch.Name, text]);
        }
        return args;
    }

    /// <summary>The secrets of <paramref name="options"/> as the environment variables the program reads them from.</summary>
    public static IReadOnlyDictionary<string, string?> SecretEnvironment(T options)
    {
        var env = new Dictionary<string, string?>();
        foreach (var e in Entries)
            if (e.Switch is { Secret: true, Environment: { } name } && SettingValues.Format(Read(e, options)) is { } text) env[name] = text;
        return env;
    }

    /// <summary>Usage, the summary and one line per switch with its default, for <c>--help</c>.</summary>
    public static string Help()
    {
        var defaults = new T();
        var positional = Entries.FirstOrDefault(e => e.Switch.Name == "");
        var columns = HelpLayout.Columns;
        var sb = new StringBuilder();
        sb.AppendLine(string.Join("\n", HelpLayout.Wrap($"{T.ProgramName} — {T.Summary}", columns))).AppendLine();
        sb.AppendLine($"usage: {T.ProgramName}{(positional is null ? "" : " " + positional.Switch.Meta)} [options]").AppendLine();
        foreach (var e in Entries)
        {
            var named = e.Switch.Alias is { } alias ? $"{alias}, {e.Switch.Name}" : e.Switch.Name;
            var left = e.Switch.Name == "" ? e.Switch.Meta ?? "ARG"
                : e.Property.PropertyType == typeof(bool) ? named : $"{named} {e.Switch.Meta ?? MetaOf(e.Property.PropertyType)}";
            var help = e.Switch.Help;
            // A help text that already says its default is not told it twice.
            var saysDefault = help.Contains("(default", StringComparison.Ordinal) || help.Contains("the default)", StringComparison.Ordinal);
            if (!e.Switch.Secret && !saysDefault && SettingValues.Format(Read(e, defaults)) is { Length: > 0 } d && e.Property.PropertyType != typeof(bool)) help += $" (default: {d})";
            if (e.Switch.Environment is { } env) help += $" [{env}]";
            sb.AppendLine(HelpLayout.Entry(left, help, columns));
        }
        sb.AppendLine(HelpLayout.Entry("-h, --help", "this text", columns));
        sb.AppendLine().AppendLine(string.Join("\n", HelpLayout.Wrap($"Settings can also come from appsettings.json beside the program (section \"{T.SectionName}\"); arguments from a file with @FILE (one a line).", columns)));
        if (T.Examples.Count > 0) sb.AppendLine().Append(HelpLayout.Examples(T.Examples, columns));
        return sb.ToString();
    }

    /// <summary>
    /// The program's JSON settings files, the first beneath: <c>appsettings.json</c> in <paramref name="directory"/>
    /// (the program's own folder by default; optional), then the site's file that <see cref="ServiceHosting.SettingsVariable"/>
    /// names (required: a site that names one means it).
    /// </summary>
    public static IReadOnlyList<SettingsFile> SettingsFiles(Func<string, string?> environment, string? directory = null) =>
        [new(Path.Combine(directory ?? AppContext.BaseDirectory, "appsettings.json"), Optional: true),
         .. environment(ServiceHosting.SettingsVariable) is { Length: > 0 } site ? new[] { new SettingsFile(Path.GetFullPath(site), Optional: false) } : []];

    /// <summary>
    /// The program's settings as one value, from every source in one order — the command line, then the documented
    /// variables, then the client's settings files where the program reads them (<see cref="IProgramOptions.ReadsClientFiles"/>),
    /// then <paramref name="files"/> (the last wins among them), then the options type's defaults — bound and
    /// validated, with where each setting came from. The switches' sources are <see cref="SettingsResolver"/>'s, as for
    /// every verb. Every program runs this, and the tests run it as the programs do; nothing is printed.
    /// </summary>
    /// <param name="variableNames">The names of the environment's variables, for the warning on one of the program's own
    /// that no setting declares (<see cref="IProgramOptions.OwnVariables"/>).</param>
    public static Resolution<T> Resolve(IReadOnlyList<string> args, Func<string, string?> environment, IReadOnlyList<SettingsFile> files,
        IEnumerable<string>? variableNames = null)
    {
        var origins = new SettingOrigins();
        if (IsHelp(args)) return new(new T(), origins, true, null, [], []);
        var builder = new ConfigurationBuilder();
        foreach (var file in files) builder.AddJsonFile(file.Path, file.Optional, reloadOnChange: false);
        IConfigurationRoot configuration;
        try { configuration = builder.Build(); }
        catch (Exception e) when (e is FileNotFoundException or InvalidDataException or FormatException or IOException)
        {
            return new(new T(), origins, false, $"settings file: {(e.InnerException ?? e).Message.ReplaceLineEndings(" ")}", [], []);
        }
        List<string> warnings = [.. UnknownKeys(configuration)];
        if (T.OwnVariables is { } own && variableNames is not null)
            warnings.AddRange(UnknownVariables.Problems(T.ProgramName, variableNames, UnknownVariables.Known(), own));
        if (BindSettingsFiles(configuration, files, origins, out var options) is { } unreadable) return new(options, origins, false, unreadable, [], warnings);
        ClientConfig clientFiles;
        try { clientFiles = T.ReadsClientFiles ? ClientConfig.Load(environment) : ClientConfig.None; }
        catch (FormatException e) { return new(options, origins, false, e.Message, [], warnings); }
        var resolved = SettingsResolver.Resolve([.. Slots(options)], args, environment, clientFiles, origins);
        var problem = resolved.Problem is { } p && p.StartsWith("unknown option", StringComparison.Ordinal) ? $"{p} (see {T.ProgramName} --help)" : resolved.Problem;
        problem ??= BindArgument(options, resolved.Arguments, origins);
        return new(options, origins, false, problem, problem is null ? [.. options.Validate().Select(origins.Attribute)] : [], warnings);
    }

    /// <summary><see cref="Resolve"/> as the program's Main calls it: this process's command line, variables and settings files.</summary>
    public static Resolution<T> ResolveThisProcess(IReadOnlyList<string> args) =>
        Resolve(args, Environment.GetEnvironmentVariable, SettingsFiles(Environment.GetEnvironmentVariable),
            Environment.GetEnvironmentVariables().Keys.OfType<string>());

    /// <summary>"help" asks for help as the first word only (later it is a value: a file may be called help); after "--" nothing is a switch.</summary>
    private static bool IsHelp(IReadOnlyList<string> args)
    {
        if (args.Count > 0 && args[0] == "help") return true;
        foreach (var a in args)
        {
            if (a == "--") return false;
            if (a is "--help" or "-h" or "-?") return true;
        }
        return false;
    }

    /// <summary>The named switches, each bound to the object it sets within <paramref name="options"/> (a nested group made where it is null).</summary>
    [UnconditionalSuppressMessage("Trimming", "IL2072", Justification = "options types are kept whole in native builds")]
    private static IEnumerable<SettingSlot> Slots(T options)
    {
        foreach (var e in Entries.Where(e => e.Switch.Name.Length > 0))
        {
            object owner = options;
            foreach (var p in e.Path[..^1])
            {
                if (p.GetValue(owner) is not { } next) p.SetValue(owner, next = Activator.CreateInstance(p.PropertyType)!);
                owner = next;
            }
            yield return new SettingSlot(e.Switch, e.Property, owner);
        }
    }

    /// <summary>The program's one positional argument, if it takes one: set from the command line, or missing.</summary>
    private static string? BindArgument(T options, IReadOnlyList<string> arguments, SettingOrigins origins)
    {
        var positional = Entries.FirstOrDefault(e => e.Switch.Name == "");
        if (arguments.Count > (positional is null ? 0 : 1)) return $"unexpected argument '{arguments[positional is null ? 0 : 1]}'";
        if (positional is null) return null;
        if (arguments.Count == 1)
        {
            try { positional.Property.SetValue(options, SettingValues.Parse(positional.Property.PropertyType, arguments[0])); }
            catch (FormatException e) { return $"{positional.Switch.Meta}: {e.Message}"; }
            origins.Record(positional.Switch.Meta ?? "ARG", new(SettingSource.CommandLine, positional.Switch.Meta ?? "ARG"));
            return null;
        }
        return positional.Switch.Meta is { } meta && !meta.EndsWith(']') ? $"missing {meta} (see {T.ProgramName} --help)" : null;
    }

    /// <summary>
    /// What a program's Main does with its <see cref="Resolution{T}"/>: answers <c>--help</c> on stdout (exit 0), refuses a
    /// problem with one line on stderr (exit 2), says each warning on stderr; null when the program goes on.
    /// </summary>
    public static int? Answer(Resolution<T> resolution)
    {
        if (resolution.HelpRequested) { Console.Out.Write(Help()); return 0; }
        if (resolution.Problem is { } problem) return Refuse(problem);
        if (resolution.Invalid.Count > 0) return Refuse(string.Join(" ", resolution.Invalid));
        foreach (var warning in resolution.Warnings) Console.Error.WriteLine($"{T.ProgramName}: warning: {warning}");
        return null;
    }

    /// <summary>Keys of the program's section that no setting has: a typo in a JSON settings file would otherwise be ignored without a word.</summary>
    private static IEnumerable<string> UnknownKeys(IConfiguration configuration)
    {
        var known = KnownKeys.Value;
        // A list's items are keys of their own (Hosts:0, Hosts:1): the list is named once.
        var unknown = configuration.GetSection(T.SectionName).AsEnumerable().Where(kv => kv.Value is not null)
            .Select(kv => string.Join(':', kv.Key.Split(':').Where(part => !int.TryParse(part, out _))))
            .Where(path => !known.Contains(path)).Distinct(StringComparer.OrdinalIgnoreCase).Order(StringComparer.Ordinal);
        foreach (var path in unknown)
            yield return $"settings key '{path}' is not a setting of {T.ProgramName}, so it was ignored{Suggestions.DidYouMean(path, known)}";
    }

    private static readonly Lazy<HashSet<string>> KnownKeys = new(() =>
    {
        var keys = new HashSet<string>(StringComparer.OrdinalIgnoreCase);
        AddKeys(keys, typeof(T), T.SectionName, 0);
        return keys;
    });

    // Every key a settings file may give: the switches' and the other public settable properties' (nested groups walked).
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("Trimming", "IL2072", Justification = "options types are kept whole in native builds")]
    private static void AddKeys(HashSet<string> keys, Type type, string prefix, int depth)
    {
        foreach (var p in type.GetProperties(BindingFlags.Public | BindingFlags.Instance).Where(p => p.CanWrite || p.PropertyType.IsClass))
        {
            var key = $"{prefix}:{p.Name}";
            keys.Add(key);
            if (depth < 4 && p.PropertyType.IsClass && p.PropertyType != typeof(string) && !IsList(p.PropertyType) && p.PropertyType.Namespace?.StartsWith("Hpc.", StringComparison.Ordinal) == true)
                AddKeys(keys, p.PropertyType, key, depth + 1);
        }
    }

    /// <summary>
    /// Binds the program's section of the JSON settings files, beneath every switch's source, and records which file gave
    /// each switch's value. Null, or the problem in one line.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("AOT", "IL3050", Justification = "the options' collections are List<string>, compiled in every build")]
    private static string? BindSettingsFiles(IConfigurationRoot configuration, IReadOnlyList<SettingsFile> files, SettingOrigins origins, out T options)
    {
        options = new T();
        // A settings file's "Tls": "yes" reads as the switch and the variable would (the binder knows only true/false).
        foreach (var e in Entries.Where(e => e.Property.PropertyType == typeof(bool)))
            if (configuration[e.Key] is { } text && !bool.TryParse(text, out _) && SettingValues.TryParseBool(text, out var on))
                configuration[e.Key] = on ? "true" : "false";
        // And its "IdleTimeout": "10s" (or 10, seconds) as every switch reads a duration.
        foreach (var e in Entries.Where(IsDuration))
            if (configuration[e.Key] is { } text && AsBinderDuration(text) is { } duration) configuration[e.Key] = duration;
        try
        {
            Microsoft.Extensions.Configuration.ConfigurationBinder.Bind(configuration.GetSection(T.SectionName), options);
        }
        catch (InvalidOperationException e)
        {
            return e.InnerException is { } inner ? $"{e.Message} {inner.Message}" : e.Message;
        }
        foreach (var e in Entries.Where(e => e.Switch.Name.Length > 0))
        {
            // The providers are the files, in their order: the last that has the key gave it.
            var providers = configuration.Providers.ToList();
            for (var i = providers.Count - 1; i >= 0; i--)
                if (providers[i].TryGet(e.Key, out _) || providers[i].TryGet(e.Key + ":0", out _))
                {
                    origins.Record(e.Switch.Name, new(SettingSource.SettingsFile, files[i].Path));
                    break;
                }
            // A list is set here too: the binder cannot fill a list in a native build (the agent's "Hosts": [...] in
            // agent.json came out empty there).
            if (!IsList(e.Property.PropertyType)) continue;
            var items = configuration.GetSection(e.Key).GetChildren().OrderBy(c => int.TryParse(c.Key, out var i) ? i : int.MaxValue)
                .Select(c => c.Value).OfType<string>().ToList();
            if (items.Count == 0) continue;
            object? owner = options;
            foreach (var p in e.Path[..^1]) owner = owner is null ? null : p.GetValue(owner);
            if (owner is not null && e.Property.PropertyType.IsAssignableFrom(typeof(List<string>))) e.Property.SetValue(owner, items);
        }
        return null;
    }

    /// <summary>Refuses to run: one line on stderr, prefixed with the program's name, and exit code 2 (a usage error).</summary>
    public static int Refuse(string problem)
    {
        Console.Error.WriteLine($"{T.ProgramName}: {problem.ReplaceLineEndings(" ")}");
        return 2;
    }

    /// <summary>Cannot start although the command line was right: one line on stderr and the exit code of the failure's class.</summary>
    public static int Fail(CommonDataException e)
    {
        Console.Error.WriteLine($"{T.ProgramName}: {e.Message.ReplaceLineEndings(" ")}");
        return ExitCodes.For(e.Code);
    }

    private static object? Read(Entry e, object root)
    {
        object? o = root;
        foreach (var p in e.Path) o = o is null ? null : p.GetValue(o);
        return o;
    }

    private static bool IsDuration(Entry e) => (Nullable.GetUnderlyingType(e.Property.PropertyType) ?? e.Property.PropertyType) == typeof(TimeSpan);

    /// <summary>
    /// A duration in the settings' grammar (<c>10s</c>, <c>15m</c>, a bare number of seconds) as the configuration binder
    /// reads one (<c>00:00:10</c>): it would take <c>10</c> for ten days and refuse <c>10s</c>. Null when it does not read.
    /// </summary>
    private static string? AsBinderDuration(string text)
    {
        try { return SettingValues.ParseDuration(text).ToString("c", System.Globalization.CultureInfo.InvariantCulture); }
        catch (Exception e) when (e is FormatException or OverflowException) { return null; }
    }

    private static bool IsList(Type t) => SettingValues.IsList(t);

    private static string MetaOf(Type t) => SettingValues.MetaOf(t);
}
