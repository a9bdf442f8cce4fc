namespace Hpc.CommonData.Fanout;

/// <summary>
/// One rank's link in the ring: messages go to the right neighbour and come from the left one, in order. Sends
/// complete when the buffer may be reused; a receive fills a buffer of <see cref="FanoutPlan.MaxMessageBytes"/>. Up to
/// <see cref="SendWindow"/> sends and <see cref="RingAllGather.ReceiveWindow"/> receives may be outstanding at once;
/// messages are sent and receives matched in the order of the calls.
/// </summary>
public interface IRingLink
{
    int Rank { get; }
    int Size { get; }
    /// <summary>Sends this link may have in flight at once (1 or more); receives are always posted <see cref="RingAllGather.ReceiveWindow"/> deep.</summary>
    int SendWindow { get; }
    Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct);
    Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct);
}

/// <summary>
/// Links to any rank of the group, beside the ring's own: what routing around a slow member needs (its ring
/// neighbours change, and every member sends to the leaves). Messages to one rank keep their order, as on the ring.
/// </summary>
public interface IPeerLinks : IRingLink
{
    /// <summary>
    /// Opens what the route needs beyond the ring's links: a collective, called by every rank with its own lists.
    /// A link to the old right or left neighbour is the ring's link, reused.
    /// </summary>
    Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct);
    Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct);
    Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct);
}

/// <summary>A member asks to become this rank's left neighbour in place of <c>skipped</c>: answer this rank's
/// have-map to take it, or null to refuse (this rank still hears from its left neighbour).</summary>
public delegate Task<byte[]?> BypassHandler(int rank, IReadOnlyList<int> skipped, CancellationToken ct);

/// <summary>
/// Links that can close the ring around a member that died or hung: the member before it connects to the one after it,
/// which answers with the blocks it already has, and the ring goes on without the dead one.
/// </summary>
public interface IRingRepair : IPeerLinks
{
    /// <summary>From now on, bypasses are answered by <paramref name="handler"/>.</summary>
    void AcceptBypasses(BypassHandler handler);
    /// <summary>Connects to <paramref name="rank"/> as its new left neighbour in place of <paramref name="skipped"/>;
    /// its have-map, or null when it refused. On success the link to it replaces those to the skipped ranks.</summary>
    Task<byte[]?> BypassAsync(int rank, IReadOnlyList<int> skipped, TimeSpan timeout, CancellationToken ct);
    /// <summary>Closes the links to and from <paramref name="rank"/>: what is pending on them fails.</summary>
    void Drop(int rank);
    /// <summary>How long the link to <paramref name="rank"/> has taken nothing while a send waited; zero when idle.</summary>
    TimeSpan SilenceTo(int rank);
    /// <summary>How long nothing has come from <paramref name="rank"/>.</summary>
    TimeSpan SilenceFrom(int rank);
    /// <summary>Sends a one-byte report back to the left neighbour <paramref name="rank"/>, against the blocks' flow;
    /// nothing when that link is gone.</summary>
    Task ReportAsync(int rank, byte code);
    /// <summary>The next report from the right neighbour <paramref name="rank"/>; fails when its link does.</summary>
    Task<int> ReadReportAsync(int rank, CancellationToken ct);
}

/// <summary>What the exchange did on one rank.</summary>
/// <param name="LeafBytesSent">Of <paramref name="BytesSent"/>, what went to leaves.</param>
/// <param name="BlocksRefetched">Own blocks fetched a second time for the leaves, because more than
/// <see cref="RingAllGather.LeafRetainBlocks"/> and the bytes allowed were already waiting for them.</param>
/// <param name="LeavesServed">With <c>awaitLeaves: false</c>: completes when this member has sent the leaves its share;
/// otherwise already complete. The counts are as of the return: with leaves still being served, what they are sent
/// after it is not in them.</param>
/// <param name="ShareSeconds">When this rank held the last block of its own share, from the exchange's start: against
/// <paramref name="Seconds"/>, whether the tier or the ring set the pace.</param>
/// <param name="Bypassed">Members this rank routed around (its right neighbour died or hung).</param>
/// <param name="RepairBytesFetched">Of <paramref name="BytesFetched"/>, what it fetched for the member after the dead
/// one: the dead member's blocks no one had, and those lost with it.</param>
/// <param name="HeldBytesAtMost">The grid's: the most bytes of its column's blocks this rank kept at once for its group's ring.</param>
/// <param name="RoutedAround">The ranks of the members this rank routed around, in the order it passed them.</param>
/// <param name="NeighbourDied">Whether a route around began with the neighbour's link failing (its process or node
/// died), rather than with its silence: a launcher has then seen a rank of the job end.</param>
/// <param name="RepairBytesResent">Blocks resent to the member after a lost one from what this member had just sent
/// into the lost one, kept in memory (<see cref="RingAllGather.KeptSentBytes"/>) rather than fetched again.</param>
/// <param name="MemberLost">Whether this rank learned, while it was in the exchange, that a member of its ring was routed
/// around (by it, or by another that said so against the flow): that member never reaches a closing barrier.</param>
/// <param name="RoutedAroundAt">When this rank last routed a member around (<see cref="System.Diagnostics.Stopwatch.GetTimestamp"/>); 0 when it did not.</param>
public sealed record RingResult(int BlocksFetched, int BlocksReceived, int BlocksSent, long BytesFetched, long BytesReceived, long BytesSent, double Seconds = 0,
    long LeafBytesSent = 0, int BlocksRefetched = 0, Task? LeavesServed = null, double ShareSeconds = 0, int Bypassed = 0, long RepairBytesFetched = 0,
    long HeldBytesAtMost = 0, IReadOnlyList<int>? RoutedAround = null, bool NeighbourDied = false, bool MemberLost = false, long RepairBytesResent = 0,
    long RoutedAroundAt = 0);

