using System.Diagnostics;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// One node's part of joining the agents' tree (<see cref="AgentTree.JoinAsync"/>): it forwards the request to its
/// children (or, past one that cannot be reached, to that child's children), gathers their subtrees' answers while it
/// tells its parent it is alive, answers for its subtree, and waits for the root's start, from its parent or from an
/// ancestor that adopted it. The requester's word that this node was left out ends the join wherever it is; so does its
/// word that the request is called off (its root went silent), which also comes down the tree as the start would, so
/// that no node takes the closing of its parent's link for a lost parent and fetches on its own.
/// </summary>
internal sealed class TreeJoin : IDisposable
{
    private readonly PrepRequest _request;
    private readonly Func<string, int, TimeSpan, CancellationToken, Task<PeerLink>> _connect;
    private readonly CancellationToken _cancellation, _withdrawn;
    private readonly ChannelReader<(PrepRequest Request, PeerLink Link)>? _adoptions;
    private readonly CancellationTokenSource _joining, _gathering;
    private readonly List<(PeerLink Link, int Position)> _children = [];
    private readonly List<(PeerLink Link, int Position, Task<int[]?> Answer)> _pending = [];
    /// <summary>Adoptions that came while this node still gathered: their adopters are told it is alive, and answered after.</summary>
    private readonly List<(PrepRequest Request, PeerLink Link)> _early = [];
    private PeerLink _parent;
    /// <summary>The requester said this node was left out (it answered too late, or its parent was lost): the node then
    /// prepares on its own at once instead of waiting out the stall timeout.</summary>
    private volatile bool _leftOut;
    /// <summary>The parent passed on the requester's word that the request is called off.</summary>
    private volatile bool _calledOff;
    /// <summary>The parent's one word before the exchange: the start, or null where the request was called off.</summary>
    private Task<int[]?> _fromParent = Task.FromResult<int[]?>(null);

    public TreeJoin(PrepRequest request, PeerLink parent, Func<string, int, TimeSpan, CancellationToken, Task<PeerLink>> connect,
        CancellationToken cancellation, ChannelReader<(PrepRequest Request, PeerLink Link)>? adoptions, CancellationToken withdrawn)
    {
        (_request, _parent, _connect, _cancellation, _adoptions, _withdrawn) = (request, parent, connect, cancellation, adoptions, withdrawn);
        _joining = CancellationTokenSource.CreateLinkedTokenSource(cancellation, withdrawn);
        _gathering = CancellationTokenSource.CreateLinkedTokenSource(_joining.Token);
    }

    private int Position => _request.Position;
    private CancellationToken Ct => _joining.Token;

    public async Task<TreeRankGroup> RunAsync()
    {
        // A parent gives up on a child after JoinTimeout of silence, however deep the child's subtree: while this node
        // gathers its own children's answers it says it is alive (the root, to the requester), so only a node that
        // really stopped is adopted around.
        var alive = AgentTree.KeepAliveAsync(_parent, _request.JoinTimeout / 2, _gathering.Token);
        // The root's parent is the requester, which says nothing more on that link: its word comes on a connection of its own.
        if (Position != 0) _fromParent = Observed(ParentWordAsync(_parent));
        var watching = _adoptions is null ? Task.CompletedTask : WatchAsync(_adoptions);
        try
        {
            var present = await GatherAsync();
            await _gathering.CancelAsync();
            await alive;
            await watching;

            int[] all;
            if (Position == 0)
            {
                all = [.. present.Order()];
                await _parent.WriteAsync(PeerFrame.Launched, AgentTree.PositionsBytes(all), Ct);
            }
            else
            {
                await _parent.WriteAsync(PeerFrame.Joined, AgentTree.PositionsBytes(present), Ct);
                all = await AwaitStartAsync(AgentTree.PositionsBytes(present));
            }
            var start = AgentTree.PositionsBytes(all);
            await Task.WhenAll(_children.Select(c => c.Link.WriteAsync(PeerFrame.Start, start, Ct)));
            var rank = Array.BinarySearch(all, Position);
            if (rank < 0) throw new InvalidDataException($"position {Position} is not among the {all.Length} that take part");
            return new TreeRankGroup(rank, all, Position == 0 ? null : _parent, _children.Select(c => c.Link).ToList(), _request.StallTimeout);
        }
        catch (Exception e)
        {
            await _gathering.CancelAsync();
            var calledOff = (_calledOff || _withdrawn.IsCancellationRequested) && !_cancellation.IsCancellationRequested;
            var below = _children.Select(c => c.Link).Concat(_pending.Select(p => p.Link)).ToList();
            if (calledOff) await PassOnWithdrawalAsync(below);
            foreach (var link in below) await link.DisposeAsync();
            if (calledOff) throw new RequestWithdrawnException(_request.Id, e);
            if (_leftOut && e is not LeftOutException && !_cancellation.IsCancellationRequested) throw new LeftOutException(Position, e);
            throw;
        }
    }

