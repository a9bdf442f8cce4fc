using System.Collections.Concurrent;
using System.Diagnostics;
using System.Runtime.InteropServices;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// A component (cache host, node agent, stager, worker) running as its own process. It is started with
/// <c>dotnet &lt;assembly&gt;.dll</c>, announces readiness with a <c>READY …</c> line on stdout, and is killed with
/// its whole process tree on dispose, so launchers and tests never leave orphans.
/// </summary>
public sealed class ComponentProcess : IAsyncDisposable
{
    private readonly Process _process;
    private readonly ConcurrentQueue<string> _stderr = new();
    private readonly ConcurrentQueue<string> _stdout = new();
    private readonly TaskCompletionSource<string> _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly TaskCompletionSource _exited = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public string Name { get; }
    public int Id => _process.Id;
    public bool HasExited => _process.HasExited;
    public int ExitCode => _process.ExitCode;
    public Task Exited => _exited.Task;
    /// <summary>Everything after "READY " on the readiness line (e.g. the bound address).</summary>
    public string? ReadyText => _ready.Task.IsCompletedSuccessfully ? _ready.Task.Result : null;
    public IEnumerable<string> StandardOutput => _stdout;
    public string StandardErrorTail => string.Join(Environment.NewLine, _stderr.TakeLast(40));

    private ComponentProcess(string name, ProcessStartInfo info)
    {
        Name = name;
        _process = new Process { StartInfo = info, EnableRaisingEvents = true };
        _process.OutputDataReceived += (_, e) =>
        {
            if (e.Data is null) return;
            if (e.Data.StartsWith("READY", StringComparison.Ordinal)) _ready.TrySetResult(e.Data.Length > 6 ? e.Data[6..].Trim() : "");
            else Bounded(_stdout, e.Data, 10_000);
        };
        _process.ErrorDataReceived += (_, e) => { if (e.Data is not null) Bounded(_stderr, e.Data, 400); };
        _process.Exited += (_, _) =>
        {
            _ready.TrySetException(new InvalidOperationException($"{Name} exited before it was ready"));
            _exited.TrySetResult();
        };
    }

    private static void Bounded(ConcurrentQueue<string> q, string line, int max)
    {
        q.Enqueue(line);
        while (q.Count > max) q.TryDequeue(out _);
    }

    /// <summary>Starts <paramref name="assembly"/> (found by <see cref="ComponentLocator"/>) with arguments and extra environment.</summary>
    /// <param name="launcher">A command that runs the component for us, e.g. <c>["ip", "netns", "exec", "hcd-n1"]</c>
    /// (it must exec the component in place, so the process id stays the component's).</param>
    public static ComponentProcess Start(string assembly, IEnumerable<string> args, IDictionary<string, string?>? environment = null, string? name = null,
        IReadOnlyList<string>? launcher = null)
    {
        string[] command = [.. launcher ?? [], .. ComponentLocator.Command(assembly)];
        var info = new ProcessStartInfo(command[0]) { RedirectStandardOutput = true, RedirectStandardError = true, RedirectStandardInput = true, UseShellExecute = false };
        foreach (var c in command.Skip(1)) info.ArgumentList.Add(c);
        foreach (var a in args) info.ArgumentList.Add(a);
        foreach (var (k, v) in environment ?? new Dictionary<string, string?>()) info.Environment[k] = v;
        var p = new ComponentProcess(name ?? assembly, info);
        p._process.Start();
        p._process.BeginOutputReadLine();
        p._process.BeginErrorReadLine();
        return p;
    }

    /// <summary>
    /// Runs the stager with <paramref name="options"/> (which must ask for <c>--json</c>) and returns what it staged; a
    /// failure is an exception carrying the stager's own last error lines.
    /// </summary>
    public static async Task<StageResult> StageAsync(StagerOptions options, TimeSpan timeout, CancellationToken ct, IReadOnlyList<string>? launcher = null,
        Func<ComponentProcess, ComponentProcess>? track = null)
    {
        if (!options.Json) throw new ArgumentException("the stager must be asked for its JSON summary", nameof(options));
        await using var stager = Start(options, name: "stager", launcher: launcher);
        track?.Invoke(stager);
        if (await stager.WaitForExitAsync(timeout, ct) != 0)
            throw new CommonDataException(ErrorCode.Internal, $"staging '{options.Path}' failed: {stager.StandardErrorTail.Replace(StagerOptions.ProgramName + ": ", "")}");
        return System.Text.Json.JsonSerializer.Deserialize(stager.StandardOutput.LastOrDefault() ?? "null", ContractJson.Default.StageResult)
               ?? throw new CommonDataException(ErrorCode.Protocol, $"the stager printed no summary: {stager.StandardErrorTail}");
    }

