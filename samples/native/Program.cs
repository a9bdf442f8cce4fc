using Hpc.CommonData.Cli;

// A worker service compiled to native code: it opens the job's dataset through the SDK exactly as `hpcdata worker` does
// (same switches, same JSON line), without a runtime to start or a method to compile first.
const string Me = "Hpc.Samples.Native";
var main = WorkerProbe.UnixMs();
if (WorkerProbe.Parse(args, out var error) is not { } settings)
{
    if (error is null)
    {
        Console.WriteLine($"usage: {Me} {WorkerProbe.Usage}");
        return 0;
    }
    Console.Error.WriteLine($"{Me}: {error}");
    return 2;
}
using var stop = new CancellationTokenSource();
Console.CancelKeyPress += (_, e) => { e.Cancel = true; stop.Cancel(); };
try
{
    return await WorkerProbe.RunAsync(settings, compute: null, stop.Token, main, Me);
}
catch (OperationCanceledException) when (stop.IsCancellationRequested)
{
    return 130;
}
