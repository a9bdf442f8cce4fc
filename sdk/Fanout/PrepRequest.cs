using System.Text;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// Node prep requested of the running agents: which dataset, pinned for which job, on which agents (their peer
/// endpoints, in the order that makes their ranks), and how the exchange runs. It travels down a tree of the agents
/// themselves (<see cref="AgentTree"/>), each forwarding it to its children with their <see cref="Position"/>, so
/// starting 10,000 nodes takes a few hops, not a job launch.
/// </summary>
public sealed record PrepRequest
{
    public required string Id { get; init; }
    public required string Name { get; init; }
    /// <summary>A version id or its start; empty for the latest.</summary>
    public string Version { get; init; } = "";
    public required string Job { get; init; }
    /// <summary>The user the copy is for: every agent checks that user against the dataset's readers before it fetches
    /// a byte, and pins the copy as that user's (its quota, its <c>noderelease</c>). Empty: the requester's own agent
    /// account, as an operator's warm-up.</summary>
    public string User { get; init; } = "";
    /// <summary>Every agent's peer endpoint (host:port); a node's position is its index here.</summary>
    public required IReadOnlyList<string> Members { get; init; }
    /// <summary>Where each node sends its <see cref="NodeOutcome"/> (host:port of the requester).</summary>
    public required string Requester { get; init; }
    /// <summary>The recipient's position in <see cref="Members"/>.</summary>
    public int Position { get; init; }
    /// <summary>The sender's position: its parent in the tree, or an ancestor adopting it; -1 from the requester.</summary>
    public int From { get; init; } = -1;
    /// <summary>Children per node in the tree that carries the request and the collectives.</summary>
    public int Degree { get; init; } = 8;
    public string RingGroups { get; init; } = "auto";
    public bool LinkProbe { get; init; } = true;
    /// <summary>
    /// How long a member may be silent (take nothing, say nothing) before it is lost to the request: its ring closed
    /// around it long before (<see cref="SuspectAfter"/>), and the requester has asked it since.
    /// </summary>
    public TimeSpan PeerTimeout { get; init; } = TimeSpan.FromSeconds(2);

    /// <summary>
    /// How long a ring neighbour may be silent before the ring closes around it: a fifth of <see cref="PeerTimeout"/>,
    /// at least a second (and never more than it). Being routed around is not the verdict: a member that was only slow
    /// completes its copy from the cache tier, and the requester waits for it while it answers within the peer timeout,
    /// so the survivors no longer wait the whole peer timeout for a node that went silent.
    /// </summary>
    public TimeSpan SuspectAfter => SuspicionOf(PeerTimeout);

    /// <inheritdoc cref="SuspectAfter"/>
    public static TimeSpan SuspicionOf(TimeSpan peerTimeout) =>
        TimeSpan.FromTicks(Math.Min(peerTimeout.Ticks, Math.Max(TimeSpan.TicksPerSecond, peerTimeout.Ticks / 5)));
    /// <summary>How long a node that took the request may go silent before its parent leaves it out and takes its children.</summary>
    public TimeSpan JoinTimeout { get; init; } = TimeSpan.FromSeconds(2);
    /// <summary>How long a node may take to accept a connection and prove the key before its parent passes over it and
    /// forwards to its children itself. A running agent answers in a round trip and a millisecond or two; one that is
    /// down or wedged is then left out at this cost to the others, not <see cref="JoinTimeout"/>'s.</summary>
    public TimeSpan ReachTimeout { get; init; } = TimeSpan.FromMilliseconds(500);
    /// <summary>This node is not in the exchange (it was not reached in time, or was left out): it prepares on its own,
    /// fetching from the cache tier, and answers the requester. Sent by the requester once the others have started.</summary>
    public bool Alone { get; init; }
    /// <summary>How long the collectives, or the exchange, may go without anything moving before a node fetches the rest directly.</summary>
    public TimeSpan StallTimeout { get; init; } = TimeSpan.FromSeconds(30);
    /// <summary>How long the whole fetch may take.</summary>
    public TimeSpan Timeout { get; init; } = TimeSpan.FromMinutes(60);

    /// <summary>The request as this node (<see cref="Position"/>) sends it to <paramref name="position"/>.</summary>
    public PrepRequest At(int position) => this with { Position = position, From = Position };

    /// <summary>The position above <paramref name="position"/> in the tree; -1 for the root.</summary>
    public int ParentOf(int position) => position == 0 ? -1 : (position - 1) / Degree;

    /// <summary>Whether <paramref name="ancestor"/> lies on the path from <paramref name="position"/> up to the root (itself excluded).</summary>
    public bool IsAncestor(int ancestor, int position)
    {
        for (var p = ParentOf(position); p >= 0; p = ParentOf(p))
            if (p == ancestor) return true;
        return false;
    }

