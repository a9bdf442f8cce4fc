using Hpc.CommonData;
using Hpc.CommonData.Cli;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Scheduling;

/// <summary>What node prep recorded about an agent it started, so node release can stop that agent and no other.</summary>
public sealed record StartedAgent(int Pid, string Pipe, string DataDirectory, string Log, DateTimeOffset Started);

/// <summary>The state file's JSON, generated at compile time: hpcdata also runs compiled to native code.</summary>
[System.Text.Json.Serialization.JsonSerializable(typeof(StartedAgent))]
internal sealed partial class StartedAgentJson : System.Text.Json.Serialization.JsonSerializerContext;

/// <summary>
/// Starts a node agent that outlives the node-prep process (the scheduler's step ends, the agent keeps serving the
/// job's workers), and remembers it in a small state file keyed by pipe name.
/// </summary>
public static partial class NodeAgentLauncher
{
    public const string StateDirectoryVariable = "HPCDATA_STATE_DIR";
    public const string ManagedVariable = "HPCDATA_AGENT_MANAGED";
    public const string SystemdUnit = "hpcdata-agent.service";
    /// <summary>The Windows service deploy/windows/install-agent.ps1 registers.</summary>
    public const string WindowsService = "hpcdata-agent";

    public static string StateDirectory =>
        JobVariables.First(Environment.GetEnvironmentVariable(StateDirectoryVariable)) ?? Path.Combine(Path.GetTempPath(), "hpcdata-agents");

    public static string StateFile(string pipe) =>
        Path.Combine(StateDirectory, new string(pipe.Select(c => char.IsAsciiLetterOrDigit(c) || c is '-' or '.' ? c : '_').ToArray()) + ".json");

    /// <summary>Why this node's agent must not be started by us (a service manager owns it), or null.</summary>
    public static string? ManagedBy()
    {
        if (Environment.GetEnvironmentVariable(ManagedVariable) is "1" or "true") return $"{ManagedVariable} is set";
        if (Directory.Exists("/run/systemd/system") &&
            new[] { "/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system" }.Any(d => File.Exists(Path.Combine(d, SystemdUnit))))
            return $"systemd unit {SystemdUnit}";
        if (OperatingSystem.IsWindows())
        {
            using var service = Microsoft.Win32.Registry.LocalMachine.OpenSubKey($@"SYSTEM\CurrentControlSet\Services\{WindowsService}");
            if (service is not null) return $"Windows service {WindowsService}";
        }
        return null;
    }

    /// <summary>
    /// Starts the agent in its own session with its output in a log file (so it holds none of our pipes and survives
    /// us), then waits until it answers on its pipe. Throws with the agent's last log lines when it does not.
    /// </summary>
    public static async Task<StartedAgent> StartAsync(NodeAgentOptions agent, TimeSpan timeout, CancellationToken ct)
    {
        var (pipe, dataDirectory) = (agent.Pipe, agent.DataDirectory);
        Directory.CreateDirectory(StateDirectory);
        var stem = Path.GetFileNameWithoutExtension(StateFile(pipe));
        var log = Path.Combine(StateDirectory, stem + ".log");
        var exitFile = Path.Combine(StateDirectory, stem + ".exit");
        TryDelete(exitFile);
        // The log is appended to by every agent on this pipe: only what this one writes explains its failure.
        var logStart = LengthOf(log);
        List<string> command = [.. ComponentLocator.Command(NodeAgentOptions.Assembly), .. ProgramContract<NodeAgentOptions>.ToArguments(agent)];
        var pid = OperatingSystem.IsWindows() ? StartDetachedOnWindows(command, log, exitFile, agent) : await StartInNewSessionAsync(command, log, exitFile, agent, ct);

        var started = new StartedAgent(pid, pipe, dataDirectory, log, DateTimeOffset.UtcNow);
        await File.WriteAllTextAsync(StateFile(pipe), JsonSerializer.Serialize(started, StartedAgentJson.Default.StartedAgent), ct);

        var clock = Stopwatch.StartNew();
        var delay = TimeSpan.FromMilliseconds(50);
        while (true)
        {
            if (!IsAlive(pid))
            {
                TryDelete(StateFile(pipe));
                var message = $"the node agent exited during start-up (pid {pid}); its log {log} ends:{Environment.NewLine}{Tail(log, logStart)}";
                // Its exit code keeps its class: a refused password or an unusable data directory is no unreachable tier.
                var code = ExitCodeOf(exitFile);
                TryDelete(exitFile);
                throw code is { } exited ? new CommonDataException(ExitCodes.KindOf(exited), message) : new IOException(message);
            }
            // Until its socket file exists there is nothing to connect to, and looking for it costs a stat: polled
            // every 10 ms, a native agent (ready in ~30 ms) is found as soon as it answers.
            var listening = !AgentClient.SocketMissing(pipe);
            if (listening)
            {
                try
                {
                    await using var probe = await AgentClient.ConnectAsync(pipe, TimeSpan.FromMilliseconds(500), ct);
                    await probe.StatusAsync(ct);
                    return started;
                }
                catch (Exception e) when (e is TimeoutException or IOException or UnauthorizedAccessException) { }
            }
            if (clock.Elapsed > timeout)
            {
                await StopAsync(started, TimeSpan.FromSeconds(5));
                throw new TimeoutException($"the node agent did not answer on pipe '{pipe}' within {timeout.TotalSeconds:0} s and was stopped; its log {log} ends:{Environment.NewLine}{Tail(log, logStart)}");
            }
            await Task.Delay(listening ? delay : TimeSpan.FromMilliseconds(10), ct);
            if (listening) delay = TimeSpan.FromMilliseconds(Math.Min(500, delay.TotalMilliseconds * 2));
        }
    }

