using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;

namespace Hpc.CommonData.Fanout;

/// <summary>What a node prep requested of the running agents came to.</summary>
/// <param name="Members">The request's members, in position order (first members that did not answer in time moved to the end).</param>
/// <param name="LaunchSeconds">From the request to the root's word that every reachable node joined.</param>
/// <param name="Joined">How many nodes joined the exchange.</param>
/// <param name="Outcomes">One per member, null where no answer came.</param>
/// <param name="Seconds">From the request to the last answer: the last node holding the verified copy.</param>
public sealed record AgentsReport(IReadOnlyList<string> Members, double LaunchSeconds, int Joined, IReadOnlyList<NodeOutcome?> Outcomes, double Seconds)
{
    public int Ready => Outcomes.Count(o => o is { Ready: true });
}

/// <summary>
/// Node prep as one request to the running agents (<c>hpcdata nodeprep --fanout agents</c>): sends it to the first
/// agent that answers, which becomes the tree's root, and collects every node's <see cref="NodeOutcome"/> on a port
/// of its own. The time counted is the requester's, from the request to the last node's answer.
/// </summary>
public static class AgentsRequest
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
    private static async Task<bool> SendsAsync(string member, PeerFrame frame, ReadOnlyMemory<byte> payload, PeerKey key, TimeSpan timeout, CancellationToken ct)
    {
        var (host, port) = AgentTree.Endpoint(member);
        try
        {
            await using var link = await PeerLink.ConnectAsync(host, port, key, timeout, ct);
            await link.WriteAsync(frame, payload, ct);
            return true;
        }
        catch (Exception e) when (e is TimeoutException or IOException or SocketException or UnauthorizedAccessException or OperationCanceledException) { return false; }
    }

    /// <param name="request">The request; its <see cref="PrepRequest.Requester"/> and position are set here.</param>
    /// <param name="onOutcome">Called as each node answers (on a thread-pool thread, one at a time).</param>
    public static async Task<AgentsReport> RunAsync(PrepRequest request, PeerKey key, Action<NodeOutcome>? onOutcome, CancellationToken ct)
    {
        var clock = Stopwatch.StartNew();
        var members = request.Members.ToList();
        // The root must answer: a first member that does not within the reach timeout goes to the end of the list,
        // where it is one more leaf its parent may pass over, and is told to prepare on its own if it was not reached.
        var dropped = new List<string>();
        PeerLink? root = null;
        string? lastError = null;
        while (dropped.Count < request.Members.Count)
        {
            var (host, port) = AgentTree.Endpoint(members[0]);
            try
            {
                root = await PeerLink.ConnectAsync(host, port, key, request.ReachTimeout, ct);
                break;
            }
            catch (Exception e) when (e is TimeoutException or IOException or SocketException or UnauthorizedAccessException)
            {
                if (e is UnauthorizedAccessException) throw;
                lastError = $"{members[0]}: {e.Message}";
                dropped.Add(members[0]);
                members.RemoveAt(0);
            }
        }
        if (root is null) throw new CommonDataException(ErrorCode.Unavailable, $"no agent answered on any of the {request.Members.Count} members (the last, {lastError})");
        await using var _ = root;
        members.AddRange(dropped);

        var (rootHost, rootPort) = AgentTree.Endpoint(members[0]);
        var local = TcpRing.LocalAddressToward(rootHost, rootPort);
        using var listener = new Socket(local.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(local, 0));
        listener.Listen(4096);
        var requester = (IPEndPoint)listener.LocalEndPoint!;
        var sent = request with
        {
            Members = members, Position = 0,
            Requester = local.AddressFamily == AddressFamily.InterNetworkV6 ? $"[{requester.Address}]:{requester.Port}" : $"{requester.Address}:{requester.Port}",
        };
        var outcomes = new NodeOutcome?[members.Count];
        // Members no longer counted on: not told they were left out, no longer taking connections, or lost to the
        // exchange and not answering the reach timeout's ping.
        var gone = new bool[outcomes.Length];
        var checkedLost = new bool[outcomes.Length];
        var lostChecks = new ConcurrentBag<Task>();
        var answered = 0;
        var lastAnswer = 0.0;
        var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var gate = new object();
        using var stopCollecting = CancellationTokenSource.CreateLinkedTokenSource(ct);
        var collecting = CollectAsync(stopCollecting.Token);
        try
        {
            await root.WriteAsync(PeerFrame.Prep, sent.Encode(), ct);
            var launchLimit = request.JoinTimeout * (sent.HeightOf(0) + 2) + TimeSpan.FromSeconds(5);
            int[] launched;
            try { launched = AgentTree.Positions(await LaunchedAsync(root, launchLimit, ct)); }
            catch (Exception e) when (e is TimeoutException or IOException or EndOfStreamException or InvalidDataException)
            {
                throw new CommonDataException(ErrorCode.Unavailable, $"the first agent ({members[0]}) took the request but did not start it ({e.Message})");
            }
            var launchSeconds = clock.Elapsed.TotalSeconds;
            // Those that joined answer once their copy is pinned. Those left out (not reached in time, or cut off with a
            // parent that went silent) are told so now and prepare on their own from the tier, rather than after the
            // stall timeout. A member that cannot be told, or whose agent later stops taking connections, is gone.
            using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
            limit.CancelAfter(request.Timeout + request.StallTimeout);
            var telling = Task.WhenAll(Enumerable.Range(0, outcomes.Length).Except(launched).Select(async p =>
            {
                var told = await SendsAsync(sent.Members[p], PeerFrame.Prep, (sent with { Position = p, Alone = true }).Encode(), key, request.JoinTimeout, limit.Token);
                lock (gate)
                {
                    gone[p] |= !told;
                    EndIfAllAccountedFor();
                }
            }));
            var interval = FirstLivenessCheck;
            // A liveness check still waiting on a member once every member is accounted for (the exchange's verdict
            // came meanwhile) is called off, not waited out.
            using var checking = CancellationTokenSource.CreateLinkedTokenSource(limit.Token);
            try
            {
                while (!all.Task.IsCompleted)
                {
                    await Task.WhenAny(all.Task, Task.Delay(interval, limit.Token));
                    limit.Token.ThrowIfCancellationRequested();
                    int[] waiting;
                    lock (gate)
                    {
                        // While most are still at work, or answers still come, asking thousands of agents would only load them.
                        if (2 * answered < outcomes.Length || clock.Elapsed.TotalSeconds - lastAnswer < interval.TotalSeconds) continue;
                        waiting = Enumerable.Range(0, outcomes.Length).Where(p => outcomes[p] is null && !gone[p]).ToArray();
                    }
                    interval = TimeSpan.FromTicks(Math.Min(interval.Ticks * 2, LongestLivenessInterval.Ticks));
                    var pings = Task.WhenAll(waiting.Select(p => SendsAsync(members[p], PeerFrame.Ping, ReadOnlyMemory<byte>.Empty, key, request.JoinTimeout, checking.Token)));
                    if (await Task.WhenAny(all.Task, pings) != pings)
                    {
                        checking.Cancel();
                        await pings;
                        break;
                    }
                    var alive = await pings;
                    lock (gate)
                    {
                        for (var i = 0; i < waiting.Length; i++) gone[waiting[i]] |= !alive[i];
                        EndIfAllAccountedFor();
                    }
                }
            }
            catch (OperationCanceledException) when (!ct.IsCancellationRequested) { }
            await telling;
            double seconds;
            lock (gate) seconds = all.Task.IsCompleted ? lastAnswer : clock.Elapsed.TotalSeconds;
            return new AgentsReport(members, launchSeconds, launched.Length, outcomes, seconds);
        }
        finally
        {
            stopCollecting.Cancel();
            listener.Close();
            try { await collecting; } catch (OperationCanceledException) { } catch (SocketException) { } catch (ObjectDisposedException) { }
            await Task.WhenAll(lostChecks);
        }

        // The exchange decided that a member is gone (dead at once, silent for the peer timeout): the survivors' outcomes
        // say which. One ping with the reach timeout, what any running agent answers in a round trip, confirms it, so
        // the request ends once the others have answered, not after a liveness check's join timeout on top of the
        // exchange's own. A member that answers is alive after all (it completes from the tier) and is waited for.
        void CheckLost(IReadOnlyList<int> lost, CancellationToken stop)
        {
            foreach (var p in lost)
            {
                if ((uint)p >= (uint)outcomes.Length || outcomes[p] is not null || gone[p] || checkedLost[p]) continue;
                checkedLost[p] = true;
                lostChecks.Add(Task.Run(async () =>
                {
                    var alive = await SendsAsync(members[p], PeerFrame.Ping, ReadOnlyMemory<byte>.Empty, key, request.ReachTimeout, stop);
                    lock (gate)
                    {
                        gone[p] |= !alive;
                        EndIfAllAccountedFor();
                    }
                }, CancellationToken.None));
            }
        }

        // Under the gate: every member answered or is gone.
        void EndIfAllAccountedFor()
        {
            for (var q = 0; q < outcomes.Length; q++)
                if (outcomes[q] is null && !gone[q]) return;
            all.TrySetResult();
        }

        async Task CollectAsync(CancellationToken stop)
        {
            var reading = new ConcurrentBag<Task>();
            try
            {
                while (!stop.IsCancellationRequested)
                {
                    var socket = await listener.AcceptAsync(stop);
                    reading.Add(ReadOneAsync(socket, stop));
                }
            }
            finally { await Task.WhenAll(reading); }
        }

        async Task ReadOneAsync(Socket socket, CancellationToken stop)
        {
            try
            {
                await using var link = await PeerLink.AcceptAsync(socket, key, TimeSpan.FromSeconds(5), stop);
                var outcome = NodeOutcome.Decode(await link.ReadAsync(PeerFrame.Outcome, stop).WaitAsync(TimeSpan.FromSeconds(5), stop));
                lock (gate)
                {
                    if ((uint)outcome.Position >= (uint)outcomes.Length || outcomes[outcome.Position] is not null) return;
                    outcomes[outcome.Position] = outcome;
                    answered++;
                    lastAnswer = clock.Elapsed.TotalSeconds;
                    onOutcome?.Invoke(outcome);
                    EndIfAllAccountedFor();
                    if (outcome.Lost is { Count: > 0 } lost) CheckLost(lost, stop);
                }
            }
            catch (Exception e) when (e is IOException or SocketException or TimeoutException or UnauthorizedAccessException or InvalidDataException or OperationCanceledException)
            {
                socket.Dispose();
            }
        }
    }

    /// <summary>The root's count of who joined; it says it is alive while it gathers, so only its silence is a timeout.</summary>
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
