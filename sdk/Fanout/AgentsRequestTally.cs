using System.Collections.Concurrent;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;

namespace Hpc.CommonData.Fanout;

public static partial class AgentsRequest
{
    /// <summary>
    /// What the requester knows of each member, under one lock: its outcome once it answered, whether it is gone (not
    /// told it was left out, no longer taking connections, or lost to the exchange and not answering a ping), and
    /// whether every member is accounted for.
    /// </summary>
    private sealed class Tally(int members, Stopwatch clock, Action<NodeOutcome>? onOutcome)
    {
        private readonly object _gate = new();
        private readonly NodeOutcome?[] _outcomes = new NodeOutcome?[members];
        private readonly bool[] _gone = new bool[members], _lossChecked = new bool[members];
        private readonly TaskCompletionSource _all = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private int _answered;
        private double _lastAnswer;

        /// <summary>Completes once every member answered or is gone.</summary>
        public Task AllAccountedFor => _all.Task;

        public NodeOutcome?[] Outcomes { get { lock (_gate) return [.. _outcomes]; } }

        /// <summary>From the request to the last answer once every member is accounted for; until now where one is not.</summary>
        public double Seconds { get { lock (_gate) return _all.Task.IsCompleted ? _lastAnswer : clock.Elapsed.TotalSeconds; } }

        /// <summary>
        /// Takes a member's answer, the first for its position. Returns the members its exchange says were lost that are
        /// still unaccounted for and not yet being checked: the caller pings each once.
        /// </summary>
        public IReadOnlyList<int> Answer(NodeOutcome outcome)
        {
            lock (_gate)
            {
                if ((uint)outcome.Position >= (uint)_outcomes.Length || _outcomes[outcome.Position] is not null) return [];
                _outcomes[outcome.Position] = outcome;
                _answered++;
                _lastAnswer = clock.Elapsed.TotalSeconds;
                onOutcome?.Invoke(outcome);
                EndIfAllAccountedFor();
                List<int> toCheck = [];
                foreach (var p in outcome.Lost ?? [])
                    if ((uint)p < (uint)_outcomes.Length && _outcomes[p] is null && !_gone[p] && !_lossChecked[p])
                    {
                        _lossChecked[p] = true;
                        toCheck.Add(p);
                    }
                return toCheck;
            }
        }

        /// <summary>Whether a member told or pinged took the connection; one that did not is gone.</summary>
        public void Reached(int position, bool reached)
        {
            lock (_gate)
            {
                _gone[position] |= !reached;
                EndIfAllAccountedFor();
            }
        }

        /// <summary>
        /// The members to ask whether they still run: those that neither answered nor are gone nor are being asked as lost. Null while fewer than half
        /// have answered or an answer came within <paramref name="quietFor"/>: asking thousands of agents at work would
        /// only load them.
        /// </summary>
        public int[]? Stragglers(TimeSpan quietFor)
        {
            lock (_gate)
            {
                if (2 * _answered < _outcomes.Length || clock.Elapsed.TotalSeconds - _lastAnswer < quietFor.TotalSeconds) return null;
                // A member the exchange lost is already being asked, for as long as the peer timeout allows.
                return [.. Enumerable.Range(0, _outcomes.Length).Where(p => _outcomes[p] is null && !_gone[p] && !_lossChecked[p])];
            }
        }

        // Under the gate.
        private void EndIfAllAccountedFor()
        {
            for (var p = 0; p < _outcomes.Length; p++)
                if (_outcomes[p] is null && !_gone[p]) return;
            _all.TrySetResult();
        }
    }

    /// <summary>
    /// The requester's own port, where every node sends its outcome on a connection of its own that proves the key. An
    /// outcome naming members the exchange lost starts pings of each with the reach timeout, what any running agent
    /// answers in a round trip, again and again for the rest of the peer timeout (the ring closed around the member
    /// after <see cref="PrepRequest.SuspectAfter"/>): the request then ends once the others have answered and the
    /// silent member has stayed silent for the peer timeout, not after a liveness check's join timeout on top of the
    /// exchange's own. A member that answers a ping is alive after all (it was only slow, and completes from the tier)
    /// and is waited for; one whose node refuses the connection has no agent left and is lost at once, as its ring
    /// decided at once when its link failed.
    /// </summary>
    private sealed class AnswerPort : IAsyncDisposable
    {
        private readonly Socket _listener;
        private readonly PeerKey _key;
        private readonly Tally _tally;
        private readonly IReadOnlyList<string> _members;
        private readonly TimeSpan _reachTimeout, _askFor;
        private readonly CancellationTokenSource _stop;
        private readonly ConcurrentBag<Task> _reading = [], _lossChecks = [];
        private readonly Task _accepting;

