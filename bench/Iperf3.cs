using System.Diagnostics;
using System.Globalization;
using System.Text.Json;

namespace Hpc.Bench;

/// <summary>
/// The scale model's links measured by iperf3 (Debian's, C, zero-copy sends with <c>-Z</c>): a calibration the
/// machine's CPU does not bound the way a managed sender and receiver per node do on 2 shared cores. Each transfer is
/// one iperf3 server in the sending namespace (one test each, <c>-1</c>) and one client in the receiving namespace
/// pulling from it (<c>-R</c>), all started together.
/// </summary>
public static class Iperf3
{
    public sealed record Transfer(Topology.Member From, Topology.Member To, int Port, long Bytes);

    /// <summary>Runs the transfers at once; returns each receiver's seconds (the longest of its pulls) by node index of <paramref name="receivers"/>.</summary>
    public static async Task<double[]> RunAsync(IReadOnlyList<Topology.Member> receivers, IReadOnlyList<Transfer> transfers, CancellationToken ct)
    {
        if (!Shell.Exists("iperf3")) throw new InvalidOperationException("--calibrate-tool iperf3 needs iperf3 (apt-get install iperf3)");
        var started = new List<Process>();
        try
        {
            foreach (var t in transfers)
                started.Add(Start(t.From, ["-s", "-1", "-B", t.From.Address, "-p", t.Port.ToString(CultureInfo.InvariantCulture)]));
            await Task.Delay(300, ct); // the servers bind; iperf3 prints nothing machine-readable when it does
            var clients = transfers.Select(t => (Transfer: t, Process: Start(t.To,
                ["-c", t.From.Address, "-p", t.Port.ToString(CultureInfo.InvariantCulture), "-n", t.Bytes.ToString(CultureInfo.InvariantCulture), "-R", "-Z", "-J"]))).ToList();
            started.AddRange(clients.Select(c => c.Process));
            var seconds = new double[receivers.Count];
            foreach (var (t, p) in clients)
            {
                var output = await p.StandardOutput.ReadToEndAsync(ct);
                await p.WaitForExitAsync(ct).WaitAsync(TimeSpan.FromMinutes(20), ct);
                if (p.ExitCode != 0) throw new InvalidOperationException($"iperf3 -c {t.From.Address} in {t.To.Namespace} failed: {output[..Math.Min(output.Length, 400)]}");
                using var json = JsonDocument.Parse(output);
                var received = json.RootElement.GetProperty("end").GetProperty("sum_received");
                var i = receivers.ToList().FindIndex(r => r.Namespace == t.To.Namespace);
                seconds[i] = Math.Max(seconds[i], received.GetProperty("seconds").GetDouble());
            }
            return seconds;
        }
        finally
        {
            foreach (var p in started)
            {
                try { if (!p.HasExited) p.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
                p.Dispose();
            }
        }
    }

    private static Process Start(Topology.Member inside, string[] args)
    {
        var info = new ProcessStartInfo("ip") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in (string[])["netns", "exec", inside.Namespace, "iperf3", .. args]) info.ArgumentList.Add(a);
        return Process.Start(info) ?? throw new InvalidOperationException("cannot start ip netns exec iperf3");
    }
}
