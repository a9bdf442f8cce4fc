namespace Hpc.NodeAgent;

/// <summary>Node agent settings: configuration section "Agent", command-line switches, or HPCDATA_AGENT_* variables.</summary>
public sealed class AgentOptions
{
    /// <summary>Pipe name (or, on Linux, an absolute socket path). Keep it short: Unix socket paths are limited to ~100 bytes.</summary>
    public string Pipe { get; set; } = Hpc.CommonData.Agent.AgentClient.DefaultPipe;
    /// <summary>Where local copies live. tmpfs (/dev/shm) by default; a local disk directory for data larger than RAM.</summary>
    public string DataDirectory { get; set; } = Directory.Exists("/dev/shm") ? "/dev/shm/hpcdata" : Path.Combine(Path.GetTempPath(), "hpcdata");
    /// <summary>Bytes of local copies kept before unleased ones are evicted, least recently used first.</summary>
    public long BudgetBytes { get; set; } = 8L << 30;
    public string NodeName { get; set; } = Environment.MachineName;
    /// <summary>
    /// JSON-lines file that gets one <c>kind: "fetch"</c> line per completed fetch (the format <c>hpcdata report</c>
    /// reads; docs/benchmarks.md). Empty: <c>telemetry.jsonl</c> in the data directory; "none": off.
    /// </summary>
    public string TelemetryFile { get; set; } = "";

    /// <summary>Concurrent pipe connections served; more wait in the accept queue.</summary>
    public int MaxConnections { get; set; } = 256;
}
