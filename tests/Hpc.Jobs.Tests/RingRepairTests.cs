using System.Collections.Concurrent;
using System.Net;
using Hpc.CommonData.Format;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;
using static Hpc.Jobs.Tests.RingData;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The TCP ring routes around a member that dies or hangs mid-exchange: the member before it connects to the one after
/// it, learns what that one already has and sends it the rest — from the cache tier only what no one else had — and
/// every other member ends with every block, once.
/// </summary>
public sealed class RingRepairTests
{
    private const int Ranks = 6;

    private static Manifest ManifestOf(int segments) => RingData.ManifestOf(segments, seed: 5, minStored: 16000);

    [Fact]
    public async Task A_member_killed_mid_exchange_is_routed_around_and_the_tier_sends_little_more_than_the_data_once()
    {
        var run = await RunWithVictimAsync(victim: 2, (ring, cancel) =>
        {
            // A process that dies: its work stops and the kernel closes its connections.
            cancel.Cancel();
            return ((Freezable)ring).DisposeAsync().AsTask();
        });

        run.AssertSurvivorsHaveEverything(victim: 2);
        // The member before the dead one routed around it; no one else had to.
        Assert.Equal(1, run.Results[1]!.Bypassed);
        Assert.Equal([0, 0, 0, 0], run.Results.Select(r => r?.Bypassed ?? -1).Where((_, r) => r is not (1 or 2)));
        // It names the member it went on without, and knows it died (its link failed): node prep leaves without
        // waiting for a closing barrier that member can never reach.
        Assert.Equal([2], run.Results[1]!.RoutedAround);
        Assert.True(run.Results[1]!.NeighbourDied);
        // Every other survivor hears of it against the flow, though none of them routed around it: none waits for that
        // barrier longer than the finalize limit either.
        run.AssertEverySurvivorHeardAMemberWasLost(victim: 2);
        // The tier sent the data once, plus at most the dead member's share and what was lost in its sockets' buffers
        // beyond what its left neighbour kept and resent from memory.
        Assert.InRange(run.Fetched, run.Stored, run.AtMost);
        Assert.True(run.Results[1]!.RepairBytesFetched + run.Results[1]!.RepairBytesResent > 0);
    }

    [Fact]
    public async Task A_member_that_hangs_with_its_connections_open_is_routed_around_once_it_has_taken_nothing_for_two_seconds()
    {
        var run = await RunWithVictimAsync(victim: 3, (ring, _) =>
        {
            // A stopped process (SIGSTOP, a hung node): its sockets stay open and nothing is read or sent on them.
            ((Freezable)ring).Freeze();
            return Task.CompletedTask;
        });

        run.AssertSurvivorsHaveEverything(victim: 3);
        Assert.Equal(1, run.Results[2]!.Bypassed);
        // A hung member is not reported dead: its links never failed, and it might have been only slow.
        Assert.Equal([3], run.Results[2]!.RoutedAround);
        Assert.False(run.Results[2]!.NeighbourDied);
        // Cut off, it fails its exchange and never reaches the barrier either: every survivor hears it was lost.
        run.AssertEverySurvivorHeardAMemberWasLost(victim: 3);
        // What the hung member's sockets held unread (megabytes here) came from its left neighbour's memory, as much as
        // it kept; the tier sent the data once, the hung member's share again, and at most the rest of those buffers.
        Assert.True(run.Results[2]!.RepairBytesResent > 0, "nothing was resent from memory");
        Assert.InRange(run.Fetched, run.Stored, run.AtMost);
    }

    private sealed record Run(Manifest Manifest, RingResult?[] Results, ConcurrentDictionary<int, byte[]>[] Delivered, long Fetched, long Stored)
    {
        /// <summary>The data once, the dead member's share again, and what the link into it can hold unread beyond what
        /// the sender keeps (<see cref="RingAllGather.KeptSentBytes"/>): the sender's send buffer and its receive buffer,
        /// as large as this machine's kernel lets them grow (tcp_wmem and tcp_rmem's maxima; 4 and 32 MiB here, so up to
        /// 20 MiB beyond the 16 kept, which a loaded run did fill).</summary>
        public long AtMost => Stored + Stored / Ranks + Math.Max(0, RingAllGather.SocketBufferBytes - RingAllGather.KeptSentBytes);

