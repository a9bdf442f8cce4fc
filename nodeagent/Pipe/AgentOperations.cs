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
        [AgentOps.Exchange] = ExchangeOperation.RunAsync,
    };

    /// <summary>
    /// Answered at once and cheaply: not counted against the user's requests, so a user at that limit can still see
    /// and release what it holds. An ingest counts itself once its manifest frame is read (<see cref="IngestOperation"/>).
    /// </summary>
    private static bool Uncounted(string op) => op is AgentOps.Status or AgentOps.Release or AgentOps.Ingest;

    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        if (ByName.TryGetValue(request.Op, out var operation))
        {
            if (Uncounted(request.Op)) return await operation(connection, request, ct);
            if (connection.Limits.TryEnter(connection.Uid, UserLimits.Kind.Request) is { } refusal)
            {
                AgentMetrics.Instance.Refused(refusal.Code);
                connection.LogRefused(request, refusal);
                await connection.ReplyAsync(AgentResponse.Failure(refusal), ct);
                return true;
            }
            try { return await operation(connection, request, ct); }
            finally { connection.Limits.Leave(connection.Uid, UserLimits.Kind.Request); }
        }
        await connection.ReplyAsync(AgentResponse.Failure(new CommonDataException(ErrorCode.BadRequest, $"unknown operation '{request.Op}'")), ct);
        return true;
    }
}
