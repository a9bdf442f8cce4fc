using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>Stage → cache hosts → node agent → worker, with every piece a real process.</summary>
public class DataPathTests
{
    [Fact]
    public async Task A_staged_file_reaches_workers_byte_for_byte_by_map_and_by_stream()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StartCacheHostAsync();
        var data = Cluster.Csvish(5 * 65536 + 123);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.csv", data), "risk/prices", "--chunking", "fixed");
        Assert.Equal(data.Length, staged.RawBytes);
        Assert.Equal(6, staged.Segments);
        Assert.True(staged.StoredBytes < data.Length / 2, $"csv should compress, stored {staged.StoredBytes}");
        var (_, pipe, dataDir) = await c.StartAgentAsync();

        await using (var mapped = await Dataset.OpenAsync("risk/prices", Cluster.Via(pipe)))
        {
            Assert.Equal(DataAccessMode.Map, mapped.Mode);
            Assert.Equal(staged.Version, mapped.Version);
            Assert.Equal(data, mapped.GetSpan(0, data.Length).ToArray());
            Assert.StartsWith(Path.GetFullPath(dataDir), mapped.LocalPath);
            using var stream = mapped.OpenRead();
            var copy = new MemoryStream();
            await stream.CopyToAsync(copy);
            Assert.Equal(data, copy.ToArray());
        }
        await using (var streamed = await Dataset.OpenAsync("risk/prices", Cluster.Via(pipe, DataAccessMode.Stream)))
        {
            Assert.Equal(DataAccessMode.Stream, streamed.Mode);
            Assert.Equal(data, streamed.GetSpan(0, data.Length).ToArray());
        }
    }

    /// <summary>
    /// A dataset staged with zstd reaches a node and a direct reader like any other (readers take the codec from each
    /// segment's header), stored smaller than the same bytes staged with LZ4.
    /// </summary>
    [Fact]
    public async Task A_dataset_staged_with_zstd_reaches_workers_verified_and_is_stored_smaller_than_with_lz4()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var data = Cluster.Csvish(40 * 65536 + 77);
        var path = Cluster.WriteFile(c.Root, "prices.csv", data);
        // Like bytes, not the same: segments already on the tier are kept in the codec they were stored with.
        var lz4 = await c.StageAsync(Cluster.WriteFile(c.Root, "prices-2.csv", Cluster.Csvish(data.Length, seed: 8)), "risk/lz4");
        var zstd = await c.StageAsync(path, "risk/zstd", "--codec", "zstd");
        Assert.True(zstd.StoredBytes < lz4.StoredBytes * 0.8, $"zstd stored {zstd.StoredBytes}, lz4 {lz4.StoredBytes}");

        var (_, pipe, _) = await c.StartAgentAsync();
        await using (var mapped = await Dataset.OpenAsync("risk/zstd", Cluster.Via(pipe)))
        {
            Assert.Equal(zstd.Version, mapped.Version);
            Assert.Equal(data, mapped.GetSpan(0, data.Length).ToArray());
            Assert.True(mapped.VerifyHash());
        }
        await using (var direct = await Dataset.OpenAsync("risk/zstd", new DatasetOptions
                     { AgentPipe = "hcd-no-agent-here", Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } }))
            Assert.Equal(data, direct.GetSpan(0, data.Length).ToArray());

        var refused = await c.RunStagerAsync([path, "--name", "risk/bad", "--cache-hosts", c.HostList, "--codec", "gzip"]);
        Assert.NotEqual(0, refused.Code);
        Assert.Contains("--codec: codec 'gzip' is not one of lz4, zstd, zstd:LEVEL, none", refused.Stderr);
    }

    [Fact]
    public async Task Worker_processes_open_the_same_copy_and_agree_on_the_result()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var csv = Cluster.WriteFile(c.Root, "market.csv", Cluster.Csvish(3 << 20));
        var staged = await c.StageAsync(csv, "demo/market");
        var (_, pipe, _) = await c.StartAgentAsync();
        var env = new Dictionary<string, string?> { [AgentClient.PipeVariable] = pipe };
        var runs = await Task.WhenAll(Enumerable.Range(0, 3).Select(_ => c.RunAsync("Hpc.Samples", ["worker", "demo/market", "--mode", "map"], env)));
        var results = runs.Select(r =>
        {
            Assert.True(r.Code == 0, r.Stderr);
            return JsonDocument.Parse(r.Stdout.Last()).RootElement;
        }).ToList();
        Assert.All(results, r => Assert.Equal(staged.Version, r.GetProperty("version").GetString()));
        Assert.All(results, r => Assert.True(r.GetProperty("verified").GetBoolean()));
        Assert.Single(results.Select(r => r.GetProperty("computed").GetString()).Distinct());
        Assert.Contains("99% one-day VaR", results[0].GetProperty("computed").GetString());
    }

    [Fact]
    public async Task A_directory_is_staged_with_its_file_table_and_files_read_back_by_path()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var dir = Path.Combine(c.Root, "model");
        var a = Cluster.WriteFile(dir, "weights/a.bin", Cluster.RandomBytes(70_000));
        Cluster.WriteFile(dir, "weights/b.bin", Cluster.RandomBytes(10, seed: 9));
        Cluster.WriteFile(dir, "empty.txt", []);
        Cluster.WriteFile(dir, "readme.txt", "hello"u8.ToArray());
        await c.StageAsync(dir, "ml/model");
        var (_, pipe, _) = await c.StartAgentAsync();
        await using var data = await Dataset.OpenAsync("ml/model", Cluster.Via(pipe));
        Assert.Equal(["empty.txt", "readme.txt", "weights", "weights/a.bin", "weights/b.bin"], data.Files.Select(f => f.Path));
        Assert.Equal(["empty.txt", "readme.txt", "weights/a.bin", "weights/b.bin"], data.Files.Where(f => f.IsFile).Select(f => f.Path));
        Assert.Equal(Hpc.CommonData.Format.DatasetEntryType.Directory, data.Files.Single(f => f.Path == "weights").Type);
        using var reader = new StreamReader(data.OpenFile("readme.txt"));
        Assert.Equal("hello", await reader.ReadToEndAsync());
        var copy = new MemoryStream();
        await data.OpenFile("weights/a.bin").CopyToAsync(copy);
        Assert.Equal(await File.ReadAllBytesAsync(a), copy.ToArray());
        Assert.Throws<FileNotFoundException>(() => { data.OpenFile("nope"); });
        Assert.Throws<FileNotFoundException>(() => { data.OpenFile("weights"); });
    }

    [Fact]
    public async Task Standard_input_and_an_empty_file_can_be_staged()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var input = Cluster.WriteFile(c.Root, "in.bin", Cluster.RandomBytes(100_000));
        var (code, stdout, stderr) = await c.RunAsync("Hpc.Stager", ["-", "--name", "io/stdin", "--cache-hosts", c.HostList, "--json"], stdinFile: input);
        Assert.True(code == 0, stderr);
        var empty = await c.StageAsync(Cluster.WriteFile(c.Root, "empty.bin", []), "io/empty");
        Assert.Equal(0, empty.Segments);
        var (_, pipe, _) = await c.StartAgentAsync();
        await using (var d = await Dataset.OpenAsync("io/stdin", Cluster.Via(pipe)))
            Assert.Equal(await File.ReadAllBytesAsync(input), d.GetSpan(0, (int)d.Length).ToArray());
        await using (var e = await Dataset.OpenAsync("io/empty", Cluster.Via(pipe)))
            Assert.Equal(0, e.Length);
        Assert.Contains("io/stdin", stdout.Last());
    }

    [Fact]
    public async Task Restaging_unchanged_content_sends_no_segments_and_keeps_the_version()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var path = Cluster.WriteFile(c.Root, "d.bin", Cluster.Csvish(300_000));
        var first = await c.StageAsync(path, "a/b");
        var second = await c.StageAsync(path, "a/b");
        Assert.True(second.Unchanged);
        Assert.Equal(first.Version, second.Version);
        Assert.Equal(first.Segments, second.SkippedSegments);
        Assert.Equal(0, second.SentBytes);
        await File.AppendAllTextAsync(path, "one more line\n");
        var third = await c.StageAsync(path, "a/b");
        Assert.NotEqual(first.Version, third.Version);
        Assert.Equal(first.Segments - 1, third.SkippedSegments); // only the changed tail moved
    }

    [Fact]
    public async Task Concurrent_opens_on_a_node_fetch_the_dataset_once()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "r.bin", Cluster.RandomBytes(4 << 20)), "x/once");
        var (_, pipe, _) = await c.StartAgentAsync();
        await using var tier = c.Tier();
        var before = await BytesSent(tier);
        var opens = await Task.WhenAll(Enumerable.Range(0, 8).Select(_ => Dataset.OpenAsync("x/once", Cluster.Via(pipe))));
        var sent = await BytesSent(tier) - before;
        Assert.All(opens, o => Assert.Equal(opens[0].LocalPath, o.LocalPath));
        foreach (var o in opens) await o.DisposeAsync();
        Assert.InRange(sent, staged.StoredBytes, staged.StoredBytes * 3 / 2); // once, plus protocol overhead and the manifest
    }

    internal static async Task<long> BytesSent(CacheTierClient tier)
    {
        long total = 0;
        foreach (var reply in await tier.ExecuteOnAllAsync("INFO"u8.ToArray(), ["stats"]))
            foreach (var line in reply.ToString().Split('\n'))
                if (line.StartsWith("total_net_output_bytes:")) total += long.Parse(line.Split(':')[1].Trim());
        return total;
    }
}
