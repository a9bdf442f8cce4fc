using System.Collections.Concurrent;
using Hpc.CommonData.Format;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;
using static Hpc.Jobs.Tests.RingData;

namespace Hpc.Jobs.Tests;

/// <summary>The fan-out's exchange, run by N ranks in one process over in-memory links.</summary>
public sealed class RingAllGatherTests
{

    [Theory]
    [InlineData(1, 40)]
    [InlineData(2, 40)]
    [InlineData(3, 7)]
    [InlineData(5, 160)]
    [InlineData(8, 5)]   // more ranks than some shares have segments: empty shares are fine
    public async Task Every_rank_gets_every_segment_once_and_each_is_fetched_from_the_cache_tier_once(int ranks, int segments)
    {
        var manifest = ManifestOf(segments);
        var plan = new FanoutPlan(manifest, ranks, maxBlockBytes: 256 << 10);
        var fetched = new ConcurrentBag<int>();
        var delivered = Enumerable.Range(0, ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        var links = InProcessRing.Create(ranks);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));

        var results = await Task.WhenAll(links.Select(link => Task.Run(() => RingAllGather.RunAsync(plan, link,
            (block, message, _) => FetchAsync(plan, block, message, fetched),
            (message, _) =>
            {
                foreach (var (index, stored) in BlockMessage.Records(message, plan))
                    Assert.True(delivered[link.Rank].TryAdd(index, stored.ToArray()), $"rank {link.Rank} got segment {index} twice");
                return ValueTask.CompletedTask;
            }, timeout.Token))));

