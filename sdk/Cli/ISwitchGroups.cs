using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cli;

/// <summary>
/// Options of a verb that nest switch groups (<see cref="SwitchGroup"/>): the command tree fills each group from the
/// environment and takes its switches off the command line before the verb's own parser sees it.
/// </summary>
public interface ISwitchGroups
{
    /// <summary>The groups the command tree fills, each with the title its help section has.</summary>
    IEnumerable<NestedSwitches> Groups { get; }
    /// <summary>Where each setting of the verb and its groups came from, filled as the verb's settings are resolved.</summary>
    SettingOrigins Origins { get; }
}

/// <summary>
/// One group a verb nests: the title of its help section, the object its switches are set on, and which of that type's
/// switches the verb takes (null: all of them).
/// </summary>
public sealed record NestedSwitches(string Title, object Target, IReadOnlyCollection<string>? Only = null)
{
    public SwitchGroup Switches => SwitchGroup.Of(Target.GetType(), Only);
}
