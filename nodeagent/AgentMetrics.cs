using Hpc.CommonData.Hosting;

namespace Hpc.NodeAgent;

/// <summary>
/// The agent's meter (<see cref="HpcMetrics.NodeAgentMeter"/>). One per process, like the agent itself, so the parts
/// that record (cache-tier client, fetches, the index, the pipe server) need not hand it to each other.
/// </summary>
public static class AgentMetrics
{
    public static ComponentMetrics Instance { get; } = new(HpcMetrics.NodeAgentMeter);
}
