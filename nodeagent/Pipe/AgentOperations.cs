using Hpc.CommonData;
using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// The agent's operations by name. Each answers its request on the connection and says whether the connection stays
/// open (false after a reply that ends it, such as a malformed ingest).
/// </summary>
internal static class AgentOperations
{
    private delegate Task<bool> Operation(PipeConnection connection, AgentRequest request, CancellationToken ct);

    private static readonly Dictionary<string, Operation> ByName = new(StringComparer.Ordinal)
    {
        [AgentOps.Open] = OpenOperation.RunAsync,
        [AgentOps.Prefetch] = OpenOperation.RunAsync,
        [AgentOps.Stream] = OpenOperation.RunAsync,
        [AgentOps.Release] = ReleaseOperation.RunAsync,
        [AgentOps.Status] = StatusOperation.RunAsync,
        [AgentOps.Ingest] = IngestOperation.RunAsync,
    };

    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        if (ByName.TryGetValue(request.Op, out var operation)) return await operation(connection, request, ct);
        await connection.ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, $"unknown operation '{request.Op}'")), ct);
        return true;
    }
}
