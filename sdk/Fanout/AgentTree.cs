using System.Buffers.Binary;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// The running agents as the ranks of an exchange, joined through a tree of their own connections: the request goes
/// down (each node forwards it to its <see cref="PrepRequest.Degree"/> children), the positions that took it come back
/// up, and the root sends down who takes part — each node's rank is its place among them. A child that cannot be
/// reached is passed over: its parent forwards the request to that child's children itself. The same connections then
/// carry the exchange's collectives (<see cref="TreeRankGroup"/>); its blocks travel on rings of their own.
/// Joining 10,000 nodes takes three passes over a tree of depth ⌈log₈ N⌉ ≈ 5: round trips, not a job launch.
/// </summary>
public static class AgentTree
{
    /// <summary>
    /// This node's part of the join: forwards <paramref name="request"/>, answers its parent (<paramref name="parent"/>;
    /// for the root, the requester, which is told how many joined), and returns once the root's start came.
    /// </summary>
    public static async Task<TreeRankGroup> JoinAsync(PrepRequest request, PeerLink parent, Func<string, int, TimeSpan, CancellationToken, Task<PeerLink>> connect,
        CancellationToken ct)
    {
        var position = request.Position;
        var children = new List<(PeerLink Link, int Position)>();
        try
        {
            await Task.WhenAll(request.ChildrenOf(position).Select(c => ForwardAsync(c)));

            // Each child answers for its subtree; how long that may take grows with the levels below it.
            var present = new List<int> { position };
            var answers = await Task.WhenAll(children.ToArray().Select(async child =>
            {
                try
                {
                    var wait = request.JoinTimeout * (request.HeightOf(child.Position) + 1);
                    return Positions(await child.Link.ReadAsync(PeerFrame.Joined, ct).WaitAsync(wait, ct));
                }
                catch (Exception e) when (e is TimeoutException or IOException or EndOfStreamException or InvalidDataException)
                {
                    return null;
                }
            }));
            for (var i = answers.Length - 1; i >= 0; i--)
            {
                if (answers[i] is { } joined) { present.AddRange(joined); continue; }
                // A child that never answered is left out with its subtree: they time out waiting for the start and
                // fetch directly, which costs the tier, never the others.
                await children[i].Link.DisposeAsync();
                children.RemoveAt(i);
            }

            int[] all;
            if (position == 0)
            {
                all = [.. present.Order()];
                await parent.WriteAsync(PeerFrame.Launched, PositionsBytes(all), ct);
            }
            else
            {
                await parent.WriteAsync(PeerFrame.Joined, PositionsBytes(present), ct);
                all = Positions(await parent.ReadAsync(PeerFrame.Start, ct).WaitAsync(request.StallTimeout, ct));
            }
            var start = PositionsBytes(all);
            await Task.WhenAll(children.Select(c => c.Link.WriteAsync(PeerFrame.Start, start, ct)));
            var rank = Array.BinarySearch(all, position);
            if (rank < 0) throw new InvalidDataException($"position {position} is not among the {all.Length} that take part");
            return new TreeRankGroup(rank, all, position == 0 ? null : parent, children.Select(c => c.Link).ToList());
        }
        catch
        {
            foreach (var (link, _) in children) await link.DisposeAsync();
            throw;
        }

        async Task ForwardAsync(int child)
        {
            var (host, port) = Endpoint(request.Members[child]);
            PeerLink link;
            try
            {
                link = await connect(host, port, request.JoinTimeout, ct);
                await link.WriteAsync(PeerFrame.Prep, request.At(child).Encode(), ct);
            }
            catch (Exception e) when (e is TimeoutException or IOException or System.Net.Sockets.SocketException or UnauthorizedAccessException)
            {
                // Passed over: its children become this node's.
                await Task.WhenAll(request.ChildrenOf(child).Select(ForwardAsync));
                return;
            }
            lock (children) children.Add((link, child));
        }
    }

    public static (string Host, int Port) Endpoint(string member)
    {
        var colon = member.LastIndexOf(':');
        if (colon <= 0 || !int.TryParse(member.AsSpan(colon + 1), out var port) || port is < 1 or > 65535)
            throw new FormatException($"'{member}' is not host:port");
        return (member[..colon].Trim('[', ']'), port);
    }

