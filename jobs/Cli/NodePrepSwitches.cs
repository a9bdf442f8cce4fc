using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Cli;

/// <summary>
/// Node prep's settings that a job carries to its nodes. Node prep reads them, each also from its variable; prestage
/// takes the same switches and the job it writes sets them as those variables (<see cref="Group"/>'s
/// <see cref="SwitchGroup.ToVariables"/>) for every scheduler, so a switch given once at submission is what node prep
/// reads on every node, and the switch means and says the same on both verbs.
/// </summary>
public sealed class NodePrepSwitches
{
    public const string LinkProbeVariable = "HPCDATA_LINK_PROBE";

    /// <summary>The title of the group's section in nodeprep's and prestage's help.</summary>
    public const string Title = "Node prep on a job's nodes (each also from its variable, which the jobs prestage writes set)";

    [Switch("--link-probe", "--fanout mpi: on (the default) or off. on: before the exchange the ranks time a short message (64 KB, more on fast links) on each " +
        "neighbour's link, and a node whose link is below half the median's leaves the ring and receives every member's own share " +
        "instead, at its own pace, so one slow node does not slow the others (tcp and mpi rings, 3 ranks or more). off: every node in the ring.",
        Environment = LinkProbeVariable)]
    public bool LinkProbe { get; set; } = true;

    /// <summary>The group every hop hands on whole: prestage's switches to the job, the job's variables to node prep.</summary>
    public static SwitchGroup Group { get; } = SwitchGroup.Of(typeof(NodePrepSwitches));

    /// <summary>A copy of the settings, for a job to carry (the options that parsed them stay the command's own).</summary>
    public NodePrepSwitches Copy()
    {
        var copy = new NodePrepSwitches();
        Group.CopyTo(this, copy);
        return copy;
    }

    /// <summary>The group as a verb nests it, under <paramref name="title"/> in its help.</summary>
    public NestedSwitches Nested(string title) => new(title, this);
}