    private static async Task<int> StartInNewSessionAsync(List<string> command, string log, string exitFile, NodeAgentOptions agent, CancellationToken ct)
    {
        var info = new ProcessStartInfo("/bin/sh") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true, RedirectStandardInput = true };
        // setsid: a new session, so a terminal's Ctrl-C or the end of the scheduler step does not take the agent down.
        info.ArgumentList.Add("-c");
        info.ArgumentList.Add("log=$1; shift; if command -v setsid >/dev/null; then setsid \"$@\" </dev/null >>\"$log\" 2>&1 & else \"$@\" </dev/null >>\"$log\" 2>&1 & fi; echo $!");
        info.ArgumentList.Add("sh");
        info.ArgumentList.Add(log);
        foreach (var a in command) info.ArgumentList.Add(a);
        foreach (var (k, v) in ProgramContract<NodeAgentOptions>.SecretEnvironment(agent)) info.Environment[k] = v;
        info.Environment[NodeAgentOptions.ExitFileVariable] = exitFile;
        KeepInheritedDescriptorsFromChildren();
        using var sh = Process.Start(info) ?? throw new IOException("cannot run /bin/sh to start the node agent");
        sh.StandardInput.Close();
        var pidText = await sh.StandardOutput.ReadToEndAsync(ct);
        await sh.WaitForExitAsync(ct);
        if (!int.TryParse(pidText.Trim(), out var pid)) throw new IOException($"could not start the node agent: {await sh.StandardError.ReadToEndAsync(ct)}");
        return pid;
    }

    /// <summary>
    /// Windows has no /bin/sh or setsid, and a child does not die with its parent there: the agent is started directly,
    /// without a console window, and writes its own output to the log (<see cref="NodeAgentOptions.LogVariable"/>)
    /// because our redirected pipes would break when node prep exits.
    /// </summary>
    private static int StartDetachedOnWindows(List<string> command, string log, string exitFile, NodeAgentOptions agent)
    {
        var info = new ProcessStartInfo(command[0]) { UseShellExecute = false, CreateNoWindow = true };
        foreach (var a in command.Skip(1)) info.ArgumentList.Add(a);
        foreach (var (k, v) in ProgramContract<NodeAgentOptions>.SecretEnvironment(agent)) info.Environment[k] = v;
        info.Environment[NodeAgentOptions.LogVariable] = log;
        info.Environment[NodeAgentOptions.ExitFileVariable] = exitFile;
        using var process = Process.Start(info) ?? throw new IOException($"cannot run {command[0]} to start the node agent");
        return process.Id;
    }

    public static StartedAgent? Find(string pipe)
    {
        try
        {
            var path = StateFile(pipe);
            return File.Exists(path) ? JsonSerializer.Deserialize(File.ReadAllText(path), StartedAgentJson.Default.StartedAgent) : null;
        }
        catch (Exception e) when (e is IOException or JsonException or UnauthorizedAccessException) { return null; }
    }

    /// <summary>Stops an agent we started (SIGTERM, then SIGKILL after the grace period) and forgets it.</summary>
    public static async Task StopAsync(StartedAgent agent, TimeSpan grace)
    {
        if (OperatingSystem.IsWindows())
        {
            // No SIGTERM to ask with: the agent is ended outright; its journal makes a cut-short fetch resume next time.
            if (IsOurAgent(agent))
                try { using var p = Process.GetProcessById(agent.Pid); p.Kill(entireProcessTree: true); await p.WaitForExitAsync().WaitAsync(grace); }
                catch (Exception e) when (e is ArgumentException or InvalidOperationException or TimeoutException or System.ComponentModel.Win32Exception) { }
            TryDelete(StateFile(agent.Pipe));
            return;
        }
        if (IsOurAgent(agent))
        {
            Kill(agent.Pid, 15);
            var clock = Stopwatch.StartNew();
            // Asked again each time, not whether the pid lives: once the agent has gone, its pid may already be another
            // process's, which the SIGKILL below must never reach.
            while (IsOurAgent(agent) && clock.Elapsed < grace) await Task.Delay(100);
            if (IsOurAgent(agent)) Kill(agent.Pid, 9);
        }
        TryDelete(StateFile(agent.Pipe));
    }

    /// <summary>The pid still runs the agent on that pipe (pids are reused; never signal a stranger).</summary>
    private static bool IsOurAgent(StartedAgent a)
    {
        if (!IsAlive(a.Pid)) return false;
        if (!OperatingSystem.IsLinux())
        {
            // No /proc: a reused pid shows as a process started after the agent we recorded.
            try
            {
                using var p = Process.GetProcessById(a.Pid);
                return p.StartTime.ToUniversalTime() <= a.Started.UtcDateTime.AddSeconds(1);
            }
            catch (Exception e) when (e is ArgumentException or InvalidOperationException or System.ComponentModel.Win32Exception) { return false; }
        }
        try
        {
            var cmdline = File.ReadAllText($"/proc/{a.Pid}/cmdline").Split('\0');
            // dotnet …/Hpc.NodeAgent.dll, or the agent compiled to native code: …/Hpc.NodeAgent.
            return cmdline.Any(c => Path.GetFileName(c) is var f && (f == NodeAgentOptions.Assembly + ".dll" || f == NodeAgentOptions.Assembly)) && cmdline.Contains(a.Pipe);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return false; }
    }

    /// <summary>Alive and not a zombie (a killed agent may wait for a reaper that never comes in a container).</summary>
    public static bool IsAlive(int pid)
    {
        if (!OperatingSystem.IsLinux())
        {
            try { using var p = Process.GetProcessById(pid); return !p.HasExited; }
            catch (Exception e) when (e is ArgumentException or InvalidOperationException or System.ComponentModel.Win32Exception) { return false; }
        }
        try
        {
            var stat = File.ReadAllText($"/proc/{pid}/stat");
            var state = stat[(stat.LastIndexOf(')') + 2)..].FirstOrDefault();
            return state is not ('Z' or 'X');
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return false; }
    }

    /// <summary>The last lines the log got from <paramref name="from"/> on (what the agent just started wrote).</summary>
    private static string Tail(string log, long from)
    {
        try
        {
            using var stream = new FileStream(log, FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete);
            stream.Position = Math.Min(from, stream.Length);
            var lines = new StreamReader(stream).ReadToEnd().Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.TrimEnd('\r')).TakeLast(15).ToList();
            return lines.Count == 0 ? "(nothing)" : string.Join(Environment.NewLine, lines);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return "(no log)"; }
    }

    private static long LengthOf(string path)
    {
        try { return File.Exists(path) ? new FileInfo(path).Length : 0; }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return 0; }
    }

    /// <summary>The exit code the agent wrote (<see cref="NodeAgentOptions.ExitFileVariable"/>), or null when it wrote none (killed).</summary>
    private static int? ExitCodeOf(string exitFile)
    {
        // Written before the agent's process ends, so it is there once the process is gone.
        try
        {
            return File.Exists(exitFile) && int.TryParse(File.ReadAllText(exitFile).Trim(), System.Globalization.NumberStyles.Integer,
                System.Globalization.CultureInfo.InvariantCulture, out var code) ? code : null;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { return null; }
    }

    private static void TryDelete(string path)
    {
        try { File.Delete(path); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
    }

    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int Kill(int pid, int signal);

    /// <summary>
    /// Descriptors this process inherited beyond stdio (an MPI launcher hands its ranks pipes of its own) would pass on
    /// to the agent, and an agent holding them keeps the launcher waiting for the end of a step that is long over. The
    /// runtime opens its own descriptors close-on-exec; this marks the inherited ones so too.
    /// </summary>
    private static void KeepInheritedDescriptorsFromChildren()
    {
        if (!OperatingSystem.IsLinux()) return;
        foreach (var entry in Directory.EnumerateFileSystemEntries("/proc/self/fd"))
            if (int.TryParse(Path.GetFileName(entry), out var fd) && fd > 2)
            {
                var flags = Libc.Fcntl(fd, Libc.F_GETFD, 0);
                if (flags >= 0) Libc.Fcntl(fd, Libc.F_SETFD, flags | Libc.FD_CLOEXEC);
            }
    }

    private static partial class Libc
    {
        public const int F_GETFD = 1, F_SETFD = 2, FD_CLOEXEC = 1;
        [LibraryImport("libc", EntryPoint = "fcntl")]
        public static partial int Fcntl(int fd, int command, int argument);
    }
}