    /// <summary>
    /// Starts the program whose command line <typeparamref name="T"/> is, with <paramref name="options"/>: the arguments
    /// from <see cref="ProgramContract{T}.ToArguments"/>, its secrets in the environment, never in argv.
    /// </summary>
    public static ComponentProcess Start<T>(T options, IDictionary<string, string?>? environment = null, string? name = null,
        IReadOnlyList<string>? launcher = null) where T : class, IProgramOptions, new()
    {
        var env = new Dictionary<string, string?>(environment ?? new Dictionary<string, string?>());
        foreach (var (k, v) in ProgramContract<T>.SecretEnvironment(options)) env[k] = v;
        return Start(T.Assembly, ProgramContract<T>.ToArguments(options), env, name ?? T.Assembly, launcher);
    }

    /// <summary>Waits for the READY line; on timeout or early exit the error carries the process's last stderr lines.</summary>
    public async Task<string> WaitReadyAsync(TimeSpan timeout, CancellationToken ct = default)
    {
        try
        {
            return await _ready.Task.WaitAsync(timeout, ct);
        }
        catch (Exception e) when (e is TimeoutException or InvalidOperationException)
        {
            await Task.Delay(100, CancellationToken.None); // let the last stderr lines arrive
            throw new InvalidOperationException($"{Name} did not become ready ({e.Message}):{Environment.NewLine}{StandardErrorTail}", e);
        }
    }

    /// <summary>Writes a line to the process's standard input (e.g. a start signal).</summary>
    public async Task SendLineAsync(string line)
    {
        await _process.StandardInput.WriteLineAsync(line);
        await _process.StandardInput.FlushAsync();
    }

    /// <summary>Sends a whole stream as standard input and closes it, so the program sees the end of its input.</summary>
    public async Task SendInputAsync(Stream input)
    {
        await input.CopyToAsync(_process.StandardInput.BaseStream);
        _process.StandardInput.Close();
    }

    public async Task<int> WaitForExitAsync(TimeSpan timeout, CancellationToken ct = default)
    {
        await _process.WaitForExitAsync(ct).WaitAsync(timeout, ct);
        _process.WaitForExit(); // drains the redirected streams
        return _process.ExitCode;
    }

    /// <summary>Asks the process to stop (SIGTERM on Unix, so hosts shut down cleanly), then kills it if it lingers.</summary>
    public async Task StopAsync(TimeSpan grace)
    {
        if (_process.HasExited) return;
        if (!OperatingSystem.IsWindows())
        {
            try { Posix.Kill(_process.Id, Posix.SIGTERM); } catch (Exception) { /* already gone */ }
            try { await _process.WaitForExitAsync().WaitAsync(grace); return; } catch (TimeoutException) { }
        }
        try { _process.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
        try { await _process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(5)); } catch (TimeoutException) { }
    }

    /// <summary>Kills the process at once, as a crash or an OOM killer would.</summary>
    public async Task KillAsync()
    {
        try { _process.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
        await _process.WaitForExitAsync();
    }

    /// <summary>Stops the process and frees it; a second call does nothing (a test may stop a component its cluster also owns).</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0) return;
        await StopAsync(TimeSpan.FromSeconds(5));
        _process.Dispose();
    }

    private int _disposed;

