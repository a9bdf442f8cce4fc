using Hpc.CommonData.Access;
using Hpc.CommonData.Hosting;

namespace Hpc.NodeAgent;

/// <summary>
/// What each local user holds of the agent at once: connections, requests being worked on, ingests. Every user of the
/// node may connect, so without a share each one could take all of it and keep the others out; with one, a user at its
/// limit is refused (<see cref="ErrorCode.Limit"/>, naming the limit and its option) and everyone else is served. Users
/// are told apart by the uid the kernel recorded for the socket. Root and the agent's own user are not counted (they
/// can stop the agent anyway), nor are connections whose user is unknown (Windows, where every connection would then
/// share one count).
/// </summary>
public sealed class UserLimits(NodeAgentOptions options, uint agentUid)
{
    public enum Kind { Connection, Request, Ingest }

    private sealed class Held
    {
        public int Connections, Requests, Ingests;
        public bool Idle => Connections == 0 && Requests == 0 && Ingests == 0;
    }

    private readonly Dictionary<uint, Held> _users = new();

    public bool Counts(uint? uid) => uid is { } u && u != 0 && u != agentUid;

    private int Limit(Kind kind) => kind switch
    {
        Kind.Connection => options.EffectiveMaxConnectionsPerUser,
        Kind.Request => options.MaxRequestsPerUser,
        _ => options.MaxIngestsPerUser,
    };

    /// <summary>Takes one more of <paramref name="kind"/> for <paramref name="uid"/>; null when taken (give it back with <see cref="Leave"/>), else the refusal.</summary>
    public CommonDataException? TryEnter(uint? uid, Kind kind)
    {
        if (!Counts(uid)) return null;
        var limit = Limit(kind);
        lock (_users)
        {
            if (!_users.TryGetValue(uid!.Value, out var held)) _users[uid.Value] = held = new Held();
            ref var count = ref Count(held, kind);
            if (count >= limit)
            {
                if (held.Idle) _users.Remove(uid.Value);
                return Refusal(uid.Value, kind, limit);
            }
            count++;
            return null;
        }
    }

    public void Leave(uint? uid, Kind kind)
    {
        if (!Counts(uid)) return;
        lock (_users)
        {
            if (!_users.TryGetValue(uid!.Value, out var held)) return;
            ref var count = ref Count(held, kind);
            if (count > 0) count--;
            if (held.Idle) _users.Remove(uid.Value);
        }
    }

    private static ref int Count(Held held, Kind kind)
    {
        if (kind == Kind.Connection) return ref held.Connections;
        if (kind == Kind.Request) return ref held.Requests;
        return ref held.Ingests;
    }

    private static CommonDataException Refusal(uint uid, Kind kind, int limit)
    {
        var user = $"user '{(OperatingSystem.IsLinux() ? UnixAccounts.UserName(uid) : null) ?? uid.ToString()}' (uid {uid})";
        var (what, option) = kind switch
        {
            Kind.Connection => ("connections", "--max-connections-per-user"),
            Kind.Request => ("requests at once", "--max-requests-per-user"),
            _ => ("ingests at once", "--max-ingests-per-user"),
        };
        return new CommonDataException(ErrorCode.Limit,
            $"limit reached: {user} already holds {limit} {what} to this node's agent, its limit per user ({option} {limit}); " +
            "end some, or have the node's administrator raise the agent's " + option);
    }
}
