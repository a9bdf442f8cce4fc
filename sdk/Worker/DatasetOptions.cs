using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Microsoft.Extensions.Logging;

namespace Hpc.CommonData;

/// <summary>How a worker reaches common data.</summary>
public enum DataAccessMode
{
    /// <summary>Map the agent's file; fall back to streaming over the pipe, then to the cache tier when no agent runs.</summary>
    Auto,
    /// <summary>Memory-map the node agent's verified local copy (zero copy, shared by every process on the node).</summary>
    Map,
    /// <summary>Receive a private copy over the agent's pipe (for workers that cannot map files).</summary>
    Stream,
    /// <summary>Fetch straight from the cache tier into private memory (no agent on this node).</summary>
    Direct,
}

/// <summary>
/// Options for <see cref="Dataset.OpenAsync(string, DatasetOptions?, CancellationToken)"/>. Defaults come from the
/// environment variables that <c>hpcdata prestage</c> sets on every job:
/// <c>HPCDATA_AGENT_PIPE</c>, <c>HPCDATA_MODE</c> (auto|map|stream|direct), <c>HPCDATA_CACHE_HOSTS</c>,
/// <c>HPCDATA_CACHE_PASSWORD</c>, and <c>HPCDATA_DATASET</c> + <c>HPCDATA_VERSION</c> (the version the job was staged with).
/// </summary>
public sealed class DatasetOptions
{
    public const string ModeVariable = "HPCDATA_MODE";
    public const string DatasetVariable = "HPCDATA_DATASET";
    public const string VersionVariable = "HPCDATA_VERSION";

    public string AgentPipe { get; set; } = AgentClient.PipeFromEnvironment();
    public DataAccessMode Mode { get; set; } = ParseMode(Environment.GetEnvironmentVariable(ModeVariable));
    public CacheTierOptions CacheTier { get; set; } = CacheTierOptions.FromEnvironment();
    public TimeSpan AgentConnectTimeout { get; set; } = TimeSpan.FromSeconds(2);
    /// <summary>A version to open instead of "latest"; by default the job's version when the name matches HPCDATA_DATASET.</summary>
    public string? Version { get; set; }
    public ILogger? Logger { get; set; }

    /// <summary>
    /// Told how far the fetch is when the data comes straight from the cache tier (<see cref="DataAccessMode.Direct"/>,
    /// or auto with no agent): after each batch of segments, from the fetch's threads. With an agent the agent fetches,
    /// and its status says how far it is.
    /// </summary>
    public IProgress<Fetch.FetchProgress>? Progress { get; set; }

    public static DataAccessMode ParseMode(string? text) => text?.Trim().ToLowerInvariant() switch
    {
        null or "" or "auto" => DataAccessMode.Auto,
        "map" => DataAccessMode.Map,
        "stream" => DataAccessMode.Stream,
        "direct" => DataAccessMode.Direct,
        _ => throw new ArgumentException($"{ModeVariable}='{text}' is not one of auto, map, stream, direct"),
    };

    internal string? VersionFor(string name) =>
        Version ?? (Environment.GetEnvironmentVariable(DatasetVariable) == name ? Environment.GetEnvironmentVariable(VersionVariable) : null);
}