/// <summary>
/// A pipelined ring all-gather of blocks of stored segments. Rank r fetches its own share from the cache tier and
/// sends each block to r+1 as soon as it is fetched; every block it receives from r−1 it hands to its node and, unless
/// the block belongs to r+1 (whose ring it has then completed), forwards it. Every link carries (N−1)/N of the data,
/// all links at once, so the exchange takes about S/B whatever N is, while the cache tier sends each byte once.
/// <para>
/// Fetching, sending, receiving and writing run concurrently. Forwarded blocks are never held back (a receive that
/// waited for room to forward could close a cycle of waits around the ring); only fetching runs ahead by at most a few
/// blocks.
/// </para>
/// </summary>
public static partial class RingAllGather
{
    /// <summary>Own blocks fetched but not yet sent, at most; the fetch waits beyond that.</summary>
    private const int FetchAhead = 4;

    /// <summary>Own blocks being fetched from the cache tier at once.</summary>
    private const int FetchConcurrency = 1;

    /// <summary>The first wait before a member that refused a bypass is asked again; doubled each time up to half the
    /// peer timeout.</summary>
    private static readonly TimeSpan FirstBypassRetry = TimeSpan.FromMilliseconds(25);

    /// <summary>Receives kept posted on each link.</summary>
    public const int ReceiveWindow = 4;


    /// <summary>
    /// Own blocks kept in memory for the leaves however large they are; beyond this and
    /// <see cref="LeafRetainBytes"/> a block is fetched again when a leaf's turn comes, so a slow leaf holds neither the
    /// ring nor more than that much memory.
    /// </summary>
    public const int LeafRetainBlocks = 16;

    /// <summary>
    /// Bytes of own blocks kept for the leaves at most beyond <see cref="LeafRetainBlocks"/> blocks. A share of one
    /// ring is a few blocks; a share of a grid's group ring (a column's part, S/G) is many, and a leaf at a tenth of the
    /// rate takes it long after the member has it: without room to keep it the tier would send the leaf its copy
    /// again. 64 MB keeps a leaf's whole copy up to S = 64 MB × G (6.4 GB at 10,000 nodes).
    /// </summary>
    public const long LeafRetainBytes = 64L << 20;

    /// <summary>
    /// How long a right neighbour may take nothing while a block waits for it before it counts as dead or hung and is
    /// routed around. Its own right neighbour must agree (it has heard nothing from it for half as long), so a
    /// member that is only slow is not cut out.
    /// </summary>
    public static readonly TimeSpan PeerSilence = TimeSpan.FromSeconds(5);

    /// <summary>Blocks fetched from the tier at once for the member after a dead one.</summary>
    private const int RepairFetches = 4;

    /// <param name="fetch">Fills a message with one of this rank's own blocks (header and records) and returns its length.</param>
    /// <param name="deliver">Hands one block message to this node (the agent); called in order of arrival, one at a time.</param>
    /// <param name="stallTimeout">How long nothing may move (no block fetched, sent, received or delivered) before the
    /// exchange counts as stuck — a neighbour that died leaves its peers waiting, not failing. Default two minutes.</param>
    /// <param name="route">Who is in the ring and who is a leaf (the plan has one share per member); default: every rank
    /// in the ring, over the link's own neighbour calls. A route with leaves needs an <see cref="IPeerLinks"/>.</param>
    /// <param name="awaitLeaves">False: return once this node has everything and the ring is done, and leave the
    /// sends to the leaves running (<see cref="RingResult.LeavesServed"/>): a leaf takes as long as its link does, and
    /// this node need not wait for it to be ready.</param>
    /// <param name="ownInAnyOrder">Fills a message with the next of this rank's own blocks, whichever is ready (each
    /// once); the ring then takes its own share in that order instead of asking <paramref name="fetch"/> for each in
    /// turn, which it still does for blocks it resends (and for a leaf, those it no longer keeps).</param>
    /// <param name="leafRetainBytes">Bytes of own blocks kept for the leaves beyond <see cref="LeafRetainBlocks"/>
    /// blocks; default <see cref="LeafRetainBytes"/>.</param>
    /// <param name="memberLost">Shared with this rank's other ring (the grid's): the word that a member was routed
    /// around, passed between them.</param>
    public static async Task<RingResult> RunAsync(FanoutPlan plan, IRingLink link, Func<Block, Memory<byte>, CancellationToken, Task<int>> fetch,
        Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout = null, RingRoute? route = null,
        bool awaitLeaves = true, TimeSpan? peerSilence = null, Func<Memory<byte>, CancellationToken, Task<int>>? ownInAnyOrder = null,
        long leafRetainBytes = LeafRetainBytes, MemberLostWord? memberLost = null)
    {
        // The run checks its arguments in its constructor: called inside this async method, bad ones fault the task rather than throw.
        return await new RingRun(plan, link, fetch, deliver, ct, stallTimeout, route, awaitLeaves, peerSilence, ownInAnyOrder, leafRetainBytes, memberLost).RunAsync();
    }
}
