using Hpc.Jobs.Commands;

// A worker service compiled to native code: it opens the job's dataset through the SDK exactly as `hpcdata worker` does
// (same switches, same JSON line), without a runtime to start or a method to compile first.
var main = WorkerProbe.UnixMs();
if (WorkerProbe.Parse(args, out var error) is not { } settings)
{
    Console.Error.WriteLine($"Hpc.Samples.Native: {error}");
    return 2;
}
return await WorkerProbe.RunAsync(settings, compute: null, CancellationToken.None, main);
