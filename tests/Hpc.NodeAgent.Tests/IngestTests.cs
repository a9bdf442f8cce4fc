using Hpc.CommonData.Format;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// Stored segments handed to the store by a process on the node (the MPI fan-out of node preparation): verified like
/// fetched ones, journaled in the same partial copy, completed and published by the next prefetch.
/// </summary>
public class Ingesting
{
    private const int Seg = 4096;

    /// <summary>Segments that alternate between compressible (stored LZ4) and random (stored raw) bytes.</summary>
    private static byte[] Mixed(int segments, int tail = 0)
    {
        var data = FakeSegmentSource.Bytes(segments * Seg + tail, seed: 11);
        for (var s = 0; s < segments; s += 2)
            for (var i = 0; i < Seg; i++) data[s * Seg + i] = (byte)('a' + (s + i / 64) % 26);
        return data;
    }

    private static Task<SegmentIngest> Begin(Node node, string name, string version, byte[]? manifest = null) =>
        node.Store.BeginIngestAsync(name, version, manifest ?? node.Source.ManifestBytes(version), CancellationToken.None);

    private static Task<DatasetStore.Ensured> PrefetchVersion(Node node, string name, string version) =>
        node.Store.EnsureAsync(name, version, lease: false, pin: null, CancellationToken.None);

    [Fact]
    public async Task Every_segment_ingested_then_prefetch_publishes_without_asking_the_source_for_anything()
    {
        using var node = new Node();
        var data = Mixed(8, tail: 100);
        var version = node.Source.Stage("mpi/a", data);

        using (var ingest = await Begin(node, "mpi/a", version))
        {
            var begun = ingest.Begun();
            Assert.Equal((false, 9, 9), (begun.Complete, begun.Segments, begun.Missing));
            Assert.All(Enumerable.Range(0, 9), i => Assert.True(begun.IsMissing(i)));
            Assert.Equal("ingesting", node.Store.Status().Copies.Single().State);
            for (var i = 8; i >= 0; i--) ingest.Accept(i, node.Source.StoredSegment(version, i)); // any order
            var done = ingest.Finish();
            Assert.Equal((9, 0, 0, 0), (done.Accepted, done.AlreadyHad, done.Rejected, done.Missing));
        }
        var partial = node.Store.Status().Copies.Single();
        Assert.Equal(("partial", 9, (long)data.Length), (partial.State, partial.SegmentsDone, partial.BytesDone));
        Assert.False(File.Exists(node.Complete(version))); // an ingest never publishes

        node.Source.Down = true; // the cache tier is gone: nothing may be asked of it
        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Equal(("resumed", node.Complete(version)), (published.Dataset.Source, published.Dataset.Path));
        Assert.Equal(0, node.Source.Fetches);
        Assert.Empty(node.Source.SegmentsServed);
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
        Assert.False(File.Exists(node.Partial(version)));
        Assert.False(File.Exists(node.Journal(version)));
        Assert.Equal("complete", node.Store.Status().Copies.Single().State);
    }

