using System.Diagnostics;
using System.Runtime.InteropServices;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// <c>hpcdata demo</c> runs the samples program, which starts cache hosts, agents and workers. Signalling or killing the
/// <c>hpcdata</c> process alone (not its process group, as a terminal's Ctrl-C would) must not leave any of them running.
/// </summary>
public sealed class DemoSignalTests
{
    private const int SIGINT = 2, SIGKILL = 9;

    [DllImport("libc", SetLastError = true)]
    private static extern int kill(int pid, int signal);

    /// <summary>Every live process below <paramref name="root"/> (by parent pid in /proc), not counting zombies.</summary>
    private static List<int> Descendants(int root)
    {
        var parents = new Dictionary<int, int>();
        foreach (var dir in Directory.EnumerateDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), out var pid)) continue;
            try
            {
                var stat = File.ReadAllText(Path.Combine(dir, "stat"));
                var fields = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
                if (fields[0] != "Z") parents[pid] = int.Parse(fields[1]);
            }
            catch (IOException) { }
        }
        var found = new List<int>();
        var frontier = new Queue<int>([root]);
        while (frontier.TryDequeue(out var p))
            foreach (var (child, parent) in parents)
                if (parent == p) { found.Add(child); frontier.Enqueue(child); }
        return found;
    }

    private static bool Alive(int pid)
    {
        try { return File.ReadAllText($"/proc/{pid}/stat") is var stat && stat[(stat.LastIndexOf(')') + 2)] != 'Z'; }
        catch (IOException) { return false; }
    }

    [Theory]
    [InlineData(SIGINT)]
    [InlineData(SIGKILL)]
    public async Task Signalling_or_killing_hpcdata_alone_stops_every_process_the_demo_started(int signal)
    {
        if (!OperatingSystem.IsLinux()) return;
        await using var s = new Sandbox();
        // A fast machine can finish a small demo between two looks at its output; a demo that ended well before the
        // signal could be sent is run again with a dataset eight times larger, so the signal lands while it works.
        foreach (var size in new[] { "16MB", "128MB", "1GB" })
        {
            var demo = s.StartHpcdata(["demo", "--size", size, "--nodes", "1", "--workers", "1", "--cache-host-count", "1", "--work-dir", Path.Combine(s.Root, $"demo-{size}")]);
            var below = await ProcessesOnceANodeIsPreparedAsync(demo);
            if (below is null) continue;
            await SignalAndExpectEverythingStoppedAsync(demo, below, signal);
            return;
        }
        Assert.Fail("even the 1 GB demo ended before it could be signalled");
    }

    /// <summary>
    /// The processes below the demo once a node has its copy (the cache host and the agent are running; the workers come
    /// next), or null when the demo ended successfully before that could be seen.
    /// </summary>
    private static async Task<List<int>?> ProcessesOnceANodeIsPreparedAsync(ComponentProcess demo)
    {
        var started = Stopwatch.StartNew();
        while (!demo.StandardOutput.Any(l => l.TrimStart().StartsWith("node1", StringComparison.Ordinal)))
        {
            if (demo.HasExited) return await EndedWithoutErrorAsync(demo);
            Assert.True(started.Elapsed < TimeSpan.FromMinutes(3), $"no node was prepared:\n{string.Join("\n", demo.StandardOutput)}\n{demo.StandardErrorTail}");
            await Task.Delay(50);
        }
        var below = Descendants(demo.Id);
        // Fewer than the samples program, a cache host and an agent: a node that finished fast, and the demo already
        // stopping them. It must then end well (within 30 s), and the caller runs a larger one.
        if (demo.HasExited || below.Count < 3) return await EndedWithoutErrorAsync(demo);
        return below;
    }

    private static async Task<List<int>?> EndedWithoutErrorAsync(ComponentProcess demo)
    {
        var code = await demo.WaitForExitAsync(TimeSpan.FromSeconds(30));
        Assert.True(code == 0, $"the demo failed (exit {code}):\n{string.Join("\n", demo.StandardOutput)}\n{demo.StandardErrorTail}");
        return null;
    }

    private static async Task SignalAndExpectEverythingStoppedAsync(ComponentProcess demo, List<int> below, int signal)
    {
        Assert.Equal(0, kill(demo.Id, signal));

        var deadline = Stopwatch.StartNew();
        while (below.Any(Alive) && deadline.Elapsed < TimeSpan.FromSeconds(60)) await Task.Delay(200);
        var left = below.Where(Alive).ToList();
        foreach (var pid in left) kill(pid, SIGKILL);
        Assert.True(left.Count == 0, $"still running {deadline.Elapsed.TotalSeconds:0} s after the signal: " +
                                     string.Join(", ", left));
        if (signal == SIGINT)
        {
            Assert.Equal(130, await demo.WaitForExitAsync(TimeSpan.FromSeconds(30)));
            Assert.Contains("interrupted; everything it started was stopped", demo.StandardErrorTail);
        }
    }
}
