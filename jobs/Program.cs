using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using Hpc.Jobs.Cli;
using Hpc.Jobs.Commands;

// hpcdata: what users type. Each verb hands off to its command; CommandTree owns help, usage errors and exit codes.
const string Me = "hpcdata";
// The installed tool's launcher runs this assembly: where the package carries hpcdata compiled for this machine, that serves.
NativeHandoff.ExecInstalledNative(args);
// hpcdata compiled to native code is also the cache host, node agent and stager: `hpcdata Hpc.NodeAgent …` runs one here.
if (args is [var program, ..] && LinkedPrograms.Find(program) is { } linked) return await linked(args[1..]);
// Said by the command the user typed, once: a misspelt HPCDATA_ variable otherwise leaves its setting at the default unnoticed.
// The agent says its own (HPCDATA_AGENT_…) itself, as it does when a service unit starts it without hpcdata.
UnknownVariables.Warn(Me, args is ["agent", ..] ? NodeAgentOptions.OwnVariables : null, typeof(Program).Assembly, typeof(JobVariables).Assembly);
return await new CommandTree(Me, "get a shared read-only dataset onto every compute node once, verified, and share it with every worker", [
    new("stage", "Stage a file, a directory or stdin as a new dataset version (runs the stager).", StageVerb.RunAsync,
        Switches: [.. ProgramContract<StagerOptions>.Switches.Select(s => s.Name).Where(n => n.Length > 0)], HelpText: ProgramContract<StagerOptions>.Help),
    new(PrestageOptions.Verb, PrestageOptions.Summary, PrestageCommand.RunAsync, Switches: VerbContract<PrestageOptions>.SwitchNames()),
    VerbEntry.For<NodePrepOptions>(Me, NodePrepCommand.RunAsync),
    VerbEntry.For<NodeReleaseOptions>(Me, NodeReleaseCommand.RunAsync),
    VerbEntry.For<BurstBufferOptions>(Me, BurstBufferCommand.RunAsync),
    VerbEntry.For<RemoveOptions>(Me, RemoveCommand.RunAsync),
    VerbEntry.For<GcOptions>(Me, GcCommand.RunAsync),
    VerbEntry.For<RepairOptions>(Me, RepairCommand.RunAsync),
    VerbEntry.For<GetOptions>(Me, GetCommand.RunAsync),
    VerbEntry.For<PathOptions>(Me, PathCommand.RunAsync),
    VerbEntry.For<StatusOptions>(Me, StatusCommand.RunAsync),
    VerbEntry.For<ListOptions>(Me, ListCommand.RunAsync),
    VerbEntry.For<VersionOptions>(Me, VersionCommand.RunAsync),
    VerbEntry.For<DoctorOptions>(Me, DoctorCommand.RunAsync),
    VerbEntry.For<TlsInitOptions>(Me, (o, _) => Task.FromResult(TlsInitCommand.Run(o))),
    new("worker", WorkerProbe.Summary, args => WorkerProbe.MainAsync($"{Me} worker", args, compute: null)),
    VerbEntry.For<GenerateOptions>(Me, GenerateCommand.RunAsync),
    // The long-running components, reachable from the one installed command (a service unit runs `hpcdata agent`);
    // each keeps its own command line, --help and exit codes.
    new("agent", "Run the node agent of this node (runs Hpc.NodeAgent; `hpcdata agent --help` for its options).",
        args => ProgramVerb.RunAsync("Hpc.NodeAgent", args), Switches: [.. ProgramContract<NodeAgentOptions>.Switches.Select(s => s.Name).Where(n => n.Length > 0)],
        HelpText: ProgramContract<NodeAgentOptions>.Help),
    new("cache-host", "Run a cache host (runs Hpc.CacheHost; `hpcdata cache-host --help` for its options).",
        args => ProgramVerb.RunAsync("Hpc.CacheHost", args), Switches: [.. ProgramContract<CacheHostOptions>.Switches.Select(s => s.Name).Where(n => n.Length > 0)],
        HelpText: ProgramContract<CacheHostOptions>.Help),
    new("demo", "Run the whole system on this machine: cache hosts, node agents, staging and sample workers (runs Hpc.Samples).",
        args => ProgramVerb.RunAsync("Hpc.Samples", ["demo", .. args])),
    new("bench", "The lab: scale-model cluster, codec, cache and attach benchmarks (runs Hpc.Bench).",
        args => ProgramVerb.RunAsync("Hpc.Bench", args), Hidden: !ComponentLocator.IsAvailable("Hpc.Bench")),
    VerbEntry.For<Hpc.CommonData.Report.ReportOptions>(Me, (o, _) => Task.FromResult(Hpc.CommonData.Report.ReportMain.Run(o))),
]).RunAsync(args);
