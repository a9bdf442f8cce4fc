using System.Diagnostics;
using System.Net.Sockets;

namespace Hpc.CommonData.Fanout;

/// <summary>What a node prep requested of the running agents came to.</summary>
/// <param name="Members">The request's members, in position order (first members that did not answer in time, or took the request and went silent, moved to the end).</param>
/// <param name="LaunchSeconds">From the request to the root's word that every reachable node joined.</param>
/// <param name="Joined">How many nodes joined the exchange.</param>
/// <param name="Outcomes">One per member, null where no answer came.</param>
/// <param name="Seconds">From the request to the last answer: the last node holding the verified copy.</param>
public sealed record AgentsReport(IReadOnlyList<string> Members, double LaunchSeconds, int Joined, IReadOnlyList<NodeOutcome?> Outcomes, double Seconds)
{
    /// <summary>The members that took the request as its first agent and went silent before it started: the request went
    /// to the next member each time, and each of these was tried again as the last.</summary>
    public IReadOnlyList<string> SilentRoots { get; init; } = [];

    public int Ready => Outcomes.Count(o => o is { Ready: true });
}

/// <summary>
/// Node prep as one request to the running agents (<c>hpcdata nodeprep --fanout agents</c>): sends it to the first
/// agent that answers, which becomes the tree's root, and collects every node's <see cref="NodeOutcome"/> on a port
/// of its own. A root that takes the request and goes silent before the start is found as the tree finds any node that
/// does (a join timeout without a word): the request is called off and goes to the next member. The time counted is the
/// requester's, from the request to the last node's answer.
/// </summary>
public static partial class AgentsRequest
{
    /// <summary>How soon, and at most how often, the members that have not answered are asked whether they still run
    /// (the wait doubles between asks): once half the members have answered and no answer has come for that long, those
    /// left are stragglers or gone. An exchange of 10,000 nodes answers within a fraction of a second, so a dead member
    /// is found a quarter of a second after the last answer, not seconds.</summary>
    private static readonly TimeSpan FirstLivenessCheck = TimeSpan.FromMilliseconds(250), LongestLivenessInterval = TimeSpan.FromSeconds(30);

    /// <summary>
    /// Sends one frame to the agent at <paramref name="member"/> on a connection of its own: a ping asks whether it still
    /// takes connections (ones that prove the key), a request marked <see cref="PrepRequest.Alone"/> tells a member left
    /// out of the exchange to prepare on its own. False where it cannot be reached in <paramref name="timeout"/>.
    /// </summary>
    private static async Task<bool> SendsAsync(string member, PeerFrame frame, ReadOnlyMemory<byte> payload, PeerKey key, TimeSpan timeout, CancellationToken ct) =>
        await ReachAsync(member, frame, payload, key, timeout, ct) == Reach.Taken;

    /// <summary>What became of a frame sent to a member.</summary>
    internal enum Reach
    {
        /// <summary>An agent holding the key took it.</summary>
        Taken,
        /// <summary>The member's node refused the connection: no agent listens there, so the one that took the request
        /// is gone, and its part of the exchange with it. A full backlog drops a connection rather than refusing it, so a
        /// live agent is never taken for this.</summary>
        Refused,
        /// <summary>No answer within the timeout, or one that failed: the member may be silent, hung, cut off or slow.</summary>
        NoAnswer,
    }

    private static async Task<Reach> ReachAsync(string member, PeerFrame frame, ReadOnlyMemory<byte> payload, PeerKey key, TimeSpan timeout, CancellationToken ct)
    {
        var (host, port) = AgentTree.Endpoint(member);
        try
        {
            await using var link = await PeerLink.ConnectAsync(host, port, key, timeout, ct);
            await link.WriteAsync(frame, payload, ct);
            return Reach.Taken;
        }
        catch (SocketException e) when (e.SocketErrorCode == SocketError.ConnectionRefused) { return Reach.Refused; }
        catch (Exception e) when (e is TimeoutException or IOException or SocketException or UnauthorizedAccessException or OperationCanceledException) { return Reach.NoAnswer; }
    }

    /// <summary>How many first members may take the request and go silent before it fails: each costs the others a join
    /// timeout and a round trip.</summary>
    internal const int MostSilentRoots = 3;

