using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Cli;

/// <summary>
/// The node agent a verb talks to (status, path, nodeprep, noderelease, prestage): the agent's own switches
/// (<see cref="NodeAgentOptions"/>), of which a verb takes the few it needs, so <c>--pipe</c> means, reads and says the
/// same for a verb as for the agent.
/// </summary>
public sealed class AgentSwitches(SettingOrigins origins)
{
    /// <summary>The switch every verb that reaches an agent takes.</summary>
    public static readonly IReadOnlyCollection<string> Pipe = ["--pipe"];

    /// <summary>What node prep also takes for an agent it starts when none answers.</summary>
    public static readonly IReadOnlyCollection<string> Start = ["--pipe", "--data-dir", "--budget", "--node"];

    /// <summary>The agent's options as the environment and the command line give them (the others keep their defaults).</summary>
    public NodeAgentOptions Options { get; set; } = new();

    /// <summary>The pipe to connect to: the one given, else the default.</summary>
    public string PipeName => string.IsNullOrWhiteSpace(Options.Pipe) ? AgentClient.DefaultPipe : Options.Pipe.Trim();

    /// <summary>Whether the switch was given, on the command line or by its variable.</summary>
    public bool IsSet(string name) => origins[name].Source is SettingSource.CommandLine or SettingSource.Variable;

    /// <summary>The group as a verb nests it, taking <paramref name="only"/> of the agent's switches.</summary>
    public NestedSwitches Nested(IReadOnlyCollection<string> only, string title = "Node agent (the agent's own switches; each also from its variable)") =>
        new(title, Options, only);

    /// <summary>
    /// The agent's status, asked as every verb that reports on the agent asks it (a few seconds to answer, a stale
    /// socket said as such), or why there is none: <see cref="AgentAnswer.Failure"/> is the exception, already one of
    /// those an operator can cause (not answering, refused).
    /// </summary>
    public async Task<AgentAnswer> QueryStatusAsync(CancellationToken ct)
    {
        try
        {
            await using var agent = await AgentClient.ConnectIfListeningAsync(PipeName, TimeSpan.FromSeconds(3), ct);
            return new(await agent.StatusAsync(ct), null);
        }
        catch (Exception e) when (e is TimeoutException or IOException or UnauthorizedAccessException or CommonDataException)
        {
            return new(null, e);
        }
    }

    /// <summary>One line for a failed <see cref="QueryStatusAsync"/>: refused (and why), or not answering (and how to start one).</summary>
    public string Problem(Exception failure) => AgentAnswer.IsRefusal(failure) ? $"the node agent on pipe '{PipeName}' refused: {failure.Message}" : NotAnswering(failure);

    /// <summary>What a verb that needs a running agent says when none answers on <see cref="PipeName"/>: where it looked, and how one is started.</summary>
    public string NotAnswering(Exception cause) =>
        $"{AgentClient.NotAnswering(PipeName, cause)}; start one with `hpcdata agent{(IsSet("--pipe") ? $" --pipe {PipeName}" : "")}`, or check the node's hpcdata-agent service";
}

/// <summary>What <see cref="AgentSwitches.QueryStatusAsync"/> got: the status, or the failure.</summary>
public sealed record AgentAnswer(AgentStatus? Status, Exception? Failure)
{
    /// <summary>The agent answered and said no (a peer it does not admit, or its own error), as against not answering.</summary>
    public bool Refused => Failure is { } e && IsRefusal(e);

    internal static bool IsRefusal(Exception e) => e is UnauthorizedAccessException or CommonDataException;
}

/// <summary>A verb that talks to this node's agent only (path, noderelease).</summary>
public abstract class AgentClientOptions : ISwitchGroups
{
    protected AgentClientOptions() => Agent = new AgentSwitches(Origins);

    public AgentSwitches Agent { get; }

    public SettingOrigins Origins { get; } = new();

    IEnumerable<NestedSwitches> ISwitchGroups.Groups => [Agent.Nested(AgentSwitches.Pipe)];
}
