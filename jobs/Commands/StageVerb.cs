using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Commands;

/// <summary>
/// Verbs served by another program of the installation (the stager, the lab, the samples): the arguments pass through
/// untouched and that program's exit code is ours. The product never references those programs' code.
/// </summary>
public static class ProgramVerb
{
    /// <param name="quiet">
    /// The program's stderr is relayed rather than inherited, so it finds no terminal and shows no progress line, while
    /// every line it writes there (its errors and warnings) still reaches ours; its stdout is dropped unless
    /// <paramref name="keepOutput"/>.
    /// </param>
    public static async Task<int> RunAsync(string assembly, IReadOnlyList<string> args, bool quiet = false, bool keepOutput = true)
    {
        // Compiled into this executable (native hpcdata): run here, a process less; quiet needs the program's own
        // process, whose output it connects.
        if (!quiet && LinkedPrograms.Find(assembly) is { } linked) return await linked([.. args]);
        var command = ComponentLocator.Command(assembly);
        var info = new System.Diagnostics.ProcessStartInfo(command[0])
        {
            UseShellExecute = false, RedirectStandardError = quiet, RedirectStandardOutput = quiet && !keepOutput,
        };
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
        var relayed = quiet ? RelayAsync(p.StandardError, Console.Error) : Task.CompletedTask;
        var dropped = info.RedirectStandardOutput ? p.StandardOutput.BaseStream.CopyToAsync(Stream.Null) : Task.CompletedTask;
        await p.WaitForExitAsync();
        await Task.WhenAll(relayed, dropped);
        return p.ExitCode;
    }

    private static async Task RelayAsync(StreamReader from, TextWriter to)
    {
        while (await from.ReadLineAsync() is { } line)
        {
            to.WriteLine(line);
            to.Flush();
        }
    }
}

/// <summary><c>hpcdata stage PATH --name owner/name …</c>: the stager program with its own command line (<see cref="StagerOptions"/>).</summary>
public static class StageVerb
{
    public static Task<int> RunAsync(string[] args)
    {
        // The stager resolves its settings itself (the client's settings files among them, as for every verb); --quiet is
        // carried out here, around it, by how its output is connected, so it is resolved here too, the same way.
        var resolved = ProgramContract<StagerOptions>.Resolve(args, Environment.GetEnvironmentVariable, []);
        var usable = !resolved.HelpRequested && resolved.Problem is null;
        return ProgramVerb.RunAsync("Hpc.Stager", args, usable && resolved.Options.Quiet, keepOutput: usable && resolved.Options.Json);
    }
}
