using Hpc.CommonData.Hosting;
using Hpc.Stager;
using Microsoft.Extensions.Configuration;

if (ProgramContract<StagerOptions>.Handle(args, out var settings) is { } exit) return exit;
var options = new ConfigurationBuilder().AddInMemoryCollection(settings).Build().GetSection(StagerOptions.SectionName).Get<StagerOptions>() ?? new();
if (options.Validate().FirstOrDefault() is { } problem)
{
    Console.Error.WriteLine($"{StagerOptions.ProgramName}: {problem}");
    return 2;
}
return await StageCommand.RunAsync(options);
