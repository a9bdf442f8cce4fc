using Hpc.CommonData.Access;
using Hpc.CommonData.Hosting;

namespace Hpc.NodeAgent;

/// <summary>
/// What each local user holds of the agent at once: connections, requests being worked on, ingests. Every user of the
/// node may connect, so without a share each one could take all of it and keep the others out; with one, a user at its
/// limit is refused (<see cref="ErrorCode.Limit"/>, naming the limit and its option) and everyone else is served. Users
/// are told apart by the uid the kernel recorded for the socket. Root and the agent's own user are not counted (they
/// can stop the agent anyway), nor are connections whose user is unknown (Windows, where every connection would then
/// share one count). A user's connections are further held to an equal share with one more user to come
/// (<see cref="ConnectionShare"/>), and the last eighth is kept for users who hold few, so no small group fills the node.
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

    /// <summary>
    /// A user's connections while <paramref name="users"/> users (itself included) hold some: the configured limit, but
    /// never more than an equal share with one more user to come, so no group of users can take every connection and a
    /// user who arrives later still gets in (its own share, from what the others could not take).
    /// </summary>
    public int ConnectionShare(int users) => Math.Max(1, Math.Min(options.EffectiveMaxConnectionsPerUser, options.MaxConnections / (users + 1)));

    /// <summary>
    /// The last eighth of --max-connections is kept for users holding fewer than <see cref="ReserveFloor"/> (a 256th of
    /// it): however the others fill the node, about 32 users arriving later each get that many.
    /// </summary>
    private int Reserve => options.MaxConnections / 8;
    public int ReserveFloor => Math.Max(1, options.MaxConnections / 256);

    private CommonDataException ReserveRefusal(uint uid, int held) => new(ErrorCode.Limit,
        $"limit reached: {User(uid)} already holds {held} connections to this node's agent, and the last {Reserve} of --max-connections " +
        $"{options.MaxConnections} are kept for users holding fewer than {ReserveFloor}; end some, or have the node's administrator raise the agent's --max-connections");

    private static string User(uint uid) => $"user '{(OperatingSystem.IsLinux() ? UnixAccounts.UserName(uid) : null) ?? uid.ToString()}' (uid {uid})";

    /// <summary>Takes one more of <paramref name="kind"/> for <paramref name="uid"/>; null when taken (give it back with <see cref="Leave"/>), else the refusal.</summary>
    public CommonDataException? TryEnter(uint? uid, Kind kind)
    {
        if (!Counts(uid)) return null;
        lock (_users)
        {
            if (!_users.TryGetValue(uid!.Value, out var held)) _users[uid.Value] = held = new Held();
            var users = kind == Kind.Connection ? _users.Values.Count(h => h.Connections > 0 || ReferenceEquals(h, held)) : 0;
            var limit = kind == Kind.Connection ? ConnectionShare(users) : Limit(kind);
            ref var count = ref Count(held, kind);
            if (count >= limit)
            {
                if (held.Idle) _users.Remove(uid.Value);
                return Refusal(uid.Value, kind, limit, limit < Limit(kind) ? users : 0);
            }
            var total = kind == Kind.Connection ? _users.Values.Sum(h => h.Connections) : 0;
            if (kind == Kind.Connection && (total >= options.MaxConnections || (count >= ReserveFloor && total >= options.MaxConnections - Reserve)))
            {
                if (held.Idle) _users.Remove(uid.Value);
                return ReserveRefusal(uid.Value, count);
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

    private CommonDataException Refusal(uint uid, Kind kind, int limit, int sharedAmong)
    {
        var user = User(uid);
        var (what, option) = kind switch
        {
            Kind.Connection => ("connections", "--max-connections-per-user"),
            Kind.Request => ("requests at once", "--max-requests-per-user"),
            _ => ("ingests at once", "--max-ingests-per-user"),
        };
        if (sharedAmong > 0)
            return new CommonDataException(ErrorCode.Limit,
                $"limit reached: {user} already holds {limit} {what} to this node's agent, its share while {sharedAmong} users hold connections " +
                $"(--max-connections {options.MaxConnections} over {sharedAmong} users and one more to come); end some, or have the node's administrator raise the agent's --max-connections");
        return new CommonDataException(ErrorCode.Limit,
            $"limit reached: {user} already holds {limit} {what} to this node's agent, its limit per user ({option} {limit}); " +
            "end some, or have the node's administrator raise the agent's " + option);
    }
}
