using System.Buffers.Binary;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// The running agents as the ranks of an exchange, joined through a tree of their own connections: the request goes
/// down (each node forwards it to its <see cref="PrepRequest.Degree"/> children), the positions that took it come back
/// up, and the root sends down who takes part — each node's rank is its place among them. A child that cannot be
/// reached is passed over: its parent forwards the request to that child's children itself; so are the children of one
/// that took the request and then went silent (no answer, nor a sign it is still gathering, for JoinTimeout), which
/// answer to the adopting ancestor instead. The same connections then
/// carry the exchange's collectives (<see cref="TreeRankGroup"/>); its blocks travel on rings of their own.
/// Joining 10,000 nodes takes three passes over a tree of depth ⌈log₈ N⌉ ≈ 5: round trips, not a job launch.
/// </summary>
public static class AgentTree
{
    /// <summary>
    /// This node's part of the join: forwards <paramref name="request"/>, answers its parent (<paramref name="parent"/>;
    /// for the root, the requester, which is told how many joined), and returns once the root's start came.
    /// </summary>
    /// <param name="adoptions">The same request from an ancestor that found this node's parent silent and adopts its
    /// children (the agent hands over every further connection carrying this request's id): this node answers that
    /// ancestor for its subtree and takes its start from it instead.</param>
    /// <param name="withdrawn">Cancelled when the requester calls the request off before it started (its root went silent):
    /// the join ends with <see cref="RequestWithdrawnException"/>, and the word goes down to this node's children.</param>
    public static async Task<TreeRankGroup> JoinAsync(PrepRequest request, PeerLink parent, Func<string, int, TimeSpan, CancellationToken, Task<PeerLink>> connect,
        CancellationToken cancellation, ChannelReader<(PrepRequest Request, PeerLink Link)>? adoptions = null, CancellationToken withdrawn = default)
    {
        using var join = new TreeJoin(request, parent, connect, cancellation, adoptions, withdrawn);
        return await join.RunAsync();
    }