    [Fact]
    public async Task Half_ingested_then_prefetch_fetches_exactly_the_other_half()
    {
        using var node = new Node();
        var data = Mixed(10);
        var version = node.Source.Stage("mpi/a", data);

        using (var ingest = await Begin(node, "mpi/a", version))
        {
            foreach (var i in new[] { 0, 2, 4, 6, 8 }) ingest.Accept(i, node.Source.StoredSegment(version, i));
            Assert.Equal((5, 5), (ingest.Finish().Accepted, ingest.Finish().Missing));
        }
        var status = node.Store.Status().Copies.Single();
        Assert.Equal((5, 5L * Seg), (status.SegmentsDone, status.BytesDone));

        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Equal([1, 3, 5, 7, 9], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
    }

    [Fact]
    public async Task A_second_ingest_is_told_what_is_still_missing_and_counts_resent_segments_as_already_had()
    {
        using var node = new Node();
        var version = node.Source.Stage("mpi/a", Mixed(6));
        using (var first = await Begin(node, "mpi/a", version))
            foreach (var i in new[] { 1, 2 }) first.Accept(i, node.Source.StoredSegment(version, i));

        using var second = await Begin(node, "mpi/a", version);
        var begun = second.Begun();
        Assert.Equal(4, begun.Missing);
        Assert.Equal([0, 3, 4, 5], Enumerable.Range(0, 6).Where(begun.IsMissing));
        for (var i = 0; i < 6; i++) second.Accept(i, node.Source.StoredSegment(version, i));
        second.Accept(0, node.Source.StoredSegment(version, 0));
        var end = second.Finish();
        Assert.Equal((4, 3, 0, 0), (end.Accepted, end.AlreadyHad, end.Rejected, end.Missing));
    }

    [Fact]
    public async Task Corrupted_truncated_and_misindexed_segments_are_rejected_never_written_nor_journaled()
    {
        using var node = new Node();
        var data = Mixed(6);
        var version = node.Source.Stage("mpi/a", data);
        using (var ingest = await Begin(node, "mpi/a", version))
        {
            var flipped = node.Source.StoredSegment(version, 2);                // compressed (even segments are text)
            flipped[^10] ^= 0x40;                                               // payload damaged: checksum, before decoding
            var truncated = node.Source.StoredSegment(version, 1)[..^7];        // payload cut short
            var misindexed = node.Source.StoredSegment(version, 0);             // segment 0's bytes sent as 4: content id
            var rewritten = node.Source.StoredSegment(version, 5);              // damaged and re-checksummed: content id after decode
            rewritten[SegmentCodec.HeaderLength] ^= 1;
            System.Buffers.Binary.BinaryPrimitives.WriteUInt64LittleEndian(rewritten.AsSpan(16), XxHash.Hash64Of(rewritten.AsSpan(SegmentCodec.HeaderLength)));
            ingest.Accept(2, flipped);
            ingest.Accept(1, truncated);
            ingest.Accept(4, misindexed);
            ingest.Accept(5, rewritten);
            ingest.Accept(3, new byte[10]);                                      // not even a header
            ingest.Accept(0, node.Source.StoredSegment(version, 0));

            var end = ingest.Finish();
            Assert.Equal((1, 5, 5), (end.Accepted, end.Rejected, end.Missing));
            Assert.Equal(SegmentIngest.MaxReasons, end.Rejections!.Count);
            Assert.Contains(end.Rejections, r => r.StartsWith("index 2:") && r.Contains("checksum"));
            Assert.Contains(end.Rejections, r => r.StartsWith("index 1:") && r.Contains("payload length"));
            Assert.Contains(end.Rejections, r => r.StartsWith("index 4:"));
            Assert.Contains(end.Rejections, r => r.StartsWith("index 5:") && r.Contains("content hash"));
        }
        Assert.Equal([0], Journal(node, version));
        var partial = File.ReadAllBytes(node.Partial(version));
        Assert.Equal(data.AsSpan(0, Seg).ToArray(), partial[..Seg]);
        Assert.All(partial[Seg..], b => Assert.Equal(0, b)); // nothing of a rejected segment reached the file
        Assert.Equal(1, node.Store.Status().Copies.Single().SegmentsDone);

        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Equal([1, 2, 3, 4, 5], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
    }

    [Fact]
    public async Task A_segment_index_outside_the_manifest_is_a_bad_request_and_nothing_is_journaled()
    {
        using var node = new Node();
        var version = node.Source.Stage("mpi/a", Mixed(3));
        using var ingest = await Begin(node, "mpi/a", version);
        foreach (var bad in new[] { 3, -1, int.MaxValue })
        {
            var e = Assert.Throws<CommonDataException>(() => ingest.Accept(bad, node.Source.StoredSegment(version, 0)));
            Assert.Equal(ErrorCode.BadRequest, e.Code);
        }
        ingest.Dispose();
        Assert.Empty(Journal(node, version));
    }

    [Fact]
    public async Task Ingesting_a_version_that_is_complete_on_the_node_says_so_and_writes_nothing()
    {
        using var node = new Node();
        var data = Mixed(4);
        var version = node.Source.Stage("mpi/a", data);
        await node.Prefetch("mpi/a");
        var written = File.GetLastWriteTimeUtc(node.Complete(version));

        using (var ingest = await Begin(node, "mpi/a", version))
        {
            Assert.True(ingest.Complete);
            var begun = ingest.Begun();
            Assert.Equal((true, 4, 0, null), (begun.Complete, begun.Segments, begun.Missing, begun.MissingBitmap));
            Assert.Throws<InvalidOperationException>(() => ingest.Accept(0, node.Source.StoredSegment(version, 0)));
        }
        Assert.Empty(Directory.GetFiles(Path.Combine(node.Root, "partial")));
        Assert.Equal(written, File.GetLastWriteTimeUtc(node.Complete(version)));
        Assert.Equal(data, File.ReadAllBytes(node.Complete(version)));
        Assert.Equal("complete", node.Store.Status().Copies.Single().State);
    }

    [Fact]
    public async Task A_manifest_that_does_not_hash_to_the_version_or_names_another_dataset_is_refused_and_nothing_is_written()
    {
        using var node = new Node();
        var version = node.Source.Stage("mpi/a", Mixed(3));
        var other = node.Source.Stage("mpi/b", Mixed(2));
        var altered = node.Source.ManifestBytes(version).ToArray();
        altered[^2] = (byte)' ';

        var e = await Assert.ThrowsAsync<CommonDataException>(() => Begin(node, "mpi/a", version, altered));
        Assert.Equal(ErrorCode.Integrity, e.Code);
        e = await Assert.ThrowsAsync<CommonDataException>(() => Begin(node, "mpi/a", version, node.Source.ManifestBytes(other)));
        Assert.Equal(ErrorCode.Integrity, e.Code);
        e = await Assert.ThrowsAsync<CommonDataException>(() => Begin(node, "mpi/a", other, node.Source.ManifestBytes(other)));
        Assert.Equal(ErrorCode.NotFound, e.Code);
        e = await Assert.ThrowsAsync<CommonDataException>(() => Begin(node, "mpi/a", "latest", node.Source.ManifestBytes(version)));
        Assert.Equal(ErrorCode.BadRequest, e.Code);

        Assert.Empty(node.Store.Status().Copies);
        Assert.Empty(Directory.GetFiles(Path.Combine(node.Root, "partial")));
        Assert.Empty(Directory.GetFiles(Path.Combine(node.Root, "manifests")));
    }

    [Fact]
    public async Task A_fetch_asked_for_during_an_ingest_waits_for_it_and_then_fetches_only_what_is_missing()
    {
        using var node = new Node();
        var data = Mixed(8);
        var version = node.Source.Stage("mpi/a", data);
        var ingest = await Begin(node, "mpi/a", version);
        for (var i = 0; i < 4; i++) ingest.Accept(i, node.Source.StoredSegment(version, i));

        var fetch = node.Open("mpi/a");
        await Task.Delay(200);
        Assert.False(fetch.IsCompleted);           // one writer per version: the fetch waits for its turn
        Assert.Equal(0, node.Source.Fetches);
        for (var i = 4; i < 6; i++) ingest.Accept(i, node.Source.StoredSegment(version, i));
        ingest.Finish();
        ingest.Dispose();

        var opened = await fetch;
        Assert.Equal("resumed", opened.Dataset.Source);
        Assert.Equal([6, 7], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(opened.Dataset.Path));
    }

    [Fact]
    public async Task An_ingest_begun_during_a_fetch_waits_for_it_and_then_finds_the_version_complete()
    {
        using var node = new Node();
        var data = Mixed(6);
        var version = node.Source.Stage("mpi/a", data);
        node.Source.PauseAfter = 2;
        var fetch = node.Prefetch("mpi/a");
        await node.Source.Paused;

        var begin = Begin(node, "mpi/a", version);
        await Task.Delay(200);
        Assert.False(begin.IsCompleted);
        node.Source.Resume();
        await fetch;
        using var ingest = await begin;
        Assert.True(ingest.Complete);
        Assert.Equal(data, File.ReadAllBytes(node.Complete(version)));
        Assert.Equal(6, node.Source.SegmentsServed.Count);
    }

    [Fact]
    public async Task An_ingest_begun_after_a_failed_fetch_takes_over_its_partial_copy()
    {
        using var node = new Node();
        var data = Mixed(6);
        var version = node.Source.Stage("mpi/a", data);
        node.Source.FailAfter = 3;
        await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("mpi/a"));
        node.Source.FailAfter = null;

        using (var ingest = await Begin(node, "mpi/a", version))
        {
            Assert.Equal([3, 4, 5], Enumerable.Range(0, 6).Where(ingest.Begun().IsMissing));
            for (var i = 0; i < 6; i++) ingest.Accept(i, node.Source.StoredSegment(version, i));
            Assert.Equal((3, 3, 0), (ingest.Finish().Accepted, ingest.Finish().AlreadyHad, ingest.Finish().Missing));
        }
        while (node.Source.SegmentsServed.TryDequeue(out _)) { }
        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Empty(node.Source.SegmentsServed);
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
    }

    [Fact]
    public async Task Many_concurrent_ingests_and_fetches_of_one_version_publish_the_right_bytes_once()
    {
        using var node = new Node();
        var data = Mixed(32);
        var version = node.Source.Stage("mpi/a", data);
        var stored = Enumerable.Range(0, 32).Select(i => node.Source.StoredSegment(version, i)).ToArray();

        var work = Enumerable.Range(0, 12).Select(k => Task.Run(async () =>
        {
            if (k % 3 == 0) { await node.Open("mpi/a"); return; }
            using var ingest = await Begin(node, "mpi/a", version);
            if (ingest.Complete) return;
            for (var i = k % 2; i < 32; i += 2) ingest.Accept(i, stored[i]);
            ingest.Finish();
        })).ToList();
        await Task.WhenAll(work);

        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
        Assert.Equal(node.Source.SegmentsServed.Count, node.Source.SegmentsServed.Distinct().Count()); // no segment fetched twice
        Assert.Equal("complete", node.Store.Status().Copies.Single().State);
    }

    [Fact]
    public async Task Segments_handed_over_by_many_threads_at_once_are_each_written_once_and_counted_once()
    {
        using var node = new Node();
        var data = Mixed(64, tail: 7);
        var version = node.Source.Stage("mpi/a", data);
        var corrupt = node.Source.StoredSegment(version, 9).ToArray();
        corrupt[^1] ^= 0xff;

        using (var ingest = await Begin(node, "mpi/a", version))
        {
            // Every segment four times over, and a damaged copy of one, from eight threads in no particular order.
            var deliveries = Enumerable.Range(0, 4 * 65).Select(k => k % 65).Order().ToArray();
            Parallel.ForEach(deliveries, new ParallelOptions { MaxDegreeOfParallelism = 8 }, i => ingest.Accept(i, node.Source.StoredSegment(version, i)));
            ingest.Accept(9, corrupt);
            var done = ingest.Finish();
            Assert.Equal((65, 3 * 65 + 1, 0, 0), (done.Accepted, done.AlreadyHad, done.Rejected, done.Missing));
        }
        Assert.Equal(Enumerable.Range(0, 65), File.ReadAllBytes(node.Journal(version)).Chunk(4).Select(e => BitConverter.ToInt32(e)).Order());

        node.Source.Down = true;
        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
    }

    [Fact]
    public async Task A_damaged_copy_verified_at_the_same_time_as_a_good_one_never_keeps_the_good_one_out()
    {
        using var node = new Node();
        var version = node.Source.Stage("mpi/a", Mixed(16));
        using var ingest = await Begin(node, "mpi/a", version);
        var bad = Enumerable.Range(0, 16).Select(i => { var b = node.Source.StoredSegment(version, i).ToArray(); b[^1] ^= 0x5a; return b; }).ToArray();

        // Each segment's damaged copy and its good one, side by side, from four threads.
        Parallel.For(0, 32, new ParallelOptions { MaxDegreeOfParallelism = 4 },
            k => ingest.Accept(k / 2, k % 2 == 0 ? bad[k / 2] : node.Source.StoredSegment(version, k / 2)));
        var done = ingest.Finish();

        Assert.Equal((16, 0), (done.Accepted, done.Missing));
        Assert.Equal(16, done.Rejected + done.AlreadyHad); // a damaged copy that came after its good one counts as already had
    }

    [Fact]
    public async Task What_was_ingested_survives_a_restart_and_the_resumed_prefetch_fetches_only_the_rest()
    {
        using var node = new Node();
        var data = Mixed(6);
        var version = node.Source.Stage("mpi/a", data);
        using (var ingest = await Begin(node, "mpi/a", version))
            foreach (var i in new[] { 0, 1, 5 }) ingest.Accept(i, node.Source.StoredSegment(version, i)); // broken off: no Finish

        node.Restart();
        var partial = node.Store.Status().Copies.Single();
        Assert.Equal(("partial", 3), (partial.State, partial.SegmentsDone));
        var published = await PrefetchVersion(node, "mpi/a", version);
        Assert.Equal([2, 3, 4], node.Source.SegmentsServed.Order());
        Assert.Equal(data, File.ReadAllBytes(published.Dataset.Path));
    }

    [Fact]
    public async Task An_ingest_needs_room_in_the_budget_as_a_fetch_does()
    {
        using var node = new Node(budget: 2 * 8192);
        node.Source.Stage("e/a", FakeSegmentSource.Bytes(8192, 1));
        node.Source.Stage("e/b", FakeSegmentSource.Bytes(8192, 2));
        var c = node.Source.Stage("e/c", FakeSegmentSource.Bytes(8192, 3));
        var a = await node.Open("e/a");
        await node.Prefetch("e/b", pin: "job7");

        var full = await Assert.ThrowsAsync<CommonDataException>(() => Begin(node, "e/c", c));
        Assert.Equal(ErrorCode.NoSpace, full.Code);
        Assert.Equal(["e/a", "e/b"], node.Names());

        node.Store.Lease(a.Version, -1);
        using (var ingest = await Begin(node, "e/c", c))      // evicts e/a, as a fetch would
        {
            Assert.Equal(["e/b", "e/c"], node.Names());
            var d = node.Source.Stage("e/d", FakeSegmentSource.Bytes(8192, 4));
            var noRoom = await Assert.ThrowsAsync<CommonDataException>(() => node.Prefetch("e/d")); // an ingesting copy is not evicted
            Assert.Equal(ErrorCode.NoSpace, noRoom.Code);
        }
    }

    private static int[] Journal(Node node, string version)
    {
        if (!File.Exists(node.Journal(version))) return [];
        var bytes = File.ReadAllBytes(node.Journal(version));
        return Enumerable.Range(0, bytes.Length / 4).Select(i => BitConverter.ToInt32(bytes, i * 4)).ToArray();
    }

    /// <summary>A node whose waiting fetches check an ingest every <paramref name="stall"/> against a least rate of <paramref name="leastRate"/> bytes/s.</summary>
    private static Node Checking(TimeSpan stall, long leastRate)
    {
        var node = new Node();
        node.Options.IngestStallTimeout = stall;
        node.Options.IngestMinRate = new Hpc.CommonData.ByteRate(leastRate);
        node.Restart();
        return node;
    }

    /// <summary>
    /// Hands the ingest segments 0.. one every <paramref name="every"/> (a fan-out's stream) until all are sent or the
    /// ingest is abandoned; returns how many it sent.
    /// </summary>
    private static async Task<int> Trickle(SegmentIngest ingest, Node node, string version, int segments, TimeSpan every)
    {
        var sent = 0;
        for (var i = 0; i < segments; i++)
        {
            try { await Task.Delay(every, ingest.Abandoned); }
            catch (OperationCanceledException) { break; }
            ingest.Accept(i, node.Source.StoredSegment(version, i));
            sent++;
        }
        return sent;
    }

    [Fact]
    public async Task A_waiting_fetch_abandons_an_ingest_above_the_least_rate_once_its_own_measured_fetch_would_finish_far_sooner()
    {
        // Windows of 2 s: a pause of a second in this test's own timers still leaves the ingest above the least rate.
        using var node = Checking(TimeSpan.FromSeconds(2), leastRate: 4 << 10);
        var data = FakeSegmentSource.Bytes(96 * Seg, seed: 21);
        var version = node.Source.Stage("mpi/a", data);
        var ingest = await Begin(node, "mpi/a", version);
        // About 40 KiB/s: ten times the least rate, so the rate alone never abandons it; 9.6 s for the whole version.
        var feeding = Trickle(ingest, node, version, 96, TimeSpan.FromMilliseconds(100));

        var clock = System.Diagnostics.Stopwatch.StartNew();
        var fetch = node.Open("mpi/a");
        var sent = await feeding; // ends when abandoned, as the ingest's connection does
        var outpaced = ingest.Outpaced;
        ingest.Dispose();
        var opened = await fetch.WaitAsync(TimeSpan.FromSeconds(20));
        clock.Stop();

        Assert.NotNull(outpaced);
        Assert.Contains("own fetch from the cache tier measured", outpaced);
        Assert.InRange(sent, 1, 60);
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(6), $"the fetch waited {clock.Elapsed.TotalSeconds:0.0} s on an ingest it outpaces");
        Assert.Equal(data, File.ReadAllBytes(opened.Dataset.Path));
    }

