using System.Diagnostics;
using System.Text;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// A Debian container booted with a real systemd as its PID 1 (<c>systemd-nspawn -b</c>), for running the units in
/// deploy/systemd as a site would. The root file system is built once per machine with <c>mmdebstrap</c> and mounted
/// under a throw-away overlay (<c>--volatile=overlay</c>), so every boot starts clean. The container shares this
/// machine's network, so it reaches cache hosts on loopback; commands run inside it through <c>nsenter</c>, and its
/// files are reachable from here under <c>/proc/&lt;leader&gt;/root</c>.
/// </summary>
internal sealed class SystemdMachine : IAsyncDisposable
{
    private const string Image = "/var/tmp/hpcdata-systemd-root";
    private static readonly SemaphoreSlim Building = new(1, 1);

    private readonly Process _nspawn;
    private readonly StringBuilder _console = new();
    public int Leader { get; }
    public string Name { get; }

    private SystemdMachine(Process nspawn, int leader, string name) => (_nspawn, Leader, Name) = (nspawn, leader, name);

    /// <summary>Why this machine cannot boot one, or null: Linux, root, systemd-nspawn and nsenter, and a root file system.</summary>
    public static async Task<string?> UnavailableAsync()
    {
        if (!OperatingSystem.IsLinux()) return "systemd units run on Linux only";
        if (Hpc.CommonData.Access.UnixAccounts.EffectiveUserId != 0) return "needs root to boot a container (CI runs as root)";
        foreach (var tool in new[] { "systemd-nspawn", "nsenter", "mmdebstrap" })
            if (!OnPath(tool)) return $"{tool} is not installed (apt-get install systemd-container mmdebstrap util-linux)";
        return await EnsureImageAsync();
    }

    /// <summary>A path inside the running container, as seen from this machine.</summary>
    public string HostPath(string inside) => $"/proc/{Leader}/root{inside}";

    public string Console { get { lock (_console) return _console.ToString(); } }

    /// <summary>Boots the container with <paramref name="binds"/> (host path, path inside, read-only) and waits until systemd says it is up.</summary>
    public static async Task<SystemdMachine> BootAsync(IEnumerable<(string Host, string Inside, bool ReadOnly)> binds, TimeSpan timeout)
    {
        var name = $"hpcdata-t{Environment.ProcessId % 100000}";
        var psi = new ProcessStartInfo("systemd-nspawn")
        {
            RedirectStandardInput = true, RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false,
        };
        // No machined here to register with, and no unit of our own to put the container in: the test is its owner.
        foreach (var a in new[] { "-D", Image, "--volatile=overlay", "--register=no", "--keep-unit", "--console=pipe", "-M", name, "-b" }) psi.ArgumentList.Add(a);
        foreach (var (host, inside, readOnly) in binds) psi.ArgumentList.Add($"{(readOnly ? "--bind-ro" : "--bind")}={host}:{inside}");
        var nspawn = Process.Start(psi)!;
        var machine = default(SystemdMachine);
        var console = new StringBuilder();
        void Keep(string? line) { if (line is null) return; lock (console) console.AppendLine(line); }
        nspawn.OutputDataReceived += (_, e) => Keep(e.Data);
        nspawn.ErrorDataReceived += (_, e) => Keep(e.Data);
        nspawn.BeginOutputReadLine();
        nspawn.BeginErrorReadLine();
        var deadline = DateTime.UtcNow + timeout;
        try
        {
            var leader = 0;
            while (leader == 0 && DateTime.UtcNow < deadline && !nspawn.HasExited)
            {
                leader = FindLeader(nspawn.Id);
                if (leader == 0) await Task.Delay(100);
            }
            if (leader == 0) throw new InvalidOperationException($"the container's systemd did not start:\n{console}");
            machine = new SystemdMachine(nspawn, leader, name);
            lock (console) machine._console.Append(console);
            nspawn.OutputDataReceived += (_, e) => { if (e.Data is { } l) lock (machine._console) machine._console.AppendLine(l); };
            nspawn.ErrorDataReceived += (_, e) => { if (e.Data is { } l) lock (machine._console) machine._console.AppendLine(l); };
            // Until systemd has opened its control socket, systemctl cannot reach it: depending on how far PID 1 has got,
            // it prints nothing or "offline" and gives up at once instead of waiting. Asked again until it waits for real.
            var booted = await machine.RunAsync(["systemctl", "is-system-running", "--wait"], Remaining(deadline));
            while (booted.Output.Trim() is "" or "offline" && DateTime.UtcNow < deadline && !nspawn.HasExited)
            {
                await Task.Delay(200);
                booted = await machine.RunAsync(["systemctl", "is-system-running", "--wait"], Remaining(deadline));
            }
            if (booted.Output.Trim() is not ("running" or "degraded"))
                throw new InvalidOperationException($"the container did not finish booting ({booted}):\n{machine.Console}");
            return machine;
        }
        catch
        {
            if (machine is not null) await machine.DisposeAsync();
            else { try { nspawn.Kill(entireProcessTree: true); } catch (InvalidOperationException) { } nspawn.Dispose(); }
            throw;
        }
    }

    public sealed record Result(int Code, string Output, string Error)
    {
        public override string ToString() => $"exit {Code}\n{Output}\n{Error}";
    }

