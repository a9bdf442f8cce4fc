using Hpc.CommonData.Agent;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Cli;

/// <summary>
/// The node agent a verb talks to (status, path, nodeprep, noderelease): the one declaration of <c>--pipe</c> among
/// hpcdata's verbs, read from the variable the agent and the workers read too.
/// </summary>
public sealed class AgentSwitches
{
    public const string Title = "Node agent (each also from its variable)";

    [Switch("--pipe", "the node agent's pipe name, or on Linux an absolute socket path (default: hpcdata-agent)", Environment = AgentClient.PipeVariable, Meta = "NAME")]
    public string? Pipe { get; set; }

    /// <summary>The pipe to connect to: the one given, else the default.</summary>
    public string PipeName => Pipe is { Length: > 0 } p ? p.Trim() : AgentClient.DefaultPipe;

    /// <summary>What a verb that needs a running agent says when none answers on <see cref="PipeName"/>: where it looked, and how one is started.</summary>
    public string NotAnswering(Exception cause) =>
        $"{AgentClient.NotAnswering(PipeName, cause)}; start one with `hpcdata agent{(Pipe is { Length: > 0 } ? $" --pipe {PipeName}" : "")}`, or check the node's hpcdata-agent service";
}

/// <summary>A verb that talks to this node's agent only (path, noderelease).</summary>
public abstract class AgentClientOptions : ISwitchGroups
{
    public AgentSwitches Agent { get; set; } = new();

    public ISet<string> GivenSwitches { get; } = new HashSet<string>(StringComparer.OrdinalIgnoreCase);

    IEnumerable<(string Title, object Switches)> ISwitchGroups.Groups => [(AgentSwitches.Title, Agent)];

    void ISwitchGroups.Adopt(ISwitchGroups filled)
    {
        Agent = ((AgentClientOptions)filled).Agent;
        GivenSwitches.UnionWith(filled.GivenSwitches);
    }
}