    /// <summary>The parent's word: the start's positions, or null for the requester's word that the request is called off,
    /// which ends this node's join at once, wherever it is.</summary>
    private async Task<int[]?> ParentWordAsync(PeerLink parent)
    {
        var (type, payload) = await parent.ReadAnyAsync(Ct, ParentWords);
        if (type == PeerFrame.Start) return AgentTree.Positions(payload);
        _calledOff = true;
        try { await _joining.CancelAsync(); }
        catch (ObjectDisposedException) { } // the join ended meanwhile
        return null;
    }

    private static readonly PeerFrame[] ParentWords = [PeerFrame.Start, PeerFrame.Withdraw];

    /// <summary>A parent's link that closes once this node stopped listening to it (it was adopted, or its join failed) is no news.</summary>
    private static Task<T> Observed<T>(Task<T> word)
    {
        _ = word.ContinueWith(t => t.Exception, CancellationToken.None, TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
        return word;
    }

    /// <summary>Tells the nodes below that the request is called off, a second at most each: they may still be gathering
    /// or waiting for the start, and would otherwise take this link's closing for a lost parent.</summary>
    private async Task PassOnWithdrawalAsync(IEnumerable<PeerLink> below)
    {
        var id = System.Text.Encoding.UTF8.GetBytes(_request.Id);
        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(_cancellation);
        bounded.CancelAfter(TimeSpan.FromSeconds(1));
        await Task.WhenAll(below.Select(async link =>
        {
            try { await link.WriteAsync(PeerFrame.Withdraw, id, bounded.Token); }
            catch (Exception e) when (e is IOException or OperationCanceledException or ObjectDisposedException or System.Net.Sockets.SocketException) { }
        }));
    }

    /// <summary>The positions of this node's subtree that took the request: its own, and its children's answers.</summary>
    private async Task<List<int>> GatherAsync()
    {
        var present = new List<int> { Position };
        await ForwardAllAsync(_request.ChildrenOf(Position));
        while (_pending.Count > 0)
        {
            var answered = await Task.WhenAny(_pending.Select(p => p.Answer));
            var i = _pending.FindIndex(p => p.Answer == answered);
            var (link, child, _) = _pending[i];
            _pending.RemoveAt(i);
            if (await answered is { } joined)
            {
                present.AddRange(joined);
                _children.Add((link, child));
                continue;
            }
            // Silent or gone: it is left out, and its children — which may have taken the request from it and now
            // wait for a start it will never send — are adopted, as an unreachable child's are.
            await link.DisposeAsync();
            await ForwardAllAsync(_request.ChildrenOf(child));
        }
        return present;
    }

    /// <summary>An adoption, while this node gathers: its adopter is kept told this node is alive. The word that this
    /// node was left out ends the join.</summary>
    private async Task WatchAsync(ChannelReader<(PrepRequest Request, PeerLink Link)> offers)
    {
        var keepers = new List<Task>();
        try
        {
            while (await offers.WaitToReadAsync(_gathering.Token))
                while (offers.TryRead(out var offer))
                {
                    if (offer.Request.Alone)
                    {
                        await offer.Link.DisposeAsync();
                        _leftOut = true;
                        await _joining.CancelAsync();
                        break;
                    }
                    _early.Add(offer);
                    keepers.Add(AgentTree.KeepAliveAsync(offer.Link, _request.JoinTimeout / 2, _gathering.Token));
                }
        }
        catch (OperationCanceledException) { }
        await Task.WhenAll(keepers);
    }

    private async Task ForwardAllAsync(IEnumerable<int> positions)
    {
        foreach (var (link, child) in (await Task.WhenAll(positions.Select(ForwardAsync))).SelectMany(c => c))
            _pending.Add((link, child, AnswerAsync(link)));
    }

    /// <summary>The forwarded links: the child's own, or, for a child that cannot be reached, those of its children in turn.</summary>
    private async Task<List<(PeerLink, int)>> ForwardAsync(int child)
    {
        var (host, port) = AgentTree.Endpoint(_request.Members[child]);
        try
        {
            // A running agent answers in a round trip; one down or wedged costs the others only ReachTimeout.
            var link = await _connect(host, port, _request.ReachTimeout, Ct);
            try { await link.WriteAsync(PeerFrame.Prep, _request.At(child).Encode(), Ct); }
            catch
            {
                await link.DisposeAsync();
                throw;
            }
            return [(link, child)];
        }
        catch (Exception e) when (e is TimeoutException or IOException or System.Net.Sockets.SocketException or UnauthorizedAccessException)
        {
            // Passed over: its children become this node's.
            return [.. (await Task.WhenAll(_request.ChildrenOf(child).Select(ForwardAsync))).SelectMany(c => c)];
        }
    }

    /// <summary>A child's answer for its subtree, or null once it went silent for JoinTimeout, closed, or sent nonsense.</summary>
    private async Task<int[]?> AnswerAsync(PeerLink link)
    {
        try
        {
            var limit = Stopwatch.StartNew();
            while (true)
            {
                var (type, payload) = await link.ReadAnyAsync(Ct).WaitAsync(_request.JoinTimeout, Ct);
                if (type == PeerFrame.Joined) return AgentTree.Positions(payload);
                if (type != PeerFrame.Alive) throw new InvalidDataException($"a {type} frame where a join's answer was expected");
                if (limit.Elapsed > _request.StallTimeout) throw new TimeoutException("a subtree still gathering after the stall timeout");
            }
        }
        catch (Exception e) when (e is TimeoutException or IOException or EndOfStreamException or InvalidDataException)
        {
            return null;
        }
    }

    /// <summary>The start from the parent, or from an ancestor above it that adopted this node because the parent went
    /// silent: that ancestor is this node's parent from then on.</summary>
    private async Task<int[]> AwaitStartAsync(byte[] joined)
    {
        var above = _request.From;
        var start = _fromParent;
        var wait = Stopwatch.StartNew();
        var queued = new Queue<(PrepRequest, PeerLink)>(_early);
        while (true)
        {
            var adoption = queued.TryDequeue(out var offered) ? Task.FromResult(offered)
                : _adoptions?.ReadAsync(Ct).AsTask() ?? Task.Delay(Timeout.Infinite, Ct).ContinueWith(_ => default((PrepRequest, PeerLink)), TaskScheduler.Default);
            var left = _request.StallTimeout - wait.Elapsed;
            if (left <= TimeSpan.Zero) throw new TimeoutException($"no start within {_request.StallTimeout.TotalSeconds:0.#} s of answering for this subtree");
            var first = await Task.WhenAny(start, adoption).WaitAsync(left, Ct);
            if (first == start) return await start ?? throw new RequestWithdrawnException(_request.Id);
            var (offer, link) = await adoption;
            if (offer.Alone)
            {
                await link.DisposeAsync();
                _leftOut = true;
                throw new LeftOutException(Position);
            }
            if (!_request.IsAncestor(offer.From, above))
            {
                await link.DisposeAsync(); // not from above the current parent: a late copy of the request
                continue;
            }
            await link.WriteAsync(PeerFrame.Joined, joined, Ct);
            (_parent, above) = (link, offer.From);
            start = _fromParent = Observed(ParentWordAsync(_parent));
        }
    }

    public void Dispose()
    {
        _gathering.Dispose();
        _joining.Dispose();
    }
}