    /// <param name="request">The request; its <see cref="PrepRequest.Requester"/> and position are set here.</param>
    /// <param name="onOutcome">Called as each node answers (on a thread-pool thread, one at a time).</param>
    public static async Task<AgentsReport> RunAsync(PrepRequest request, PeerKey key, Action<NodeOutcome>? onOutcome, CancellationToken ct)
    {
        var clock = Stopwatch.StartNew();
        var silent = new List<string>();
        var attempt = request;
        while (true)
        {
            var (report, members, silence) = await AttemptAsync(attempt, key, onOutcome, clock, ct);
            if (report is not null) return report with { SilentRoots = silent };
            // The root took the request and went silent before it started: nothing was fetched for it. The members that
            // took it from the root are told to stop waiting for its start, and the request goes again, under an id of its
            // own, to the next member, the silent one now last: one more leaf its parent may pass over.
            silent.Add(members[0]);
            if (silent.Count == MostSilentRoots || members.Count == 1)
                throw new CommonDataException(ErrorCode.Unavailable, silent.Count == 1
                    ? $"the first agent ({members[0]}) took the request but did not start it ({silence})"
                    : $"the first agents ({string.Join(", ", silent)}) each took the request but did not start it (the last: {silence})");
            await WithdrawAsync(members, attempt.Id, key, request.ReachTimeout, ct);
            var stem = request.Id[..Math.Min(request.Id.Length, PrepRequest.MaxIdLength - 2)]; // ".1" and ".2" still fit
            attempt = attempt with { Id = $"{stem}.{silent.Count}", Members = [.. members.Skip(1), members[0]] };
        }
    }

    /// <summary>One try with the first member that answers as the root: the report, or, where that root took the request
    /// and went silent before it started, the members in the order tried and what the silence was.</summary>
    private static async Task<(AgentsReport? Report, List<string> Members, string? Silence)> AttemptAsync(PrepRequest request, PeerKey key,
        Action<NodeOutcome>? onOutcome, Stopwatch clock, CancellationToken ct)
    {
        var (root, members) = await ConnectRootAsync(request, key, ct);
        await using var _ = root;
        var tally = new Tally(members.Count, clock, onOutcome);
        var (rootHost, rootPort) = AgentTree.Endpoint(members[0]);
        await using var answers = new AnswerPort(TcpRing.LocalAddressToward(rootHost, rootPort), key, tally, members, request.ReachTimeout,
            request.PeerTimeout - request.SuspectAfter, ct);
        var sent = request with { Members = members, Position = 0, Requester = answers.Endpoint };
        await root.WriteAsync(PeerFrame.Prep, sent.Encode(), ct);
        int[] launched;
        try { launched = AgentTree.Positions(await LaunchedAsync(root, request.JoinTimeout, ct)); }
        catch (Exception e) when (e is TimeoutException or IOException or EndOfStreamException or InvalidDataException)
        {
            return (null, members, e is TimeoutException ? $"nothing from it for {request.JoinTimeout.TotalSeconds:0.###} s" : e.Message);
        }
        var launchSeconds = clock.Elapsed.TotalSeconds;
        // Those that joined answer once their copy is pinned. Those left out (not reached in time, or cut off with a
        // parent that went silent) are told so now and prepare on their own from the tier, rather than after the
        // stall timeout. A member that cannot be told, or whose agent later stops taking connections, is gone.
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(request.Timeout + request.StallTimeout);
        var telling = Task.WhenAll(Enumerable.Range(0, members.Count).Except(launched).Select(async p =>
            tally.Reached(p, await SendsAsync(members[p], PeerFrame.Prep, (sent with { Position = p, Alone = true }).Encode(), key, request.JoinTimeout, limit.Token))));
        await WatchStragglersAsync(tally, members, key, request.JoinTimeout, limit.Token, ct);
        await telling;
        return (new AgentsReport(members, launchSeconds, launched.Length, tally.Outcomes, tally.Seconds), members, null);
    }

