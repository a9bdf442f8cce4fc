using CommandLine;
using Hpc.Jobs.Commands;

// hpcdata: what users type. Each verb hands off to its command class, which maps failures to exit codes.
if (args is ["stage", .. var stageArgs]) return await StageVerb.RunAsync(stageArgs);
if (args is ["prestage", .. var prestageArgs]) return await PrestageCommand.RunAsync(prestageArgs);
if (args is ["bench", .. var benchArgs]) return await BenchVerb.RunAsync(benchArgs);
if (args is ["report", .. var reportArgs]) return await ReportCommand.RunAsync(reportArgs);
var parser = new Parser(s => { s.HelpWriter = Console.Error; s.CaseInsensitiveEnumValues = true; });
return await parser.ParseArguments<DemoOptions, WorkerOptions, GenerateOptions, NodePrepOptions, NodeReleaseOptions, RemoveOptions, Hpc.Jobs.Sample.SoaHostOptions, Hpc.Jobs.Sample.SoaClientOptions>(args).MapResult(
    (DemoOptions o) => new DemoCommand(o).RunAsync(),
    (NodePrepOptions o) => NodePrepCommand.RunAsync(o),
    (NodeReleaseOptions o) => NodeReleaseCommand.RunAsync(o),
    (RemoveOptions o) => RemoveCommand.RunAsync(o),
    (Hpc.Jobs.Sample.SoaHostOptions o) => Hpc.Jobs.Sample.SoaHost.RunAsync(o),
    (Hpc.Jobs.Sample.SoaClientOptions o) => Hpc.Jobs.Sample.SoaClient.RunAsync(o),
    (WorkerOptions o) => WorkerCommand.RunAsync(o),
    (GenerateOptions o) => o.RunAsync(),
    _ => Task.FromResult(2));
