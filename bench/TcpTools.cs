using System.Buffers.Binary;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Text.Json;

namespace Hpc.Bench;

/// <summary>
/// Plain TCP with no product code, to calibrate the emulator: a server that sends as many bytes as a client asks for,
/// and a client that asks several servers at once and times the whole transfer.
/// </summary>
public static class TcpTools
{
    public static async Task<int> ServeAsync(string address, int port, CancellationToken ct)
    {
        var listener = new TcpListener(IPAddress.Parse(address), port);
        listener.Start(512);
        Console.WriteLine($"READY {address}:{((IPEndPoint)listener.LocalEndpoint).Port}");
        var payload = new byte[1 << 20];
        Random.Shared.NextBytes(payload); // incompressible, in case a link ever compresses
        try
        {
            while (!ct.IsCancellationRequested)
            {
                var client = await listener.AcceptTcpClientAsync(ct);
                _ = Task.Run(async () =>
                {
                    using (client)
                    {
                        var s = client.GetStream();
                        var header = new byte[8];
                        await s.ReadExactlyAsync(header, ct);
                        for (var left = BinaryPrimitives.ReadInt64LittleEndian(header); left > 0; left -= payload.Length)
                            await s.WriteAsync(payload.AsMemory(0, (int)Math.Min(left, payload.Length)), ct);
                        client.Client.Shutdown(SocketShutdown.Send);
                        _ = await s.ReadAsync(header, ct); // returns when the client closes: every byte was delivered
                    }
                }, ct);
            }
        }
        catch (OperationCanceledException) { }
        return 0;
    }

    public sealed record PullResult(double Seconds, long Bytes);

    public static async Task<int> PullAsync(IReadOnlyList<string> sources, long bytesEach, bool waitGo, CancellationToken ct)
    {
        if (waitGo)
        {
            Console.WriteLine("READY");
            await Console.In.ReadLineAsync(ct);
        }
        var clock = Stopwatch.StartNew();
        var counts = await Task.WhenAll(sources.Select(async src =>
        {
            var colon = src.LastIndexOf(':');
            using var client = new TcpClient { ReceiveBufferSize = 1 << 20 };
            await client.ConnectAsync(IPAddress.Parse(src[..colon]), int.Parse(src[(colon + 1)..]), ct);
            var s = client.GetStream();
            var header = new byte[8];
            BinaryPrimitives.WriteInt64LittleEndian(header, bytesEach);
            await s.WriteAsync(header, ct);
            var buffer = new byte[1 << 20];
            long got = 0;
            int n;
            while ((n = await s.ReadAsync(buffer, ct)) > 0) got += n;
            if (got != bytesEach) throw new IOException($"{src} sent {got} of {bytesEach} bytes");
            return got;
        }));
        Console.WriteLine(JsonSerializer.Serialize(new PullResult(clock.Elapsed.TotalSeconds, counts.Sum()), BenchJson.Options));
        return 0;
    }
}
