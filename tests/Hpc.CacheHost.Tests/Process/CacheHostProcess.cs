using System.Diagnostics;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Text;
using Hpc.CommonData.Hosting;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// The real cache host executable on a free port. Its command line is built from <see cref="CacheHostOptions"/>, as
/// every launcher's is; it learns the port from the READY line and always kills the process on dispose, so a failing
/// test never leaves a server behind.
/// </summary>
internal sealed partial class CacheHostProcess : IDisposable
{
    private static readonly TimeSpan StartTimeout = TimeSpan.FromSeconds(60);

    private readonly System.Diagnostics.Process _process;
    private readonly StringBuilder _stderr = new();

    private CacheHostProcess(System.Diagnostics.Process process)
    {
        _process = process;
        _process.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
                lock (_stderr)
                    _stderr.AppendLine(e.Data);
        };
        _process.BeginErrorReadLine();
    }

    public string Host { get; private set; } = "";

    public int Port { get; private set; }

    public bool HasExited => _process.HasExited;

    /// <summary>What the host logged so far, for failure messages.</summary>
    public string Log
    {
        get
        {
            lock (_stderr)
                return _stderr.ToString();
        }
    }

    /// <summary>
    /// The log once it holds <paramref name="text"/>, or after 10 s: the host writes a line on its logger's own thread
    /// and its output reaches the test a moment after the reply that caused it.
    /// </summary>
    public string LogOnceItSays(string text)
    {
        for (var wait = System.Diagnostics.Stopwatch.StartNew(); !Log.Contains(text, StringComparison.Ordinal) && wait.Elapsed < TimeSpan.FromSeconds(10);)
            Thread.Sleep(50);
        return Log;
    }

    /// <summary>Starts a host on a free port with the defaults, changed by <paramref name="configure"/>.</summary>
    public static CacheHostProcess Start(Action<CacheHostOptions>? configure = null)
    {
        var options = new CacheHostOptions { Port = 0 };
        configure?.Invoke(options);
        return StartWithArguments(ProgramContract<CacheHostOptions>.ToArguments(options), ProgramContract<CacheHostOptions>.SecretEnvironment(options));
    }

    /// <summary>Starts a host with a command line spelled by hand (for the compatibility of switches launchers no longer use).</summary>
    public static CacheHostProcess StartWithArguments(IEnumerable<string> args, IReadOnlyDictionary<string, string?>? environment = null)
    {
        var host = new CacheHostProcess(System.Diagnostics.Process.Start(StartInfo(args, environment)) ?? throw new InvalidOperationException("dotnet did not start"));
        try
        {
            host.WaitForReady();
            return host;
        }
        catch
        {
            host.Dispose();
            throw;
        }
    }

    /// <summary>Runs a host that is expected to exit without serving; returns its exit code, stdout and stderr.</summary>
    public static (int ExitCode, string Stdout, string Log) RunToExit(CacheHostOptions options) =>
        RunToExit([.. ProgramContract<CacheHostOptions>.ToArguments(options)]);

    /// <summary>Runs a host, with exactly these arguments, that is expected to exit without serving.</summary>
    public static (int ExitCode, string Stdout, string Log) RunToExit(params string[] args)
    {
        using var host = new CacheHostProcess(System.Diagnostics.Process.Start(StartInfo(args, null)) ?? throw new InvalidOperationException("dotnet did not start"));
        var stdout = host._process.StandardOutput.ReadToEndAsync();
        if (!host._process.WaitForExit(StartTimeout))
            throw new TimeoutException($"Cache host kept running although it should have exited.\n{host.Log}");
        host._process.WaitForExit();
        return (host._process.ExitCode, stdout.Result, host.Log);
    }

    private static ProcessStartInfo StartInfo(IEnumerable<string> args, IReadOnlyDictionary<string, string?>? environment)
    {
        var start = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
            UseShellExecute = false,
        };
        start.ArgumentList.Add(CacheHostDll);
        foreach (string arg in args)
            start.ArgumentList.Add(arg);
        start.Environment["Logging__LogLevel__Default"] = "Debug";
        // Only what the test gives: a password in the test runner's own environment must not leak into the host.
        start.Environment.Remove("HPCDATA_CACHE_PASSWORD");
        foreach (var (name, value) in environment ?? new Dictionary<string, string?>())
            start.Environment[name] = value;
        return start;
    }

    private void WaitForReady()
    {
        var read = _process.StandardOutput.ReadLineAsync();
        string? line = read.Wait(StartTimeout) ? read.Result : null;
        var match = ReadyLine().Match(line ?? "");
        if (!match.Success && _process.WaitForExit(TimeSpan.FromSeconds(10)))
            _process.WaitForExit(); // drains stderr, so the message below carries the host's own explanation
        if (!match.Success)
            throw new InvalidOperationException($"Cache host did not announce READY within {StartTimeout} (stdout: '{line}').\n{Log}");
        Host = match.Groups["host"].Value;
        Port = int.Parse(match.Groups["port"].Value);
    }

    /// <summary>Sends SIGTERM, as a service manager would, and waits for the exit code.</summary>
    public int Terminate(TimeSpan timeout)
    {
        if (SysKill(_process.Id, SigTerm) != 0)
            throw new InvalidOperationException($"kill({_process.Id}, SIGTERM) failed: errno {Marshal.GetLastPInvokeError()}");
        if (!_process.WaitForExit(timeout))
            throw new TimeoutException($"Cache host did not exit within {timeout} of SIGTERM.\n{Log}");
        _process.WaitForExit();
        return _process.ExitCode;
    }

    /// <summary>Sends SIGHUP, as <c>systemctl reload</c> does.</summary>
    public void HangUp()
    {
        if (SysKill(_process.Id, SigHup) != 0)
            throw new InvalidOperationException($"kill({_process.Id}, SIGHUP) failed: errno {Marshal.GetLastPInvokeError()}");
    }

    public void Dispose()
    {
        Kill(_process);
        _process.Dispose();
    }

    private static void Kill(System.Diagnostics.Process process)
    {
        try
        {
            if (!process.HasExited)
            {
                process.Kill(entireProcessTree: true);
                process.WaitForExit(TimeSpan.FromSeconds(10));
            }
        }
        catch (InvalidOperationException)
        {
            // Exited between the check and the kill.
        }
    }

    /// <summary>
    /// The host built alongside these tests: artifacts/bin/Hpc.CacheHost/&lt;configuration&gt;/ under the folder that holds
    /// Hpc.sln, found by walking up from this test assembly.
    /// </summary>
    public static string CacheHostDll { get; } = FindCacheHostDll();

    private static string FindCacheHostDll()
    {
        string configuration = (typeof(CacheHostProcess).Assembly.GetCustomAttribute<AssemblyConfigurationAttribute>()?.Configuration ?? "Debug")
            .ToLowerInvariant();
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "Hpc.sln")))
            {
                string dll = Path.Combine(dir.FullName, "artifacts", "bin", "Hpc.CacheHost", configuration, "Hpc.CacheHost.dll");
                return File.Exists(dll)
                    ? dll
                    : throw new FileNotFoundException($"Build the cache host first (dotnet build -c {configuration}); expected {dll}.", dll);
            }
        }
        throw new DirectoryNotFoundException($"No Hpc.sln above {AppContext.BaseDirectory}.");
    }

    private const int SigHup = 1;
    private const int SigTerm = 15;

    [LibraryImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static partial int SysKill(int pid, int signal);

    [System.Text.RegularExpressions.GeneratedRegex(@"^READY (?<host>.+):(?<port>\d+)$")]
    private static partial System.Text.RegularExpressions.Regex ReadyLine();
}