    /// <summary>The dotnet host running this process, so children use the same runtime.</summary>
    /// <remarks>An installed tool runs from its own launcher (apphost), not from <c>dotnet</c>, and a service's PATH
    /// may not name dotnet at all: the host is then found from the runtime this process runs on
    /// (<c>DOTNET_ROOT/shared/Microsoft.NETCore.App/VERSION/</c> is three levels below it).</remarks>
    public static string DotnetHost()
    {
        if (Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") is { Length: > 0 } h && File.Exists(h)) return h;
        if (Environment.ProcessPath is { } p && Path.GetFileNameWithoutExtension(p) == "dotnet") return p;
        var exe = OperatingSystem.IsWindows() ? "dotnet.exe" : "dotnet";
        var runtime = System.Runtime.InteropServices.RuntimeEnvironment.GetRuntimeDirectory().TrimEnd(Path.DirectorySeparatorChar, Path.AltDirectorySeparatorChar);
        if (Directory.GetParent(runtime)?.Parent?.Parent is { } root && Path.Combine(root.FullName, exe) is var beside && File.Exists(beside)) return beside;
        return "dotnet";
    }

    /// <summary>Asks a process to stop as a service manager would (SIGTERM); on Windows there is no such request.</summary>
    public static void Terminate(int pid)
    {
        if (!OperatingSystem.IsWindows()) Posix.Kill(pid, Posix.SIGTERM);
    }

    /// <summary>
    /// Passes on a hang-up (systemctl reload, kill -HUP): a program that reloads its configuration on it (the cache host's
    /// users file) does so, any other ends as it would have.
    /// </summary>
    public static void HangUp(int pid)
    {
        if (!OperatingSystem.IsWindows()) Posix.Kill(pid, Posix.SIGHUP);
    }

    private static class Posix
    {
        public const int SIGHUP = 1;
        public const int SIGTERM = 15;
        [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "kill", SetLastError = true)]
        public static extern int Kill(int pid, int signal);
    }
}

/// <summary>
/// Finds a component's assembly: <c>$HPCDATA_BIN</c>, then beside the running program (a published layout), then the
/// build's artifacts tree (<c>artifacts/bin/&lt;Project&gt;/&lt;config&gt;/</c>). An installed folder may hold a program
/// compiled ahead of time to native code (no <c>.dll</c>, just the executable), which is then run directly.
/// </summary>
public static class ComponentLocator
{
    public const string BinVariable = "HPCDATA_BIN";

    /// <summary>
    /// The command line that runs <paramref name="assembly"/>: <c>dotnet &lt;path&gt;.dll</c>, a native program's path, or
    /// a native hpcdata that carries the program (<see cref="LinkedIntoHpcdata"/>) with the program's name after it.
    /// </summary>
    public static string[] Command(string assembly) => CommandFor(Find(assembly), assembly);

    internal static string[] CommandFor(string path, string assembly) => IsNative(path)
        ? (Carries(path, assembly) ? [path, assembly] : [path])
        : [ComponentProcess.DotnetHost(), path];

    /// <summary>
    /// The programs that hpcdata, compiled to native code, carries compiled into it (and runs as
    /// <c>hpcdata &lt;assembly&gt; ARGS</c>): one executable instead of four, the runtime and libraries they share in it once.
    /// A program's own native build, where a folder has one, is still preferred.
    /// </summary>
    public static IReadOnlyList<string> LinkedIntoHpcdata { get; } = [CacheHostOptions.Assembly, NodeAgentOptions.Assembly, StagerOptions.Assembly];

    private const string Hpcdata = "hpcdata";

    private static bool Carries(string nativePath, string assembly) =>
        assembly != Hpcdata && ProgramName(Path.GetFileName(nativePath)) == Hpcdata;

    /// <summary>The executables that can run <paramref name="assembly"/> natively, its own first.</summary>
    private static string[] NativeNames(string assembly) => LinkedIntoHpcdata.Contains(assembly)
        ? [Executable(assembly), Executable(Hpcdata)]
        : [Executable(assembly)];

    private static string Executable(string name) => OperatingSystem.IsWindows() ? name + ".exe" : name;

    // Not Path.GetFileNameWithoutExtension: "Hpc.Stager" has no extension.
    private static string ProgramName(string executable) =>
        OperatingSystem.IsWindows() && executable.EndsWith(".exe", StringComparison.OrdinalIgnoreCase) ? executable[..^4] : executable;

    /// <summary>True for a program compiled to native code rather than an assembly run by <c>dotnet</c>.</summary>
    public static bool IsNative(string path) => !path.EndsWith(".dll", StringComparison.OrdinalIgnoreCase);

    /// <summary>
    /// How the program at <paramref name="path"/> was compiled: "native", "ReadyToRun" (an assembly carrying precompiled
    /// code beside its IL, which the runtime uses instead of compiling) or "JIT".
    /// </summary>
    public static string BuildKind(string path)
    {
        if (IsNative(path)) return "native";
        try
        {
            using var pe = new System.Reflection.PortableExecutable.PEReader(File.OpenRead(path));
            return pe.PEHeaders.CorHeader?.ManagedNativeHeaderDirectory.Size > 0 ? "ReadyToRun" : "JIT";
        }
        catch (Exception e) when (e is IOException or BadImageFormatException or UnauthorizedAccessException) { return "JIT"; }
    }

