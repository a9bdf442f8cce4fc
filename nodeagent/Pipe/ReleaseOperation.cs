using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// release: ends a job's pin on a version, and evicts the copy when asked and nothing else holds it. Only the pin's
/// owner, root, the agent's user or a member of its admin group may release it. The answer says how many pins were
/// dropped, so a caller that held none of that name learns so instead of a bare success.
/// </summary>
internal static class ReleaseOperation
{
    public static Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct) =>
        connection.AnswerAsync(request, () =>
        {
            var name = request.Dataset ?? throw new ArgumentException("request names no dataset");
            var evicted = connection.Store.Release(name, request.Version, request.Pin ?? throw new ArgumentException("release needs a pin"), request.Evict,
                connection.Access, connection.Peer.Value, out var released);
            if (evicted) connection.Log.ReleasedAndEvicted(request.Pin, name, connection.Peer.Value?.Uid);
            return Task.FromResult(new AgentResponse { Ok = true, Released = released });
        }, ct);
}
