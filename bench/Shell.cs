using System.Diagnostics;

namespace Hpc.Bench;

/// <summary>Runs the small system tools (ip, tc) the emulator is built from, and fails loudly with their stderr.</summary>
public static class Shell
{
    public sealed record Result(int ExitCode, string Stdout, string Stderr);

    public static Result Run(string program, params string[] args)
    {
        var info = new ProcessStartInfo(program) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in args) info.ArgumentList.Add(a);
        using var p = Process.Start(info) ?? throw new InvalidOperationException($"cannot start {program}");
        var stdout = p.StandardOutput.ReadToEndAsync();
        var stderr = p.StandardError.ReadToEnd();
        if (!p.WaitForExit(30_000))
        {
            try { p.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
            throw new TimeoutException($"{program} {string.Join(' ', args)} did not finish in 30 s");
        }
        return new Result(p.ExitCode, stdout.Result, stderr);
    }

    /// <summary>Runs and throws when the tool fails.</summary>
    public static string Check(string program, params string[] args)
    {
        var r = Run(program, args);
        if (r.ExitCode != 0) throw new InvalidOperationException($"{program} {string.Join(' ', args)} failed ({r.ExitCode}): {r.Stderr.Trim()}");
        return r.Stdout;
    }

    public static bool Exists(string program) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "/usr/sbin:/usr/bin:/sbin:/bin").Split(':')
            .Concat(["/usr/sbin", "/sbin"]).Any(d => File.Exists(Path.Combine(d, program)));

    public static bool IsRoot => Environment.UserName == "root" || GetEuid() == 0;

    [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "geteuid")]
    private static extern uint GetEuid();
}
