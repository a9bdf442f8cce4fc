using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// release: ends a job's pin on a version, and evicts the copy when asked and nothing else holds it. Only the pin's
/// owner, root, the agent's user or a member of its admin group may release it.
/// </summary>
internal static class ReleaseOperation
{
    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        AgentResponse response;
        try
        {
            var name = request.Dataset ?? throw new ArgumentException("request names no dataset");
            var evicted = connection.Store.Release(name, request.Version, request.Pin ?? throw new ArgumentException("release needs a pin"), request.Evict,
                connection.Access, connection.Peer.Value);
            response = new AgentResponse { Ok = true };
            if (evicted) Log.ReleasedAndEvicted(connection.Log, request.Pin, name, connection.Peer.Value?.Uid);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            response = connection.Failed(request, e);
        }
        await connection.ReplyAsync(response, ct);
        return true;
    }
}
