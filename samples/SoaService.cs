using System.Buffers.Binary;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.CommonData.Local;
using Microsoft.Extensions.Logging;

namespace Hpc.Samples;

public sealed class SoaHostOptions : IVerbOptions
{
    public static string Verb => "soa-host";

    public static string Summary => "Sample SOA service host: opens the job's common data once, then answers portfolio VaR requests over loopback TCP.";

    [Switch("--no-data", "Answer from a small synthetic history instead of the common data (the baseline 'without common data').")]
    public bool NoData { get; set; }

    [Switch("--days", "--no-data: days of synthetic history (use the real history's length for a like-for-like baseline).")]
    public int Days { get; set; } = 250;

    [Switch("--port", "TCP port (0: any free one, announced as READY host:port).")]
    public int Port { get; set; }
}

/// <summary>
/// A service host as a SOA job runs it: the data is loaded on the first request (as a service would in its
/// constructor), so the client's end-to-end time includes it; every later request is computed from the same
/// in-memory daily returns. Requests are small: a portfolio of instrument indexes and weights (~1 KB).
/// </summary>
public static class SoaHost
{
    public static async Task<int> RunAsync(SoaHostOptions o)
    {
        using var loggerFactory = LoggerFactory.Create(b => b.SetMinimumLevel(LogLevel.Warning).AddConsole(c => c.LogToStandardErrorThreshold = LogLevel.Trace));
        using var stop = new CancellationTokenSource();
        using var signals = Signals.CancelOn(stop);
        var endpointsDir = Environment.GetEnvironmentVariable(JobVariables.EndpointsDirectory);
        // Across nodes (Slurm) clients come from elsewhere; on one machine loopback is enough.
        var listener = new TcpListener(endpointsDir is null ? IPAddress.Loopback : IPAddress.Any, o.Port);
        listener.Start();
        var port = ((IPEndPoint)listener.LocalEndpoint).Port;
        var endpoint = endpointsDir is null ? $"127.0.0.1:{port}" : $"{Dns.GetHostName()}:{port}";
        if (endpointsDir is not null) await File.WriteAllTextAsync(Path.Combine(endpointsDir, $"{Dns.GetHostName()}-{Environment.ProcessId}"), endpoint + "\n");
        Console.WriteLine($"READY {endpoint}");

        var returns = new Lazy<Task<Returns>>(() => LoadAsync(o.NoData, o.Days, loggerFactory.CreateLogger("soa-host")));
        var connections = new List<Task>();
        try
        {
            while (!stop.IsCancellationRequested)
            {
                var client = await listener.AcceptTcpClientAsync(stop.Token);
                connections.Add(ServeAsync(client, returns, stop.Token));
            }
        }
        catch (OperationCanceledException) { }
        finally { listener.Stop(); }
        try { await Task.WhenAll(connections); } catch (Exception e) when (e is IOException or OperationCanceledException or SocketException) { }
        return 0;
    }

    private static async Task<Returns> LoadAsync(bool synthetic, int days, ILogger log)
    {
        var clock = Stopwatch.StartNew();
        if (synthetic) return Returns.Synthetic(MarketHistory.DefaultInstruments, days);
        var name = Environment.GetEnvironmentVariable(JobVariables.Dataset) ?? throw new InvalidOperationException("HPCDATA_DATASET is not set: run under hpcdata prestage");
        await using var data = await Dataset.OpenAsync(name, new DatasetOptions { Logger = log });
        var opened = clock.Elapsed.TotalMilliseconds;
        var r = Returns.Load(data.Windows());
        Console.Error.WriteLine($"soa-host {Environment.ProcessId}: {name} {data.Version[..12]}… opened via {data.Mode.ToString().ToLowerInvariant()} in {opened:0.0} ms, " +
                                $"{r.Days} days × {r.Instruments} instruments parsed in {clock.Elapsed.TotalMilliseconds - opened:0} ms");
        return r;
    }

    private static async Task ServeAsync(TcpClient client, Lazy<Task<Returns>> returns, CancellationToken ct)
    {
        using var _ = client;
        client.NoDelay = true;
        var stream = client.GetStream();
        var header = new byte[4];
        var response = new byte[12];
        try
        {
            while (true)
            {
                if (!await SoaProtocol.ReadExactlyOrEndAsync(stream, header, ct)) return;
                var length = BinaryPrimitives.ReadInt32LittleEndian(header);
                if (length is < 4 or > 1 << 20) return;
                var request = new byte[length];
                if (!await SoaProtocol.ReadExactlyOrEndAsync(stream, request, ct)) return;
                var r = await returns.Value;
                var (var99, days) = r.PortfolioValueAtRisk(request);
                BinaryPrimitives.WriteDoubleLittleEndian(response, var99);
                BinaryPrimitives.WriteInt32LittleEndian(response.AsSpan(8), days);
                await stream.WriteAsync(response, ct);
            }
        }
        catch (Exception e) when (e is IOException or OperationCanceledException or SocketException) { }
    }
}

