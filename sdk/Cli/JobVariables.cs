using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;

namespace Hpc.CommonData.Cli;

/// <summary>
/// The environment every service host of a job sees. The SDK reads the first four itself; the job id names the
/// node-prep pin, so node release can drop exactly this job's pin.
/// </summary>
public static class JobVariables
{
    public const string Dataset = DatasetOptions.DatasetVariable;
    public const string Version = DatasetOptions.VersionVariable;
    public const string CacheHosts = CacheTierOptions.HostsVariable;
    public const string AgentPipe = AgentClient.PipeVariable;
    public const string JobId = "HPCDATA_JOB_ID";
    /// <summary>Where the node's copy is (the root of a directory dataset's read-only tree), for programs that read files.</summary>
    public const string DatasetPath = "HPCDATA_DATASET_PATH";
    /// <summary>Where service hosts of a SOA job may leave their endpoint (one file each) for the client.</summary>
    public const string EndpointsDirectory = "HPCDATA_ENDPOINTS_DIR";
    /// <summary>The service hosts' endpoints, host:port,…, given to a SOA client.</summary>
    public const string ServiceEndpoints = "HPCDATA_SERVICE_ENDPOINTS";

    /// <summary>The job id from the option, else from the scheduler's own variable (ours, Slurm, HPC Pack).</summary>
    public static string? JobIdFromEnvironment(string? explicitId) =>
        First(explicitId, Environment.GetEnvironmentVariable(JobId), Environment.GetEnvironmentVariable("SLURM_JOB_ID"),
            Environment.GetEnvironmentVariable("CCP_JOBID"));

    public static string? First(params string?[] values) => values.FirstOrDefault(v => !string.IsNullOrWhiteSpace(v))?.Trim();
}
