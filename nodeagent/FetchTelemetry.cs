using System.Text.Json;
using System.Text.Json.Serialization;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.NodeAgent;

/// <summary>
/// One JSON line of <c>kind: "fetch"</c> per completed fetch, so a cluster's fetch times can be reported like a bench
/// run (<c>hpcdata report</c>; docs/benchmarks.md). Reusing a local copy writes nothing.
/// </summary>
public sealed class FetchTelemetry(string? path, string node, int hosts, ILogger? log = null, AgentFiles? files = null)
{
    private readonly AgentFiles _files = files ?? new AgentFiles(log: log);
    private readonly object _lock = new();
    private readonly ILogger _log = log ?? NullLogger.Instance;

    /// <summary>Where the lines go, null for nowhere.</summary>
    public string? Path { get; } = path;

    /// <summary>The file a <c>--telemetry</c> setting names: empty for <c>telemetry.jsonl</c> in the data directory, "none" for off.</summary>
    public static string? Resolve(string setting, string dataDirectory) => setting switch
    {
        "none" => null,
        "" => System.IO.Path.Combine(dataDirectory, "telemetry.jsonl"),
        var p => p,
    };

    /// <param name="source">"fetched", or "resumed" when part of the copy was already on the node.</param>
    public void Fetched(Manifest manifest, string version, double seconds, string source, int reusedSegments = 0, long reusedBytes = 0)
    {
        if (Path is null) return;
        var line = JsonSerializer.Serialize(new FetchLine(DateTimeOffset.UtcNow, node, manifest.Name, version, manifest.RawLength, manifest.StoredLength,
            Math.Round(seconds, 4), source, hosts, reusedSegments, reusedBytes), NodeAgentJson.Default.FetchLine);
        try
        {
            // Owner-only: the lines name restricted datasets, their versions and sizes (the file is the agent's, not a copy it serves).
            lock (_lock) _files.Append(Path, System.Text.Encoding.UTF8.GetBytes(line + "\n"));
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _log.TelemetryNotWritten(Path, e.Message);
        }
    }
}

/// <summary>A line of the telemetry file (the reader is <c>hpcdata report</c>).</summary>
internal sealed record FetchLine(DateTimeOffset Time, string Node, string Dataset, string Version, long RawBytes, long StoredBytes, double Seconds,
    string Source, int Hosts, int ReusedSegments, long ReusedBytes)
{
    public string Kind => "fetch";
    public int Schema => 1;
}

/// <summary>The agent's own files, serialised without reflection (the agent may be compiled to native code).</summary>
[JsonSourceGenerationOptions(PropertyNamingPolicy = JsonKnownNamingPolicy.CamelCase)]
[JsonSerializable(typeof(FetchLine))]
[JsonSerializable(typeof(Dictionary<string, PinRecord[]>))]
internal sealed partial class NodeAgentJson : JsonSerializerContext;

/// <summary>A pin as pins.json keeps it.</summary>
internal sealed record PinRecord(string Name, uint Owner);
