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
    /// <summary>A request: what the agent reads from any process on the node.</summary>
    public const int MaxControlFrame = 1 << 20;
    /// <summary>
    /// A reply, read by clients from their agent: it carries a directory dataset's file table, which for 100k files
    /// passes a megabyte of JSON. Bounded by what a manifest may hold (its table came from one), with room for JSON.
    /// </summary>
    public const int MaxReplyFrame = 256 << 20;
    public const int DataFrameSize = 1 << 20;
    /// <summary>The manifest frame that follows an <c>ingest</c> request: a manifest is at most this long.</summary>
    public const int MaxManifestFrame = SegmentCodec.MaxRawLength;
    /// <summary>
    /// Largest data frame of an ingest: one record of the largest stored segment the format allows (records are
    /// 8 bytes of index and length, then the stored bytes). Clients send frames of about <see cref="DataFrameSize"/>.
    /// </summary>
    public static readonly int MaxIngestFrame = SegmentCodec.MaxEncodedLength(SegmentCodec.MaxRawLength) + IngestRecord.HeaderLength;

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
    public static ValueTask<T?> ReadMessageAsync<T>(PipeReader input, JsonTypeInfoProvider<T> type, CancellationToken ct, int maxFrame = MaxControlFrame) where T : class =>
        ReadFrameAsync(input, maxFrame, payload =>
        {
            try
            {
                var reader = new Utf8JsonReader(payload);
                return JsonSerializer.Deserialize(ref reader, type()) ?? throw new InvalidDataException("empty message");
            }
            catch (JsonException e) { throw new InvalidDataException($"malformed message: {e.Message}", e); }
        }, ct);

    /// <summary>Reads one frame of at most <paramref name="maxFrame"/> bytes as an array; null at a clean end of stream.</summary>
    public static ValueTask<byte[]?> ReadFrameAsync(PipeReader input, int maxFrame, CancellationToken ct) =>
        ReadFrameAsync(input, maxFrame, payload => payload.ToArray(), ct);

    private static async ValueTask<T?> ReadFrameAsync<T>(PipeReader input, int maxFrame, Func<ReadOnlySequence<byte>, T> parse, CancellationToken ct)
        where T : class
    {
        while (true)
        {
            var result = await input.ReadAsync(ct);
            var buffer = result.Buffer;
            // Everything is examined only when more bytes are needed: bytes already received after the frame (an ingest's
            // manifest and data follow its request at once) must be seen by the next read without waiting for more.
            var examined = buffer.End;
            try
            {
                if (TryParse(ref buffer, maxFrame, out var payload))
                {
                    examined = buffer.Start;
                    return parse(payload);
                }
                if (result.IsCompleted)
                {
                    if (buffer.IsEmpty) return null;
                    throw new InvalidDataException("connection ended inside a frame");
                }
            }
            finally { input.AdvanceTo(buffer.Start, examined); }
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
    /// <summary>Have the running agents of <see cref="AgentRequest.Agents"/> exchange a dataset among themselves, pinned
    /// for <see cref="AgentRequest.Pin"/> as the caller's (the agent knows the caller from the socket and holds the
    /// cluster's peer key, which users never do).</summary>
    public const string Exchange = "exchange";
    /// <summary>Hand the agent stored segments of a version obtained elsewhere (see <see cref="IngestSession"/>).</summary>
    public const string Ingest = "ingest";
}

/// <summary>
/// One record of an ingest data frame: segment index (int32 LE), stored length (int32 LE), then the stored segment
/// exactly as the cache tier holds it (header and payload). A frame holds one or more records back to back.
/// </summary>
public static class IngestRecord
{
    public const int HeaderLength = 8;

    public static void WriteHeader(Span<byte> destination, int index, int storedLength)
    {
        BinaryPrimitives.WriteInt32LittleEndian(destination, index);
        BinaryPrimitives.WriteInt32LittleEndian(destination[4..], storedLength);
    }
}

public sealed class AgentRequest
{
    [JsonPropertyName("op")] public string Op { get; set; } = "";
    [JsonPropertyName("dataset")] public string? Dataset { get; set; }
    [JsonPropertyName("version")] public string? Version { get; set; }
    /// <summary>A pin name (e.g. the job id): pinned copies survive eviction until released.</summary>
    [JsonPropertyName("pin")] public string? Pin { get; set; }
    [JsonPropertyName("evict")] public bool Evict { get; set; }
    /// <summary>A prefetch on behalf of this user (a name the node knows): the readers are checked against that user
    /// and the pin is that user's (its quota, its release). Only root and the agent's own user may ask it: the agents'
    /// exchange, which takes the job's user from a request sealed with the cluster's key.</summary>
    [JsonPropertyName("for")] public string? For { get; set; }
    /// <summary>An exchange's members: the agents' peer endpoints (host:port), in the order that makes their ranks.</summary>
    [JsonPropertyName("agents")] public List<string>? Agents { get; set; }
    /// <summary>How an exchange runs, as the caller's own settings say; null: the agent's defaults.</summary>
    [JsonPropertyName("exchange")] public ExchangeRequestSettings? Exchange { get; set; }
}

/// <summary>
/// The caller's settings for an exchange a node's agent makes on its behalf (<see cref="AgentOps.Exchange"/>): a job step
/// without the cluster's key gets the exchange its own switches ask for, as one with the key does. The agent checks them
/// against the bounds every agent takes before the request travels.
/// </summary>
public sealed class ExchangeRequestSettings
{
    /// <summary>How long a ring neighbour may take nothing before the ring closes around it (--peer-timeout).</summary>
    [JsonPropertyName("peerTimeout")] public TimeSpan PeerTimeout { get; set; }
    /// <summary>How long the collectives or the exchange may go without anything moving (--stall-timeout).</summary>
    [JsonPropertyName("stallTimeout")] public TimeSpan StallTimeout { get; set; }
    /// <summary>How long the whole node prep may take (--timeout).</summary>
    [JsonPropertyName("timeout")] public TimeSpan Timeout { get; set; }
    /// <summary>--ring-groups: auto, off or a group size.</summary>
    [JsonPropertyName("ringGroups")] public string RingGroups { get; set; } = "auto";
    /// <summary>--link-probe.</summary>
    [JsonPropertyName("linkProbe")] public bool LinkProbe { get; set; } = true;
    /// <summary>--tree-degree: children per node in the agents' tree.</summary>
    [JsonPropertyName("treeDegree")] public int TreeDegree { get; set; } = 8;
}

/// <summary>What an <see cref="AgentOps.Exchange"/> came to: every member's line, null where none answered.</summary>
public sealed class ExchangeReport
{
    [JsonPropertyName("members")] public List<string> Members { get; set; } = [];
    [JsonPropertyName("launchSeconds")] public double LaunchSeconds { get; set; }
    [JsonPropertyName("joined")] public int Joined { get; set; }
    [JsonPropertyName("seconds")] public double Seconds { get; set; }
    [JsonPropertyName("outcomes")] public List<ExchangeOutcome?> Outcomes { get; set; } = [];
    /// <summary>Members that took the request as its first agent and went silent before it started; it went to the next each time.</summary>
    [JsonPropertyName("silentRoots")] public List<string>? SilentRoots { get; set; }
}

/// <summary>One node's part of an exchange: 0 ready, else the failure's <see cref="ErrorCode"/> as a number.</summary>
public sealed class ExchangeOutcome
{
    [JsonPropertyName("position")] public int Position { get; set; }
    [JsonPropertyName("node")] public string Node { get; set; } = "";
    [JsonPropertyName("code")] public int Code { get; set; }
    [JsonPropertyName("version")] public string Version { get; set; } = "";
    [JsonPropertyName("seconds")] public double Seconds { get; set; }
    [JsonPropertyName("detail")] public string Detail { get; set; } = "";
    /// <summary>The positions this node's ring went on without (dead, or silent for the peer timeout); null when none.</summary>
    [JsonPropertyName("lost")] public List<int>? Lost { get; set; }
}

public sealed class AgentResponse
{
    [JsonPropertyName("ok")] public bool Ok { get; set; }
    [JsonPropertyName("error")] public string? Error { get; set; }
    [JsonPropertyName("code")] public ErrorCode? Code { get; set; }
    [JsonPropertyName("dataset")] public LocalDataset? Dataset { get; set; }
    [JsonPropertyName("status")] public AgentStatus? Status { get; set; }
    [JsonPropertyName("ingest")] public IngestReport? Ingest { get; set; }
    /// <summary>A release's answer: how many pins of that name it dropped (0: the caller held none there). Null from older agents.</summary>
    [JsonPropertyName("released")] public int? Released { get; set; }
    [JsonPropertyName("exchange")] public ExchangeReport? Exchange { get; set; }

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
    /// <summary>Raw bytes this fetch took from other versions already on the node instead of the cache tier (an update's unchanged segments).</summary>
    [JsonPropertyName("reusedBytes")] public long ReusedBytes { get; set; }
    /// <summary>
    /// Raw bytes a resumed fetch found already in the partial copy, verified and kept (what an interrupted fetch, or a
    /// fan-out's ring, had written), so not fetched again.
    /// </summary>
    [JsonPropertyName("resumedBytes")] public long ResumedBytes { get; set; }
}

public sealed class AgentStatus
{
    [JsonPropertyName("node")] public string Node { get; set; } = "";
    /// <summary>The agent's release and the commit it was built from (<c>1.0.0+3f2a…</c>); null from agents before it said.</summary>
    [JsonPropertyName("version")] public string? Version { get; set; }
    [JsonPropertyName("dataDirectory")] public string DataDirectory { get; set; } = "";
    [JsonPropertyName("budgetBytes")] public long BudgetBytes { get; set; }
    [JsonPropertyName("usedBytes")] public long UsedBytes { get; set; }
    /// <summary>CPU time the agent process has used since it started (user and system): the node's cost of its fetches.</summary>
    [JsonPropertyName("cpuSeconds")] public double CpuSeconds { get; set; }
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
    /// <c>complete</c> (published, read-only), <c>fetching</c> (a fetch is running now), <c>ingesting</c> (a process on the
    /// node is handing the agent segments) or <c>partial</c> (an interrupted or failed fetch, or segments ingested; the
    /// next request resumes it).
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
    /// <summary>
    /// Of <see cref="Pins"/>, the names of those the asking user may release: its own (two users pinning under one name
    /// hold two pins), or all of them for the agent's administrators. Null from agents older than this field.
    /// </summary>
    [JsonPropertyName("releasable")] public List<string>? Releasable { get; set; }
    [JsonPropertyName("lastAccess")] public DateTimeOffset LastAccess { get; set; }
}

/// <summary>
/// The agent's two answers to an <c>ingest</c>. After the manifest: the version's state on the node — <see cref="Complete"/>,
/// or which segments it still lacks (<see cref="MissingBitmap"/>). After the data: what became of the segments sent
/// (<see cref="Accepted"/>, <see cref="AlreadyHad"/>, <see cref="Rejected"/>) and how many are still missing.
/// </summary>
public sealed class IngestReport
{
    /// <summary>The version is published on the node: nothing is sent and nothing is written.</summary>
    [JsonPropertyName("complete")] public bool Complete { get; set; }
    /// <summary>Segments of the version, from its manifest.</summary>
    [JsonPropertyName("segments")] public int Segments { get; set; }
    /// <summary>Segments the node still lacks (before the data in the first answer, after it in the second).</summary>
    [JsonPropertyName("missing")] public int Missing { get; set; }
    /// <summary>
    /// First answer only, unless complete: one bit per segment, set when the node lacks it, least significant bit first
    /// (segment i is bit i % 8 of byte i / 8), base64. 100,000 segments take 12.5 KB (about 17 KB of base64).
    /// </summary>
    [JsonPropertyName("missingBitmap")] public byte[]? MissingBitmap { get; set; }
    /// <summary>Segments verified, written and journaled by this ingest.</summary>
    [JsonPropertyName("accepted")] public int Accepted { get; set; }
    /// <summary>Segments sent that the node already had (verified on the node, or accepted earlier in this ingest).</summary>
    [JsonPropertyName("alreadyHad")] public int AlreadyHad { get; set; }
    /// <summary>Segments that failed verification: never written, never journaled.</summary>
    [JsonPropertyName("rejected")] public int Rejected { get; set; }
    /// <summary>Why the first few were rejected.</summary>
    [JsonPropertyName("rejections")] public List<string>? Rejections { get; set; }
    /// <summary>
    /// Second answer, when any was rejected: one bit per segment, set when a copy of it failed verification in this
    /// ingest (as <see cref="MissingBitmap"/>), so the sender can tell whose blocks they were.
    /// </summary>
    [JsonPropertyName("rejectedBitmap")] public byte[]? RejectedBitmap { get; set; }

    /// <summary>The segments <see cref="RejectedBitmap"/> marks, in order.</summary>
    public IEnumerable<int> RejectedSegments()
    {
        if (RejectedBitmap is not { } bits) yield break;
        for (var i = 0; i < Math.Min(Segments, bits.Length * 8); i++)
            if ((bits[i >> 3] & (1 << (i & 7))) != 0) yield return i;
    }

    /// <summary>Whether segment <paramref name="index"/> is missing according to <see cref="MissingBitmap"/>.</summary>
    public bool IsMissing(int index) =>
        !Complete && MissingBitmap is { } bits && (uint)index < (uint)Segments && (bits[index >> 3] & (1 << (index & 7))) != 0;

    /// <summary>Builds the bitmap of the segments <paramref name="have"/> does not mark.</summary>
    public static byte[] BitmapOfMissing(ReadOnlySpan<bool> have)
    {
        var bits = new byte[(have.Length + 7) / 8];
        for (var i = 0; i < have.Length; i++) if (!have[i]) bits[i >> 3] |= (byte)(1 << (i & 7));
        return bits;
    }
}

[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(AgentRequest))]
[JsonSerializable(typeof(AgentResponse))]
public sealed partial class AgentJson : JsonSerializerContext;