    /// <summary>Runs a command inside the container as root (in all its namespaces), bounded by <paramref name="timeout"/>.</summary>
    public async Task<Result> RunAsync(IEnumerable<string> command, TimeSpan timeout, IDictionary<string, string>? environment = null)
    {
        using var p = Start(command, environment);
        using var cts = new CancellationTokenSource(timeout);
        var output = p.StandardOutput.ReadToEndAsync(cts.Token);
        var error = p.StandardError.ReadToEndAsync(cts.Token);
        try
        {
            await p.WaitForExitAsync(cts.Token);
            return new Result(p.ExitCode, await output, await error);
        }
        catch (OperationCanceledException)
        {
            try { p.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
            throw new TimeoutException($"'{string.Join(' ', command)}' in the container did not end within {timeout.TotalSeconds:0} s");
        }
    }

    /// <summary>Starts a command inside the container as root; the caller reads and disposes it.</summary>
    public Process Start(IEnumerable<string> command, IDictionary<string, string>? environment = null)
    {
        var psi = new ProcessStartInfo("nsenter") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in new[] { "-t", Leader.ToString(), "-a", "--", "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin" }) psi.ArgumentList.Add(a);
        foreach (var (k, v) in environment ?? new Dictionary<string, string>()) psi.ArgumentList.Add($"{k}={v}");
        foreach (var a in command) psi.ArgumentList.Add(a);
        return Process.Start(psi)!;
    }

    public async ValueTask DisposeAsync()
    {
        // The container's own shutdown first (units stopped in order); then whatever is left is killed.
        try { await RunAsync(["systemctl", "poweroff", "--no-block"], TimeSpan.FromSeconds(10)); }
        catch (Exception e) when (e is TimeoutException or InvalidOperationException or System.ComponentModel.Win32Exception) { }
        using var stopped = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        try { await _nspawn.WaitForExitAsync(stopped.Token); }
        catch (OperationCanceledException)
        {
            try { _nspawn.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
            try { Process.GetProcessById(Leader).Kill(); } catch (ArgumentException) { } catch (InvalidOperationException) { }
        }
        _nspawn.Dispose();
    }

    /// <summary>The container's PID 1: a descendant of systemd-nspawn that is process 1 of its own PID namespace.</summary>
    private static int FindLeader(int nspawn)
    {
        foreach (var dir in Directory.EnumerateDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), out var pid) || pid == nspawn) continue;
            string status;
            try { status = File.ReadAllText(Path.Combine(dir, "status")); }
            catch (IOException) { continue; }
            catch (UnauthorizedAccessException) { continue; }
            var nspid = status.Split('\n').FirstOrDefault(l => l.StartsWith("NSpid:", StringComparison.Ordinal))?.Split('\t', StringSplitOptions.RemoveEmptyEntries);
            if (nspid is not { Length: > 2 } || nspid[^1] != "1") continue;
            // nspawn's inner child is process 1 too until it has set up the root and become systemd.
            if (!status.StartsWith("Name:\tsystemd\n", StringComparison.Ordinal)) continue;
            for (var p = pid; p > 1; p = ParentOf(p))
                if (ParentOf(p) == nspawn) return pid;
        }
        return 0;
    }

    private static TimeSpan Remaining(DateTime deadline) => TimeSpan.FromTicks(Math.Max((deadline - DateTime.UtcNow).Ticks, TimeSpan.TicksPerSecond));

    private static int ParentOf(int pid)
    {
        try
        {
            var line = File.ReadLines($"/proc/{pid}/status").FirstOrDefault(l => l.StartsWith("PPid:", StringComparison.Ordinal));
            return line is null ? 0 : int.Parse(line[5..].Trim());
        }
        catch (IOException) { return 0; }
    }

    /// <summary>
    /// The root file system: Debian of this machine's release with systemd, D-Bus and ICU (the .NET runtime comes from
    /// this machine, bound in). Built once, into a temporary directory renamed into place, so a half-built root is never used.
    /// </summary>
    private static async Task<string?> EnsureImageAsync()
    {
        await Building.WaitAsync();
        try
        {
            if (File.Exists(Path.Combine(Image, "lib/systemd/systemd"))) return null;
            var release = File.ReadLines("/etc/os-release").FirstOrDefault(l => l.StartsWith("VERSION_CODENAME=", StringComparison.Ordinal))?[17..].Trim('"');
            if (string.IsNullOrEmpty(release)) return "this machine's Debian release is not known (/etc/os-release has no VERSION_CODENAME)";
            var building = Image + ".building";
            if (Directory.Exists(building)) Directory.Delete(building, recursive: true);
            var psi = new ProcessStartInfo("mmdebstrap") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
            foreach (var a in new[] { "--variant=minbase", "--include=systemd,systemd-sysv,dbus,libicu72,ca-certificates", release, building }) psi.ArgumentList.Add(a);
            using var p = Process.Start(psi)!;
            using var cts = new CancellationTokenSource(TimeSpan.FromMinutes(5));
            var output = p.StandardOutput.ReadToEndAsync(cts.Token);
            var error = p.StandardError.ReadToEndAsync(cts.Token);
            try { await p.WaitForExitAsync(cts.Token); }
            catch (OperationCanceledException)
            {
                p.Kill(entireProcessTree: true);
                return "mmdebstrap did not build the container's root within 5 minutes";
            }
            // A machine without a package mirror cannot build the root: said as such, not as a failing unit.
            if (p.ExitCode != 0) return $"mmdebstrap could not build the container's root (exit {p.ExitCode}): {string.Join(" | ", (await error).Split('\n').Where(l => l.StartsWith("E:")).Take(3))}";
            Directory.Move(building, Image);
            return null;
        }
        finally
        {
            Building.Release();
        }
    }

    private static bool OnPath(string tool) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "/usr/bin:/bin").Split(':').Any(d => File.Exists(Path.Combine(d, tool)));
}
