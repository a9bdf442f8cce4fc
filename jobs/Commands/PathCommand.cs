using Hpc.CommonData.Hosting;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Format;
using Hpc.Jobs.Scheduling;

using Hpc.CommonData.Cli;
using Hpc.Jobs.Cli;

namespace Hpc.Jobs.Commands;

public sealed class PathOptions : AgentClientOptions, IVerbOptions
{
    public static string Verb => "path";

    public static string Summary => "Print where this node's copy of a dataset is: the read-only tree of a directory dataset, or the file of a single-file one. " +
                         "For programs that read files (Python, R, solvers); job scripts export it as $HPCDATA_DATASET_PATH.";

    [Switch("", "The dataset, optionally @ a version id (" + DatasetArgument.JobDefault + ", else the latest).", Meta = DatasetArgument.Meta)]
    public string? Dataset { get; set; }

    [Switch("--shell", "Print POSIX shell lines that set the job's environment for the copy instead (eval \"$(hpcdata path --shell)\"): " +
                       "$HPCDATA_DATASET_PATH, and for a software tree what its own activation sets — a Python venv or conda environment's " +
                       "bin/ on PATH, a tree of Python packages on PYTHONPATH, an install prefix's bin/ on PATH.")]
    public bool Shell { get; set; }
}

/// <summary>Exit codes: 0 printed; 1 no agent answers or the data cannot be had (it says why); 2 bad usage.</summary>
public static class PathCommand
{
    public static async Task<int> RunAsync(PathOptions o, CancellationToken ct)
    {
        var (name, version) = DatasetArgument.OrJob(o.Dataset) ?? throw CommandException.Usage("no dataset (NAME or HPCDATA_DATASET)");
        var pipe = o.Agent.PipeName;
        AgentClient agent;
        try
        {
            agent = await AgentClient.ConnectIfListeningAsync(pipe, TimeSpan.FromSeconds(5), ct);
        }
        catch (Exception e) when (e is IOException or TimeoutException)
        {
            throw CommandException.From(e, o.Agent.NotAnswering(e));
        }
        catch (Exception e) when (e is CommonDataException or UnauthorizedAccessException)
        {
            throw CommandException.From(e); // an agent is there but its socket turns this user away
        }
        try
        {
            await using var connected = agent;
            // A prefetch neither leases nor pins: after node preparation it only answers where the pinned copy is.
            var local = await agent.PrefetchAsync(name, version, pin: null, ct);
            Console.Write(o.Shell ? TreeEnvironment.Of(local.Path).ShellExports() : local.Path + Environment.NewLine);
            return 0;
        }
        catch (Exception e) when (e is CommonDataException or IOException or TimeoutException or UnauthorizedAccessException)
        {
            throw CommandException.From(e);
        }
    }

}
