using CommandLine;
using Hpc.CommonData.Cli;

namespace Hpc.Samples;

[Verb("worker", HelpText = "A sample worker: open the job's dataset as hpcdata worker does, then compute the 99% one-day VaR from it; one JSON line.")]
public sealed class SampleWorkerOptions : WorkerOptions
{
    [Option("no-compute", HelpText = "Only attach and verify.")]
    public bool NoCompute { get; set; }
}

/// <summary>The product's worker check with the sample's own pass over the data: what a risk service does first.</summary>
public static class SampleWorker
{
    public static Task<int> RunAsync(SampleWorkerOptions o, CancellationToken ct) =>
        WorkerCommand.RunAsync(o, o.NoCompute ? null : data =>
        {
            var r = ValueAtRisk.Compute(data.Windows());
            return $"99% one-day VaR of an equal-weight portfolio over {r.Days} days: {r.ValueAtRisk99:P3}";
        }, ct);
}