    internal static byte[] PositionsBytes(IReadOnlyCollection<int> positions)
    {
        var bytes = new byte[4 * positions.Count];
        var i = 0;
        foreach (var p in positions) BinaryPrimitives.WriteInt32LittleEndian(bytes.AsSpan(4 * i++), p);
        return bytes;
    }

    internal static int[] Positions(byte[] bytes)
    {
        if (bytes.Length % 4 != 0) throw new InvalidDataException("a malformed list of positions");
        var positions = new int[bytes.Length / 4];
        for (var i = 0; i < positions.Length; i++) positions[i] = BinaryPrimitives.ReadInt32LittleEndian(bytes.AsSpan(4 * i));
        return positions;
    }
}

/// <summary>
/// The ranks of an exchange among running agents (<see cref="AgentTree"/>): rank 0's broadcast goes down the tree,
/// an all-gather goes up to the root and its whole result down. Collectives are called in the same order on every
/// rank, so each connection carries one at a time. The blocks travel on a <see cref="TcpRing"/>; the tree has no ring.
/// </summary>
public sealed class TreeRankGroup : IRankGroup, IAsyncDisposable
{
    private readonly PeerLink? _parent;
    private readonly IReadOnlyList<PeerLink> _children;
    private readonly int[] _positions;

    internal TreeRankGroup(int rank, int[] positions, PeerLink? parent, IReadOnlyList<PeerLink> children) =>
        (Rank, _positions, _parent, _children) = (rank, positions, parent, children);

    public int Rank { get; }
    public int Size => _positions.Length;
    /// <summary>The request's positions that take part, in rank order.</summary>
    public IReadOnlyList<int> Positions => _positions;

    public IRingLink Ring => throw new NotSupportedException("an exchange among agents carries its blocks on a TcpRing");

    public async Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct)
    {
        var bytes = _parent is null ? fromRoot ?? throw new ArgumentNullException(nameof(fromRoot)) : await _parent.ReadAsync(PeerFrame.Collective, ct);
        await Task.WhenAll(_children.Select(c => c.WriteAsync(PeerFrame.Collective, bytes, ct)));
        return bytes;
    }

    public async Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct)
    {
        // Up: each node sends (rank, bytes) for its whole subtree.
        var below = await Task.WhenAll(_children.Select(c => c.ReadAsync(PeerFrame.Collective, ct)));
        var entry = 4 + mine.Length;
        var subtree = new byte[entry + below.Sum(b => b.Length)];
        BinaryPrimitives.WriteInt32LittleEndian(subtree, Rank);
        mine.CopyTo(subtree, 4);
        var at = entry;
        foreach (var b in below) { b.CopyTo(subtree, at); at += b.Length; }
        byte[] all;
        if (_parent is not null)
        {
            await _parent.WriteAsync(PeerFrame.Collective, subtree, ct);
            all = await _parent.ReadAsync(PeerFrame.Collective, ct);
        }
        else
        {
            if (subtree.Length != entry * Size) throw new InvalidDataException($"an all-gather of {subtree.Length} bytes, expected {entry * Size}");
            all = new byte[mine.Length * Size];
            for (var i = 0; i < Size; i++)
            {
                var rank = BinaryPrimitives.ReadInt32LittleEndian(subtree.AsSpan(i * entry));
                if ((uint)rank >= (uint)Size) throw new InvalidDataException($"an all-gather entry for rank {rank} of {Size}");
                subtree.AsSpan(i * entry + 4, mine.Length).CopyTo(all.AsSpan(rank * mine.Length));
            }
        }
        await Task.WhenAll(_children.Select(c => c.WriteAsync(PeerFrame.Collective, all, ct)));
        if (all.Length != mine.Length * Size) throw new InvalidDataException($"an all-gather of {all.Length} bytes, expected {mine.Length * Size}");
        return Enumerable.Range(0, Size).Select(r => all.AsSpan(r * mine.Length, mine.Length).ToArray()).ToArray();
    }

    /// <summary>Closes the tree's connections: a node below learns at once that this one is gone.</summary>
    public async ValueTask DisposeAsync()
    {
        foreach (var c in _children) await c.DisposeAsync();
    }
}