/// <summary>Requests: int32 length, int32 count, then count × (int32 instrument, float64 weight). Replies: float64 VaR, int32 days.</summary>
public static class SoaProtocol
{
    public const int DefaultPositions = 80; // 4 + 80 × 12 = 964 bytes

    public static byte[] Request(Random rng, int positions, int instruments)
    {
        var body = new byte[8 + positions * 12];
        BinaryPrimitives.WriteInt32LittleEndian(body, body.Length - 4);
        BinaryPrimitives.WriteInt32LittleEndian(body.AsSpan(4), positions);
        for (var i = 0; i < positions; i++)
        {
            BinaryPrimitives.WriteInt32LittleEndian(body.AsSpan(8 + i * 12), rng.Next(instruments));
            BinaryPrimitives.WriteDoubleLittleEndian(body.AsSpan(12 + i * 12), 1.0 / positions);
        }
        return body;
    }

    public static async Task<bool> ReadExactlyOrEndAsync(Stream s, byte[] buffer, CancellationToken ct)
    {
        var read = 0;
        while (read < buffer.Length)
        {
            var n = await s.ReadAsync(buffer.AsMemory(read), ct);
            if (n == 0) return read == 0 ? false : throw new IOException("connection ended inside a message");
            read += n;
        }
        return true;
    }
}

/// <summary>Daily simple returns, instrument-major (one instrument's history is contiguous): the table every request is computed from.</summary>
public sealed class Returns(float[] values, int days, int instruments)
{
    public int Days { get; } = days;
    public int Instruments { get; } = instruments;

    public static Returns Synthetic(int instruments, int days)
    {
        var rng = new Random(1);
        var v = new float[instruments * days];
        for (var i = 0; i < v.Length; i++) v[i] = (float)((rng.NextDouble() - 0.5) * 0.04);
        return new Returns(v, days, instruments);
    }

    /// <summary>One pass over the market-history CSV (date,symbol,close; ordered by date then symbol).</summary>
    public static Returns Load(IEnumerable<ReadOnlyMemory<byte>> windows)
    {
        var last = new double[MarketHistory.MaxInstruments];
        var rows = new List<float[]>();
        float[]? today = null;
        var instruments = 0;
        long currentDate = -1;
        MarketHistory.ForEachRow(windows, (dateKey, instrument, price) =>
        {
            if (dateKey != currentDate)
            {
                if (today is not null) rows.Add(today);
                today = new float[Math.Max(instruments, 1) + 64];
                currentDate = dateKey;
            }
            if (instrument >= today!.Length) Array.Resize(ref today, instrument + 64);
            var previous = last[instrument];
            if (previous > 0) today[instrument] = (float)(price / previous - 1);
            else instruments = Math.Max(instruments, instrument + 1);
            last[instrument] = price;
        });
        if (today is not null) rows.Add(today);
        var days = Math.Max(0, rows.Count - 1); // the first day has no returns
        var v = new float[(long)days * instruments];
        for (var d = 0; d < days; d++)
        {
            var row = rows[d + 1];
            for (var i = 0; i < Math.Min(instruments, row.Length); i++) v[(long)i * days + d] = row[i];
        }
        return new Returns(v, days, instruments);
    }

    /// <summary>99% one-day historical VaR of the weighted portfolio in <paramref name="request"/>.</summary>
    public (double ValueAtRisk99, int Days) PortfolioValueAtRisk(ReadOnlySpan<byte> request)
    {
        var count = BinaryPrimitives.ReadInt32LittleEndian(request);
        if (count < 0 || 4 + count * 12 > request.Length) throw new IOException("malformed request");
        var pnl = new double[Days];
        for (var p = 0; p < count; p++)
        {
            var instrument = BinaryPrimitives.ReadInt32LittleEndian(request[(4 + p * 12)..]) % Math.Max(1, Instruments);
            var weight = BinaryPrimitives.ReadDoubleLittleEndian(request[(8 + p * 12)..]);
            var history = values.AsSpan(instrument * Days, Days);
            for (var d = 0; d < Days; d++) pnl[d] += weight * history[d];
        }
        if (Days == 0) return (0, 0);
        Array.Sort(pnl);
        return (-pnl[(int)Math.Floor(0.01 * (Days - 1))], Days);
    }
}
