using Hpc.CommonData.Cli;

// A worker service compiled to native code: it opens the job's dataset through the SDK exactly as `hpcdata worker` does
// (same switches, same JSON line, same exit codes), without a runtime to start or a method to compile first.
return await WorkerProbe.MainAsync("Hpc.Samples.Native", args, compute: null);
