using Hpc.Jobs.Tests;
using System.Diagnostics.Metrics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>The components' meters: scraped from real processes through the Prometheus exporter, and read in-process.</summary>
public sealed class MetricsTests
{
    [Fact]
    public async Task A_cache_host_and_an_agent_serve_their_meters_to_a_prometheus_scrape()
    {
        await using var c = new Cluster();
        var hostPort = FreePorts.Next();
        await c.StartCacheHostAsync(o => o.Metrics.Prometheus = hostPort.ToString(CultureInfo.InvariantCulture));
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(12 * 65536 + 10)), "m/scraped");
        var agentPort = FreePorts.Next();
        var pipe = $"hcd{Environment.ProcessId}m";
        var agent = c.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(c.Root, "m"), CacheTier = new CacheTierOptions { Hosts = c.Hosts.ToList() },
            Metrics = new MetricsOptions { Prometheus = agentPort.ToString(CultureInfo.InvariantCulture) },
        }), name: "agent"));
        await agent.WaitReadyAsync(Cluster.Ready);
        await using (var client = await AgentClient.ConnectAsync(pipe))
        {
            await client.PrefetchAsync("m/scraped");
            await client.ReleaseAsync("m/scraped", staged.Version, "job-1", evict: false);
        }

        var node = await ScrapeAsync(agentPort);
        Assert.Equal(staged.Segments, node["hpcdata_segments_total"]);
        // Every stored byte came over the wire once; nothing failed verification.
        Assert.Equal(staged.StoredBytes, node["hpcdata_bytes_received_bytes_total"]);
        Assert.Equal(1, node["hpcdata_fetch_duration_seconds_count"]);
        Assert.False(node.ContainsKey("hpcdata_verification_failures_total"));

        var host = await ScrapeAsync(hostPort);
        // The segments, the manifest and the latest pointer, and at least the segments' bytes sent to the agent.
        Assert.Equal(staged.Segments + 2, host["hpcdata_keys"]);
        Assert.True(host["hpcdata_bytes_sent_bytes_total"] >= staged.StoredBytes, $"sent {host["hpcdata_bytes_sent_bytes_total"]}");
        Assert.True(host["hpcdata_bytes_received_bytes_total"] >= staged.StoredBytes);
        Assert.True(host["hpcdata_memory_used_bytes"] >= staged.StoredBytes);
        Assert.Equal(0, host["hpcdata_refusals_total{reason=\"no-space\"}"]);
    }

    [Fact]
    public async Task A_stager_side_client_counts_what_it_uploads_and_a_refused_write_is_counted_by_the_host()
    {
        await using var c = new Cluster();
        var hostPort = FreePorts.Next();
        await c.StartCacheHostAsync(o => { o.MaxMemoryBytes = new ByteSize(1 << 20); o.Metrics.Prometheus = hostPort.ToString(CultureInfo.InvariantCulture); });
        using var metrics = new ComponentMetrics(HpcMetrics.StagerMeter);
        long sent = 0, segments = 0;
        using var listener = new MeterListener();
        listener.InstrumentPublished = (instrument, l) => { if (instrument.Meter == metrics.Meter) l.EnableMeasurementEvents(instrument); };
        listener.SetMeasurementEventCallback<long>((instrument, value, _, _) =>
        {
            if (instrument.Name == HpcMetrics.BytesSent) Interlocked.Add(ref sent, value);
            else if (instrument.Name == HpcMetrics.Segments) Interlocked.Add(ref segments, value);
        });
        listener.Start();

        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = c.Hosts.ToList(), MaxAttempts = 1 }, metrics: metrics);
        var batch = Enumerable.Range(0, 4).Select(i =>
        {
            var raw = Cluster.RandomBytes(65536, seed: i);
            var stored = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
            var n = SegmentCodec.Encode(raw, stored);
            return (SegmentId.Of(raw), (ReadOnlyMemory<byte>)stored.AsMemory(0, n));
        }).ToList();
        var bytes = await tier.PutSegmentsAsync(batch);
        Assert.Equal(bytes, Interlocked.Read(ref sent));
        Assert.Equal(4, Interlocked.Read(ref segments));

        // 32 more random segments do not fit the 1 MB budget: the host refuses and counts it.
        var tooMany = Enumerable.Range(10, 32).Select(i =>
        {
            var raw = Cluster.RandomBytes(65536, seed: i);
            return (SegmentId.Of(raw), (ReadOnlyMemory<byte>)raw);
        }).ToList();
        await Assert.ThrowsAnyAsync<Exception>(() => tier.PutSegmentsAsync(tooMany));
        var host = await ScrapeAsync(hostPort);
        Assert.True(host["hpcdata_refusals_total{reason=\"no-space\"}"] >= 1);
    }

    [Fact]
    public async Task A_short_lived_stager_pushes_its_meter_over_otlp_when_it_exits()
    {
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var port = FreePorts.Next();
        using var collector = new HttpListener();
        collector.Prefixes.Add($"http://localhost:{port}/");
        collector.Start();
        var received = Task.Run(async () =>
        {
            // The collector's side of OTLP/HTTP: take the export request, answer 200 with an empty protobuf message.
            var context = await collector.GetContextAsync();
            using var body = new MemoryStream();
            await context.Request.InputStream.CopyToAsync(body);
            context.Response.StatusCode = 200;
            context.Response.ContentType = "application/x-protobuf";
            context.Response.Close();
            return (context.Request.Url!.AbsolutePath, context.Request.ContentType, body.ToArray());
        });

        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(3 * 65536)), "m/pushed",
            "--otlp", $"http://localhost:{port}/v1/metrics");
        var (path, type, payload) = await received.WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal("/v1/metrics", path);
        Assert.Equal("application/x-protobuf", type);
        // Protobuf carries names as plain UTF-8: the meter and the instruments the staging recorded are in the request.
        var text = System.Text.Encoding.UTF8.GetString(payload);
        Assert.Contains(HpcMetrics.StagerMeter, text);
        Assert.Contains(HpcMetrics.Segments, text);
        Assert.Contains(HpcMetrics.BytesSent, text);
        Assert.Contains(HpcMetrics.StageDuration, text);
        Assert.True(staged.Segments > 0);
    }

    /// <summary>Metric lines of a Prometheus text scrape, by name with labels (the service labels left out), summed over the rest.</summary>
    private static async Task<Dictionary<string, double>> ScrapeAsync(int port)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(10) };
        var text = await http.GetStringAsync($"http://localhost:{port}/metrics");
        var values = new Dictionary<string, double>();
        foreach (var line in text.Split('\n'))
        {
            if (line.Length == 0 || line[0] == '#') continue;
            var space = line.LastIndexOf(' ');
            var key = line[..space];
            // Drop a trailing timestamp if the exporter wrote one.
            if (!double.TryParse(line[(space + 1)..], NumberStyles.Float, CultureInfo.InvariantCulture, out var value)) continue;
            var parts = key.Split(' ');
            if (parts.Length > 1 && double.TryParse(parts[1], NumberStyles.Float, CultureInfo.InvariantCulture, out var v)) { key = parts[0]; value = v; }
            key = StripScopeLabels(key);
            values[key] = values.GetValueOrDefault(key) + value;
        }
        return values;
    }

    /// <summary>Keeps only the instrument's own labels (reason, result), not the exporter's scope and target labels.</summary>
    private static string StripScopeLabels(string key)
    {
        var brace = key.IndexOf('{');
        if (brace < 0) return key;
        var labels = key[(brace + 1)..^1].Split(',').Where(l => l.StartsWith("reason=", StringComparison.Ordinal) || l.StartsWith("result=", StringComparison.Ordinal)).ToArray();
        return labels.Length == 0 ? key[..brace] : $"{key[..brace]}{{{string.Join(",", labels)}}}";
    }
}
