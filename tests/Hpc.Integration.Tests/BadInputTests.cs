using Hpc.Jobs.Tests;
using Hpc.CommonData.Hosting;
using System.Buffers.Binary;
using System.IO.Pipes;
using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;

namespace Hpc.Integration.Tests;

/// <summary>Bad input gets a clear error, nothing is lost, and nothing bad reaches a worker.</summary>
public class BadInputTests
{
    [Fact]
    public async Task A_version_staged_with_XXH3_content_ids_is_refused_naming_it_and_asking_for_a_re_stage()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        const string old = "4c8b85794da2e16cfa8aa7ab96778792";
        await using (var raw = await RespConnection.ConnectAsync(CacheEndpoint.Parse(c.Hosts[0]), null, TimeSpan.FromSeconds(5), default))
        {
            raw.BeginCommand(3); raw.Argument("SET"u8); raw.Argument(CacheKeys.Latest("risk/old")); raw.Argument(old);
            Assert.Equal("OK", (await raw.FlushAndReadAsync(default)).Text);
        }
        var (_, pipe, dataDir) = await c.StartAgentAsync();
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } };
        foreach (var options in new[] { Cluster.Via(pipe), new DatasetOptions { AgentPipe = pipe, Version = old }, direct })
        {
            var e = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("risk/old", options));
            Assert.Equal(ErrorCode.Integrity, e.Code);
            Assert.Contains($"dataset 'risk/old' version '{old}'", e.Message);
            Assert.Contains("XXH3-128", e.Message);
            Assert.Contains("re-stage", e.Message);
        }
        Assert.Empty(Directory.GetFiles(Path.Combine(dataDir, "complete")));
    }

    [Fact]
    public async Task Unknown_dataset_or_version_is_an_error_naming_it()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "a.bin", Cluster.RandomBytes(1000)), "known/data");
        var (_, pipe, _) = await c.StartAgentAsync();

        var e = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("nobody/staged-this", Cluster.Via(pipe)));
        Assert.Equal(ErrorCode.NotFound, e.Code);
        Assert.Contains("nobody/staged-this", e.Message);

        var wrongVersion = new string('0', SegmentId.HexLength);
        var v = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("known/data", new DatasetOptions { AgentPipe = pipe, Version = wrongVersion }));
        Assert.Equal(ErrorCode.NotFound, v.Code);
        Assert.Contains(wrongVersion, v.Message);

        // A real version of another dataset is not accepted under this name.
        await c.StageAsync(Cluster.WriteFile(c.Root, "b.bin", Cluster.RandomBytes(1000, seed: 5)), "other/data");
        var mixed = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("other/data", new DatasetOptions { AgentPipe = pipe, Version = staged.Version }));
        Assert.Equal(ErrorCode.NotFound, mixed.Code);
        Assert.Contains("known/data", mixed.Message);
    }

    [Fact]
    public async Task Corrupted_segment_bytes_are_detected_and_never_reach_a_worker()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var data = Cluster.Csvish(4 * 65536);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", data), "risk/corrupt");
        await using var tier = c.Tier();
        var (_, manifest) = await tier.ResolveAsync("risk/corrupt");
        // Flip one byte of the third segment's payload on the cache host itself.
        var key = CacheKeys.Segment(manifest.SegmentIds[2]);
        var stored = (await tier.ExecuteOnAllAsync("GET"u8.ToArray(), [key]))[0].Bulk!;
        stored[^5] ^= 0x01;
        await using (var raw = await RespConnection.ConnectAsync(CacheEndpoint.Parse(c.Hosts[0]), null, TimeSpan.FromSeconds(5), default))
        {
            raw.BeginCommand(3); raw.Argument("SET"u8); raw.Argument(key); raw.Argument(stored);
            Assert.Equal("OK", (await raw.FlushAndReadAsync(default)).Text);
        }

        var (_, pipe, dataDir) = await c.StartAgentAsync();
        var e = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("risk/corrupt", Cluster.Via(pipe)));
        Assert.Equal(ErrorCode.Integrity, e.Code);
        Assert.Contains("checksum", e.Message);
        Assert.Empty(Directory.GetFiles(Path.Combine(dataDir, "complete")));
        Assert.Empty(Directory.GetFiles(Path.Combine(dataDir, "partial")));

        // The SDK's direct path verifies the same way.
        var direct = new DatasetOptions { Mode = DataAccessMode.Direct, CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() } };
        Assert.Equal(ErrorCode.Integrity, (await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("risk/corrupt", direct))).Code);
        Assert.NotEqual("", staged.Version);
    }

    [Fact]
    public async Task Malformed_or_oversized_pipe_frames_close_that_connection_only()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        await c.StageAsync(Cluster.WriteFile(c.Root, "a.bin", Cluster.RandomBytes(1000)), "ok/data");
        var (_, pipe, _) = await c.StartAgentAsync();

        await using var good = await AgentClient.ConnectAsync(pipe);
        foreach (var garbage in new[] { Frame(new byte[4] { 0xff, 0xff, 0xff, 0x7f }, raw: true), Frame("{not json"u8.ToArray()), Frame("{\"op\":123}"u8.ToArray()) })
        {
            await using var bad = new NamedPipeClientStream(".", pipe, PipeDirection.InOut, PipeOptions.Asynchronous);
            await bad.ConnectAsync(5000);
            await bad.WriteAsync(garbage);
            var buffer = new byte[4096];
            var total = 0;
            using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(10));
            int n;
            while ((n = await bad.ReadAsync(buffer.AsMemory(total), timeout.Token)) > 0) total += n;
            Assert.Contains("\"code\":\"bad-request\"", Encoding.UTF8.GetString(buffer, 0, total)); // told why, then closed (the read loop ended)
        }
        var status = await good.StatusAsync();
        Assert.NotNull(status);
        await using var data = await Dataset.OpenAsync("ok/data", Cluster.Via(pipe));
        Assert.Equal(1000, data.Length);
    }

    private static byte[] Frame(byte[] payload, bool raw = false)
    {
        if (raw) return payload;
        var frame = new byte[4 + payload.Length];
        BinaryPrimitives.WriteInt32LittleEndian(frame, payload.Length);
        payload.CopyTo(frame, 4);
        return frame;
    }

    [Theory]
    [InlineData("../escape")]
    [InlineData("/etc/passwd")]
    [InlineData("a/..")]
    [InlineData("a\\b/c")]
    [InlineData("a//b")]
    [InlineData("a/b\u0001")]
    public async Task Invalid_dataset_names_are_rejected_and_nothing_is_written(string name)
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var (_, pipe, dataDir) = await c.StartAgentAsync();
        var before = Directory.GetFileSystemEntries(c.Root, "*", SearchOption.AllDirectories).Order().ToArray();

        // Straight onto the wire, past the client's own validation.
        await using var client = await AgentClient.ConnectAsync(pipe);
        var response = await client.SendAsync(new AgentRequest { Op = AgentOps.Open, Dataset = name });
        Assert.False(response.Ok);
        Assert.Equal(ErrorCode.BadRequest, response.Code);
        Assert.Contains("dataset name", response.Error);

        var (code, _, stderr) = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "x.bin", [1, 2, 3]), "--name", name, "--cache-hosts", c.HostList]);
        Assert.NotEqual(0, code);
        Assert.Contains("dataset name", stderr);
        var after = Directory.GetFileSystemEntries(c.Root, "*", SearchOption.AllDirectories).Where(p => !p.EndsWith("x.bin")).Order().ToArray();
        Assert.Equal(before, after);
        Assert.True(Directory.Exists(dataDir));
    }

    [Fact]
    public async Task Staging_a_path_that_does_not_exist_says_which()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var (code, _, stderr) = await c.RunStagerAsync(["/no/such/file.csv", "--name", "a/b", "--cache-hosts", c.HostList]);
        Assert.Equal(ExitCodes.NotFound, code);
        Assert.Contains("/no/such/file.csv", stderr);
    }

    [Fact]
    public async Task An_unreachable_cache_host_is_retried_then_named_in_the_error()
    {
        var port = FreePorts.Next();
        var options = new CacheTierOptions { Hosts = [$"127.0.0.1:{port}"], MaxAttempts = 3, RetryBaseDelay = TimeSpan.FromMilliseconds(20) };
        await using var tier = new CacheTierClient(options);
        var started = DateTime.UtcNow;
        var e = await Assert.ThrowsAsync<CacheHostUnavailableException>(() => tier.ResolveAsync("a/b"));
        Assert.Contains($"127.0.0.1:{port}", e.Message);
        Assert.Contains("after 3 attempts", e.Message);

        await using var c = new Cluster();
        c.Hosts.Add($"127.0.0.1:{port}");
        var (code, _, stderr) = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "x.bin", [1, 2, 3]), "--name", "a/b", "--cache-hosts", c.HostList]);
        Assert.Equal(ExitCodes.Unavailable, code);
        Assert.Contains($"127.0.0.1:{port}", stderr);
    }

    [Fact]
    public async Task Without_an_agent_the_sdk_warns_and_fetches_straight_from_the_cache_tier()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var bytes = Cluster.Csvish(200_000);
        await c.StageAsync(Cluster.WriteFile(c.Root, "d.csv", bytes), "a/direct");
        var log = new ListLogger();
        var options = new DatasetOptions
        {
            AgentPipe = $"hcd-none-{Environment.ProcessId}", AgentConnectTimeout = TimeSpan.FromMilliseconds(200),
            CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() }, Logger = log,
        };
        await using var data = await Dataset.OpenAsync("a/direct", options);
        Assert.Equal(DataAccessMode.Direct, data.Mode);
        Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
        Assert.Contains(log.Messages, m => m.Contains("no node agent answers", StringComparison.OrdinalIgnoreCase));
    }

    private sealed class ListLogger : Microsoft.Extensions.Logging.ILogger
    {
        public List<string> Messages { get; } = [];
        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;
        public bool IsEnabled(Microsoft.Extensions.Logging.LogLevel logLevel) => true;
        public void Log<TState>(Microsoft.Extensions.Logging.LogLevel logLevel, Microsoft.Extensions.Logging.EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        {
            lock (Messages) Messages.Add(formatter(state, exception));
        }
    }
}
