using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Commands;

/// <summary><c>hpcdata stage PATH --name owner/name …</c>: forwards to the stager program with its own options.</summary>
public static class StageVerb
{
    public static async Task<int> RunAsync(string[] args)
    {
        var info = new System.Diagnostics.ProcessStartInfo(ComponentProcess.DotnetHost()) { UseShellExecute = false };
        info.ArgumentList.Add(ComponentLocator.Find("Hpc.Stager"));
        foreach (var a in args) info.ArgumentList.Add(a);
        using var p = System.Diagnostics.Process.Start(info)!;
        await p.WaitForExitAsync();
        return p.ExitCode;
    }
}
