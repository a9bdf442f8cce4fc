using System.Collections.Concurrent;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fetch;

namespace Hpc.Integration.Tests;

/// <summary>
/// A worker that fetches straight from the cache tier (no agent) is told how far the fetch is: once per batch of
/// segments a cache host answered, in bytes and segments of the whole, ending at all of it.
/// </summary>
public class DirectProgressTests
{
    /// <summary>Records every report as it comes, on the fetch's own threads.</summary>
    private sealed class Recorder : IProgress<FetchProgress>
    {
        public ConcurrentQueue<FetchProgress> Reports { get; } = new();
        public void Report(FetchProgress value) => Reports.Enqueue(value);
    }

    [Fact]
    public async Task A_direct_open_reports_once_per_batch_up_to_every_byte_and_segment()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var data = Cluster.Csvish(40 * 65536 + 99);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", data), "risk/progress", "--chunking", "fixed");
        Assert.Equal(41, staged.Segments);
        const int batch = 8;
        var recorder = new Recorder();

        await using var direct = await Dataset.OpenAsync("risk/progress", new DatasetOptions
        {
            AgentPipe = "hcd-no-agent-here", Mode = DataAccessMode.Direct, Progress = recorder,
            CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList(), BatchSize = batch },
        });

        Assert.Equal(data, direct.GetSpan(0, data.Length).ToArray());
        var reports = recorder.Reports.ToList();
        // One host, 41 segments in batches of 8: six batches, six reports — not one per segment.
        Assert.Equal((staged.Segments + batch - 1) / batch, reports.Count);
        Assert.All(reports, r => Assert.Equal((data.Length, staged.Segments), (r.TotalBytes, r.Segments)));
        // Batches finish in any order (several connections), so each report adds one whole batch to those before it.
        var done = reports.Select(r => r.SegmentsDone).Order().Prepend(0).ToList();
        Assert.Equal(staged.Segments, done[^1]);
        Assert.All(done.Zip(done.Skip(1), (before, after) => after - before), added => Assert.Contains(added, new[] { batch, staged.Segments % batch }));
        Assert.Equal(data.Length, reports.Max(r => r.BytesDone));
        Assert.All(reports, r => Assert.InRange(r.BytesDone, 1, data.Length));
    }

    [Fact]
    public async Task Through_an_agent_the_progress_hook_is_not_called_the_agent_fetches()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var data = Cluster.Csvish(4 * 65536);
        await c.StageAsync(Cluster.WriteFile(c.Root, "a.csv", data), "risk/agentprogress");
        var (_, pipe, _) = await c.StartAgentAsync();
        var recorder = new Recorder();
        var options = Cluster.Via(pipe);
        options.Progress = recorder;

        await using var mapped = await Dataset.OpenAsync("risk/agentprogress", options);

        Assert.Equal(DataAccessMode.Map, mapped.Mode);
        Assert.Empty(recorder.Reports);
    }
}
