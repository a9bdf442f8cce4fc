using System.Collections;
using System.ComponentModel;
using System.Diagnostics.CodeAnalysis;
using System.Globalization;
using System.Reflection;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// A group of switches declared once with <see cref="SwitchAttribute"/> on an options type (the cache tier's, say) and
/// read wherever a command line carries them: the programs' contracts nest the type, and a CLI's verbs take the group's
/// switches out of their arguments before parsing their own. Name, variable, help and value checks come from the one
/// declaration, so a switch cannot mean one thing to a daemon and another to a verb.
/// </summary>
public sealed class SwitchGroup
{
    private readonly (SwitchAttribute Switch, PropertyInfo Property)[] _switches;
    /// <summary>The positional arguments (switches without a name), in declaration order.</summary>
    private readonly (SwitchAttribute Switch, PropertyInfo Property)[] _positionals = [];

    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    [DynamicDependency(DynamicallyAccessedMemberTypes.All, typeof(Hpc.CommonData.Cache.CacheTierOptions))]
    private SwitchGroup(Type type, IReadOnlyCollection<string>? only)
    {
        _switches = type.GetProperties(BindingFlags.Public | BindingFlags.Instance)
            .Select(p => (Switch: p.GetCustomAttribute<SwitchAttribute>()!, Property: p))
            .Where(x => x.Switch is { Name.Length: > 0 } && (only is null || only.Contains(x.Switch.Name))).ToArray();
        if (only?.FirstOrDefault(name => _switches.All(s => s.Switch.Name != name)) is { } unknown)
            throw new ArgumentException($"{type.Name} declares no switch {unknown}", nameof(only));
        if (only is null)
            _positionals = type.GetProperties(BindingFlags.Public | BindingFlags.Instance)
                .Select(p => (Switch: p.GetCustomAttribute<SwitchAttribute>()!, Property: p)).Where(x => x.Switch is { Name.Length: 0 }).ToArray();
    }

    /// <summary>
    /// The switches <paramref name="type"/> declares, or only those named in <paramref name="only"/>: a verb that starts
    /// a program can take a few of that program's own switches (node prep: the agent's <c>--data-dir</c> and
    /// <c>--budget</c>) without declaring them again.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2067", Justification = "options types are kept whole in native builds")]
    public static SwitchGroup Of(Type type, IReadOnlyCollection<string>? only = null) => new(type, only);

    /// <summary>Whether <paramref name="name"/> was on the command line (<paramref name="given"/>) or its variable is set.</summary>
    public bool IsSet(string name, ISet<string> given) => given.Contains(name)
        || _switches.FirstOrDefault(s => s.Switch.Name == name).Switch?.Environment is { } variable && Environment.GetEnvironmentVariable(variable) is { Length: > 0 };

    /// <summary>The group's switches, in declaration order.</summary>
    public IEnumerable<SwitchAttribute> Switches => _switches.Select(s => s.Switch);

    /// <summary>Whether <paramref name="type"/> declares switches (a group a command line can nest).</summary>
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    public static bool IsGroup(Type type) =>
        type.IsClass && type != typeof(string) && type.GetProperties().Any(p => p.GetCustomAttribute<SwitchAttribute>() is { Name.Length: > 0 });

    /// <summary>Sets every switch whose variable is set; the first bad value is returned as the problem.</summary>
    public string? ApplyEnvironment(object target)
    {
        foreach (var (s, p) in _switches)
        {
            if (s.Environment is not { } name || Environment.GetEnvironmentVariable(name) is not { Length: > 0 } value) continue;
            if (Set(target, p, value) is { } problem) return $"environment variable {name}: {problem}";
        }
        return null;
    }

