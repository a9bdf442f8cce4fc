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
        var declared = SwitchAttribute.DeclaredOn(type);
        _switches = declared.Where(x => x.Switch.Name.Length > 0 && (only is null || only.Contains(x.Switch.Name))).ToArray();
        if (only?.FirstOrDefault(name => _switches.All(s => s.Switch.Name != name)) is { } unknown)
            throw new ArgumentException($"{type.Name} declares no switch {unknown}", nameof(only));
        if (only is null)
            _positionals = declared.Where(x => x.Switch.Name.Length == 0).ToArray();
    }

    /// <summary>
    /// The switches <paramref name="type"/> declares, or only those named in <paramref name="only"/>: a verb that starts
    /// a program can take a few of that program's own switches (node prep: the agent's <c>--data-dir</c> and
    /// <c>--budget</c>) without declaring them again.
    /// </summary>
    [UnconditionalSuppressMessage("Trimming", "IL2067", Justification = "options types are kept whole in native builds")]
    public static SwitchGroup Of(Type type, IReadOnlyCollection<string>? only = null) => new(type, only);

    /// <summary>The names and aliases of the group's switches (for suggestions and completion).</summary>
    public IEnumerable<string> Names => _switches.SelectMany(s => s.Switch.Alias is { } alias ? new[] { s.Switch.Name, alias } : [s.Switch.Name]);

    /// <summary>The group's switches, in declaration order.</summary>
    public IEnumerable<SwitchAttribute> Switches => _switches.Select(s => s.Switch);

    /// <summary>Whether <paramref name="type"/> declares switches (a group a command line can nest).</summary>
    [UnconditionalSuppressMessage("Trimming", "IL2070", Justification = "options types are kept whole in native builds")]
    public static bool IsGroup(Type type) =>
        type.IsClass && type != typeof(string) && SwitchAttribute.DeclaredOn(type).Any(x => x.Switch.Name.Length > 0);

    /// <summary>
    /// Binds the positional arguments in order and checks that every required switch (given by any source, as
    /// <paramref name="origins"/> says) and argument is there. Returns the first problem — an argument too many, a bad
    /// value, something required missing — or null.
    /// </summary>
    public string? BindArguments(IReadOnlyList<string> values, object target, SettingOrigins origins)
    {
        if (values.Count > _positionals.Length) return $"unexpected argument '{values[_positionals.Length]}'";
        for (var i = 0; i < values.Count; i++)
            if (Set(target, _positionals[i].Property, values[i]) is { } bad) return $"{_positionals[i].Switch.Meta}: {bad}";
        var missing = _switches.Where(s => s.Switch.Required && origins[s.Switch.Name].Source == SettingSource.Default).Select(s => s.Switch.Name)
            .Concat(_positionals.Skip(values.Count).Where(p => p.Switch.Required).Select(p => p.Switch.Meta ?? "ARGUMENT")).ToList();
        return missing.Count > 0 ? $"missing required {string.Join(", ", missing)}" : null;
    }

    /// <summary>The positional arguments as a usage line shows them: <c>NAME DEST</c>, an optional one in brackets.</summary>
    public string Arguments => string.Join(" ", _positionals.Select(p => p.Switch.Required ? p.Switch.Meta : $"[{p.Switch.Meta}]"));

    /// <summary>
    /// One entry per positional argument and switch (name, value placeholder, help, the default
    /// <paramref name="defaults"/> holds, variable), for help in <see cref="HelpLayout"/>'s layout, no line wider than
    /// <paramref name="columns"/>.
    /// </summary>
    public IEnumerable<string> HelpLines(object? defaults, int columns) =>
        _positionals.Concat(_switches).Select(x =>
        {
            var name = x.Switch.Alias is { } alias ? $"{alias}, {x.Switch.Name}" : x.Switch.Name;
            var left = x.Switch.Name.Length == 0 ? x.Switch.Meta ?? "ARGUMENT"
                : x.Property.PropertyType == typeof(bool) ? name : $"{name} {x.Switch.Meta ?? SettingValues.MetaOf(x.Property.PropertyType)}";
            // A help text that already says its default is not told it twice.
            var shown = defaults is null || x.Switch.Secret || x.Switch.Name.Length == 0 || x.Property.PropertyType == typeof(bool)
                        || x.Switch.Help.Contains("(default", StringComparison.Ordinal) || x.Switch.Help.Contains("the default)", StringComparison.Ordinal) ? null
                : SettingValues.Format(x.Property.GetValue(defaults));
            return HelpLayout.Entry(left, $"{x.Switch.Help}{(shown is { Length: > 0 } ? $" (default: {shown})" : "")}{(x.Switch.Environment is { } env ? $" [{env}]" : "")}", columns);
        });

    private static string? Set(object target, PropertyInfo property, string value)
    {
        try { property.SetValue(target, SettingValues.Parse(property.PropertyType, value)); }
        catch (FormatException e) { return e.Message; }
        return null;
    }

    /// <summary>
    /// Every switch of the group copied from <paramref name="from"/> to <paramref name="to"/> (lists as new lists): a
    /// group handed on whole to the next process, so no member is forgotten at a hop.
    /// </summary>
    public void CopyTo(object from, object to)
    {
        foreach (var (_, p) in _switches)
            p.SetValue(to, p.GetValue(from) is IEnumerable<string> list && p.PropertyType != typeof(string) ? list.ToList() : p.GetValue(from));
    }

    /// <summary>
    /// The group's settings as the variables its switches are read from, for a job's environment: every switch with a
    /// variable whose value differs from the type's default, in declaration order. Secrets are left out (a job script
    /// must never carry one): <see cref="SecretVariables"/> has them, for an environment that is not written down. So
    /// are a machine's own settings (<see cref="SwitchAttribute.ThisMachine"/>): the job's nodes are other machines.
    /// </summary>
    public IReadOnlyList<KeyValuePair<string, string>> ToVariables(object value) => Variables(value, secret: false);

    /// <summary>The group's secrets that are set, as the variables they are read from.</summary>
    public IReadOnlyList<KeyValuePair<string, string>> SecretVariables(object value) => Variables(value, secret: true);

    [UnconditionalSuppressMessage("Trimming", "IL2072", Justification = "options types are kept whole in native builds")]
    private List<KeyValuePair<string, string>> Variables(object value, bool secret)
    {
        var defaults = Activator.CreateInstance(value.GetType());
        var variables = new List<KeyValuePair<string, string>>();
        foreach (var (s, p) in _switches)
        {
            if (s.Environment is not { } name || s.Secret != secret || s.ThisMachine) continue;
            var text = SettingValues.Format(p.GetValue(value));
            if (text is not { Length: > 0 } || text == SettingValues.Format(p.GetValue(defaults))) continue;
            variables.Add(new(name, text));
        }
        return variables;
    }
}
