using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;
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
        if (Contract.Handle(args, out var settings) is { } exit) return exit;
        // appsettings.json beside the program, as the other programs read it (their help and this one's say so), then the command line.
        var configuration = new ConfigurationBuilder()
            .AddJsonFile(Path.Combine(AppContext.BaseDirectory, "appsettings.json"), optional: true, reloadOnChange: false)
            .AddInMemoryCollection(settings).Build();
        if (Contract.Bind(configuration, settings, out var options) is { } refused) return refused;
        return await StageCommand.RunAsync(options);
    }
}
