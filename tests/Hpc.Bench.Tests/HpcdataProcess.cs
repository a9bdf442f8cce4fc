using Hpc.CommonData.Hosting;

namespace Hpc.Bench.Tests;

/// <summary>Runs the hpcdata CLI as a child process, as users do.</summary>
internal static class HpcdataProcess
{
    public sealed record Result(int Code, string Stdout, string Stderr);

    /// <summary>On timeout or test failure, disposal SIGTERMs the child, and every bench verb tears down on SIGTERM.</summary>
    public static async Task<Result> RunAsync(TimeSpan timeout, params string[] args)
    {
        await using var p = ComponentProcess.Start("hpcdata", args, name: "hpcdata " + args[0]);
        var code = await p.WaitForExitAsync(timeout);
        return new Result(code, string.Join('\n', p.StandardOutput), p.StandardErrorTail);
    }
}
