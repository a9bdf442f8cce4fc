namespace Hpc.CommonData.Hosting;

/// <summary>What <see cref="SettingsResolver.Resolve"/> left: where each setting came from, the positional arguments, or the first problem.</summary>
public sealed record ResolvedSwitches(SettingOrigins Origins, IReadOnlyList<string> Arguments, string? Problem);

/// <summary>
/// The one resolve of every program's and verb's switches, in one order: the client's settings files, the environment's
/// variables, the command line — each over the one before, over what the slots' objects already hold (a daemon's JSON
/// settings, the defaults). A daemon's <see cref="ProgramContract{T}"/> and a verb's contract differ only in the slots
/// they hand it and in what they do with the positional arguments.
/// </summary>
public static class SettingsResolver
{
    /// <param name="beneath">Where the values the slots already hold came from (a daemon's JSON settings); the resolve records over them.</param>
    public static ResolvedSwitches Resolve(IReadOnlyList<SettingSlot> slots, IReadOnlyList<string> args, Func<string, string?> environment, ClientConfig files,
        SettingOrigins? beneath = null)
    {
        var origins = beneath ?? new SettingOrigins();
        if (SettingLayers.ApplyBeneathCommandLine(slots, environment, files, origins) is { } problemBeneath) return new(origins, [], problemBeneath);
        var parsed = CommandLineEngine.Parse([.. slots.Select(s => new SwitchSyntax(s.Switch.Name, s.Switch.Alias, s.IsFlag))], args);
        if (parsed.Problem is { } bad) return new(origins, [], bad);
        if (parsed.UnknownOption is { } unknown)
        {
            var name = unknown.Split('=')[0];
            return new(origins, [], name.StartsWith("--", StringComparison.Ordinal)
                ? $"unknown option '{name}'{Suggestions.DidYouMean(name, slots.SelectMany(s => s.Switch.Alias is { } a ? new[] { s.Switch.Name, a } : [s.Switch.Name]))}"
                : $"unknown option '{name}' (an argument that starts with '-' goes after --)");
        }
        foreach (var (name, value) in parsed.Values)
        {
            var slot = slots.First(s => s.Switch.Name.Equals(name, StringComparison.OrdinalIgnoreCase));
            if (slot.Set(value) is { } problem) return new(origins, [], $"{slot.Switch.Name}: {problem}");
            origins.Record(slot.Switch.Name, new(SettingSource.CommandLine, slot.Switch.Name));
        }
        SettingLayers.DropOutrankedSecrets(slots, origins);
        return new(origins, parsed.Arguments, null);
    }
}
