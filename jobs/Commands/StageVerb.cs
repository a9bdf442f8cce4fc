using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Commands;

/// <summary>
/// Verbs served by another program of the installation (the stager, the lab, the samples): the arguments pass through
/// untouched and that program's exit code is ours. The product never references those programs' code.
/// </summary>
public static class ProgramVerb
{
    public static async Task<int> RunAsync(string assembly, IReadOnlyList<string> args)
    {
        var command = ComponentLocator.Command(assembly);
        var info = new System.Diagnostics.ProcessStartInfo(command[0]) { UseShellExecute = false };
        foreach (var c in command.Skip(1)) info.ArgumentList.Add(c);
        foreach (var a in args) info.ArgumentList.Add(a);
        using var p = System.Diagnostics.Process.Start(info)!;
        // A terminal's Ctrl-C reaches the whole process group; a scheduler's SIGTERM, or a SIGINT sent to this process
        // alone (kill -INT), reaches only us: pass it on, and stay to return the program's exit code once it has cleaned
        // up, rather than die and leave it running (with the processes it started) under no parent. The programs take
        // SIGTERM as they take SIGINT, so a Ctrl-C that reached both just cancels them once more.
        void PassOn(System.Runtime.InteropServices.PosixSignalContext c) { c.Cancel = true; ComponentProcess.Terminate(p.Id); }
        using var sigterm = OperatingSystem.IsWindows() ? null : System.Runtime.InteropServices.PosixSignalRegistration.Create(
            System.Runtime.InteropServices.PosixSignal.SIGTERM, PassOn);
        using var sigint = OperatingSystem.IsWindows() ? null : System.Runtime.InteropServices.PosixSignalRegistration.Create(
            System.Runtime.InteropServices.PosixSignal.SIGINT, PassOn);
        // A service manager's reload (ExecReload=kill -HUP $MAINPID) names this process; the program is the one to reload.
        using var sighup = OperatingSystem.IsWindows() ? null : System.Runtime.InteropServices.PosixSignalRegistration.Create(
            System.Runtime.InteropServices.PosixSignal.SIGHUP, c => { c.Cancel = true; ComponentProcess.HangUp(p.Id); });
        await p.WaitForExitAsync();
        return p.ExitCode;
    }
}

/// <summary><c>hpcdata stage PATH --name owner/name …</c>: the stager program with its own command line (<see cref="StagerOptions"/>).</summary>
public static class StageVerb
{
    public static Task<int> RunAsync(string[] args) => ProgramVerb.RunAsync("Hpc.Stager", args);
}
