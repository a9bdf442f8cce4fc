using Hpc.CommonData.Hosting;
using Contract = Hpc.CommonData.Hosting.ProgramContract<Hpc.CommonData.Hosting.StagerOptions>;

namespace Hpc.Stager;

/// <summary>
/// The stager's whole program: the entry of its own executable, and what a native <c>hpcdata</c> runs in its own process
/// (one executable compiled with every program in it; ComponentLocator starts it as <c>hpcdata Hpc.Stager …</c>).
/// </summary>
public static class StagerProgram
{
    public static async Task<int> RunAsync(string[] args)
    {
        // --help answered, an unknown switch or a bad value refused (exit 2), before anything is read or sent.
        var resolved = Contract.ResolveThisProcess(args);
        if (Contract.Answer(resolved) is { } exit) return exit;
        var options = resolved.Options;
        return await StageCommand.RunAsync(options);
    }
}