    /// <summary>The positions whose parent is <paramref name="position"/> in the tree.</summary>
    public IEnumerable<int> ChildrenOf(int position)
    {
        for (var c = position * Degree + 1; c <= position * Degree + Degree && c < Members.Count; c++) yield return c;
    }

    /// <summary>Levels of the tree below <paramref name="position"/> (0 for a leaf).</summary>
    public int HeightOf(int position)
    {
        var height = 0;
        for (long first = position; first * Degree + 1 < Members.Count; first = first * Degree + 1) height++;
        return height;
    }

    /// <summary>
    /// The first of this request's settings outside what every agent takes — its id of 1 to <see cref="MaxIdLength"/>
    /// characters, each timeout above 0 and at most its bound,
    /// the tree's degree from 2 to <see cref="MaxDegree"/>, <see cref="RingGroups"/> as <c>--ring-groups</c> reads it —
    /// naming the setting; null when all are in. An agent that makes a request for a caller checks it before it travels.
    /// </summary>
    public string? Problem()
    {
        if (Id.Length is 0 or > MaxIdLength) return $"an id of {Id.Length} characters (1 to {MaxIdLength} is taken)";
        if (Degree < 2 || Degree > MaxDegree) return $"a tree degree of {Degree} (2 to {MaxDegree} is taken)";
        foreach (var (which, value, max) in new[] { ("peer", PeerTimeout, MaxPeerTimeout), ("join", JoinTimeout, MaxJoinTimeout), ("reach", ReachTimeout, MaxReachTimeout),
                     ("stall", StallTimeout, MaxStallTimeout), ("overall", Timeout, MaxTimeout) })
            if (value <= TimeSpan.Zero || value > max) return $"a {which} timeout of {(value < TimeSpan.Zero ? TimeSpan.Zero : value)} (more than 0 and at most {max} is taken)";
        try { RingGrid.ParseGroupSize(RingGroups); }
        catch (FormatException e) { return e.Message; }
        return null;
    }

    /// <summary>The longest id a request may carry: a withdrawal (<see cref="PeerFrame.Withdraw"/>) is the id alone, in
    /// a frame of at most 256 bytes.</summary>
    public const int MaxIdLength = 64;

    /// <summary>The most members a request may name.</summary>
    public const int MaxMembers = 1_000_000;

    /// <summary>The longest each timeout may be: a request cannot hold an agent's connections, threads or pins for longer
    /// than an operator would ever ask (a day for the whole fetch).</summary>
    public static readonly TimeSpan MaxPeerTimeout = TimeSpan.FromMinutes(10), MaxJoinTimeout = TimeSpan.FromMinutes(5),
        MaxReachTimeout = TimeSpan.FromMinutes(1), MaxStallTimeout = TimeSpan.FromHours(1), MaxTimeout = TimeSpan.FromDays(1);

    /// <summary>The most children a node forwards to.</summary>
    public const int MaxDegree = 64;

    /// <summary>The encoding's format: 2 names the sender (<see cref="From"/>); 3 carries <see cref="ReachTimeout"/> and <see cref="Alone"/>;
    /// 4 has the same fields, and says the tree's collectives are those of this build: a broadcast in pieces, and the
    /// union of what the nodes lack reduced on the way up (<see cref="TreeRankGroup"/>). An agent of format 3 would wait
    /// for whole frames that never come, so it is refused by name instead. 5 names the <see cref="User"/> the copy is for.</summary>
    private const byte Format = 5;

    public byte[] Encode()
    {
        using var stream = new MemoryStream();
        using var w = new BinaryWriter(stream, Encoding.UTF8);
        w.Write(Format);
        w.Write(Id); w.Write(Name); w.Write(Version); w.Write(Job); w.Write(User); w.Write(Requester);
        w.Write(Position); w.Write(From); w.Write(Degree); w.Write(RingGroups); w.Write(LinkProbe);
        w.Write(PeerTimeout.Ticks); w.Write(JoinTimeout.Ticks); w.Write(StallTimeout.Ticks); w.Write(Timeout.Ticks);
        w.Write(ReachTimeout.Ticks); w.Write(Alone);
        w.Write(Members.Count);
        foreach (var m in Members) w.Write(m);
        w.Flush();
        return stream.ToArray();
    }