        public void AssertEverySurvivorHeardAMemberWasLost(int victim)
        {
            for (var r = 0; r < Ranks; r++)
                if (r != victim) Assert.True(Results[r]!.MemberLost, $"rank {r} did not hear that rank {victim} was routed around");
        }

        public void AssertSurvivorsHaveEverything(int victim)
        {
            for (var r = 0; r < Ranks; r++)
            {
                if (r == victim) continue;
                Assert.NotNull(Results[r]);
                Assert.Equal(Enumerable.Range(0, Manifest.Segments.Count), Delivered[r].Keys.Order());
                Assert.All(Delivered[r], kv => Assert.Equal(StoredBytes(Manifest, kv.Key), kv.Value));
            }
        }
    }

    [Fact]
    public async Task A_member_that_hangs_as_the_last_block_reaches_it_is_routed_around_when_its_heartbeat_stops()
    {
        // It stops once it has taken its left neighbour's last block, before forwarding it or saying it has everything:
        // that neighbour has no send left waiting, and only the silence of the reports channel, where a live member
        // beats, tells that it hangs.
        var manifest = ManifestOf(1200);
        var plan = new FanoutPlan(manifest, Ranks, maxBlockBytes: 256 << 10);
        var fromLeft = plan.Shares.Sum(s => s.Count) - plan.Shares[3].Count;
        var run = await RunWithVictimAsync(victim: 3, (_, _) => Task.CompletedTask, strikeAt: 1, arm: link => link.FreezeAfterReceives = fromLeft);

        run.AssertSurvivorsHaveEverything(victim: 3);
        Assert.Equal(1, run.Results[2]!.Bypassed);
        Assert.Equal([0, 0, 0, 0], run.Results.Select(r => r?.Bypassed ?? -1).Where((_, r) => r is not (2 or 3)));
        Assert.InRange(run.Fetched, run.Stored, run.AtMost);
    }