        Assert.Equal(Enumerable.Range(0, segments), fetched.Order());
        foreach (var got in delivered)
        {
            Assert.Equal(Enumerable.Range(0, segments), got.Keys.Order());
            Assert.All(got, kv => Assert.Equal(StoredBytes(manifest, kv.Key), kv.Value));
        }
        // Bandwidth: each rank sends every block but its right neighbour's, i.e. (N−1)/N of the data for equal shares.
        for (var r = 0; r < ranks; r++)
            Assert.Equal(ranks == 1 ? 0 : plan.Shares.Where((_, k) => k != (r + 1) % ranks).Sum(s => s.Count), results[r].BlocksSent);
        // Each rank held its own share at some moment of its exchange, not after it.
        Assert.All(results, r => Assert.InRange(r.ShareSeconds, double.Epsilon, r.Seconds));
    }

    [Theory]
    [InlineData(2)] // nothing is forwarded: only the rank's own sends free its fetch slots
    [InlineData(3)]
    public async Task Ranks_with_many_more_own_blocks_than_blocks_in_flight_finish(int ranks)
    {
        var manifest = ManifestOf(300, seed: 5);
        var plan = new FanoutPlan(manifest, ranks, maxBlockBytes: 64 << 10);
        Assert.All(plan.Shares, share => Assert.True(share.Count > 20));
        var fetched = new ConcurrentBag<int>();
        var delivered = new int[ranks];
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));

        await Task.WhenAll(InProcessRing.Create(ranks).Select(link => Task.Run(() => RingAllGather.RunAsync(plan, link,
            (block, message, _) => FetchAsync(plan, block, message, fetched),
            (message, _) =>
            {
                Interlocked.Add(ref delivered[link.Rank], BlockMessage.Records(message, plan).Count());
                return ValueTask.CompletedTask;
            }, timeout.Token, stallTimeout: TimeSpan.FromSeconds(10)))));

        Assert.All(delivered, count => Assert.Equal(300, count));
    }

    [Fact]
    public async Task Mutated_block_messages_from_a_neighbour_are_read_within_the_plan_or_refused_as_invalid_data()
    {
        var manifest = ManifestOf(40, seed: 9);
        var plan = new FanoutPlan(manifest, 3, maxBlockBytes: 64 << 10);
        var seeds = new List<byte[]>();
        foreach (var block in plan.Shares.SelectMany(s => s).Take(4))
        {
            var message = new byte[plan.MaxMessageBytes];
            seeds.Add(message[..await FetchAsync(plan, block, message, [])]);
        }
        int read = 0, refused = 0;
        await Hpc.Fuzzing.Mutator.RunAsync("block message", seeds, input =>
        {
            try
            {
                foreach (var (index, stored) in BlockMessage.Records(input, plan))
                {
                    if (index < 0 || index >= manifest.Segments.Count) throw new InvalidOperationException($"record index {index} outside the manifest");
                    _ = stored.Length;
                }
                read++;
            }
            catch (InvalidDataException) { refused++; }
        });
        Assert.True(read > 0 && refused > 0, $"{read} read, {refused} refused");
    }

    [Fact]
    public void Shares_are_contiguous_cover_every_segment_and_hold_about_equal_stored_bytes()
    {
        var manifest = ManifestOf(1000, seed: 7);
        var plan = new FanoutPlan(manifest, 7);
        var blocks = plan.Shares.SelectMany(s => s).ToList();
        Assert.Equal(Enumerable.Range(0, 1000), blocks.SelectMany(b => Enumerable.Range(b.First, b.Count)));
        Assert.All(blocks, b => Assert.True(b.StoredBytes <= plan.MaxBlockBytes));
        var perShare = plan.Shares.Select(s => s.Sum(b => b.StoredBytes)).ToList();
        Assert.True(perShare.Max() - perShare.Min() <= 2 * 65536, string.Join(", ", perShare));
    }

    [Fact]
    public void A_shares_first_blocks_grow_from_an_eighth_of_the_largest_so_the_ring_starts_on_a_small_fetch()
    {
        // 64 MB of segments of 27 KB stored (the market history's ratio) over 16 ranks: blocks of 215 KB.
        var segments = Enumerable.Range(0, 1024).Select(i => new ManifestSegment(SegmentId.Of(BitConverter.GetBytes(i)).ToString(), 65536, 27_000)).ToList();
        var manifest = new Manifest
        {
            Name = "test/ramp", Hash = new string('0', 32), Segments = segments,
            RawLength = segments.Sum(s => (long)s.RawLength), StoredLength = segments.Sum(s => (long)s.StoredLength),
        };
        var plan = new FanoutPlan(manifest, 16);
        Assert.Equal(27_000L * 1024 / 16 / BlockSizing.BlocksPerShare, plan.MaxBlockBytes);
        Assert.All(plan.Shares, share =>
        {
            Assert.Equal([1, 2, 4], share.Take(BlockSizing.RampBlocks).Select(b => b.Count));
            Assert.All(share.Skip(BlockSizing.RampBlocks).SkipLast(1), b => Assert.Equal(8, b.Count));
        });
        // One segment larger than an eighth still travels as a block of its own.
        var large = new FanoutPlan(RingData.ManifestOf(40, seed: 5, minStored: 60_000), 2, maxBlockBytes: 128 << 10);
        Assert.All(large.Shares, share => Assert.Equal(1, share[0].Count));
    }

    [Fact]
    public async Task A_rank_whose_fetch_fails_stops_at_once_with_that_error()
    {
        var plan = new FanoutPlan(ManifestOf(30), 3, maxBlockBytes: 128 << 10);
        var links = InProcessRing.Create(3);
        using var others = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var failing = RingAllGather.RunAsync(plan, links[1],
            (_, _, _) => throw new IOException("cache host gone"), (_, _) => ValueTask.CompletedTask, CancellationToken.None);
        var e = await Assert.ThrowsAsync<IOException>(() => failing.WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.Equal("cache host gone", e.Message);
        others.Cancel();
    }

    [Fact]
    public void A_message_that_is_not_a_block_of_this_plan_is_refused()
    {
        var plan = new FanoutPlan(ManifestOf(4), 2);
        Assert.Throws<InvalidDataException>(() => BlockMessage.ReadHeader(new byte[40], plan));
        var message = new byte[64];
        BlockMessage.WriteHeader(message, new Block(0, 3, 5, 0), 64);   // segments 3..7 of a 4-segment dataset
        Assert.Throws<InvalidDataException>(() => BlockMessage.ReadHeader(message, plan));
    }

    [Fact]
    public async Task A_rank_whose_neighbour_never_sends_reports_a_stall_instead_of_waiting_for_ever()
    {
        var plan = new FanoutPlan(ManifestOf(12), 2, maxBlockBytes: 128 << 10);
        var links = InProcessRing.Create(2);
        var fetched = new ConcurrentBag<int>();
        // Rank 0 runs; rank 1 never starts, as if its node had died before the exchange.
        var lonely = RingAllGather.RunAsync(plan, links[0], (block, message, _) => FetchAsync(plan, block, message, fetched),
            (_, _) => ValueTask.CompletedTask, CancellationToken.None, stallTimeout: TimeSpan.FromSeconds(1));
        var e = await Assert.ThrowsAsync<TimeoutException>(() => lonely.WaitAsync(TimeSpan.FromSeconds(20)));
        Assert.Contains("stalled on rank 0", e.Message);
    }

    [Fact]
    public async Task A_link_sends_its_own_blocks_before_forwarded_ones_and_each_kind_in_arrival_order()
    {
        var outbox = new RingAllGather.Outbox();
        var messages = Enumerable.Range(0, 5).Select(_ => RingAllGather.Message.Rent(16, holders: 1)).ToArray();
        outbox.Add(messages[0], own: false);
        outbox.Add(messages[1], own: false);
        outbox.Add(messages[2], own: true);    // fetched from the cache tier after the neighbour's blocks came in
        outbox.Add(messages[3], own: false);
        outbox.Add(messages[4], own: true);
        outbox.Complete();                     // the blocks already queued still go, then the end

        var order = new List<int>();
        while (await outbox.TakeAsync(CancellationToken.None) is { } m) order.Add(Array.IndexOf(messages, m));
        Assert.Equal([2, 4, 0, 1, 3], order);
    }

    [Fact]
    public async Task An_own_block_fetched_while_the_link_is_busy_goes_before_forwarded_ones_already_waiting()
    {
        var plan = new FanoutPlan(ManifestOf(30, seed: 3), 3, maxBlockBytes: 64 << 10);
        Assert.True(plan.Shares[0].Count >= 2);
        var links = InProcessRing.Create(3);
        var busy = new GatedLink(links[1], plan);
        var ownFetch = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var forwardedWaiting = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var ownFetched = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var neighbourBlocks = 0;
        var fetched = new ConcurrentBag<int>();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));

        var ranks = new[] { links[0], busy, links[2] }.Select(link => Task.Run(() => RingAllGather.RunAsync(plan, link,
            async (block, message, t) =>
            {
                if (link.Rank == 1) await ownFetch.Task.WaitAsync(t);
                var length = await FetchAsync(plan, block, message, fetched);
                if (link.Rank == 1) ownFetched.TrySetResult();
                return length;
            },
            (message, _) =>
            {
                // Rank 1's first send (a block of rank 0's share) is held on the wire while a second one arrives.
                if (link.Rank == 1 && BlockMessage.ReadHeader(message.Span, plan).Share == 0 && Interlocked.Increment(ref neighbourBlocks) == 2)
                    forwardedWaiting.TrySetResult();
                return ValueTask.CompletedTask;
            }, timeout.Token))).ToArray();

        await forwardedWaiting.Task.WaitAsync(timeout.Token);
        await Task.Delay(200);              // the forwarded block is queued right after it is handed to the node
        ownFetch.SetResult();
        await ownFetched.Task.WaitAsync(timeout.Token);
        await Task.Delay(200);
        busy.Release();
        await Task.WhenAll(ranks);

        Assert.Equal(0, busy.SentShares[0]);
        Assert.Equal(1, busy.SentShares[1]);  // not the second block of share 0, which was waiting first
    }

    /// <summary>Rank 1's link with one send in flight, the first held until released; records each block's share.</summary>
    private sealed class GatedLink(IRingLink inner, FanoutPlan plan) : IRingLink
    {
        private readonly TaskCompletionSource _gate = new(TaskCreationOptions.RunContinuationsAsynchronously);
        public readonly List<int> SentShares = [];
        public int Rank => inner.Rank;
        public int Size => inner.Size;
        public int SendWindow => 1;
        public void Release() => _gate.SetResult();

        public async Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct)
        {
            bool first;
            lock (SentShares)
            {
                first = SentShares.Count == 0;
                SentShares.Add(BlockMessage.ReadHeader(message.Span, plan).Share);
            }
            if (first) await _gate.Task.WaitAsync(ct);
            await inner.SendAsync(message, ct);
        }

        public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => inner.ReceiveAsync(buffer, ct);
    }
}
