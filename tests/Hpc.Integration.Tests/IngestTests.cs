using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>The agent's ingest over the real pipe: stored segments that came from elsewhere, not from the agent's cache tier.</summary>
public class IngestTests
{
    [Fact]
    public async Task Segments_ingested_over_the_pipe_are_published_by_open_while_the_cache_tier_is_down_and_a_worker_reads_the_staged_bytes()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var bytes = Cluster.Csvish(20 * 65536 + 1234);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", bytes), "mpi/prices");
        var (_, pipe, _) = await c.StartAgentAsync();

        // What another node would send: the manifest as stored and the stored segments, straight from the cache tier.
        var (_, manifestBytes) = await StoredManifestAsync(c, staged);
        var stored = new byte[staged.Segments][];
        await using (var tier = c.Tier())
        {
            var manifest = Manifest.Parse(manifestBytes);
            await tier.FetchSegmentsAsync(manifest.SegmentIds, Enumerable.Range(0, manifest.Segments.Count).ToArray(),
                (i, s) => { stored[i] = s.ToArray(); return null; }, "test");
        }
        Assert.Equal(staged.Version, Manifest.VersionOf(manifestBytes));
        var (otherVersion, otherManifest) = await StoredManifestAsync(c, await c.StageAsync(Cluster.WriteFile(c.Root, "e.bin", Cluster.RandomBytes(1000)), "mpi/other"));
        var (thirdVersion, thirdManifest) = await StoredManifestAsync(c, await c.StageAsync(Cluster.WriteFile(c.Root, "f.bin", Cluster.RandomBytes(1000, seed: 4)), "mpi/third"));

        // A segment index outside the manifest is a bad request: the agent answers once and closes that connection only.
        await using (var bad = await AgentClient.ConnectAsync(pipe))
        {
            var session = await bad.BeginIngestAsync("mpi/other", otherVersion, otherManifest);
            Assert.Equal(1, session.MissingCount);
            session.Write(7, stored[0]);
            var e = await Assert.ThrowsAsync<CommonDataException>(() => session.CompleteAsync());
            Assert.Equal(ErrorCode.BadRequest, e.Code);
            Assert.Contains("out of range", e.Message);
            await Assert.ThrowsAsync<CommonDataException>(() => bad.StatusAsync()); // this connection is done
        }

        await using var client = await AgentClient.ConnectAsync(pipe);
        // The agent checks the manifest against its own cache tier when the ingest begins; the data comes after.
        await using (var session = await client.BeginIngestAsync("mpi/prices", staged.Version, manifestBytes))
        {
            await c.Processes.Single(p => p.ReadyText == c.Hosts[0]).KillAsync(); // the agent's cache tier is gone from here on
            Assert.False(session.Complete);
            Assert.Equal((staged.Segments, staged.Segments), (session.Segments, session.MissingCount));

            // The first half as one received block with a table of where each segment lies, as a fan-out loop gets them.
            var half = staged.Segments / 2;
            var block = stored.Take(half).SelectMany(s => s).ToArray();
            var slices = new StoredSegmentSlice[half];
            for (int i = 0, offset = 0; i < half; offset += stored[i].Length, i++) slices[i] = new StoredSegmentSlice(i, offset, stored[i].Length);
            await session.SendAsync(block, slices);

            // The rest one by one, a damaged copy of one of them first.
            var damaged = stored[half].ToArray();
            damaged[^1] ^= 0x10;
            await session.SendAsync(half, damaged);
            for (var i = half; i < staged.Segments; i++) await session.SendAsync(i, stored[i]);
            await session.SendAsync(0, stored[0]);

            var report = await session.CompleteAsync();
            Assert.Equal((staged.Segments, 1, 1, 0), (report.Accepted, report.AlreadyHad, report.Rejected, report.Missing));
            Assert.Contains("checksum", Assert.Single(report.Rejections!));
        }
        var copy = (await client.StatusAsync()).Copies.Single(d => d.Name == "mpi/prices");
        Assert.Equal(("partial", staged.Segments, staged.RawBytes), (copy.State, copy.SegmentsDone, copy.BytesDone));

        var options = Cluster.Via(pipe);
        options.Version = staged.Version;
        await using (var data = await Dataset.OpenAsync("mpi/prices", options)) // the agent completes and publishes from what it was given
        {
            Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
            Assert.True(data.VerifyHash());
        }
        Assert.Equal("complete", (await client.StatusAsync()).Copies.Single(d => d.Name == "mpi/prices").State);

        // Once the node has the version, an ingest is told so and sends nothing.
        var again = await client.IngestAsync("mpi/prices", staged.Version, manifestBytes, stored.Select((s, i) => (i, (ReadOnlyMemory<byte>)s)));
        Assert.True(again.Complete);

        // With the tier down, a version the node does not hold cannot be vouched for: refused, and the connection stays usable.
        var unchecked_ = await Assert.ThrowsAsync<CommonDataException>(() => client.BeginIngestAsync("mpi/third", thirdVersion, thirdManifest));
        Assert.Equal(ErrorCode.Unavailable, unchecked_.Code);
        Assert.Contains("cannot be reached to vouch", unchecked_.Message);
        var tampered = manifestBytes.ToArray();
        tampered[^2] = (byte)' ';
        var refused = await Assert.ThrowsAsync<CommonDataException>(() => client.BeginIngestAsync("mpi/prices", staged.Version, tampered));
        Assert.Equal(ErrorCode.Integrity, refused.Code);
        Assert.NotNull(await client.StatusAsync()); // a refused ingest leaves the connection usable
    }

    /// <summary>A staged version's manifest as the cache tier stores it (decoded from its segment form): the bytes whose hash is the version id.</summary>
    private static async Task<(string Version, byte[] Manifest)> StoredManifestAsync(Cluster c, Cluster.Staged staged)
    {
        await using var tier = c.Tier();
        var reply = await tier.ExecuteOnAsync(0, "GET"u8.ToArray(), [CacheKeys.Manifest(staged.Version)]);
        Assert.True(SegmentCodec.TryReadRawLength(reply.Bulk, out var rawLength));
        var manifest = new byte[rawLength];
        Assert.Null(SegmentCodec.TryDecode(reply.Bulk, SegmentId.Parse(staged.Version), manifest));
        return (staged.Version, manifest);
    }
}