    /// <summary>
    /// A member that hangs owes the leaves its own share, which no one else sends them. A leaf gives up on it once it
    /// has sent nothing for the peer silence (not the stall timeout, minutes): its exchange fails and its node fetches
    /// what it lacks, as a node whose exchange failed; the members route around the hung one and finish as before.
    /// </summary>
    [Fact]
    public async Task A_leaf_gives_up_on_a_member_that_hangs_after_the_peer_silence_and_the_members_finish_without_both()
    {
        const int leaf = 4, victim = 2;
        var route = RingRoute.FromProbes(Enumerable.Range(0, Ranks).Select(r => new ProbeResult(r is leaf or leaf + 1 ? 0.5e6 : 3e6, 0.3)).ToArray());
        Assert.Equal([leaf], route.Leaves);
        var manifest = ManifestOf(1200);
        var plan = new FanoutPlan(manifest, route.Members.Count, maxBlockBytes: 256 << 10);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));
        var ends = Enumerable.Range(0, Ranks).Select(_ => TcpRing.Listen(IPAddress.Loopback)).ToArray();
        var links = (await Task.WhenAll(Enumerable.Range(0, Ranks).Select(r =>
            ends[r].ConnectAsync(r, ends.Select(e => e.Entry).ToArray(), TimeSpan.FromSeconds(20), timeout.Token, route)))).Select(l => new Freezable(l)).ToArray();
        var delivered = Enumerable.Range(0, Ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        var victimCancel = CancellationTokenSource.CreateLinkedTokenSource(timeout.Token);
        var struck = new TaskCompletionSource<TimeSpan>(TaskCreationOptions.RunContinuationsAsynchronously);
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var results = new RingResult?[Ranks];
        Exception? leafError = null;
        TimeSpan leafGaveUp = default;
        try
        {
            var runs = links.Select(link => Task.Run(async () =>
            {
                try
                {
                    results[link.Rank] = await RingAllGather.RunAsync(plan, link,
                        async (block, message, ct) =>
                        {
                            // The victim's own share comes slowly, so it still owes the leaf most of it when it hangs.
                            await Task.Delay(link.Rank == victim ? 30 : 3, ct);
                            return await FetchAsync(plan, block, message, []);
                        },
                        (message, _) =>
                        {
                            foreach (var (index, stored) in BlockMessage.Records(message, plan))
                                Assert.True(delivered[link.Rank].TryAdd(index, stored.ToArray()), $"rank {link.Rank} got segment {index} twice");
                            if (link.Rank == victim && delivered[victim].Count >= 150 && struck.TrySetResult(clock.Elapsed)) link.Freeze();
                            return ValueTask.CompletedTask;
                        }, link.Rank == victim ? victimCancel.Token : timeout.Token, stallTimeout: TimeSpan.FromSeconds(60), route, awaitLeaves: false,
                        peerSilence: TimeSpan.FromSeconds(2));
                }
                catch (Exception e) when (link.Rank == leaf)
                {
                    // As node prep does when its exchange fails: the links close, and the members' sends to it end.
                    (leafError, leafGaveUp) = (e, clock.Elapsed);
                    await link.DisposeAsync();
                }
                catch (Exception) when (link.Rank == victim) { }
            })).ToArray();
            await Task.WhenAll(runs.Where((_, r) => r is not (victim or leaf))).WaitAsync(timeout.Token);
            await runs[leaf].WaitAsync(timeout.Token);
            victimCancel.Cancel();
            await runs[victim];
        }
        finally
        {
            victimCancel.Cancel();
            foreach (var link in links) await link.DisposeAsync();
            foreach (var end in ends) end.Dispose();
            victimCancel.Dispose();
        }

        Assert.True(struck.Task.IsCompleted, "the victim was not struck: the exchange ended first");
        for (var r = 0; r < Ranks; r++)
        {
            if (r is victim or leaf) continue;
            Assert.Equal(Enumerable.Range(0, manifest.Segments.Count), delivered[r].Keys.Order());
        }
        Assert.Equal(1, results[1]!.Bypassed);
        var error = Assert.IsType<TimeoutException>(leafError);
        // The hung member, or the member before it: that one's sends stall behind the hung link for the same peer silence
        // until it routes around, its own blocks to the leaf with them, so the leaf may find either silent first.
        Assert.Matches($"rank ({victim}|{victim - 1}) sent this leaf \\(rank {leaf}\\) nothing for 2 s", error.Message);
        // Within a few peer silences of the strike, not the 60 s stall timeout (the silence began with the hung
        // member's last bytes to the leaf, which may precede the moment it was struck).
        Assert.InRange(leafGaveUp - await struck.Task, TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(20));
        // What the leaf has is every member's share but the hung one's, less what was still on its way.
        Assert.DoesNotContain(plan.Shares[route.PositionOf(victim)].Last().First, delivered[leaf].Keys);
    }

    /// <summary>
    /// A leaf whose process dies mid-exchange (its connections closed) costs the members nothing: their sends to it fail
    /// and stop, what they kept for it is let go, and their ring goes on to the end.
    /// </summary>
    [Fact]
    public async Task A_leaf_that_dies_mid_exchange_leaves_the_members_ring_running_to_the_end()
    {
        const int leaf = 4;
        var route = RingRoute.FromProbes(Enumerable.Range(0, Ranks).Select(r => new ProbeResult(r is leaf or leaf + 1 ? 0.5e6 : 3e6, 0.3)).ToArray());
        var manifest = ManifestOf(1200);
        var plan = new FanoutPlan(manifest, route.Members.Count, maxBlockBytes: 256 << 10);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));
        var ends = Enumerable.Range(0, Ranks).Select(_ => TcpRing.Listen(IPAddress.Loopback)).ToArray();
        var links = await Task.WhenAll(Enumerable.Range(0, Ranks).Select(r =>
            ends[r].ConnectAsync(r, ends.Select(e => e.Entry).ToArray(), TimeSpan.FromSeconds(20), timeout.Token, route)));
        var delivered = Enumerable.Range(0, Ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        using var leafCancel = CancellationTokenSource.CreateLinkedTokenSource(timeout.Token);
        var struck = false;
        var results = new RingResult?[Ranks];
        try
        {
            await Task.WhenAll(links.Select(link => Task.Run(async () =>
            {
                try
                {
                    results[link.Rank] = await RingAllGather.RunAsync(plan, link,
                        async (block, message, ct) =>
                        {
                            await Task.Delay(3, ct);
                            return await FetchAsync(plan, block, message, []);
                        },
                        async (message, _) =>
                        {
                            foreach (var (index, stored) in BlockMessage.Records(message, plan))
                                Assert.True(delivered[link.Rank].TryAdd(index, stored.ToArray()), $"rank {link.Rank} got segment {index} twice");
                            if (link.Rank == leaf && delivered[leaf].Count >= 100 && !struck)
                            {
                                // A process that dies: its work stops and the kernel closes its connections.
                                struck = true;
                                await leafCancel.CancelAsync();
                                await link.DisposeAsync();
                            }
                        }, link.Rank == leaf ? leafCancel.Token : timeout.Token, stallTimeout: TimeSpan.FromSeconds(60), route, awaitLeaves: false,
                        peerSilence: TimeSpan.FromSeconds(2));
                }
                catch (Exception) when (link.Rank == leaf) { }
            }))).WaitAsync(timeout.Token);
        }
        finally
        {
            foreach (var link in links) await link.DisposeAsync();
            foreach (var end in ends) end.Dispose();
        }

        Assert.True(struck, "the leaf was not struck: the exchange ended first");
        Assert.True(delivered[leaf].Count < manifest.Segments.Count, "the leaf had everything before it died");
        foreach (var member in route.Members)
        {
            Assert.Equal(Enumerable.Range(0, manifest.Segments.Count), delivered[member].Keys.Order());
            await results[member]!.LeavesServed!.WaitAsync(timeout.Token);
        }
    }

    /// <summary>
    /// Six ranks over TCP on loopback; once the victim's node holds some blocks, <paramref name="strike"/> kills or
    /// freezes it. The tier is a function that counts what it sends and takes a moment per block, so the exchange is
    /// still under way when the victim is struck.
    /// </summary>
    private static async Task<Run> RunWithVictimAsync(int victim, Func<IRingRepair, CancellationTokenSource, Task> strike, int strikeAt = 150,
        Action<Freezable>? arm = null)
    {
        var manifest = ManifestOf(1200);
        var plan = new FanoutPlan(manifest, Ranks, maxBlockBytes: 256 << 10);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(120));
        var connected = await Task.WhenAll(InProcessRanks.Create(Ranks).Select(g =>
            Task.Run(() => TcpRing.ConnectAsync(g, IPAddress.Loopback, TimeSpan.FromSeconds(20), timeout.Token))));
        var links = connected.Select(l => new Freezable(l)).ToArray();
        arm?.Invoke(links[victim]);
        var delivered = Enumerable.Range(0, Ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        var victimCancel = CancellationTokenSource.CreateLinkedTokenSource(timeout.Token);
        var struck = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        long fetched = 0;
        var results = new RingResult?[Ranks];
        try
        {
            var runs = links.Select(link => Task.Run(async () =>
            {
                var token = link.Rank == victim ? victimCancel.Token : timeout.Token;
                try
                {
                    results[link.Rank] = await RingAllGather.RunAsync(plan, link,
                        async (block, message, ct) =>
                        {
                            await Task.Delay(3, ct);
                            var at = BlockMessage.HeaderLength;
                            for (var i = block.First; i < block.First + block.Count; i++)
                                at += BlockMessage.WriteRecord(message.Span[at..], i, StoredBytes(manifest, i));
                            BlockMessage.WriteHeader(message.Span, block, at);
                            Interlocked.Add(ref fetched, block.StoredBytes);
                            return at;
                        },
                        async (message, _) =>
                        {
                            foreach (var (index, stored) in BlockMessage.Records(message, plan))
                                Assert.True(delivered[link.Rank].TryAdd(index, stored.ToArray()), $"rank {link.Rank} got segment {index} twice");
                            if (link.Rank == victim && delivered[victim].Count >= strikeAt && struck.TrySetResult())
                                await strike(link, victimCancel);
                        }, token, stallTimeout: TimeSpan.FromSeconds(60), peerSilence: TimeSpan.FromSeconds(2));
                }
                catch (Exception) when (link.Rank == victim) { }
            })).ToArray();
            // The others finish without the victim; a frozen one is then let go.
            await Task.WhenAll(runs.Where((_, r) => r != victim)).WaitAsync(timeout.Token);
            victimCancel.Cancel();
            await runs[victim];
        }
        finally
        {
            victimCancel.Cancel();
            foreach (var link in links) await link.DisposeAsync();
            victimCancel.Dispose();
        }
        Assert.True(struck.Task.IsCompleted, "the victim was not struck: the exchange ended first");
        return new Run(manifest, results, delivered, fetched, manifest.StoredLength);
    }

    /// <summary>A rank's links that can be frozen as a stopped process's are: open, and nothing read or sent on them.</summary>
    private sealed class Freezable(TcpRing inner) : IRingRepair
    {
        private readonly TaskCompletionSource _frozen = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private bool Frozen => _frozen.Task.IsCompleted;

        public void Freeze() => _frozen.TrySetResult();

        /// <summary>Freezes as the n-th message from the left is taken: it is handed over, but nothing after.</summary>
        public int FreezeAfterReceives { get; set; } = int.MaxValue;
        private int _received;

        private async Task<int> Counted(Task<int> receive)
        {
            var length = await receive;
            if (Interlocked.Increment(ref _received) >= FreezeAfterReceives) Freeze();
            return length;
        }

        public int Rank => inner.Rank;
        public int Size => inner.Size;
        public int SendWindow => inner.SendWindow;
        public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) => Frozen ? Never<bool>(ct) : inner.SendAsync(message, ct);
        public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => Frozen ? Never<int>(ct) : Counted(inner.ReceiveAsync(buffer, ct));
        public Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct) =>
            inner.ConnectPeersAsync(sendTo, receiveFrom, timeout, ct);
        public Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct) => Frozen ? Never<bool>(ct) : inner.SendToAsync(rank, message, ct);
        public Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct) => Frozen ? Never<int>(ct) : Counted(inner.ReceiveFromAsync(rank, buffer, ct));
        public void AcceptBypasses(BypassHandler handler) => inner.AcceptBypasses((rank, skipped, ct) => Frozen ? Never<byte[]?>(ct) : handler(rank, skipped, ct));
        public Task<byte[]?> BypassAsync(int rank, IReadOnlyList<int> skipped, TimeSpan timeout, CancellationToken ct) =>
            Frozen ? Never<byte[]?>(ct) : inner.BypassAsync(rank, skipped, timeout, ct);
        public void Drop(int rank) => inner.Drop(rank);
        public TimeSpan SilenceTo(int rank) => Frozen ? TimeSpan.Zero : inner.SilenceTo(rank);
        public TimeSpan SilenceFrom(int rank) => inner.SilenceFrom(rank);
        public Task ReportAsync(int rank, byte code) => Frozen ? Task.CompletedTask : inner.ReportAsync(rank, code);
        public Task<int> ReadReportAsync(int rank, CancellationToken ct) => Frozen ? Never<int>(ct) : inner.ReadReportAsync(rank, ct);
        public ValueTask DisposeAsync() => inner.DisposeAsync();

        private async Task<T> Never<T>(CancellationToken ct)
        {
            await Task.Delay(Timeout.Infinite, ct);
            throw new OperationCanceledException(ct);
        }
    }
}
