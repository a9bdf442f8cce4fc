using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Cli;

/// <summary>
/// Options of a verb that nest switch groups (<see cref="SwitchGroup"/>): the command tree fills each group from the
/// environment and takes its switches off the command line before the verb's own parser sees it.
/// </summary>
public interface ISwitchGroups
{
    /// <summary>The group objects the command tree fills (one per nested group), each with the title its help section has.</summary>
    IEnumerable<(string Title, object Switches)> Groups { get; }
    ISet<string> GivenSwitches { get; }
    /// <summary>Takes the groups another instance of the same options type was filled with.</summary>
    void Adopt(ISwitchGroups filled);
}
