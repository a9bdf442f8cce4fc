using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Threading.Channels;

namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>
    /// One rank's exchange, from its start to its result: the state that fetching, receiving, sending, delivering and
    /// watching share while they run concurrently.
    /// </summary>
    private sealed class RingRun
    {
        public readonly Stopwatch Clock = Stopwatch.StartNew();
        public readonly FanoutPlan Plan;
        public readonly IRingLink Link;
        public readonly Func<Block, Memory<byte>, CancellationToken, Task<int>> Fetch;
        public readonly Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> Deliver;
        public readonly RingRoute Route;
        public readonly bool AwaitLeaves;
        public readonly Func<Memory<byte>, CancellationToken, Task<int>>? OwnInAnyOrder;
        public readonly long RetainBytes;
        public readonly IPeerLinks? Peers;
        public readonly int Rank, Position, Size, Expected;
        /// <summary>This rank's part where it is a leaf of the route; null for a member of the ring.</summary>
        public readonly RingLeaf? Leaf;
        /// <summary>This rank's place in the ring where it is a member; null for a leaf, which has no neighbours.</summary>
        public readonly RingSeat? Seat;
        public readonly IReadOnlyList<int> Leaves;
        public readonly CancellationTokenSource Failed;
        public readonly CancellationToken Token;
        public readonly Outbox Outgoing = new();
        public readonly Channel<Message> ToNode = Channel.CreateUnbounded<Message>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = false });
        public readonly Channel<LeafItem>[] ToLeaves;
        public readonly SemaphoreSlim FetchSlots = new(FetchAhead);
        public long FetchedBytes, ReceivedBytes, SentBytes, LeafBytes;
        public int Fetched, Received, Sent, Refetched, Retained;
        public long RetainedBytes;
        public long Progress;
        public double ShareSeconds;
        public readonly TimeSpan Silence, Limit;
        public readonly IRingRepair? RepairLinks;
        public readonly Repair? Ring;
        public int Bypassed;
        public readonly ConcurrentQueue<int> RoutedAround = new();
        public long RoutedAroundAt;
        public bool NeighbourDied;
        public long RepairBytes, RepairBytesKept;
        /// <summary>What was sent to the right neighbour lately, for a repair; null where the ring cannot be repaired.</summary>
        public readonly SentWindow? Kept;
        public readonly ConcurrentBag<Task> Repairs = [];
        /// <summary>Where the ring can be repaired: the one route around a dead or hung right neighbour, shared by the sender and the watch.</summary>
        public readonly RingBypass? Bypass;

        public RingRun(FanoutPlan plan, IRingLink link, Func<Block, Memory<byte>, CancellationToken, Task<int>> fetch,
            Func<ReadOnlyMemory<byte>, CancellationToken, ValueTask> deliver, CancellationToken ct, TimeSpan? stallTimeout, RingRoute? route,
            bool awaitLeaves, TimeSpan? peerSilence, Func<Memory<byte>, CancellationToken, Task<int>>? ownInAnyOrder, long leafRetainBytes,
            MemberLostWord? memberLost)
        {
            (Plan, Link, Fetch, Deliver, AwaitLeaves, OwnInAnyOrder, RetainBytes) = (plan, link, fetch, deliver, awaitLeaves, ownInAnyOrder, leafRetainBytes);
            route ??= RingRoute.Ring(link.Size);
            Route = route;
            if (route.Members.Count != plan.Ranks) throw new ArgumentException($"the plan has {plan.Ranks} shares for {route.Members.Count} ring members", nameof(route));
            var peers = link as IPeerLinks;
            Peers = peers;
            if (route.HasLeaves && peers is null) throw new ArgumentException("routing around slow members needs links to every rank", nameof(link));
            var rank = Rank = link.Rank;
            var leaf = route.IsLeaf(rank);
            var position = Position = route.PositionOf(rank);
            Leaves = leaf ? [] : route.Leaves;
            Size = plan.MaxMessageBytes;
            Failed = CancellationTokenSource.CreateLinkedTokenSource(ct);
            Token = Failed.Token;
            ToLeaves = Leaves.Select(_ => Channel.CreateUnbounded<LeafItem>(new UnboundedChannelOptions { SingleReader = true, SingleWriter = true })).ToArray();
            Expected = leaf ? RingLeaf.Expected(plan) : plan.BlocksReceivedBy(position);
            Silence = peerSilence ?? PeerSilence;
            if (leaf) Leaf = new RingLeaf(this);
            Limit = stallTimeout ?? TimeSpan.FromMinutes(2);
            var repair = RepairLinks = !leaf && plan.Ranks > 1 && link.SendWindow == 1 ? link as IRingRepair : null;
            var ring = Ring = repair is null ? null : new Repair(plan, route, position, Expected, peerSilence ?? PeerSilence);
            if (!leaf) Seat = RingSeat.Of(plan, route, link, position, repair, ring);
            if (ring is not null) Bypass = new RingBypass(this);
            if (ring is not null) Kept = new SentWindow(KeptSentBytes);
            Word = memberLost;
            if (ring is not null) memberLost?.Listen(() => _ = HearMemberLost());
        }

        /// <summary>Shared with this rank's other ring, if any.</summary>
        public readonly MemberLostWord? Word;

        /// <summary>
        /// A member of the exchange was routed around: this ring's members still in the exchange hear it against the
        /// flow, once each (the word stops where it is already known, at the latest with the member that sent it).
        /// </summary>
        public Task HearMemberLost()
        {
            if (Ring is null || !Ring.LearnMemberLost()) return Task.CompletedTask;
            Word?.Hear();
            return RepairLinks!.ReportAsync(Ring.LeftRank, Repair.ReportMemberLost);
        }

        private async Task DeliverAll(Task producers)
        {
            _ = producers.ContinueWith(_ => ToNode.Writer.TryComplete(), TaskScheduler.Default);
            await foreach (var m in ToNode.Reader.ReadAllAsync(Token))
            {
                await Deliver(m.Buffer[..m.Length], Token);
                Interlocked.Increment(ref Progress);
                m.Release();
            }
        }

        public async Task<RingResult> RunAsync()
        {
            var fetching = Guard(new OwnShareFetcher(this).FetchOwn());
            var receiving = Guard(new RingReceiver(this).ReceiveAll());
            var producers = Task.WhenAll(fetching, receiving);
            // A bypass may come after this rank's own blocks and forwarding are done (its right neighbour hangs once it
            // holds everything): the sender stays until this member leaves, so what the bypass resends goes out.
            var watchEnded = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            var sending = Guard(new RingSender(this).SendAll(Ring is null ? producers : Task.WhenAll(producers, watchEnded.Task)));
            var delivering = Guard(DeliverAll(producers));
            var leafSending = Guard(Task.WhenAll(Leaves.Select((l, i) => new LeafSender(this).SendToLeaf(l, ToLeaves[i].Reader))));
            var watch = Ring is null ? null : new RightWatch(this);
            var watching = watch is null ? Task.CompletedTask : Guard(watch.WatchRight());
            _ = watching.ContinueWith(_ => watchEnded.TrySetResult(), TaskScheduler.Default);
            var all = AwaitLeaves ? Task.WhenAll(fetching, receiving, sending, delivering, watching, leafSending) : Task.WhenAll(fetching, receiving, sending, delivering, watching);
            // The token source lives until the leaves are served, which may be after this method returns.
            _ = leafSending.ContinueWith(_ => all.ContinueWith(_ => Failed.Dispose(), TaskScheduler.Default), TaskScheduler.Default);
            using var beating = CancellationTokenSource.CreateLinkedTokenSource(Token);
            var heartbeat = watch is null ? Task.CompletedTask : watch.Heartbeat(beating.Token);
            try
            {
                await UntilDone(all);
            }
            finally
            {
                beating.Cancel();
                await heartbeat;
                Kept?.Dispose();
            }
            return new RingResult(Fetched, Received, Sent, FetchedBytes, ReceivedBytes, SentBytes, Clock.Elapsed.TotalSeconds, LeafBytes, Refetched,
                AwaitLeaves ? Task.CompletedTask : leafSending, ShareSeconds, Bypassed, RepairBytes, RepairBytesResent: Interlocked.Read(ref RepairBytesKept),
                RoutedAround: RoutedAround.IsEmpty ? null : [.. RoutedAround], NeighbourDied: Volatile.Read(ref NeighbourDied),
                MemberLost: Ring?.MemberLost ?? false, RoutedAroundAt: Interlocked.Read(ref RoutedAroundAt));
        }

        // The parts only stall, never fail, when a neighbour dies without closing its link: the run fails once nothing
        // has moved for the limit.
        private async Task UntilDone(Task all)
        {
            var tick = Leaf?.Tick(Limit) ?? Limit;
            var moved = Clock.Elapsed;
            for (var seen = -1L; ;)
            {
                if (await Task.WhenAny(all, Task.Delay(tick, Token).ContinueWith(_ => { }, TaskScheduler.Default)) == all) break;
                if (Token.IsCancellationRequested) break;
                Leaf?.ThrowIfMemberSilent();
                var now = Interlocked.Read(ref Progress);
                if (now != seen)
                {
                    (seen, moved) = (now, Clock.Elapsed);
                    continue;
                }
                if (Clock.Elapsed - moved >= Limit)
                {
                    Failed.Cancel();
                    var from = Leaf?.Senders ?? $"rank {Seat!.LeftRank}";
                    throw new TimeoutException($"the fan-out ring stalled on rank {Rank}: nothing moved for {Limit.TotalSeconds:0} s " +
                                               $"(received {Volatile.Read(ref Received)} of {Expected} blocks from {from})");
                }
            }
            await all;
        }

        // The first failure cancels the others, so the exchange ends at once and the caller can fall back.
        public async Task Guard(Task task)
        {
            try { await task; }
            catch
            {
                Failed.Cancel();
                throw;
            }
        }
    }
    /// <summary>
    /// A member's place in the ring: the share its right neighbour begins with, its neighbours' ranks, and the links it
    /// sends and receives on. Where the ring can be repaired, sends go to whoever is right of it now (<see cref="Repair"/>).
    /// </summary>
    private sealed record RingSeat(int Right, int RightRank, int LeftRank,
        Func<ReadOnlyMemory<byte>, CancellationToken, Task> SendRight, Func<Memory<byte>, CancellationToken, Task<int>> ReceiveLeft)
    {
        public static RingSeat Of(FanoutPlan plan, RingRoute route, IRingLink link, int position, IRingRepair? repair, Repair? ring)
        {
            var (rightRank, leftRank) = (route.RightOf(link.Rank), route.LeftOf(link.Rank));
            var peers = link as IPeerLinks;
            // Without leaves the neighbours are the link's own: exactly the ring as it always ran.
            Func<ReadOnlyMemory<byte>, CancellationToken, Task> send = repair is not null ? (m, t) => repair.SendToAsync(ring!.RightRank, m, t)
                : route.HasLeaves ? (m, t) => peers!.SendToAsync(rightRank, m, t) : link.SendAsync;
            Func<Memory<byte>, CancellationToken, Task<int>> receive = route.HasLeaves ? (b, t) => peers!.ReceiveFromAsync(leftRank, b, t) : link.ReceiveAsync;
            return new RingSeat((position + 1) % plan.Ranks, rightRank, leftRank, send, receive);
        }
    }
}