    /// <summary>Calls request <paramref name="id"/> off on every member, a few hundred connections at a time, each within
    /// the reach timeout: a member that took it from the silent root stops waiting for its start, and a copy still on its
    /// way is refused. A member not reached is one the new request passes over or waits for as any other.</summary>
    private static async Task WithdrawAsync(IReadOnlyList<string> members, string id, PeerKey key, TimeSpan reachTimeout, CancellationToken ct)
    {
        var payload = System.Text.Encoding.UTF8.GetBytes(id);
        await Parallel.ForEachAsync(members, new ParallelOptions { MaxDegreeOfParallelism = 256, CancellationToken = ct },
            async (member, c) => await SendsAsync(member, PeerFrame.Withdraw, payload, key, reachTimeout, c));
    }

    /// <summary>
    /// The root must answer: a first member that does not within the reach timeout goes to the end of the list, where it
    /// is one more leaf its parent may pass over, and is told to prepare on its own if it was not reached.
    /// </summary>
    private static async Task<(PeerLink Root, List<string> Members)> ConnectRootAsync(PrepRequest request, PeerKey key, CancellationToken ct)
    {
        var members = request.Members.ToList();
        var dropped = new List<string>();
        string? lastError = null;
        while (dropped.Count < request.Members.Count)
        {
            var (host, port) = AgentTree.Endpoint(members[0]);
            try
            {
                var root = await PeerLink.ConnectAsync(host, port, key, request.ReachTimeout, ct);
                return (root, [.. members, .. dropped]);
            }
            catch (Exception e) when (e is TimeoutException or IOException or SocketException)
            {
                lastError = $"{members[0]}: {e.Message}";
                dropped.Add(members[0]);
                members.RemoveAt(0);
            }
        }
        throw new CommonDataException(ErrorCode.Unavailable, $"no agent answered on any of the {request.Members.Count} members (the last, {lastError})");
    }

    /// <summary>
    /// Asks the members that have not answered whether they still run, from when most have answered and answers stopped
    /// coming, at doubling intervals, until every member answered or is gone. A check still waiting on a member once every
    /// member is accounted for (the exchange's verdict came meanwhile) is called off, not waited out.
    /// </summary>
    private static async Task WatchStragglersAsync(Tally tally, IReadOnlyList<string> members, PeerKey key, TimeSpan joinTimeout, CancellationToken limit,
        CancellationToken ct)
    {
        var interval = FirstLivenessCheck;
        using var checking = CancellationTokenSource.CreateLinkedTokenSource(limit);
        try
        {
            while (!tally.AllAccountedFor.IsCompleted)
            {
                await Task.WhenAny(tally.AllAccountedFor, Task.Delay(interval, limit));
                limit.ThrowIfCancellationRequested();
                if (tally.Stragglers(quietFor: interval) is not { } waiting) continue;
                interval = TimeSpan.FromTicks(Math.Min(interval.Ticks * 2, LongestLivenessInterval.Ticks));
                var pings = Task.WhenAll(waiting.Select(p => SendsAsync(members[p], PeerFrame.Ping, ReadOnlyMemory<byte>.Empty, key, joinTimeout, checking.Token)));
                if (await Task.WhenAny(tally.AllAccountedFor, pings) != pings)
                {
                    checking.Cancel();
                    await pings;
                    return;
                }
                var alive = await pings;
                for (var i = 0; i < waiting.Length; i++) tally.Reached(waiting[i], alive[i]);
            }
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested) { }
    }

    /// <summary>The root's count of who joined; it says it is alive while it gathers (every half join timeout, as each node
    /// to its parent), so only its silence for a join timeout is a timeout.</summary>
    private static async Task<byte[]> LaunchedAsync(PeerLink root, TimeSpan silence, CancellationToken ct)
    {
        while (true)
        {
            var (type, payload) = await root.ReadAnyAsync(ct).WaitAsync(silence, ct);
            if (type == PeerFrame.Launched) return payload;
            // The root refused the request (it is busy, or the request is not one it takes): its reason, not a closed link.
            if (type == PeerFrame.Outcome && NodeOutcome.Decode(payload) is { Ready: false } refused)
                throw new CommonDataException((ErrorCode)refused.Code, $"the first agent ({refused.Node}) refused the request: {refused.Detail}");
            if (type != PeerFrame.Alive) throw new InvalidDataException($"a {type} frame where the start was expected");
        }
    }
}
