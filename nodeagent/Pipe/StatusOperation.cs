using Hpc.CommonData.Agent;

namespace Hpc.NodeAgent.Pipe;

/// <summary>status: the node's copies, pins and fetches, of the datasets the caller may read (all of them to administrators).</summary>
internal static class StatusOperation
{
    // Names, versions, sizes and pins of datasets the caller may not read are not the caller's to know.
    public static Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct) =>
        connection.AnswerAsync(request, () => Task.FromResult(new AgentResponse
        {
            Ok = true, Status = connection.Store.Status(manifest => connection.Access.MaySee(manifest, connection.Peer.Value),
                owner => connection.Access.MayRelease(owner, connection.Peer.Value)),
        }), ct);
}