    /// <summary>Whether <see cref="Find"/> finds the program: an installed tool carries the lab only when packed with it.</summary>
    public static bool IsAvailable(string assembly)
    {
        try { Find(assembly); return true; }
        catch (FileNotFoundException) { return false; }
    }

    public static string Find(string assembly)
    {
        var file = assembly + ".dll";
        var installed = new List<string>();
        if (Environment.GetEnvironmentVariable(BinVariable) is { Length: > 0 } bin) installed.Add(bin);
        installed.Add(AppContext.BaseDirectory);
        // A native program of an installed folder (<folder>/native/<rid>/) runs that folder's other programs too.
        if (new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar)) is { Name: var rid, Parent: { Name: "native", Parent: { } folder } }
            && rid == RuntimeInformation.RuntimeIdentifier)
            installed.Add(folder.FullName);
        foreach (var dir in installed)
            if (FindIn(dir, assembly) is { } path) return path;
        // A build tree (artifacts/bin/<project>/<configuration>/): a program may also sit, copied, in the output of
        // projects that reference it; the newest build of it is the one meant.
        var built = NewestBuilt(BuildTree().Select(d => Path.Combine(d, file)), assembly);
        if (built is not null && NativeBuildOf(built, assembly) is { } native) return native;
        return built ?? throw new FileNotFoundException(
            $"cannot find {file}; build the solution first (dotnet build Hpc.sln) or set {BinVariable} to the folder of the installed programs. " +
            $"Looked in: {string.Join(", ", installed)} and the build's artifacts/bin");
    }

    /// <summary>
    /// Of a program's assembly in the build outputs (<paramref name="candidates"/>, artifacts/bin/&lt;project&gt;/&lt;config&gt;/),
    /// the newest build; but when its own project's output holds the same bytes, that one: it is the same program, and
    /// the folder named to a person (the demo's "programs … from") is then the product's own, not a test project's copy.
    /// </summary>
    internal static string? NewestBuilt(IEnumerable<string> candidates, string assembly)
    {
        // A copy whose runtime configuration is not there (yet) is one a build is still writing: not a program to start.
        var built = candidates.Where(p => File.Exists(p) && File.Exists(Path.ChangeExtension(p, ".runtimeconfig.json"))).ToList();
        var newest = built.MaxBy(File.GetLastWriteTimeUtc);
        if (newest is null) return null;
        var project = assembly == "hpcdata" ? "Hpc.Jobs" : assembly;
        var own = built.FirstOrDefault(p => new DirectoryInfo(Path.GetDirectoryName(p)!).Parent?.Name == project);
        return own is not null && own != newest && SameBytes(own, newest) ? own : newest;
    }

    private static bool SameBytes(string a, string b)
    {
        try { return new FileInfo(a).Length == new FileInfo(b).Length && File.ReadAllBytes(a).AsSpan().SequenceEqual(File.ReadAllBytes(b)); }
        catch (IOException) { return false; }
    }

    /// <summary>
    /// The instruction set of the daemons' second native build. Native code is fixed to one level at build time; the
    /// default build's x86-64-v3 (AVX2) hashes content ids at 2.0 GB/s, this level's AVX-512 at 6.4 GB/s, and the node
    /// agent, stager and cache host hash every byte they move. A CPU that has it runs that build (the build tree's
    /// <c>&lt;config&gt;_&lt;rid&gt;_x86-64-v4</c> publish, an installed folder's <c>native/&lt;rid&gt;/x86-64-v4/</c>); others the default one.
    /// </summary>
    public const string WideVectorLevel = "x86-64-v4";

    /// <summary>
    /// Whether this CPU has every extension of <see cref="WideVectorLevel"/> (AVX-512 F, BW, CD, DQ and VL), unless
    /// <see cref="WideVectorsVariable"/> is off (to run the default build, or compare the two).
    /// </summary>
    public static bool CpuRunsWideVectorBuilds => WideVectors.Value;

    /// <summary><c>HPCDATA_WIDE_VECTORS=0</c> runs the default native build on a CPU with AVX-512 as well.</summary>
    public const string WideVectorsVariable = "HPCDATA_WIDE_VECTORS";

    private static readonly Lazy<bool> WideVectors = new(() =>
    {
        if (Environment.GetEnvironmentVariable(WideVectorsVariable) is { Length: > 0 } setting
            && SettingValues.TryParseBool(setting, out var allowed) && !allowed) return false;
        if (!OperatingSystem.IsLinux() || RuntimeInformation.ProcessArchitecture != Architecture.X64) return false;
        try
        {
            var flags = File.ReadLines("/proc/cpuinfo").FirstOrDefault(l => l.StartsWith("flags", StringComparison.Ordinal));
            if (flags is null) return false;
            var have = flags[(flags.IndexOf(':') + 1)..].Split(' ', StringSplitOptions.RemoveEmptyEntries).ToHashSet(StringComparer.Ordinal);
            return new[] { "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl" }.All(have.Contains);
        }
        catch (IOException) { return false; }
        catch (UnauthorizedAccessException) { return false; }
    });

    /// <summary>Where an installed folder keeps programs compiled to native code for one platform: <c>native/&lt;rid&gt;/</c>.</summary>
    public static string NativeFolder(string dir) => Path.Combine(dir, "native", RuntimeInformation.RuntimeIdentifier);

    /// <summary>
    /// The program in an installed folder: its native build for this platform (the tool package carries one for the
    /// platform it was packed on, beside the portable assemblies), else its assembly, else a native executable in the
    /// folder itself; null when none is there.
    /// </summary>
    internal static string? FindIn(string dir, string assembly) => FindIn(dir, assembly, CpuRunsWideVectorBuilds);

    internal static string? FindIn(string dir, string assembly, bool wideVectors)
    {
        foreach (var executable in NativeNames(assembly))
            if (InstalledNative(dir, executable, wideVectors) is { } native) return native;
        if (Path.Combine(dir, assembly + ".dll") is var path && File.Exists(path)) return path;
        // A native build has no runtime configuration beside it; an apphost (any ordinary build copies one) has.
        foreach (var executable in NativeNames(assembly))
            if (Path.Combine(dir, executable) is var native && File.Exists(native)
                && !File.Exists(Path.Combine(dir, ProgramName(executable) + ".runtimeconfig.json"))) return native;
        return null;
    }

    /// <summary>
    /// Whether this user may run the file: a package extracted by another user may leave it without the execute bit for
    /// us, and then the portable assembly beside it is the one to start.
    /// </summary>
    private static bool IsExecutable(string path) => OperatingSystem.IsWindows() || Posix.Access(path, Posix.X_OK) == 0;

    private static readonly HashSet<string> Said = [];

    /// <summary>
    /// The native build of <paramref name="program"/> that an installed folder carries for this platform and CPU
    /// (<c>native/&lt;rid&gt;/</c>, its wide-vector build on a CPU that has AVX-512), when this user may run it; else null.
    /// </summary>
    public static string? InstalledNative(string dir, string program) => InstalledNative(dir, Executable(program), CpuRunsWideVectorBuilds);

    private static string? InstalledNative(string dir, string executable, bool wideVectors)
    {
        if (wideVectors && Path.Combine(NativeFolder(dir), WideVectorLevel, executable) is var wide && File.Exists(wide) && Runnable(wide)) return wide;
        if (Path.Combine(NativeFolder(dir), executable) is var forPlatform && File.Exists(forPlatform) && Runnable(forPlatform)) return forPlatform;
        return null;
    }

    /// <summary>
    /// Whether an installed native build can be started, said once when it cannot. <c>dotnet tool install</c> run by
    /// root extracts the natives executable by root alone (0744): every other user then silently got the portable
    /// assembly, several times slower to start. Run as root, the tool makes such a file executable by every user (a
    /// line says so); run as another user, a line names the file and the command that fixes it.
    /// </summary>
    internal static bool Runnable(string path)
    {
        if (OperatingSystem.IsWindows()) return true;
        const UnixFileMode everyone = UnixFileMode.GroupRead | UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute;
        var mode = File.GetUnixFileMode(path);
        if (Environment.IsPrivilegedProcess && (mode & UnixFileMode.UserExecute) != 0 && (mode & UnixFileMode.OtherExecute) == 0)
        {
            try
            {
                File.SetUnixFileMode(path, mode | everyone);
                Once(path, $"hpcdata: made {path} executable by every user (it was {Octal(mode)}), so every user starts the native build");
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
        }
        if (IsExecutable(path)) return true;
        Once(path, $"hpcdata: note: {path} is not executable by this user (mode {Octal(mode)}): its portable assembly runs instead, slower to start; " +
                   $"an administrator fixes it with: chmod a+rx {path} (or runs hpcdata once as root)");
        return false;
    }

    private static string Octal(UnixFileMode mode) => Convert.ToString((int)mode & 0x1FF, 8).PadLeft(4, '0');

    private static void Once(string path, string line)
    {
        lock (Said) if (!Said.Add(path)) return;
        Console.Error.WriteLine(line);
    }

    private static class Posix
    {
        public const int X_OK = 1;
        [DllImport("libc", EntryPoint = "access", SetLastError = true)]
        public static extern int Access([MarshalAs(UnmanagedType.LPUTF8Str)] string path, int mode);
    }

    /// <summary>Whether <paramref name="directory"/> is a build's output (under <c>artifacts/bin/</c>), not an installation.</summary>
    public static bool IsBuildTree(string directory)
    {
        for (var dir = new DirectoryInfo(directory.TrimEnd(Path.DirectorySeparatorChar, Path.AltDirectorySeparatorChar)); dir is not null; dir = dir.Parent)
            if (dir.Name is "bin" or "publish" && dir.Parent?.Name == "artifacts") return true;
        return false;
    }

    /// <summary>
    /// The same program compiled to native code by the Release build (artifacts/publish/&lt;project&gt;/&lt;config&gt;_&lt;rid&gt;/),
    /// or, where the build could not (no clang), compiled ReadyToRun (<c>&lt;config&gt;_&lt;rid&gt;_ready-to-run/</c>, an
    /// assembly <c>dotnet</c> runs), when it is at least as new as the assembly: one older than the assembly was built
    /// from older code.
    /// </summary>
    internal static string? NativeBuildOf(string builtAssembly, string assembly) => NativeBuildOf(builtAssembly, assembly, CpuRunsWideVectorBuilds);

    internal static string? NativeBuildOf(string builtAssembly, string assembly, bool wideVectors)
    {
        // The newest copy may sit in a referencing project's output; the native build is under the program's own project.
        var configDir = new DirectoryInfo(Path.GetDirectoryName(builtAssembly)!);
        if (configDir.Parent?.Parent is not { Name: "bin", Parent: { } artifacts }) return null;
        // Under the project's name, which is the program's own except for hpcdata (project Hpc.Jobs).
        var publish = new DirectoryInfo(Path.Combine(artifacts.FullName, "publish"));
        if (!publish.Exists) return null;
        var pivot = $"{configDir.Name}_{RuntimeInformation.RuntimeIdentifier}";
        string[] pivots = wideVectors ? [$"{pivot}_{WideVectorLevel}", pivot] : [pivot];
        var projects = publish.EnumerateDirectories().ToList();
        return NativeNames(assembly)
            .SelectMany(executable => projects.SelectMany(project => pivots.Select(p => Path.Combine(project.FullName, p, executable))))
            .FirstOrDefault(native => File.Exists(native)
                                      && !File.Exists(Path.Combine(Path.GetDirectoryName(native)!, ProgramName(Path.GetFileName(native)) + ".runtimeconfig.json"))
                                      && File.GetLastWriteTimeUtc(native) >= File.GetLastWriteTimeUtc(builtAssembly))
            ?? projects.Select(project => Path.Combine(project.FullName, $"{pivot}_{ReadyToRunPivot}", assembly + ".dll"))
                .FirstOrDefault(precompiled => File.Exists(precompiled) && File.Exists(Path.ChangeExtension(precompiled, ".runtimeconfig.json"))
                                               && File.GetLastWriteTimeUtc(precompiled) >= File.GetLastWriteTimeUtc(builtAssembly));
    }

    /// <summary>The suffix of the build tree's ReadyToRun publishes (made by a Release build on a machine without clang).</summary>
    public const string ReadyToRunPivot = "ready-to-run";

    private static IEnumerable<string> BuildTree()
    {
        var baseDir = AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar);
        var config = Path.GetFileName(baseDir);
        // A native build (artifacts/publish/<project>/<config>_<rid>/) runs the other programs of its configuration's build.
        if (new DirectoryInfo(baseDir) is { Parent.Parent: { Name: "publish", Parent: { Name: "artifacts" } artifacts } } && config.IndexOf('_') is var rid and > 0
            && new DirectoryInfo(Path.Combine(artifacts.FullName, "bin")) is { Exists: true } bin)
            return bin.EnumerateDirectories().Select(project => Path.Combine(project.FullName, config[..rid]));
        for (var dir = new DirectoryInfo(baseDir); dir is not null; dir = dir.Parent)
        {
            if (dir.Name != "bin" || dir.Parent?.Name != "artifacts") continue;
            return dir.EnumerateDirectories().Select(project => Path.Combine(project.FullName, config));
        }
        return [];
    }
}