        /// <param name="askFor">How long a lost member is asked again before it is gone: what is left of the peer timeout
        /// once its ring closed around it, less the time the survivor that names it had already gone on without it.</param>
        public AnswerPort(IPAddress local, PeerKey key, Tally tally, IReadOnlyList<string> members, TimeSpan reachTimeout, TimeSpan askFor, CancellationToken ct)
        {
            (_key, _tally, _members, _reachTimeout, _askFor) = (key, tally, members, reachTimeout, askFor);
            _listener = new Socket(local.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
            _listener.Bind(new IPEndPoint(local, 0));
            _listener.Listen(4096);
            var bound = (IPEndPoint)_listener.LocalEndPoint!;
            Endpoint = local.AddressFamily == AddressFamily.InterNetworkV6 ? $"[{bound.Address}]:{bound.Port}" : $"{bound.Address}:{bound.Port}";
            _stop = CancellationTokenSource.CreateLinkedTokenSource(ct);
            _accepting = AcceptAsync(_stop.Token);
        }

        /// <summary>HOST:PORT as the request carries it (<see cref="PrepRequest.Requester"/>).</summary>
        public string Endpoint { get; }

        private async Task AcceptAsync(CancellationToken stop)
        {
            while (!stop.IsCancellationRequested)
            {
                var socket = await _listener.AcceptAsync(stop);
                _reading.Add(ReadOneAsync(socket, stop));
            }
        }

        private async Task ReadOneAsync(Socket socket, CancellationToken stop)
        {
            try
            {
                await using var link = await PeerLink.AcceptAsync(socket, _key, TimeSpan.FromSeconds(5), stop);
                var outcome = NodeOutcome.Decode(await link.ReadAsync(PeerFrame.Outcome, stop).WaitAsync(TimeSpan.FromSeconds(5), stop));
                // The member has been silent since its ring went on without it, so that much of the peer timeout is spent.
                var askFor = _askFor - TimeSpan.FromSeconds(outcome.LostFor);
                foreach (var p in _tally.Answer(outcome))
                    _lossChecks.Add(Task.Run(async () => _tally.Reached(p, await AnswersWithinAsync(_members[p], askFor, stop)), CancellationToken.None));
            }
            catch (Exception e) when (e is IOException or SocketException or TimeoutException or UnauthorizedAccessException or InvalidDataException or OperationCanceledException)
            {
                socket.Dispose();
            }
        }

        /// <summary>Whether the member answers a ping, asked until <paramref name="askFor"/> has passed (at least once).</summary>
        private async Task<bool> AnswersWithinAsync(string member, TimeSpan askFor, CancellationToken stop)
        {
            var asking = Stopwatch.StartNew();
            while (true)
            {
                var started = asking.Elapsed;
                var reach = await ReachAsync(member, PeerFrame.Ping, ReadOnlyMemory<byte>.Empty, _key, _reachTimeout, stop);
                if (reach == Reach.Taken) return true;
                // Nothing listens where the member took the request: it died, and nothing it could still say would count.
                // Only a silence is worth the rest of the peer timeout.
                if (reach == Reach.Refused || asking.Elapsed >= askFor || stop.IsCancellationRequested) return false;
                // An ask that failed early (no route to the host, say) waits out what is left of a reach timeout.
                var wait = _reachTimeout - (asking.Elapsed - started);
                if (wait > TimeSpan.Zero)
                {
                    try { await Task.Delay(wait, stop); }
                    catch (OperationCanceledException) { return false; }
                }
            }
        }

        public async ValueTask DisposeAsync()
        {
            _stop.Cancel();
            _listener.Close();
            try { await _accepting; } catch (OperationCanceledException) { } catch (SocketException) { } catch (ObjectDisposedException) { }
            await Task.WhenAll(_reading);
            await Task.WhenAll(_lossChecks);
            _stop.Dispose();
        }
    }
}
