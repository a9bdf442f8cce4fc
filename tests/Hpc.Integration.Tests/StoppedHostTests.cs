using System.Diagnostics;
using Hpc.CommonData;

namespace Hpc.Integration.Tests;

/// <summary>
/// A cache host frozen with SIGSTOP: its kernel still completes TCP handshakes and takes requests into its buffers, but
/// nothing answers. Unlike a dead host (refused at once), this used to cost a node 5 × 30 s before it served its own copy.
/// </summary>
public sealed class StoppedHostTests(Xunit.Abstractions.ITestOutputHelper output)
{
    [Fact]
    public async Task A_node_holding_a_complete_copy_serves_it_within_seconds_when_its_cache_host_is_stopped()
    {
        if (!OperatingSystem.IsLinux()) return;
        await using var c = new Cluster();
        await c.StartCacheHostAsync();
        var bytes = Cluster.RandomBytes(2 << 20, seed: 31);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "d.bin", bytes), "fault/stopped");
        var (_, pipe, _) = await c.StartAgentAsync();
        await using (var first = await Dataset.OpenAsync("fault/stopped", Cluster.Via(pipe)))
            Assert.Equal(staged.Version, first.Version);

        var host = c.Processes.First(p => p.ReadyText == c.Hosts[0]);
        Signal(host.Id, "STOP");
        try
        {
            // Three opens in a row, each served from the local copy within seconds. At most one of them waits out the
            // 3 s response timeout: once the agent has seen the host not answer, the next open does not wait again.
            // SIGSTOP stops the host's threads when they are next scheduled, so the first open may still be answered.
            var waits = new List<TimeSpan>();
            for (var i = 0; i < 3; i++)
            {
                var clock = Stopwatch.StartNew();
                await using var data = await Dataset.OpenAsync("fault/stopped", Cluster.Via(pipe));
                waits.Add(clock.Elapsed);
                output.WriteLine($"open {i + 1}: local copy served {clock.Elapsed.TotalSeconds:0.00} s after the cache host was stopped");
                Assert.Equal(staged.Version, data.Version);
                Assert.True(data.VerifyHash());
                Assert.Equal(bytes, data.GetSpan(0, bytes.Length).ToArray());
                // The old policy waited 150 s. The margin is for a loaded test machine.
                Assert.True(clock.Elapsed < TimeSpan.FromSeconds(15), $"open {i + 1} served the local copy after {clock.Elapsed.TotalSeconds:0.0} s");
            }
            var waited = string.Join(", ", waits.Select(w => $"{w.TotalSeconds:0.0} s"));
            Assert.True(waits.Count(w => w >= TimeSpan.FromSeconds(2.5)) <= 1, $"more than one open waited for the stopped host: {waited}");
        }
        finally
        {
            Signal(host.Id, "CONT");
        }
    }

    private static void Signal(int pid, string signal)
    {
        using var kill = Process.Start(new ProcessStartInfo("kill", [$"-{signal}", pid.ToString()]) { UseShellExecute = false })!;
        kill.WaitForExit();
        Assert.Equal(0, kill.ExitCode);
    }
}