    /// <summary>
    /// Takes the group's switches (<c>--name value</c>, <c>--name=value</c>, a bare flag) out of <paramref name="args"/>,
    /// up to a <c>--</c>, and sets them on <paramref name="target"/>; the rest stay for the verb's own parser. Returns the
    /// first problem (a missing or bad value, naming the switch), or null; <paramref name="given"/> collects the
    /// switches found.
    /// </summary>
    public string? Take(List<string> args, object target, ISet<string> given)
    {
        for (var i = 0; i < args.Count;)
        {
            var arg = args[i];
            if (arg == "--") break;
            var (name, value) = arg.IndexOf('=') is var eq and > 0 ? (arg[..eq], arg[(eq + 1)..]) : (arg, null);
            var found = _switches.FirstOrDefault(s => string.Equals(s.Switch.Name, name, StringComparison.OrdinalIgnoreCase) || s.Switch.Alias == name);
            if (found.Property is null) { i++; continue; }
            var taken = 1;
            if (value is null)
            {
                if (found.Property.PropertyType == typeof(bool) && (i + 1 >= args.Count || !bool.TryParse(args[i + 1], out _))) value = "true";
                else if (i + 1 < args.Count && !args[i + 1].StartsWith("--", StringComparison.Ordinal)) (value, taken) = (args[i + 1], 2);
                else return $"{found.Switch.Name} needs a value";
            }
            if (Set(target, found.Property, value) is { } problem) return $"{found.Switch.Name}: {problem}";
            given.Add(found.Switch.Name);
            args.RemoveRange(i, taken);
        }
        return null;
    }

    /// <summary>
    /// Binds a whole command line (what nested groups left of it) to <paramref name="target"/>: the switches, then the
    /// positional arguments in order (everything after <c>--</c> is positional). Returns the first problem — an unknown
    /// option, an argument too many, a bad or missing value, a required switch or argument missing — or null.
    /// </summary>
    public string? Bind(List<string> args, object target, ISet<string> given)
    {
        if (Take(args, target, given) is { } problem) return problem;
        var values = new List<string>();
        var end = args.IndexOf("--");
        for (var i = 0; i < args.Count; i++)
        {
            if (i == end) continue;
            if ((end < 0 || i < end) && args[i].Length > 1 && args[i][0] == '-') return $"unknown option '{args[i].Split('=')[0]}'";
            values.Add(args[i]);
        }
        if (values.Count > _positionals.Length) return $"unexpected argument '{values[_positionals.Length]}'";
        for (var i = 0; i < values.Count; i++)
            if (Set(target, _positionals[i].Property, values[i]) is { } bad) return $"{_positionals[i].Switch.Meta}: {bad}";
        var missing = _switches.Where(s => s.Switch.Required && !IsSet(s.Switch.Name, given)).Select(s => s.Switch.Name)
            .Concat(_positionals.Skip(values.Count).Where(p => p.Switch.Required).Select(p => p.Switch.Meta ?? "ARGUMENT")).ToList();
        return missing.Count > 0 ? $"missing required {string.Join(", ", missing)}" : null;
    }

    /// <summary>The positional arguments as a usage line shows them: <c>NAME DEST</c>, an optional one in brackets.</summary>
    public string Arguments => string.Join(" ", _positionals.Select(p => p.Switch.Required ? p.Switch.Meta : $"[{p.Switch.Meta}]"));

    /// <summary>
    /// One entry per positional argument and switch (name, value placeholder, help, the default
    /// <paramref name="defaults"/> holds, variable), for a verb's help: the help wraps under itself so no line is wider
    /// than <paramref name="columns"/>.
    /// </summary>
    public IEnumerable<string> HelpLines(object? defaults = null, int width = 28, int columns = 100) =>
        _positionals.Concat(_switches).Select(x =>
        {
            var name = x.Switch.Alias is { } alias ? $"{alias}, {x.Switch.Name}" : x.Switch.Name;
            var left = x.Switch.Name.Length == 0 ? x.Switch.Meta ?? "ARGUMENT"
                : x.Property.PropertyType == typeof(bool) ? name : $"{name} {x.Switch.Meta ?? SwitchValues.MetaOf(x.Property.PropertyType)}";
            var shown = defaults is null || x.Switch.Secret || x.Switch.Name.Length == 0 || x.Property.PropertyType == typeof(bool) ? null
                : SwitchValues.Format(x.Property.GetValue(defaults));
            var text = $"{x.Switch.Help}{(shown is { Length: > 0 } ? $" (default: {shown})" : "")}{(x.Switch.Environment is { } env ? $" [{env}]" : "")}";
            return $"  {left.PadRight(width)} " + string.Join("\n" + new string(' ', width + 3), Wrap(text, Math.Max(20, columns - width - 3)));
        });

