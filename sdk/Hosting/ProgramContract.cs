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
    /// <summary>Problems with the values, each a sentence naming the switch; empty when the options are usable.</summary>
    IEnumerable<string> Validate();
}

/// <summary>A JSON settings file of a program, and whether it may be missing.</summary>
public sealed record SettingsFile(string Path, bool Optional);

/// <summary>
/// A program's settings resolved from every source (<see cref="ProgramContract{T}.Resolve"/>): the bound options, the
/// keys the command line and variables gave, the whole configuration (for the program's other sections, such as
/// logging), and what is wrong: <see cref="Problem"/> (a switch, variable, file or value that does not read),
/// <see cref="Invalid"/> (the options' own checks), <see cref="Warnings"/> (keys no setting has).
/// </summary>
public sealed record Resolution<T>(T Options, IReadOnlyDictionary<string, string?> Settings, IConfiguration? Configuration, bool HelpRequested,
    string? Problem, IReadOnlyList<string> Invalid, IReadOnlyList<string> Warnings) where T : class;

/// <summary>What <see cref="ProgramContract{T}.Parse"/> found on a command line.</summary>
public sealed record ParsedCommandLine(IReadOnlyDictionary<string, string?> Settings, bool HelpRequested, string? Error);

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
        foreach (var p in type.GetProperties(BindingFlags.Public | BindingFlags.Instance))
        {
            var key = $"{prefix}:{p.Name}";
            if (p.GetCustomAttribute<SwitchAttribute>() is { } s) yield return new Entry(s, key, p, [.. path, p]);
            else if (p.PropertyType.IsClass && p.PropertyType != typeof(string) && p.PropertyType.GetProperties().Any(q => q.IsDefined(typeof(SwitchAttribute))))
                foreach (var e in Collect(p.PropertyType, key, [.. path, p])) yield return e;
        }
    }

    /// <summary>The switches, in declaration order (for help and documentation).</summary>
    public static IEnumerable<SwitchAttribute> Switches => Entries.Select(e => e.Switch);

    /// <summary>
    /// Reads the command line into configuration keys of <see cref="IProgramOptions.SectionName"/>. A list value
    /// (<c>--cache-hosts a:1,b:2</c>) becomes indexed keys; a switch that takes no value stands for <c>true</c>.
    /// </summary>
    public static ParsedCommandLine Parse(IReadOnlyList<string> args)
    {
        var settings = new Dictionary<string, string?>(StringComparer.OrdinalIgnoreCase);
        var positional = Entries.FirstOrDefault(e => e.Switch.Name == "");
        // "help" asks for help as the first word only: later it is a value (a file may be called help); after "--"
        // nothing is a switch.
        var end = args.Count;
        for (var i = 0; i < args.Count; i++) if (args[i] == "--") { end = i; break; }
        if ((args.Count > 0 && args[0] == "help") || args.Take(end).Any(a => a is "--help" or "-h" or "-?")) return new(settings, true, null);
        var named = Entries.Where(e => e.Switch.Name.Length > 0).ToList();
        var parsed = CommandLineEngine.Parse([.. named.Select(e => new SwitchSyntax(e.Switch.Name, e.Switch.Alias, e.Property.PropertyType == typeof(bool)))], args);
        if (parsed.Problem is { } problem) return new(settings, false, problem);
        if (parsed.UnknownOption is { } unknown)
        {
            var name = unknown.Split('=')[0];
            return new(settings, false, name.StartsWith("--", StringComparison.Ordinal)
                ? $"unknown option '{name}'{Suggestions.DidYouMean(name, named.Select(e => e.Switch.Name))} (see {T.ProgramName} --help)"
                : $"unknown option '{name}' (see {T.ProgramName} --help; an argument that starts with '-' goes after --)");
        }
        foreach (var (name, value) in parsed.Values)
        {
            var entry = named.First(e => e.Switch.Name == name);
            if (Check(entry, value) is { } bad) return new(settings, false, $"{name}: {bad}");
            Put(settings, entry, value);
        }
        if (parsed.Arguments.Count > (positional is null ? 0 : 1))
            return new(settings, false, $"unexpected argument '{parsed.Arguments[positional is null ? 0 : 1]}'");
        if (positional is not null && parsed.Arguments.Count == 1) settings[positional.Key] = parsed.Arguments[0];
        if (positional is not null && !settings.ContainsKey(positional.Key) && positional.Switch.Meta is { } meta && !meta.EndsWith(']'))
            return new(settings, false, $"missing {meta} (see {T.ProgramName} --help)");
        return new(settings, false, null);
    }

    /// <summary>The documented environment variables that are set (in <paramref name="environment"/>, the process's by default), as configuration keys.</summary>
    public static IReadOnlyDictionary<string, string?> FromEnvironment(Func<string, string?>? environment = null) => ReadEnvironment(out _, environment);

    private static Dictionary<string, string?> ReadEnvironment(out string? error, Func<string, string?>? environment = null)
    {
        error = null;
        environment ??= Environment.GetEnvironmentVariable;
        var settings = new Dictionary<string, string?>(StringComparer.OrdinalIgnoreCase);
        foreach (var e in Entries)
        {
            if (e.Switch.Environment is not { } v || environment(v) is not { Length: > 0 } value) continue;
            if (Check(e, value) is { } problem) { error ??= $"environment variable {v}: {problem}"; continue; }
            Put(settings, e, value);
        }
        return settings;
    }

    /// <summary>Sets one switch's keys, first dropping what an earlier layer or an earlier occurrence gave it (a list
    /// given again replaces the old one instead of overwriting only its first items).</summary>
    private static void Put(Dictionary<string, string?> settings, Entry e, string value)
    {
        settings.Remove(e.Key);
        if (IsList(e.Property.PropertyType))
            foreach (var k in settings.Keys.Where(k => k.StartsWith(e.Key + ":", StringComparison.OrdinalIgnoreCase)).ToList()) settings.Remove(k);
        foreach (var (k, v) in Expand(e, value)) settings[k] = v;
    }

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

    /// <summary>The command line over the documented variables, as configuration keys: what every program starts from.</summary>
    private static (Dictionary<string, string?> Settings, ParsedCommandLine Parsed, string? EnvironmentError) Merge(IReadOnlyList<string> args, Func<string, string?> environment)
    {
        var parsed = Parse(args);
        var merged = ReadEnvironment(out var environmentError, environment);
        // A switch on the command line replaces everything the environment gave it (all items of a list).
        foreach (var e in Entries)
            if (parsed.Settings.Keys.Any(k => k.Equals(e.Key, StringComparison.OrdinalIgnoreCase) || k.StartsWith(e.Key + ":", StringComparison.OrdinalIgnoreCase)))
                foreach (var k in merged.Keys.Where(k => k.Equals(e.Key, StringComparison.OrdinalIgnoreCase) || k.StartsWith(e.Key + ":", StringComparison.OrdinalIgnoreCase)).ToList())
                    merged.Remove(k);
        // A secret's file on the command line outranks the secret a variable gave, although it fills another key: the
        // command line wins over the environment for the password as for every setting, and as hpcdata's own verbs read it.
        foreach (var file in Entries.Where(e => parsed.Settings.ContainsKey(e.Key)))
            foreach (var secret in Entries.Where(e => e.Switch.Secret && e.Switch.Name + "-file" == file.Switch.Name))
                merged.Remove(secret.Key);
        foreach (var (k, v) in parsed.Settings) merged[k] = v;
        return (merged, parsed, environmentError);
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
    /// variables, then <paramref name="files"/> (the last wins among them), then the options type's defaults — bound
    /// and validated. Every program runs this, and the tests run it as the programs do; nothing is printed.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("AOT", "IL3050", Justification = "the options' collections are List<string>, compiled in every build")]
    public static Resolution<T> Resolve(IReadOnlyList<string> args, Func<string, string?> environment, IReadOnlyList<SettingsFile> files)
    {
        var (settings, parsed, environmentError) = Merge(args, environment);
        if (parsed.HelpRequested) return new(new T(), settings, null, true, null, [], []);
        if ((parsed.Error ?? environmentError) is { } error) return new(new T(), settings, null, false, error, [], []);
        var builder = new ConfigurationBuilder();
        foreach (var file in files) builder.AddJsonFile(file.Path, file.Optional, reloadOnChange: false);
        IConfiguration configuration;
        try { configuration = builder.AddInMemoryCollection(settings).Build(); }
        catch (Exception e) when (e is FileNotFoundException or InvalidDataException or FormatException or IOException)
        {
            return new(new T(), settings, null, false, $"settings file: {(e.InnerException ?? e).Message.ReplaceLineEndings(" ")}", [], []);
        }
        var warnings = UnknownKeys(configuration).ToList();
        var problem = BindSection(configuration, settings, out var options);
        return new(options, settings, configuration, false, problem, problem is null ? [.. options.Validate()] : [], warnings);
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

    // Every key a settings file may give: the switches' and the other public settable properties' (nested groups walked).
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    private static readonly Lazy<HashSet<string>> KnownKeys = new(() =>
    {
        var keys = new HashSet<string>(StringComparer.OrdinalIgnoreCase);
        void Walk(Type type, string prefix, int depth)
        {
            foreach (var p in type.GetProperties(BindingFlags.Public | BindingFlags.Instance).Where(p => p.CanWrite || p.PropertyType.IsClass))
            {
                var key = $"{prefix}:{p.Name}";
                keys.Add(key);
                if (depth < 4 && p.PropertyType.IsClass && p.PropertyType != typeof(string) && !IsList(p.PropertyType) && p.PropertyType.Namespace?.StartsWith("Hpc.", StringComparison.Ordinal) == true)
                    Walk(p.PropertyType, key, depth + 1);
            }
        }
        Walk(typeof(T), T.SectionName, 0);
        return keys;
    });

    /// <summary>
    /// Binds the program's section of <paramref name="configuration"/> (the settings files with the command line and the
    /// variables over them). A list the command line or a variable gave is the whole list: configuration would
    /// otherwise lay it over a settings file's item by item. Null, or the problem in one line.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("AOT", "IL3050", Justification = "the options' collections are List<string>, compiled in every build")]
    private static string? BindSection(IConfiguration configuration, IReadOnlyDictionary<string, string?> settings, out T options)
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
            // A bad value in a settings file (the command line's and the variables' were checked as they were read).
            return e.InnerException is { } inner ? $"{e.Message} {inner.Message}" : e.Message;
        }
        foreach (var e in Entries.Where(e => IsList(e.Property.PropertyType)))
        {
            var items = settings.Where(kv => kv.Key.StartsWith(e.Key + ":", StringComparison.OrdinalIgnoreCase) && kv.Value is not null)
                .OrderBy(kv => int.TryParse(kv.Key[(e.Key.Length + 1)..], out var i) ? i : int.MaxValue).Select(kv => kv.Value!).ToList();
            // Else the settings file's list, set here too: the binder cannot fill a list in a native build (the agent's
            // "Hosts": [...] in agent.json came out empty there).
            if (items.Count == 0)
                items = configuration.GetSection(e.Key).GetChildren().OrderBy(c => int.TryParse(c.Key, out var i) ? i : int.MaxValue)
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

    private static IEnumerable<KeyValuePair<string, string?>> Expand(Entry e, string value)
    {
        if (IsList(e.Property.PropertyType))
        {
            var items = value.Split([',', ' ', ';'], StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
            for (var i = 0; i < items.Length; i++) yield return new($"{e.Key}:{i}", items[i]);
        }
        // The configuration binder reads only true/false: every other spelling of on and off is given to it as those.
        else if (e.Property.PropertyType == typeof(bool) && SettingValues.TryParseBool(value, out var on)) yield return new(e.Key, on ? "true" : "false");
        else if (IsDuration(e) && AsBinderDuration(value) is { } duration) yield return new(e.Key, duration);
        else yield return new(e.Key, value);
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

    private static string? Check(Entry e, string value) => SettingValues.Check(e.Property.PropertyType, value);

    private static bool IsList(Type t) => SettingValues.IsList(t);

    private static string MetaOf(Type t) => SettingValues.MetaOf(t);
}
