using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Runtime.Intrinsics.X86;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Cli;

/// <summary>
/// The installed tool's launcher always runs the portable hpcdata (hpcdata.dll, on the runtime). Where the package
/// carries hpcdata compiled to native code for this machine, that one serves the command instead: this process becomes
/// it (<c>execve</c>), so every verb starts in milliseconds rather than compiling itself first, with the same arguments,
/// standard streams, process id and exit code.
/// </summary>
internal static class NativeHandoff
{
    /// <summary><c>HPCDATA_NATIVE=0</c> keeps the portable hpcdata (to compare the two, or to rule the native one out).</summary>
    public const string Variable = "HPCDATA_NATIVE";

    /// <summary>The launcher the user ran (e.g. /opt/hpcdata/hpcdata): what jobs call on their nodes, whichever build served.</summary>
    public const string LauncherVariable = "HPCDATA_LAUNCHER";

    /// <summary>The path the user ran hpcdata by: the launcher a portable hpcdata handed off from, else this process.</summary>
    public static string? LauncherPath => Environment.GetEnvironmentVariable(LauncherVariable) is { Length: > 0 } launcher ? launcher : Environment.ProcessPath;

    /// <summary>Replaces this process with the installed native hpcdata when there is one to run; returns only when not.</summary>
    public static void ExecInstalledNative(string[] args)
    {
        if (!RuntimeFeature.IsDynamicCodeSupported || !OperatingSystem.IsLinux()) return;
        if (Environment.GetEnvironmentVariable(Variable) is { Length: > 0 } setting && SettingValues.TryParseBool(setting, out var on) && !on) return;
        // The default native build is compiled for x86-64-v3 and refuses to start without it; the runtime, which answers
        // for this CPU, says whether it may.
        if (!(Avx2.IsSupported && Bmi1.IsSupported && Bmi2.IsSupported && Fma.IsSupported && Lzcnt.IsSupported)) return;
        if (ComponentLocator.IsBuildTree(AppContext.BaseDirectory)) return;
        if (ComponentLocator.InstalledNative(AppContext.BaseDirectory, "hpcdata") is not { } native) return;

        var environment = Environment.GetEnvironmentVariables().Cast<System.Collections.DictionaryEntry>()
            .ToDictionary(e => (string)e.Key, e => (string?)e.Value, StringComparer.Ordinal);
        if (Environment.ProcessPath is { } launcher) environment.TryAdd(LauncherVariable, launcher);
        // The portable programs it starts (the samples, the lab) run on the runtime this launcher found.
        environment.TryAdd("DOTNET_HOST_PATH", ComponentProcess.DotnetHost());
        string?[] argv = [native, .. args, null];
        string?[] envp = [.. environment.Select(e => $"{e.Key}={e.Value}"), null];
        Execve(native, argv, envp);
        // Only on failure: serve the command here, as before.
    }

    // LPStr is UTF-8 on Unix.
    [DllImport("libc", EntryPoint = "execve", SetLastError = true)]
    private static extern int Execve([MarshalAs(UnmanagedType.LPUTF8Str)] string path,
        [MarshalAs(UnmanagedType.LPArray, ArraySubType = UnmanagedType.LPStr)] string?[] argv,
        [MarshalAs(UnmanagedType.LPArray, ArraySubType = UnmanagedType.LPStr)] string?[] envp);
}
