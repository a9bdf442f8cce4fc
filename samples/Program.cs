using Hpc.CommonData.Cli;
using Hpc.Samples;

// Samples: services written against the worker SDK, and the demo that runs them on a local cluster.
const string Me = "Hpc.Samples";
return await new CommandTree(Me, "sample services on common data, and the demo that runs them on this machine", [
    VerbEntry.For<DemoOptions>("hpcdata", (o, ct) => new DemoCommand(o).RunAsync(ct)),
    new("worker", SampleWorker.Summary, args => SampleWorker.MainAsync($"{Me} worker", args)),
    VerbEntry.For<SoaHostOptions>(Me, (o, _) => SoaHost.RunAsync(o)),
    VerbEntry.For<SoaClientOptions>(Me, (o, _) => SoaClient.RunAsync(o)),
]).RunAsync(args);