    /// <summary>Words of <paramref name="text"/> as lines of at most <paramref name="columns"/> characters (a longer word stands alone).</summary>
    public static IEnumerable<string> Wrap(string text, int columns)
    {
        var line = new System.Text.StringBuilder();
        foreach (var word in text.Split(' ', StringSplitOptions.RemoveEmptyEntries))
        {
            if (line.Length > 0 && line.Length + 1 + word.Length > columns) { yield return line.ToString(); line.Clear(); }
            if (line.Length > 0) line.Append(' ');
            line.Append(word);
        }
        if (line.Length > 0) yield return line.ToString();
    }

    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("Trimming", "IL2072", Justification = "options types are kept whole in native builds")]
    private static string? Set(object target, PropertyInfo property, string value)
    {
        if (SwitchValues.Check(property.PropertyType, value) is { } problem) return problem;
        var type = Nullable.GetUnderlyingType(property.PropertyType) ?? property.PropertyType;
        object? converted = type == typeof(string) ? value
            : SwitchValues.IsList(type) ? value.Split([',', ' ', ';'], StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList()
            : type == typeof(TimeSpan) ? TimeSpan.Parse(value, CultureInfo.InvariantCulture)
            : type.IsEnum ? Enum.Parse(type, value, ignoreCase: true)
            : TypeDescriptor.GetConverter(type).ConvertFromInvariantString(value);
        property.SetValue(target, converted);
        return null;
    }
}

/// <summary>How switch values are checked and shown, alike for programs' contracts and switch groups.</summary>
internal static class SwitchValues
{
    /// <summary>Converts the text as binding will, so a bad value is a usage error naming it, not a crash later; null when it converts.</summary>
    [UnconditionalSuppressMessage("Trimming", "IL2026", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("Trimming", "IL2067", Justification = "options types are kept whole in native builds")]
    [UnconditionalSuppressMessage("Trimming", "IL2072", Justification = "options types are kept whole in native builds")]
    public static string? Check(Type propertyType, string value)
    {
        var type = Nullable.GetUnderlyingType(propertyType) ?? propertyType;
        if (IsList(type) || type == typeof(string)) return null;
        try
        {
            if (type == typeof(TimeSpan)) { _ = TimeSpan.Parse(value, CultureInfo.InvariantCulture); return null; }
            if (type.IsEnum) return Enum.TryParse(type, value, ignoreCase: true, out _) ? null : $"'{value}' is not one of {string.Join(", ", Enum.GetNames(type)).ToLowerInvariant()}";
            TypeDescriptor.GetConverter(type).ConvertFromInvariantString(value);
            return null;
        }
        catch (Exception ex) when (ex is FormatException or ArgumentException or NotSupportedException or OverflowException)
        {
            return ex is FormatException && ex.Message.StartsWith('\'') ? ex.Message : $"'{value}' is not {Describe(type)}";
        }
    }

    private static string Describe(Type t) => t switch
    {
        _ when t == typeof(int) || t == typeof(long) || t == typeof(short) => "a whole number",
        _ when t == typeof(double) || t == typeof(float) || t == typeof(decimal) => "a number",
        _ when t == typeof(bool) => "true or false",
        _ when t == typeof(TimeSpan) => "a duration (HH:MM:SS)",
        _ when t == typeof(ByteSize) => "a size (examples: 65536, 64KB, 256MB, 1GB)",
        _ when t == typeof(ByteRate) => "a rate (examples: 100MB, 100MB/s, 800mbit; 0: unlimited)",
        _ => $"a valid {t.Name}",
    };

    /// <summary>A value as a command line and help spell it (sizes and rates exactly, lists comma-separated).</summary>
    public static string? Format(object? value) => value switch
    {
        null => null,
        string s => s,
        bool b => b ? "true" : "false",
        ByteSize b => b.ToExactString(),
        ByteRate r => r.ToExactString(),
        TimeSpan t => t.ToString("c", CultureInfo.InvariantCulture),
        IFormattable f => f.ToString(null, CultureInfo.InvariantCulture),
        IEnumerable list => string.Join(",", list.Cast<object?>().Select(Format)),
        _ => value.ToString(),
    };

    public static bool IsList(Type t) => t != typeof(string) && typeof(IEnumerable).IsAssignableFrom(t);

    public static string MetaOf(Type t) => (Nullable.GetUnderlyingType(t) ?? t) switch
    {
        var x when x == typeof(ByteSize) => "SIZE",
        var x when x == typeof(ByteRate) => "RATE",
        var x when x == typeof(TimeSpan) => "HH:MM:SS",
        var x when x == typeof(int) || x == typeof(long) => "N",
        var x when IsList(x) => "A,B,…",
        _ => "VALUE",
    };
}
