using System.Diagnostics;
using System.Text;
using System.Text.RegularExpressions;

namespace Hpc.Mpi.Tests;

/// <summary>The two launchers installed on the test machines, called by their own names (installing Open MPI moves plain mpiexec).</summary>
public enum Launcher
{
    Hydra,
    OpenMpi,
}

/// <summary>What one launch of the probe printed and how it ended.</summary>
public sealed record MpiRunResult(int ExitCode, TimeSpan Elapsed, string Output, IReadOnlyList<(int Rank, string Text)> Lines)
{
    /// <summary>The text of every line rank <paramref name="rank"/> printed.</summary>
    public IEnumerable<string> Of(int rank) => Lines.Where(l => l.Rank == rank).Select(l => l.Text);
}

/// <summary>Starts <c>dotnet Hpc.Mpi.Probe.dll scenario</c> on N ranks under a real launcher, bounded in time.</summary>
public static partial class MpiRun
{
    public const int Ranks = 3;
    private static readonly TimeSpan Limit = TimeSpan.FromSeconds(90);

    public static Task<MpiRunResult> ProbeAsync(Launcher launcher, params string[] probeArguments) =>
        ProbeAsync(launcher, new Dictionary<string, string>(), probeArguments);

    public static async Task<MpiRunResult> ProbeAsync(Launcher launcher, IReadOnlyDictionary<string, string> environment, params string[] probeArguments)
    {
        var start = new ProcessStartInfo
        {
            FileName = LauncherPath(launcher),
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        if (launcher == Launcher.OpenMpi)
        {
            // Root in CI containers, 2 cores for 3 ranks; waiting ranks yield instead of spinning.
            foreach (string a in new[] { "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1" }) start.ArgumentList.Add(a);
        }
        // MPICH 4's ch4 device has no yield setting (MPIR_CVAR_POLLS_BEFORE_YIELD is ch3's): its waiting ranks spin,
        // which is why every scenario here is small.
        start.ArgumentList.Add("-n");
        start.ArgumentList.Add(Ranks.ToString());
        start.ArgumentList.Add(DotnetPath());
        start.ArgumentList.Add(ProbePath());
        foreach (string a in probeArguments) start.ArgumentList.Add(a);
        // The probe must find its library by probing, as in a job; an MPI environment of the test host's own must
        // not leak into the ranks. TERM=dumb keeps the console from writing terminal modes into Open MPI's pty output.
        foreach (string key in start.Environment.Keys.ToArray())
            if (key == "HPCDATA_MPI_LIBRARY" || key.StartsWith("OMPI_", StringComparison.Ordinal) || key.StartsWith("PMI_", StringComparison.Ordinal) || key.StartsWith("PMIX_", StringComparison.Ordinal))
                start.Environment.Remove(key);
        start.Environment["TERM"] = "dumb";
        // Every rank is on this machine. UCX opens each network device it listed a moment before, so a device that
        // another test adds or removes meanwhile fails MPI_Init ("init_worker No such device"); loopback stays put.
        start.Environment["UCX_NET_DEVICES"] = "lo";
        foreach (var (key, value) in environment) start.Environment[key] = value;
        start.Environment["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1";

        var output = new StringBuilder();
        using var process = new Process { StartInfo = start };
        process.OutputDataReceived += (_, e) => { if (e.Data is not null) lock (output) output.AppendLine(e.Data); };
        process.ErrorDataReceived += (_, e) => { if (e.Data is not null) lock (output) output.AppendLine(e.Data); };
        var clock = Stopwatch.StartNew();
        process.Start();
        try
        {
            process.BeginOutputReadLine();
            process.BeginErrorReadLine();
            using var timeout = new CancellationTokenSource(Limit);
            try
            {
                await process.WaitForExitAsync(timeout.Token);
            }
            catch (OperationCanceledException)
            {
                Assert.Fail($"{start.FileName} {string.Join(' ', start.ArgumentList)} did not end within {Limit.TotalSeconds} s; killed it. Output:\n{Snapshot(output)}");
            }
            process.WaitForExit();   // drains the redirected streams
        }
        finally
        {
            // On a timeout or a failed assertion, take down the launcher, its proxies/daemons and the ranks.
            if (!process.HasExited) process.Kill(entireProcessTree: true);
        }
        string text = Snapshot(output);
        var lines = RankLine().Matches(text).Select(m => (int.Parse(m.Groups[1].Value), m.Groups[2].Value.TrimEnd())).ToList();
        return new MpiRunResult(process.ExitCode, clock.Elapsed, text, lines);
    }

    /// <summary>Asserts the run ended well and every rank printed a line matching <paramref name="pattern"/>.</summary>
    public static void AssertEveryRank(MpiRunResult run, string pattern)
    {
        Assert.True(run.ExitCode == 0, $"the launcher exited with {run.ExitCode}. Output:\n{run.Output}");
        Assert.DoesNotContain(run.Lines, l => l.Text.StartsWith("FAIL", StringComparison.Ordinal));
        for (int rank = 0; rank < Ranks; rank++)
            Assert.True(run.Of(rank).Any(t => Regex.IsMatch(t, pattern)), $"rank {rank} printed no line matching '{pattern}'. Output:\n{run.Output}");
    }

    private static string LauncherPath(Launcher launcher)
    {
        string name = launcher == Launcher.Hydra ? "mpiexec.hydra" : "mpiexec.openmpi";
        string package = launcher == Launcher.Hydra ? "mpich" : "openmpi-bin";
        foreach (string dir in (Environment.GetEnvironmentVariable("PATH") ?? "/usr/bin").Split(Path.PathSeparator))
        {
            string candidate = Path.Combine(dir, name);
            if (File.Exists(candidate)) return candidate;
        }
        Assert.Fail($"{name} is not on PATH: install the Debian package {package} (.ci/run does when run as root).");
        return name;
    }

    private static string DotnetPath() =>
        Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") is { Length: > 0 } host && File.Exists(host) ? host : "dotnet";

    private static string ProbePath()
    {
        // artifacts/bin/Hpc.Mpi.Tests/<config>/ → artifacts/bin/Hpc.Mpi.Probe/<config>/Hpc.Mpi.Probe.dll
        var here = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
        string path = Path.Combine(here.Parent!.Parent!.FullName, "Hpc.Mpi.Probe", here.Name, "Hpc.Mpi.Probe.dll");
        Assert.True(File.Exists(path), $"the probe program was not built at {path}; build tests/Hpc.Mpi.Tests, which builds it.");
        return path;
    }

    private static string Snapshot(StringBuilder output)
    {
        lock (output) return output.ToString();
    }

    [GeneratedRegex(@"rank (\d+): ([^\r\n]*)")]
    private static partial Regex RankLine();
}
