using System.Diagnostics;
using System.Runtime.Intrinsics.X86;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The installed tool's launcher runs the portable hpcdata; an installed folder that carries a native hpcdata for this
/// machine (<c>native/&lt;rid&gt;/hpcdata</c>) serves the command with it instead: the process becomes that program with the
/// same arguments, and learns the launcher's path for the jobs it writes.
/// </summary>
public sealed class NativeHandoffTests : IDisposable
{
    private readonly string _installed = Directory.CreateTempSubdirectory("hcd-handoff-").FullName;

    public void Dispose() => Directory.Delete(_installed, recursive: true);

    /// <summary>This build's portable hpcdata copied into a folder that is not a build tree, with a stand-in "native" hpcdata that says how it was run.</summary>
    private string Install()
    {
        var built = AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar).Replace("Hpc.Jobs.Tests", "Hpc.Jobs");
        foreach (var file in Directory.GetFiles(built)) File.Copy(file, Path.Combine(_installed, Path.GetFileName(file)));
        var native = Path.Combine(Directory.CreateDirectory(ComponentLocator.NativeFolder(_installed)).FullName, "hpcdata");
        File.WriteAllText(native, "#!/bin/sh\necho \"native pid=$$ args=$* launcher=$HPCDATA_LAUNCHER\"\n");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(native, (UnixFileMode)0b111_101_101);
        return native;
    }

    private async Task<(int Code, string Out, int Pid)> RunAsync(params string[] args)
    {
        var info = new ProcessStartInfo(ComponentProcess.DotnetHost()) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        info.ArgumentList.Add(Path.Combine(_installed, "hpcdata.dll"));
        foreach (var a in args) info.ArgumentList.Add(a);
        info.Environment[ComponentLocator.BinVariable] = "";
        info.Environment[ComponentLocator.WideVectorsVariable] = "0";
        using var p = Process.Start(info)!;
        var pid = p.Id;
        var stdout = p.StandardOutput.ReadToEndAsync();
        var stderr = p.StandardError.ReadToEndAsync();
        await p.WaitForExitAsync().WaitAsync(TimeSpan.FromMinutes(2));
        return (p.ExitCode, await stdout + await stderr, pid);
    }

    [Fact]
    public async Task An_installed_portable_hpcdata_becomes_the_native_one_in_the_same_process_with_the_same_arguments()
    {
        if (!OperatingSystem.IsLinux()) return;
        Install();
        var (code, output, pid) = await RunAsync("list", "risk/*", "--cache-hosts", "127.0.0.1:1");
        if (!(Avx2.IsSupported && Bmi1.IsSupported && Bmi2.IsSupported && Fma.IsSupported && Lzcnt.IsSupported))
        {
            // A CPU below the native build's x86-64-v3: the portable program serves.
            Assert.DoesNotContain("native pid=", output);
            return;
        }
        Assert.Equal(0, code);
        Assert.Contains($"native pid={pid} args=list risk/* --cache-hosts 127.0.0.1:1 launcher=", output);
    }

    [Fact]
    public async Task With_HPCDATA_NATIVE_off_or_a_native_build_this_user_may_not_run_the_portable_hpcdata_serves()
    {
        if (!OperatingSystem.IsLinux()) return;
        var native = Install();
        var info = new ProcessStartInfo(ComponentProcess.DotnetHost()) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        info.ArgumentList.Add(Path.Combine(_installed, "hpcdata.dll"));
        info.ArgumentList.Add("--version");
        info.Environment["HPCDATA_NATIVE"] = "0";
        using (var p = Process.Start(info)!)
        {
            var output = await p.StandardOutput.ReadToEndAsync();
            await p.WaitForExitAsync();
            Assert.StartsWith("hpcdata 1.", output);
        }

        // Executable by no one (execve needs an execute bit, even for root): the portable program serves.
        File.SetUnixFileMode(native, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var (code, text, _) = await RunAsync("--version");
        Assert.Equal(0, code);
        Assert.DoesNotContain("native pid=", text);
    }
}
