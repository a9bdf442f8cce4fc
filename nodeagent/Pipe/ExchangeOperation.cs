using System.Security.Cryptography;
using Hpc.CommonData;
using Hpc.CommonData.Access;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fanout;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// exchange: node prep of a job's nodes by their running agents, asked of this node's agent by a user's own job step.
/// The agent holds the cluster's peer key (users never do) and knows the caller from the socket, so the request it
/// sends is for that user: every agent checks that user against the dataset's readers before it fetches a byte and pins
/// the copy as that user's, counted against that user's pin quota. No launcher and no MPI ranks on the data path.
/// </summary>
internal static class ExchangeOperation
{
    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct) =>
        await connection.AnswerAsync(request, async () =>
        {
            var name = request.Dataset ?? throw new ArgumentException("request names no dataset");
            var job = request.Pin ?? throw new ArgumentException("an exchange needs the job's id to pin the copies with");
            if (request.Agents is not { Count: > 0 } agents || agents.Count > PrepRequest.MaxMembers)
                throw new ArgumentException($"an exchange needs between 1 and {PrepRequest.MaxMembers} agents");
            foreach (var member in agents) AgentTree.Endpoint(member);
            var options = connection.Options;
            if (string.IsNullOrEmpty(options.PeerKeyFile))
                throw new CommonDataException(ErrorCode.Unavailable, "this node's agent takes no part in exchanges (it runs without --peer-listen and --peer-key-file)");
            var user = UserOf(connection.Peer.Value);
            var key = PeerKey.Load(options.PeerKeyFile, "--peer-key-file");
            // The caller's own settings where it gave them (node prep sends its switches), else node prep's defaults.
            var asked = request.Exchange;
            var prep = new PrepRequest
            {
                Id = Convert.ToHexString(RandomNumberGenerator.GetBytes(8)).ToLowerInvariant(), Name = name, Version = request.Version ?? "", Job = job, User = user,
                Members = agents, Requester = "", StallTimeout = asked?.StallTimeout ?? TimeSpan.FromMinutes(2), PeerTimeout = asked?.PeerTimeout ?? TimeSpan.FromSeconds(5),
                Timeout = asked?.Timeout ?? TimeSpan.FromMinutes(60), Degree = asked?.TreeDegree ?? 8, RingGroups = asked?.RingGroups ?? "auto", LinkProbe = asked?.LinkProbe ?? true,
            };
            if (prep.Problem() is { } problem) throw new ArgumentException($"an exchange with {problem}");
            var report = await AgentsRequest.RunAsync(prep, key, null, ct);
            return new AgentResponse
            {
                Ok = true,
                Exchange = new ExchangeReport
                {
                    Members = [.. report.Members], LaunchSeconds = report.LaunchSeconds, Joined = report.Joined, Seconds = report.Seconds,
                    SilentRoots = report.SilentRoots.Count == 0 ? null : [.. report.SilentRoots],
                    Outcomes = [.. report.Outcomes.Select(o => o is null ? null : new ExchangeOutcome
                        { Position = o.Position, Node = o.Node, Code = o.Code, Version = o.Version, Seconds = o.Seconds, Detail = o.Detail, Lost = o.Lost is null ? null : [.. o.Lost] })],
                },
            };
        }, ct);

    /// <summary>The caller by name as the node knows it (the other nodes resolve the same name), or its uid.</summary>
    private static string UserOf(PeerCredentials? caller)
    {
        if (caller is null || !OperatingSystem.IsLinux())
            throw new CommonDataException(ErrorCode.AccessDenied, "access denied: an exchange is made for the calling user, whom this agent cannot identify");
        return UnixAccounts.UserName(caller.Uid) ?? caller.Uid.ToString(System.Globalization.CultureInfo.InvariantCulture);
    }
}
