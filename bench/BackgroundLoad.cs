using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Hosting;

namespace Hpc.Bench;

/// <summary>
/// A busy node's other work beside the agent, for measuring the agent as it runs on a compute node: CPU-bound loops
/// (a job's workers) and processes that write and read tmpfs files and send them through loopback sockets (the job's
/// I/O and the node's other daemons). Each is its own process, started and stopped by the benchmark, and each also stops
/// by itself after its time limit, so a benchmark that dies leaves nothing running for long.
/// </summary>
public sealed class BackgroundLoad : IAsyncDisposable
{
    public const int CpuLoops = 2, IoLoops = 2;
    public const string Cpu = "cpu", Io = "io";

    private readonly List<ComponentProcess> _processes;

    private BackgroundLoad(List<ComponentProcess> processes) => _processes = processes;

    public static async Task<BackgroundLoad> StartAsync(string directory, TimeSpan limit, CancellationToken ct)
    {
        var seconds = ((int)Math.Ceiling(limit.TotalSeconds)).ToString(System.Globalization.CultureInfo.InvariantCulture);
        var processes = new List<ComponentProcess>();
        try
        {
            for (var i = 0; i < CpuLoops; i++)
                processes.Add(ComponentProcess.Start("hpcdata", ["bench", "load", "--kind", Cpu, "--seconds", seconds], name: $"cpu load {i + 1}"));
            for (var i = 0; i < IoLoops; i++)
                processes.Add(ComponentProcess.Start("hpcdata", ["bench", "load", "--kind", Io, "--seconds", seconds, "--dir", directory], name: $"io load {i + 1}"));
            foreach (var p in processes) await p.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            return new BackgroundLoad(processes);
        }
        catch
        {
            foreach (var p in processes) await p.DisposeAsync();
            throw;
        }
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var p in _processes) await p.DisposeAsync();
    }

    /// <summary>
    /// The load process's own loop until <paramref name="seconds"/> pass or it is stopped: <see cref="Cpu"/> spins one
    /// core; <see cref="Io"/> writes a 64 MiB file into <paramref name="directory"/> a MiB at a time, reads it back, and
    /// sends what it read to itself over a loopback TCP connection, again and again.
    /// </summary>
    public static async Task<int> RunAsync(string kind, int seconds, string? directory, CancellationToken ct)
    {
        if (kind is not (Cpu or Io)) { Console.Error.WriteLine($"hpcdata bench load: --kind '{kind}': use {Cpu} or {Io}"); return 2; }
        if (seconds is < 1 or > 3600) { Console.Error.WriteLine("hpcdata bench load: --seconds must be between 1 and 3600"); return 2; }
        if (kind == Io && string.IsNullOrEmpty(directory)) { Console.Error.WriteLine("hpcdata bench load: --kind io needs --dir"); return 2; }
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(TimeSpan.FromSeconds(seconds));
        Console.WriteLine("READY");
        try
        {
            if (kind == Cpu) await Task.Run(() => Spin(limit.Token), CancellationToken.None);
            else await WriteReadSendAsync(directory!, limit.Token);
        }
        catch (OperationCanceledException) when (limit.IsCancellationRequested) { }
        return 0;
    }

    private static void Spin(CancellationToken stop)
    {
        var x = 0UL;
        while (!stop.IsCancellationRequested)
            for (var i = 0; i < 1_000_000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
        GC.KeepAlive(x);
    }

    private static async Task WriteReadSendAsync(string directory, CancellationToken stop)
    {
        Directory.CreateDirectory(directory);
        var file = Path.Combine(directory, $"load-{Environment.ProcessId}.bin");
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start(1);
        using var sender = new TcpClient();
        await sender.ConnectAsync(IPAddress.Loopback, ((IPEndPoint)listener.LocalEndpoint).Port, stop);
        using var receiver = await listener.AcceptTcpClientAsync(stop);
        var draining = Task.Run(async () =>
        {
            var sink = new byte[1 << 20];
            var stream = receiver.GetStream();
            while (await stream.ReadAsync(sink, stop) > 0) { }
        }, stop);
        var chunk = new byte[1 << 20];
        Random.Shared.NextBytes(chunk);
        var outgoing = sender.GetStream();
        try
        {
            while (true)
            {
                stop.ThrowIfCancellationRequested();
                await using (var write = new FileStream(file, FileMode.Create, FileAccess.Write, FileShare.None, 0))
                    for (var i = 0; i < 64; i++) await write.WriteAsync(chunk, stop);
                await using (var read = new FileStream(file, FileMode.Open, FileAccess.Read, FileShare.None, 0))
                    while (await read.ReadAsync(chunk, stop) is > 0 and var n) await outgoing.WriteAsync(chunk.AsMemory(0, n), stop);
            }
        }
        finally
        {
            File.Delete(file);
            sender.Close();
            try { await draining; } catch (Exception e) when (e is OperationCanceledException or IOException or SocketException) { }
        }
    }
}
