using CommandLine;
using Hpc.CommonData;

namespace Hpc.CommonData.Cli;

[Verb("worker", HelpText = "Check a worker's view of a dataset on this node: open it through the SDK as a service would, verify it, time it, print one JSON line.")]
public class WorkerOptions
{
    [Option('d', "dataset", HelpText = "Dataset name (default: $HPCDATA_DATASET).")]
    public string? Dataset { get; set; }

    [Option("mode", Default = "auto", HelpText = "auto, map, stream or direct (default: $HPCDATA_MODE or auto).")]
    public string Mode { get; set; } = "auto";

    [Option("wait-go", HelpText = "Print READY and wait for a line on stdin before opening (so many workers start together).")]
    public bool WaitGo { get; set; }

    [Option("verify", HelpText = "Also re-hash a mapped copy in this worker. Not needed: the agent verified every segment and the whole copy before it " +
                                 "published it read-only; this checks the node's memory and disk since (stream and direct copies are always hashed on open).")]
    public bool Verify { get; set; }

    [Option("touch", Default = "first", HelpText = "Map mode, timed as TouchMs: first (read the first byte: the mapping is usable) or all (a byte of every " +
                                                  "page: the page-table cost a first full pass over the data pays).")]
    public string Touch { get; set; } = "first";

    [Option("reopens", Default = 5, HelpText = "Opens after the first, in the same process, for the re-open time (0: none; in stream mode each one copies the whole dataset again).")]
    public int Reopens { get; set; } = 5;
}

public static class WorkerCommand
{
    public static Task<int> RunAsync(WorkerOptions o, Func<Dataset, string>? compute, CancellationToken ct) =>
        WorkerProbe.RunAsync(new WorkerProbe.Settings(o.Dataset, o.Mode, o.WaitGo, o.Verify, o.Touch, o.Reopens), compute, ct);
}
