using System.Diagnostics;
using System.Net.Sockets;
using System.Text.Json;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;

namespace Hpc.Samples;

public sealed class SoaClientOptions : IVerbOptions
{
    public static string Verb => "soa-client";

    public static string Summary => "Sample SOA client: sends M portfolio VaR requests to the job's service hosts and measures end-to-end time.";

    [Switch("--requests", "Requests to send.", Alias = "-m")]
    public int Requests { get; set; } = 1000;

    [Switch("--positions", "Positions per portfolio (80 ≈ 1 KB per request).")]
    public int Positions { get; set; } = SoaProtocol.DefaultPositions;

    [Switch("--endpoints", "Service hosts host:port,… (default: $HPCDATA_SERVICE_ENDPOINTS, set by prestage --client).")]
    public string? Endpoints { get; set; }

    [Switch("--json", "Also write the measurement to this file.")]
    public string? Json { get; set; }
}

/// <summary>
/// The reference's method: M requests spread over every service host, one outstanding request per host, timed from
/// the first connect to the last reply. Run once with hosts that use the common data and once with <c>--no-data</c>
/// hosts; the difference is the data access time.
/// </summary>
public static class SoaClient
{
    public sealed record Measurement(int Requests, int Hosts, double Seconds, double FirstReplyMsMedian, double FirstReplyMsMax, double LaterReplyMsMedian, int Days);

    public static async Task<int> RunAsync(SoaClientOptions o)
    {
        var list = JobVariables.First(o.Endpoints, Environment.GetEnvironmentVariable(JobVariables.ServiceEndpoints));
        if (list is null) { Console.Error.WriteLine("hpcdata soa-client: no service hosts (--endpoints or HPCDATA_SERVICE_ENDPOINTS)"); return 2; }
        var endpoints = list.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        var clock = Stopwatch.StartNew();
        try
        {
            var perHost = await Task.WhenAll(endpoints.Select((e, h) => RunHostAsync(e, h, o.Requests / endpoints.Length + (h < o.Requests % endpoints.Length ? 1 : 0), o.Positions)));
            var seconds = clock.Elapsed.TotalSeconds;
            var first = perHost.Where(p => p.Latencies.Count > 0).Select(p => p.Latencies[0]).Order().ToList();
            var later = perHost.SelectMany(p => p.Latencies.Skip(1)).Order().ToList();
            var m = new Measurement(perHost.Sum(p => p.Latencies.Count), endpoints.Length, seconds,
                first.Count > 0 ? first[first.Count / 2] : 0, first.Count > 0 ? first[^1] : 0, later.Count > 0 ? later[later.Count / 2] : 0, perHost.Max(p => p.Days));
            Console.WriteLine($"soa-client: {m.Requests} requests to {m.Hosts} service hosts in {m.Seconds:0.000} s end to end; first reply per host median " +
                              $"{m.FirstReplyMsMedian:0.0} ms (max {m.FirstReplyMsMax:0.0} ms), later replies median {m.LaterReplyMsMedian:0.000} ms; history of {m.Days} days");
            if (o.Json is not null) await File.WriteAllTextAsync(o.Json, JsonSerializer.Serialize(m, JsonSerializerOptions.Web));
            return 0;
        }
        catch (Exception e) when (e is IOException or SocketException or FormatException)
        {
            Console.Error.WriteLine($"hpcdata soa-client: {e.Message}");
            return 1;
        }
    }

    private static async Task<(List<double> Latencies, int Days)> RunHostAsync(string endpoint, int index, int requests, int positions)
    {
        var colon = endpoint.LastIndexOf(':');
        using var tcp = new TcpClient { NoDelay = true };
        await tcp.ConnectAsync(endpoint[..colon], int.Parse(endpoint[(colon + 1)..]));
        var stream = tcp.GetStream();
        var rng = new Random(index);
        var reply = new byte[12];
        var latencies = new List<double>(requests);
        var days = 0;
        for (var i = 0; i < requests; i++)
        {
            var request = SoaProtocol.Request(rng, positions, Hpc.CommonData.Local.MarketHistory.DefaultInstruments);
            var t = Stopwatch.GetTimestamp();
            await stream.WriteAsync(request);
            if (!await SoaProtocol.ReadExactlyOrEndAsync(stream, reply, CancellationToken.None)) throw new IOException($"service host {endpoint} closed the connection");
            latencies.Add(Stopwatch.GetElapsedTime(t).TotalMilliseconds);
            days = System.Buffers.Binary.BinaryPrimitives.ReadInt32LittleEndian(reply.AsSpan(8));
        }
        return (latencies, days);
    }
}
