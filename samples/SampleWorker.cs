using Hpc.CommonData.Cli;

namespace Hpc.Samples;

/// <summary>The product's worker check with the sample's own pass over the data: what a risk service does first.</summary>
public static class SampleWorker
{
    public const string Summary = "A sample worker: open the job's dataset as hpcdata worker does, then compute the 99% one-day VaR from it; one JSON line.";
    private const string NoCompute = "--no-compute";

    /// <summary><c>hpcdata worker</c>'s switches, and <c>--no-compute</c> to only attach and verify.</summary>
    public static Task<int> MainAsync(string me, string[] args) =>
        WorkerProbe.MainAsync(me, [.. args.Where(a => a != NoCompute)], args.Contains(NoCompute) ? null : data =>
        {
            var r = ValueAtRisk.Compute(data.Windows());
            return $"99% one-day VaR of an equal-weight portfolio over {r.Days} days: {r.ValueAtRisk99:P3}";
        }, Summary, [("    " + NoCompute, "Only attach and verify.")]);
}
