using System.Diagnostics.CodeAnalysis;
using System.Reflection;

namespace Hpc.CommonData.Hosting;

/// <summary>The sources of a setting, lowest precedence first: a later one wins over every earlier one.</summary>
public enum SettingSource
{
    Default,
    /// <summary>A daemon's JSON settings (<c>appsettings.json</c>, the site's file <c>HPCDATA_SETTINGS</c> names).</summary>
    SettingsFile,
    /// <summary>A client's settings file (<see cref="ClientConfig"/>: the site's, then the user's).</summary>
    ClientFile,
    Variable,
    CommandLine,
}

/// <summary>Where one setting's value came from: the source and the place in it (a switch, a variable, a file and line).</summary>
public readonly record struct SettingOrigin(SettingSource Source, string Where)
{
    public override string ToString() => Source switch
    {
        SettingSource.CommandLine => $"the command line ({Where})",
        SettingSource.Variable => $"environment variable {Where}",
        SettingSource.ClientFile => Where,
        SettingSource.SettingsFile => $"settings file {Where}",
        _ => "the default",
    };
}

/// <summary>
/// One switch (<see cref="SwitchAttribute"/>) bound to the object it sets: a program's options, or a group its options
/// nest (the cache tier's). The layers set slots; what a slot's object held before them — a daemon's JSON settings,
/// the type's default — is what they leave where no layer gives a value.
/// </summary>
public sealed record SettingSlot(SwitchAttribute Switch, PropertyInfo Property, object Target)
{
    /// <summary>The named switches <paramref name="target"/>'s own type declares (not those of the groups it nests), or only those in <paramref name="only"/>.</summary>
    public static IEnumerable<SettingSlot> Of(object target, IReadOnlyCollection<string>? only = null) =>
        SwitchAttribute.DeclaredOn(target.GetType()).Where(x => x.Switch.Name.Length > 0 && (only is null || only.Contains(x.Switch.Name)))
            .Select(x => new SettingSlot(x.Switch, x.Property, target));

    public bool IsFlag => Property.PropertyType == typeof(bool);

    /// <summary>Sets the slot from its text, read as every program reads a setting (<see cref="SettingValues"/>); the problem, or null.</summary>
    public string? Set(string text)
    {
        try { Property.SetValue(Target, SettingValues.Parse(Property.PropertyType, text)); }
        catch (FormatException e) { return e.Message; }
        return null;
    }
}

/// <summary>
/// Where each setting a resolve gave came from, by switch name. A check of the resolved value that names a switch
/// (<c>--replicas must be at least 1 (got 0)</c>) says through <see cref="Attribute"/> where that value came from when
/// it was not the command line, so a mistake in a variable or a file is not looked for among the switches.
/// </summary>
public sealed class SettingOrigins
{
    private readonly Dictionary<string, SettingOrigin> _byName = new(StringComparer.OrdinalIgnoreCase);

    public IReadOnlyDictionary<string, SettingOrigin> ByName => _byName;

    /// <summary>Where the switch <paramref name="name"/>'s value came from; <see cref="SettingSource.Default"/> when no source gave it.</summary>
    public SettingOrigin this[string name] => _byName.TryGetValue(name, out var origin) ? origin : default;

    public bool Gave(string name, SettingSource source) => this[name].Source == source;

    /// <summary>The switches the command line gave.</summary>
    public IEnumerable<string> FromCommandLine => _byName.Where(kv => kv.Value.Source == SettingSource.CommandLine).Select(kv => kv.Key);

    public void Record(string name, SettingOrigin origin) => _byName[name] = origin;

    /// <summary>
    /// <paramref name="problem"/>, with where its value came from when it starts with a switch that a variable or a file
    /// gave: <c>--replicas must be at least 1 (got 0) (from environment variable HPCDATA_CACHE_REPLICAS)</c>.
    /// </summary>
    public string Attribute(string problem)
    {
        if (!problem.StartsWith("--", StringComparison.Ordinal)) return problem;
        var end = problem.AsSpan(2).IndexOfAny(" :=,'") is var i and >= 0 ? i + 2 : problem.Length;
        return this[problem[..end]] is { Source: not (SettingSource.CommandLine or SettingSource.Default) } origin ? $"{problem} (from {origin})" : problem;
    }
}

/// <summary>
/// The layers of settings beneath the command line, in their one order: the client's settings files (the site's, then
/// the user's), then the environment's variables. The worker SDK resolves its cache tier with these alone; every
/// program's resolve (<c>SettingsResolver</c>) lays the command line over them.
/// </summary>
public static class SettingLayers
{
    /// <summary>
    /// Sets every slot whose variable <paramref name="files"/> give, then every one <paramref name="environment"/> gives,
    /// recording each origin. A list a layer gives replaces the whole list beneath. The first value that does not read is
    /// the problem, naming the variable (a file's value was checked, with its file and line, as the file was read).
    /// </summary>
    public static string? ApplyBeneathCommandLine(IEnumerable<SettingSlot> slots, Func<string, string?> environment, ClientConfig files, SettingOrigins origins)
    {
        var withVariables = slots.Where(s => s.Switch.Environment is not null).ToList();
        foreach (var slot in withVariables)
        {
            var variable = slot.Switch.Environment!;
            if (files[variable] is not { Length: > 0 } text) continue;
            if (slot.Set(text) is { } problem) return $"{files.LineOf(variable)}: {problem}";
            origins.Record(slot.Switch.Name, new(SettingSource.ClientFile, files.LineOf(variable) ?? variable));
        }
        foreach (var slot in withVariables)
        {
            var variable = slot.Switch.Environment!;
            if (environment(variable) is not { Length: > 0 } text) continue;
            if (slot.Set(text) is { } problem) return $"environment variable {variable}: {problem}";
            origins.Record(slot.Switch.Name, new(SettingSource.Variable, variable));
        }
        return null;
    }

    /// <summary>
    /// A secret's file given above the secret itself wins over it (<c>--cache-password-file</c> on the command line over
    /// <c>HPCDATA_CACHE_PASSWORD</c>): the higher source decides the password as it decides every setting, although the
    /// two fill different properties. Within one source the secret wins, as it always has.
    /// </summary>
    public static void DropOutrankedSecrets(IReadOnlyList<SettingSlot> slots, SettingOrigins origins)
    {
        foreach (var secret in slots.Where(s => s.Switch.Secret))
        {
            var file = secret.Switch.Name + "-file";
            if (origins[file].Source > origins[secret.Switch.Name].Source && origins[secret.Switch.Name].Source != SettingSource.Default)
                secret.Property.SetValue(secret.Target, null);
        }
    }
}
