using System.Globalization;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Bench.Commands;

public sealed class BenchFramesOptions : IVerbOptions
{
    public static string Verb => "frames";

    public static string Summary => "Unfinished-frame attack on a cache host: C connections each send most of one large SET and stop; the host's RSS before, at the peak and after they close, against its budget.";

    [Switch("--connections", "Connections, each holding one unfinished frame.")]
    public int Connections { get; set; } = 60;

    [Switch("--frame", "Declared size of each SET value.")]
    public string Frame { get; set; } = "60MB";

    [Switch("--max-memory", "The cache host's --max-memory.")]
    public string MaxMemory { get; set; } = "2GB";

    [Switch("--settle", "Seconds to watch RSS after the connections close.")]
    public int SettleSeconds { get; set; } = 10;
}

public static class BenchFramesVerb
{
    private static readonly TimeSpan SendLimit = TimeSpan.FromSeconds(120);

    public static async Task<int> RunAsync(BenchFramesOptions o, CancellationToken ct)
    {
        long frame, budget;
        try
        {
            frame = ByteSize.Parse(o.Frame).Bytes;
            budget = ByteSize.Parse(o.MaxMemory).Bytes;
        }
        catch (FormatException e)
        {
            Console.Error.WriteLine($"hpcdata bench frames: {e.Message}");
            return 2;
        }
        await using var host = ComponentProcess.Start(new CacheHostOptions
        {
            Address = "127.0.0.1", Port = 0, MaxMemoryBytes = new(budget), MaxFrameBytes = new(Math.Max(frame + 1024, 64L << 20)),
        }, name: "cachehost");
        var endpoint = CacheEndpoint.Parse(await host.WaitReadyAsync(TimeSpan.FromSeconds(30), ct));
        await Task.Delay(1000, ct);
        long resting = Rss(host.Id);

        var sockets = new List<Socket>();
        int refused = 0, held = 0;
        long peak = resting;
        using var sampler = new CancellationTokenSource();
        var sampling = Task.Run(async () =>
        {
            while (!sampler.IsCancellationRequested)
            {
                peak = Math.Max(peak, Rss(host.Id));
                try { await Task.Delay(50, sampler.Token); } catch (OperationCanceledException) { }
            }
        }, CancellationToken.None);
        var started = DateTime.UtcNow;
        try
        {
            // Two at a time: the machine's cores, so the host receives as fast as it can.
            var gate = new SemaphoreSlim(2);
            var attacks = Enumerable.Range(0, o.Connections).Select(async i =>
            {
                await gate.WaitAsync(ct);
                try
                {
                    var socket = new Socket(SocketType.Stream, ProtocolType.Tcp);
                    lock (sockets) sockets.Add(socket);
                    await socket.ConnectAsync(endpoint.Host, endpoint.Port, ct);
                    bool accepted = await SendUnfinishedAsync(socket, i, frame, ct);
                    Interlocked.Increment(ref accepted ? ref held : ref refused);
                }
                finally
                {
                    gate.Release();
                }
            });
            await Task.WhenAll(attacks);
            await Task.Delay(1000, ct);
        }
        finally
        {
            foreach (var s in sockets) s.Dispose();
        }
        var closed = DateTime.UtcNow;
        long after = Rss(host.Id);
        var settle = DateTime.UtcNow + TimeSpan.FromSeconds(o.SettleSeconds);
        while (DateTime.UtcNow < settle)
        {
            await Task.Delay(500, ct);
            after = Rss(host.Id);
        }
        await sampler.CancelAsync();
        await sampling;
        var info = await RespInfo.ReadAsync(endpoint.Host, endpoint.Port, ct);

        static string Mb(long b) => (b / 1048576.0).ToString("F0", CultureInfo.InvariantCulture) + " MiB";
        Console.WriteLine($"cache host --max-memory {Mb(budget)}; {o.Connections} connections × one unfinished {Mb(frame)} SET ({(closed - started).TotalSeconds:F1} s)");
        Console.WriteLine($"  frames held: {held}, refused with -OOM before buffering: {refused}");
        Console.WriteLine($"  RSS resting {Mb(resting)}, peak {Mb(peak)} (budget + {Mb(peak - budget)}), {o.SettleSeconds} s after close {Mb(after)} (resting + {Mb(after - resting)})");
        Console.WriteLine($"  after: used_memory {info.GetValueOrDefault("used_memory", "?")}, hpc_frame_bytes {info.GetValueOrDefault("hpc_frame_bytes", "?")}, keys {info.GetValueOrDefault("db0", "none")}");
        return 0;
    }

    /// <summary>Sends the header and all but the last bytes of a SET of <paramref name="frame"/> bytes; false when the host refused it.</summary>
    private static async Task<bool> SendUnfinishedAsync(Socket socket, int index, long frame, CancellationToken ct)
    {
        var header = Encoding.ASCII.GetBytes($"*3\r\n$3\r\nSET\r\n${("attack:" + index).Length}\r\nattack:{index}\r\n${frame}\r\n");
        var chunk = new byte[1 << 20];
        var deadline = DateTime.UtcNow + SendLimit;
        try
        {
            await socket.SendAsync(header, SocketFlags.None, ct);
            for (long sent = 0; sent < frame - 16 && DateTime.UtcNow < deadline;)
            {
                int n = (int)Math.Min(chunk.Length, frame - 16 - sent);
                sent += await socket.SendAsync(chunk.AsMemory(0, n), SocketFlags.None, ct);
                if (socket.Available > 0)
                    return false;
            }
            return socket.Available == 0 && !(socket.Poll(200_000, SelectMode.SelectRead));
        }
        catch (SocketException)
        {
            return false;
        }
    }

    private static long Rss(int pid)
    {
        foreach (var line in File.ReadLines($"/proc/{pid}/status"))
            if (line.StartsWith("VmRSS:", StringComparison.Ordinal))
                return long.Parse(line[6..].Trim().Split(' ')[0], CultureInfo.InvariantCulture) * 1024;
        return -1;
    }
}
