using System.Buffers;
using System.Buffers.Binary;
using System.IO.Pipelines;
using System.Text.Json;
using System.Text.Json.Serialization;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Agent;

/// <summary>
/// Node-agent pipe protocol: each frame is a 4-byte little-endian length then that many bytes. Requests and replies
/// are JSON; in stream mode the reply is followed by raw data frames and an empty frame that ends the data.
/// </summary>
public static class AgentFrames
{
    public const int MaxControlFrame = 1 << 20;
    public const int DataFrameSize = 1 << 20;

    /// <summary>Slices one complete frame off <paramref name="buffer"/>; false when more bytes are needed.</summary>
    public static bool TryParse(ref ReadOnlySequence<byte> buffer, int maxFrame, out ReadOnlySequence<byte> payload)
    {
        payload = default;
        if (buffer.Length < 4) return false;
        Span<byte> header = stackalloc byte[4];
        buffer.Slice(0, 4).CopyTo(header);
        var length = BinaryPrimitives.ReadUInt32LittleEndian(header);
        if (length > (uint)maxFrame) throw new InvalidDataException($"frame of {length} bytes exceeds the {maxFrame}-byte limit");
        if (buffer.Length < 4 + length) return false;
        payload = buffer.Slice(4, length);
        buffer = buffer.Slice(payload.End);
        return true;
    }

    public static void Write(IBufferWriter<byte> output, ReadOnlySpan<byte> payload)
    {
        var span = output.GetSpan(4 + payload.Length);
        BinaryPrimitives.WriteUInt32LittleEndian(span, (uint)payload.Length);
        payload.CopyTo(span[4..]);
        output.Advance(4 + payload.Length);
    }

    public static async ValueTask WriteMessageAsync<T>(PipeWriter output, T message, JsonTypeInfoProvider<T> type, CancellationToken ct)
    {
        Write(output, JsonSerializer.SerializeToUtf8Bytes(message, type()));
        await output.FlushAsync(ct);
    }

    /// <summary>Reads one frame; null at a clean end of stream. A stream ending inside a frame is an error.</summary>
    public static async ValueTask<T?> ReadMessageAsync<T>(PipeReader input, JsonTypeInfoProvider<T> type, CancellationToken ct) where T : class
    {
        while (true)
        {
            var result = await input.ReadAsync(ct);
            var buffer = result.Buffer;
            try
            {
                if (TryParse(ref buffer, MaxControlFrame, out var payload))
                {
                    var reader = new Utf8JsonReader(payload);
                    return JsonSerializer.Deserialize(ref reader, type()) ?? throw new InvalidDataException("empty message");
                }
                if (result.IsCompleted)
                {
                    if (buffer.IsEmpty) return null;
                    throw new InvalidDataException("connection ended inside a frame");
                }
            }
            catch (JsonException e) { throw new InvalidDataException($"malformed message: {e.Message}", e); }
            finally { input.AdvanceTo(buffer.Start, buffer.End); }
        }
    }

    public delegate System.Text.Json.Serialization.Metadata.JsonTypeInfo<T> JsonTypeInfoProvider<T>();
}

public static class AgentOps
{
    public const string Open = "open";
    public const string Prefetch = "prefetch";
    public const string Release = "release";
    public const string Status = "status";
    public const string Stream = "stream";
}

public sealed class AgentRequest
{
    [JsonPropertyName("op")] public string Op { get; set; } = "";
    [JsonPropertyName("dataset")] public string? Dataset { get; set; }
    [JsonPropertyName("version")] public string? Version { get; set; }
    /// <summary>A pin name (e.g. the job id): pinned copies survive eviction until released.</summary>
    [JsonPropertyName("pin")] public string? Pin { get; set; }
    [JsonPropertyName("evict")] public bool Evict { get; set; }
}

public sealed class AgentResponse
{
    [JsonPropertyName("ok")] public bool Ok { get; set; }
    [JsonPropertyName("error")] public string? Error { get; set; }
    [JsonPropertyName("code")] public ErrorCode? Code { get; set; }
    [JsonPropertyName("dataset")] public LocalDataset? Dataset { get; set; }
    [JsonPropertyName("status")] public AgentStatus? Status { get; set; }

    public static AgentResponse Failure(CommonDataException e) => new() { Ok = false, Code = e.Code, Error = e.Message };

    /// <summary>The agent's error as the exception it was on the agent's side: same code, same message.</summary>
    public CommonDataException ToException(string fallback) => new(Code ?? ErrorCode.Internal, Error ?? fallback);
}

/// <summary>A verified, read-only local copy of one dataset version.</summary>
public sealed class LocalDataset
{
    [JsonPropertyName("name")] public string Name { get; set; } = "";
    [JsonPropertyName("version")] public string Version { get; set; } = "";
    [JsonPropertyName("path")] public string Path { get; set; } = "";
    [JsonPropertyName("length")] public long Length { get; set; }
    [JsonPropertyName("storedLength")] public long StoredLength { get; set; }
    [JsonPropertyName("hash")] public string Hash { get; set; } = "";
    [JsonPropertyName("files")] public IReadOnlyList<DatasetFile>? Files { get; set; }
    /// <summary>local (already on the node), fetched, or resumed (a partial copy was completed: some of its segments were already on the node).</summary>
    [JsonPropertyName("source")] public string Source { get; set; } = "";
    [JsonPropertyName("fetchSeconds")] public double FetchSeconds { get; set; }
}

public sealed class AgentStatus
{
    [JsonPropertyName("node")] public string Node { get; set; } = "";
    [JsonPropertyName("dataDirectory")] public string DataDirectory { get; set; } = "";
    [JsonPropertyName("budgetBytes")] public long BudgetBytes { get; set; }
    [JsonPropertyName("usedBytes")] public long UsedBytes { get; set; }
    [JsonPropertyName("copies")] public List<CopyStatus> Copies { get; set; } = [];
}

/// <summary>One local copy in <see cref="AgentStatus"/>: what it is, how far its fetch got, and what holds it.</summary>
public sealed class CopyStatus
{
    [JsonPropertyName("name")] public string Name { get; set; } = "";
    [JsonPropertyName("version")] public string Version { get; set; } = "";
    /// <summary>Raw (decoded) bytes of the version.</summary>
    [JsonPropertyName("length")] public long Length { get; set; }
    /// <summary>
    /// <c>complete</c> (published, read-only), <c>fetching</c> (a fetch is running now) or <c>partial</c> (an interrupted
    /// or failed fetch; the next request resumes it).
    /// </summary>
    [JsonPropertyName("state")] public string State { get; set; } = "";
    /// <summary>Segments of the version, from its manifest.</summary>
    [JsonPropertyName("segments")] public int Segments { get; set; }
    /// <summary>
    /// Segments verified and written on this node: all of them for a complete copy; while fetching, those done so far
    /// (including those a resumed fetch found intact); for a partial copy, those its journal records, which are
    /// re-verified when the fetch resumes.
    /// </summary>
    [JsonPropertyName("segmentsDone")] public int SegmentsDone { get; set; }
    /// <summary>Raw bytes of the segments counted in <see cref="SegmentsDone"/>; <see cref="Length"/> when complete.</summary>
    [JsonPropertyName("bytesDone")] public long BytesDone { get; set; }
    [JsonPropertyName("leases")] public int Leases { get; set; }
    [JsonPropertyName("pins")] public List<string> Pins { get; set; } = [];
    [JsonPropertyName("lastAccess")] public DateTimeOffset LastAccess { get; set; }
}

[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(AgentRequest))]
[JsonSerializable(typeof(AgentResponse))]
public sealed partial class AgentJson : JsonSerializerContext;