    public static PrepRequest Decode(byte[] bytes)
    {
        try
        {
            using var r = new BinaryReader(new MemoryStream(bytes), Encoding.UTF8);
            if (r.ReadByte() is var format && format != Format) throw new InvalidDataException($"a node prep request of format {format}; this agent takes format {Format}");
            var (id, name, version, job, user, requester) = (r.ReadString(), r.ReadString(), r.ReadString(), r.ReadString(), r.ReadString(), r.ReadString());
            var (position, from, degree, groups, probe) = (r.ReadInt32(), r.ReadInt32(), r.ReadInt32(), r.ReadString(), r.ReadBoolean());
            var (peer, join, stall, timeout) = (r.ReadInt64(), r.ReadInt64(), r.ReadInt64(), r.ReadInt64());
            var (reach, alone) = (r.ReadInt64(), r.ReadBoolean());
            var count = r.ReadInt32();
            if (count is < 1 or > MaxMembers) throw new InvalidDataException($"a node prep request for {count} members");
            var members = new string[count];
            for (var i = 0; i < count; i++) members[i] = r.ReadString();
            if (position < 0 || position >= count || from < -1 || from >= count) throw new InvalidDataException($"position {position} (from {from}) of {count} members");
            var request = new PrepRequest
            {
                Id = id, Name = name, Version = version, Job = job, User = user, Requester = requester, Position = position, From = from, Degree = degree,
                RingGroups = groups, LinkProbe = probe, PeerTimeout = TimeSpan.FromTicks(peer), JoinTimeout = TimeSpan.FromTicks(join),
                StallTimeout = TimeSpan.FromTicks(stall), Timeout = TimeSpan.FromTicks(timeout), ReachTimeout = TimeSpan.FromTicks(reach), Alone = alone, Members = members,
            };
            return request.Problem() is { } problem ? throw new InvalidDataException($"a node prep request with {problem}") : request;
        }
        catch (EndOfStreamException) { throw new InvalidDataException("a truncated node prep request"); }
    }
}

/// <summary>What one node's part of a requested node prep came to, sent by its agent to the requester.</summary>
/// <param name="Seconds">From the request reaching this agent to its copy verified and pinned.</param>
/// <param name="Code">0 ready; else the failure's <see cref="ErrorCode"/> as a number.</param>
/// <param name="Detail">The node prep line's fields (key=value …) when ready, else why not.</param>
/// <param name="Lost">The positions this node's ring went on without (dead, or silent for the peer timeout): the exchange's
/// own verdict, which the requester takes instead of finding the same member gone again with a timeout of its own.
/// Null when none.</param>
/// <param name="Lost">The positions this node's ring went on without.</param>
/// <param name="LostFor">How long, when it reported, this node's ring had gone on without the last of <paramref name="Lost"/>:
/// they have been silent that long already, and the requester's verdict counts it.</param>
public sealed record NodeOutcome(int Position, string Node, int Code, string Version, double Seconds, string Detail, IReadOnlyList<int>? Lost = null,
    double LostFor = 0)
{
    public bool Ready => Code == 0;

    public byte[] Encode()
    {
        using var stream = new MemoryStream();
        using var w = new BinaryWriter(stream, Encoding.UTF8);
        w.Write(Position); w.Write(Node); w.Write(Code); w.Write(Version); w.Write(Seconds); w.Write(Detail);
        // Appended: a requester that reads only the fields before it takes the outcome as before.
        w.Write(Lost?.Count ?? 0);
        foreach (var p in Lost ?? []) w.Write(p);
        w.Write(LostFor);
        w.Flush();
        return stream.ToArray();
    }

    public static NodeOutcome Decode(byte[] bytes)
    {
        try
        {
            using var r = new BinaryReader(new MemoryStream(bytes), Encoding.UTF8);
            var outcome = new NodeOutcome(r.ReadInt32(), r.ReadString(), r.ReadInt32(), r.ReadString(), r.ReadDouble(), r.ReadString());
            // An agent of an earlier build ends here.
            if (r.BaseStream.Position == r.BaseStream.Length) return outcome;
            var count = r.ReadInt32();
            if (count < 0 || count > PrepRequest.MaxMembers) throw new InvalidDataException($"a node outcome naming {count} lost members");
            var lost = new int[count];
            for (var i = 0; i < count; i++) lost[i] = r.ReadInt32();
            // An agent of an earlier build ends here too.
            var lostFor = r.BaseStream.Position == r.BaseStream.Length ? 0 : r.ReadDouble();
            if (!double.IsFinite(lostFor) || lostFor < 0 || lostFor > PrepRequest.MaxPeerTimeout.TotalSeconds * 100)
                throw new InvalidDataException($"a node outcome that lost members {lostFor} s ago");
            return outcome with { Lost = count == 0 ? null : lost, LostFor = count == 0 ? 0 : lostFor };
        }
        catch (EndOfStreamException) { throw new InvalidDataException("a truncated node outcome"); }
    }
}