    [Fact]
    public async Task A_waiting_fetch_never_probes_an_ingest_delivering_well_above_the_least_rate()
    {
        using var node = Checking(TimeSpan.FromMilliseconds(1500), leastRate: 512);
        var data = FakeSegmentSource.Bytes(48 * Seg, seed: 22);
        var version = node.Source.Stage("mpi/a", data);
        var ingest = await Begin(node, "mpi/a", version);
        // About 40 KiB/s against a least rate of 512 bytes/s, five times the rate below which it would be compared: a
        // healthy fan-out, over three windows of the waiting fetch.
        var feeding = Trickle(ingest, node, version, 48, TimeSpan.FromMilliseconds(100));

        var fetch = node.Open("mpi/a");
        var sent = await feeding;
        Assert.Equal(0, node.Source.Fetches); // the cache tier was not asked while the ingest ran
        ingest.Finish();
        ingest.Dispose();
        var opened = await fetch.WaitAsync(TimeSpan.FromSeconds(20));

        Assert.Equal((48, null, 0), (sent, ingest.Outpaced, ingest.Probed));
        Assert.Equal(0, node.Source.Fetches);
        Assert.Equal(data, File.ReadAllBytes(opened.Dataset.Path));
    }

    [Fact]
    public async Task A_waiting_fetch_keeps_a_slow_ingest_when_its_own_measured_fetch_is_no_faster_and_keeps_what_it_measured_with()
    {
        using var node = Checking(TimeSpan.FromSeconds(2), leastRate: 4 << 10);
        node.Source.SegmentDelay = TimeSpan.FromMilliseconds(400); // the cache tier delivers about 10 KiB/s to this node
        var data = FakeSegmentSource.Bytes(60 * Seg, seed: 23);
        var version = node.Source.Stage("mpi/a", data);
        var ingest = await Begin(node, "mpi/a", version);
        // About 40 KiB/s: ten times the least rate and under sixteen times it, so the fetch measures its own rate.
        var feeding = Trickle(ingest, node, version, 60, TimeSpan.FromMilliseconds(100));

        var fetch = node.Open("mpi/a");
        var sent = await feeding;
        var done = ingest.Finish();
        ingest.Dispose();
        var opened = await fetch.WaitAsync(TimeSpan.FromSeconds(30));

        Assert.Equal((60, null), (sent, ingest.Outpaced));
        Assert.True(ingest.Probed > 0, "the fetch never measured its own rate");
        Assert.Equal(ingest.Probed, done.AlreadyHad); // what the probes fetched was journaled for the ingest, which then had it
        Assert.Equal(data, File.ReadAllBytes(opened.Dataset.Path));
    }
}