    /// <summary>Sends <see cref="PeerFrame.Alive"/> every <paramref name="interval"/> until cancelled; never in the middle of a frame.</summary>
    internal static async Task KeepAliveAsync(PeerLink parent, TimeSpan interval, CancellationToken stop)
    {
        try
        {
            while (true)
            {
                await Task.Delay(interval, stop);
                await parent.WriteAsync(PeerFrame.Alive, ReadOnlyMemory<byte>.Empty, CancellationToken.None);
            }
        }
        catch (OperationCanceledException) { }
        catch (Exception e) when (e is IOException or ObjectDisposedException) { } // the parent is gone: its own wait tells
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

/// <summary>The requester said this node is not in the exchange (<see cref="PrepRequest.Alone"/>): it prepares on its own.</summary>
public sealed class LeftOutException(int position, Exception? inner = null)
    : IOException($"position {position} was left out of the exchange (the others started without it); it prepares on its own", inner);

/// <summary>The requester called the request off before it started (<see cref="PeerFrame.Withdraw"/>): the node does
/// nothing for it; the request comes again under an id of its own.</summary>
public sealed class RequestWithdrawnException(string id, Exception? inner = null)
    : OperationCanceledException($"node prep {id} was called off by its requester before it started", inner);

/// <summary>
/// The ranks of an exchange among running agents (<see cref="AgentTree"/>): rank 0's broadcast goes down the tree in
/// pieces, an all-gather goes up to the root and its whole result down, a union is reduced on the way up. Collectives are called in the same order on every
/// rank, so each connection carries one at a time. The blocks travel on a <see cref="TcpRing"/>; the tree has no ring.
/// </summary>
public sealed class TreeRankGroup : IRankGroup, IAsyncDisposable
{
    private readonly PeerLink? _parent;
    private readonly IReadOnlyList<PeerLink> _children;
    private readonly int[] _positions;

    private readonly TimeSpan _stall;

    /// <param name="stall">How long one frame of a collective may take to come, or to be taken: a member that joined and
    /// then went silent fails the collective on its neighbours within this, and every node fetches on its own.</param>
    internal TreeRankGroup(int rank, int[] positions, PeerLink? parent, IReadOnlyList<PeerLink> children, TimeSpan? stall = null) =>
        (Rank, _positions, _parent, _children, _stall) = (rank, positions, parent, children, stall ?? Timeout.InfiniteTimeSpan);

    private async Task<byte[]> ReadAsync(PeerLink from, CancellationToken ct)
    {
        try { return await from.ReadAsync(PeerFrame.Collective, ct).WaitAsync(_stall, ct); }
        catch (TimeoutException) { throw new TimeoutException($"{from.Remote} sent nothing of a collective for {_stall.TotalSeconds:0.#} s (the stall timeout): it stalled or died"); }
    }

    private async Task WriteAsync(PeerLink to, ReadOnlyMemory<byte> frame, CancellationToken ct)
    {
        try { await to.WriteAsync(PeerFrame.Collective, frame, ct).WaitAsync(_stall, ct); }
        catch (TimeoutException) { throw new TimeoutException($"{to.Remote} took nothing of a collective for {_stall.TotalSeconds:0.#} s (the stall timeout): it stalled or died"); }
    }

    public int Rank { get; }
    public int Size => _positions.Length;
    /// <summary>The request's positions that take part, in rank order.</summary>
    public IReadOnlyList<int> Positions => _positions;

    public IRingLink Ring => throw new NotSupportedException("an exchange among agents carries its blocks on a TcpRing");

    /// <summary>
    /// Bytes of a broadcast per frame. A node forwards each piece to its children as it arrives, so a manifest (about
    /// 38 bytes a segment: 39 KB for 64 MB, 0.6 MB for 1 GB) crosses a level in the time of one piece rather than of the
    /// whole: at N = 16 on 25 Mbit/s links the second level no longer waits 0.1 s for the first.
    /// </summary>
    internal const int BroadcastPiece = 16 << 10;

    /// <summary>Rank 0's bytes down the tree in pieces: the first frame says the whole length.</summary>
    public async Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct)
    {
        if (_parent is null)
        {
            var bytes = fromRoot ?? throw new ArgumentNullException(nameof(fromRoot));
            var first = new byte[4 + Math.Min(bytes.Length, BroadcastPiece)];
            BinaryPrimitives.WriteInt32LittleEndian(first, bytes.Length);
            bytes.AsSpan(0, first.Length - 4).CopyTo(first.AsSpan(4));
            await ForwardAsync(first, ct);
            for (var at = first.Length - 4; at < bytes.Length; at += BroadcastPiece)
                await ForwardAsync(bytes.AsMemory(at, Math.Min(BroadcastPiece, bytes.Length - at)), ct);
            return bytes;
        }
        var head = await ReadAsync(_parent, ct);
        var length = head.Length >= 4 ? BinaryPrimitives.ReadInt32LittleEndian(head) : -1;
        if (length < 0 || length > PeerLink.MaxFrame || head.Length - 4 > length)
            throw new InvalidDataException($"a malformed broadcast from {_parent.Remote} ({head.Length} bytes saying {length})");
        var received = new byte[length];
        head.AsSpan(4).CopyTo(received);
        await ForwardAsync(head, ct);
        for (var at = head.Length - 4; at < length;)
        {
            var piece = await ReadAsync(_parent, ct);
            if (piece.Length == 0 || piece.Length > length - at)
                throw new InvalidDataException($"a broadcast piece of {piece.Length} bytes from {_parent.Remote} with {length - at} left");
            piece.CopyTo(received, at);
            at += piece.Length;
            await ForwardAsync(piece, ct);
        }
        return received;
    }

    private Task ForwardAsync(ReadOnlyMemory<byte> frame, CancellationToken ct) =>
        Task.WhenAll(_children.Select(c => WriteAsync(c, frame, ct)));

    /// <summary>Reduced on the way up: each link carries one set, not a subtree's worth (at 10,000 nodes and 16,384
    /// segments the all-gather's result is 20 MB, which the root would send to each child).</summary>
    public async Task<byte[]> AllOrAsync(byte[] mine, CancellationToken ct)
    {
        var union = (byte[])mine.Clone();
        foreach (var below in await Task.WhenAll(_children.Select(c => ReadAsync(c, ct)))) Bits.Or(union, below);
        if (_parent is not null) await WriteAsync(_parent, union, ct);
        var all = await BroadcastAsync(_parent is null ? union : null, ct);
        if (all.Length != mine.Length) throw new InvalidDataException($"a union of {all.Length} bytes, expected {mine.Length}");
        return all;
    }

    public async Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct)
    {
        // Up: each node sends (rank, bytes) for its whole subtree.
        var below = await Task.WhenAll(_children.Select(c => ReadAsync(c, ct)));
        var entry = 4 + mine.Length;
        var subtree = new byte[entry + below.Sum(b => b.Length)];
        BinaryPrimitives.WriteInt32LittleEndian(subtree, Rank);
        mine.CopyTo(subtree, 4);
        var at = entry;
        foreach (var b in below) { b.CopyTo(subtree, at); at += b.Length; }
        byte[] all;
        if (_parent is not null)
        {
            await WriteAsync(_parent, subtree, ct);
            all = await ReadAsync(_parent, ct);
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
        await Task.WhenAll(_children.Select(c => WriteAsync(c, all, ct)));
        if (all.Length != mine.Length * Size) throw new InvalidDataException($"an all-gather of {all.Length} bytes, expected {mine.Length * Size}");
        return Enumerable.Range(0, Size).Select(r => all.AsSpan(r * mine.Length, mine.Length).ToArray()).ToArray();
    }

    /// <summary>Closes the tree's connections: a node below learns at once that this one is gone.</summary>
    public async ValueTask DisposeAsync()
    {
        foreach (var c in _children) await c.DisposeAsync();
    }
}
