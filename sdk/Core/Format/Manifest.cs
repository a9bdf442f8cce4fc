using System.Text.Json;
using System.Text.Json.Serialization;
using Hpc.CommonData.Access;

namespace Hpc.CommonData.Format;

/// <summary>One segment of a version, in dataset order.</summary>
public sealed record ManifestSegment(
    [property: JsonPropertyName("id")] string Id,
    [property: JsonPropertyName("raw")] int RawLength,
    [property: JsonPropertyName("stored")] int StoredLength);

/// <summary>What an entry of a directory dataset is.</summary>
public enum DatasetEntryType
{
    /// <summary>A regular file: its bytes lie at <see cref="DatasetFile.Offset"/> in the dataset.</summary>
    File = 0,
    /// <summary>A directory (kept so empty ones survive, with their modes and times).</summary>
    Directory = 1,
    /// <summary>A symbolic link: <see cref="DatasetFile.Target"/> is its target as written (relative or absolute, inside the tree or not).</summary>
    SymbolicLink = 2,
    /// <summary>Another name of a file listed before it (a hard link): <see cref="DatasetFile.Target"/> is that file's path; its bytes are stored once.</summary>
    HardLink = 3,
}

/// <summary>An entry of a directory dataset: a file (where its bytes lie in the dataset), a directory or a link.</summary>
public sealed record DatasetFile(
    [property: JsonPropertyName("path")] string Path,
    [property: JsonPropertyName("offset")] long Offset,
    [property: JsonPropertyName("length")] long Length,
    [property: JsonPropertyName("mode")] int Mode)
{
    /// <summary>Absent in JSON for a file, which is all that manifests held before trees were staged faithfully.</summary>
    [JsonPropertyName("type"), JsonIgnore(Condition = JsonIgnoreCondition.WhenWritingDefault)] public DatasetEntryType Type { get; init; }
    [JsonPropertyName("target")] public string? Target { get; init; }
    /// <summary>Modification time, nanoseconds since the Unix epoch; null when not recorded (older manifests).</summary>
    [JsonPropertyName("mtime")] public long? ModifiedNanoseconds { get; init; }

    public bool IsFile => Type == DatasetEntryType.File;
}

/// <summary>
/// An immutable dataset version. Its version id is the BLAKE3-256 of its serialized bytes, so the id names exactly
/// this content and this segment list; nothing about it can change without the id changing — its readers included.
/// Its <see cref="Hash"/> (XXH3-128 of the whole dataset) is a check against damage in assembling a copy, not what
/// vouches for the content: the segment ids and the version id do that.
/// <para>Format 1 has no readers: everyone on a node may read it. Format 2 carries <see cref="Readers"/>. A manifest is
/// written as format 2 exactly when it restricts its readers, so an agent built before readers existed refuses such a
/// version (unknown format) instead of ignoring the field and serving it to everyone; unrestricted versions stay
/// byte-identical to what earlier stagers wrote.</para>
/// </summary>
public sealed class Manifest
{
    /// <summary>The format without readers (everyone may read).</summary>
    public const int OpenFormat = 1;
    /// <summary>The newest format this build reads and writes: format 1 plus <see cref="Readers"/>.</summary>
    public const int CurrentFormat = 2;

    private readonly int? _format;

    /// <summary>Why a version staged before content ids became BLAKE3-256 is refused, and what to do about it.</summary>
    public const string LegacyIds = "the version was staged with XXH3-128 content ids, which a writer can forge, and this build reads only BLAKE3-256 ones: re-stage the dataset";

    /// <summary>As parsed; for a manifest being built, the format its readers need.</summary>
    [JsonPropertyName("format")] public int Format { get => _format ?? (Readers is null ? OpenFormat : CurrentFormat); init => _format = value; }
    [JsonPropertyName("name")] public required string Name { get; init; }
    [JsonPropertyName("created")] public DateTimeOffset Created { get; init; }
    [JsonPropertyName("lifetimeSeconds")] public long? LifetimeSeconds { get; init; }
    [JsonPropertyName("rawLength")] public long RawLength { get; init; }
    [JsonPropertyName("storedLength")] public long StoredLength { get; init; }
    [JsonPropertyName("hash")] public required string Hash { get; init; }
    [JsonPropertyName("segmentSize")] public int SegmentSize { get; init; } = SegmentCodec.DefaultSegmentSize;
    /// <summary>How the segment boundaries were chosen: null for fixed <see cref="SegmentSize"/> segments, or a content-defined
    /// scheme (<see cref="ContentChunker.Name"/>). Readers need only the segment list; this says how to reproduce it.</summary>
    [JsonPropertyName("chunking")] public string? Chunking { get; init; }
    [JsonPropertyName("segments")] public required IReadOnlyList<ManifestSegment> Segments { get; init; }
    [JsonPropertyName("files")] public IReadOnlyList<DatasetFile>? Files { get; init; }

    /// <summary>Who may read the version on a node; null: everyone (see <see cref="DatasetReaders"/>).</summary>
    [JsonPropertyName("readers")] public DatasetReaders? Readers { get; init; }

    private long[]? _offsets;
    private SegmentId[]? _ids;

    /// <summary>Byte offset of each segment, plus the total at the end (longs: datasets pass 4 GB).</summary>
    [JsonIgnore]
    public IReadOnlyList<long> Offsets => _offsets ??= ComputeOffsets();

    [JsonIgnore]
    public IReadOnlyList<SegmentId> SegmentIds => _ids ??= Segments.Select(s => SegmentId.Parse(s.Id)).ToArray();

    private long[] ComputeOffsets()
    {
        var offsets = new long[Segments.Count + 1];
        long o = 0;
        for (var i = 0; i < Segments.Count; i++) { offsets[i] = o; o += Segments[i].RawLength; }
        offsets[^1] = o;
        return offsets;
    }

    /// <summary>The bytes that are stored and whose hash is the version id: the compact binary encoding (<see cref="ManifestBinary"/>).</summary>
    public byte[] Serialize() => ManifestBinary.Write(this);

    /// <summary>The JSON encoding every version staged before the binary one used; still read, no longer written by the stager.</summary>
    public byte[] SerializeJson() => JsonSerializer.SerializeToUtf8Bytes(this, FormatJsonContext.Default.Manifest);

    internal void UseParsedIds(SegmentId[] ids) => _ids = ids;

    /// <summary>The version id of these exact bytes (BLAKE3-256, like a segment's: a manifest is stored under it the same way).</summary>
    public static string VersionOf(ReadOnlySpan<byte> serialized) => SegmentId.Of(serialized).ToString();

    /// <summary>The 32 hex digits of a whole-dataset hash (<see cref="Hash"/>).</summary>
    public static string FormatDatasetHash(UInt128 hash) => hash.ToString("x32", System.Globalization.CultureInfo.InvariantCulture);

    internal static UInt128 ParseDatasetHash(string hex) =>
        TryParseDatasetHash(hex, out var hash) ? hash : throw new FormatException($"'{hex}' is not a 32-digit hex dataset hash");

    private static bool TryParseDatasetHash(string? hex, out UInt128 hash)
    {
        hash = default;
        return hex is { Length: 32 } && UInt128.TryParse(hex, System.Globalization.NumberStyles.AllowHexSpecifier, System.Globalization.CultureInfo.InvariantCulture, out hash);
    }

    /// <summary>Parses and checks internal consistency; throws <see cref="InvalidDataException"/> on any mismatch.</summary>
    public static Manifest Parse(ReadOnlySpan<byte> serialized)
    {
        Manifest? m;
        if (ManifestBinary.IsBinary(serialized))
        {
            try { m = ManifestBinary.Read(serialized); }
            catch (Exception e) when (e is OverflowException or ArgumentException) { throw new InvalidDataException($"manifest holds an impossible value: {e.Message}", e); }
        }
        else
        {
            try { m = JsonSerializer.Deserialize(serialized, FormatJsonContext.Default.Manifest); }
            catch (JsonException e) { throw new InvalidDataException($"manifest is not valid JSON: {e.Message}", e); }
        }
        if (m is null) throw new InvalidDataException("manifest is empty");
        m.Check();
        return m;
    }

    private void Check()
    {
        if (Format is not (OpenFormat or CurrentFormat))
            throw new InvalidDataException($"manifest format {Format} is not supported (this build reads {OpenFormat} and {CurrentFormat})");
        // Each format says whether readers are present: a format 1 manifest with readers would be served to everyone by
        // an older agent, and a format 2 one without them means nothing.
        if ((Format == CurrentFormat) != (Readers is not null))
            throw new InvalidDataException(Readers is null ? $"manifest format {Format} lacks its readers" : $"manifest format {Format} cannot carry readers");
        if (Readers is not null && (Readers.Users is null || Readers.Groups is null))
            throw new InvalidDataException("manifest readers lack their user or group list");
        // JSON can say null where a name, list or entry belongs; that is a damaged manifest, not a crash.
        if (Name is null || Hash is null || Segments is null) throw new InvalidDataException("manifest lacks its name, hash or segment list");
        if (!DatasetName.TryValidate(Name, out var error)) throw new InvalidDataException(error);
        long raw = 0;
        foreach (var s in Segments)
        {
            if (s?.Id is null) throw new InvalidDataException($"manifest of {Name}: a segment entry without an id");
            if (SegmentId.IsLegacy(s.Id)) throw new InvalidDataException($"manifest of {Name}: {LegacyIds}");
            if (!SegmentId.TryParse(s.Id, out _)) throw new InvalidDataException($"manifest of {Name}: bad segment id '{s.Id}'");
            if (s.RawLength <= 0 || s.RawLength > SegmentCodec.MaxRawLength || s.StoredLength <= 0)
                throw new InvalidDataException($"manifest of {Name}: bad segment lengths {s.RawLength}/{s.StoredLength}");
            raw += s.RawLength;
        }
        if (raw != RawLength) throw new InvalidDataException($"manifest of {Name}: segments add up to {raw} bytes, header says {RawLength}");
        if (!TryParseDatasetHash(Hash, out _)) throw new InvalidDataException($"manifest of {Name}: bad dataset hash '{Hash}'");
        var seen = new HashSet<string>(StringComparer.Ordinal);
        var files = new HashSet<string>(StringComparer.Ordinal);
        foreach (var f in Files ?? [])
        {
            if (f?.Path is null) throw new InvalidDataException($"manifest of {Name}: a file entry without a path");
            if (f.Offset < 0 || f.Length < 0 || f.Offset + f.Length > RawLength)
                throw new InvalidDataException($"manifest of {Name}: file '{f.Path}' lies outside the dataset");
            if (!IsSafeRelativePath(f.Path)) throw new InvalidDataException($"manifest of {Name}: unsafe file path '{f.Path}'");
            if (!seen.Add(f.Path)) throw new InvalidDataException($"manifest of {Name}: '{f.Path}' is listed twice");
            if (f.IsFile) files.Add(f.Path);
            switch (f.Type)
            {
                case DatasetEntryType.File or DatasetEntryType.Directory when f.Target is null:
                    break;
                case DatasetEntryType.SymbolicLink when f.Target is not null && IsStorableLinkTarget(f.Target):
                    break;
                case DatasetEntryType.HardLink when f.Target is not null && files.Contains(f.Target):
                    break;
                default:
                    throw new InvalidDataException($"manifest of {Name}: entry '{f.Path}' ({f.Type}) has a missing or unsafe target '{f.Target}'");
            }
        }
        // A tree is written out (on a node, by hpcdata get): nothing may lie below an entry that is not a directory —
        // "a" a file and "a/b" another cannot both exist, and below a link it would be written through the link.
        if (Files is { Count: > 0 })
        {
            var notDirectories = Files.Where(f => f.Type != DatasetEntryType.Directory).Select(f => f.Path).ToHashSet(StringComparer.Ordinal);
            foreach (var f in Files)
                for (var slash = f.Path.IndexOf('/'); slash > 0; slash = f.Path.IndexOf('/', slash + 1))
                    if (notDirectories.Contains(f.Path[..slash]))
                        throw new InvalidDataException($"manifest of {Name}: '{f.Path}' lies below '{f.Path[..slash]}', which is not a directory");
        }
    }

    /// <summary>The longest symbolic link target a tree keeps (Linux's PATH_MAX).</summary>
    public const int MaxLinkTarget = 4096;

    /// <summary>
    /// Whether a symbolic link's target can be kept: any text of 1 to <see cref="MaxLinkTarget"/> characters without
    /// control characters — absolute, leading out of the tree or to nothing alike. A link is only ever created, never
    /// followed, by whoever writes a tree out (nothing in a manifest may lie below one), so its target is data.
    /// </summary>
    public static bool IsStorableLinkTarget(string target) => target.Length is > 0 and <= MaxLinkTarget && !target.Any(char.IsControl);

    /// <summary>
    /// Whether a symbolic link at <paramref name="linkPath"/> (relative to the tree) pointing to <paramref name="target"/>
    /// resolves inside the tree: a relative target whose ".." parts never climb above the tree's root.
    /// </summary>
    public static bool LinkStaysInside(string linkPath, string target)
    {
        if (target.Length is 0 or > 4096 || target.StartsWith('/') || target.Contains('\\') || target.Contains(':') || target.Any(char.IsControl))
            return false;
        var depth = linkPath.Count(c => c == '/');
        foreach (var part in target.Split('/'))
        {
            if (part is "" or ".") continue;
            depth += part == ".." ? -1 : 1;
            if (depth < 0) return false;
        }
        return true;
    }

    /// <summary>A path inside a directory dataset: relative, '/'-separated, no empty, '.' or '..' parts, no control characters.</summary>
    public static bool IsSafeRelativePath(string path) =>
        path.Length is > 0 and <= 4096 && !path.StartsWith('/') && !path.Contains('\\') && !path.Contains(':') &&
        !path.Any(char.IsControl) && path.Split('/').All(p => p.Length > 0 && p != "." && p != "..");
}

[JsonSourceGenerationOptions(DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull)]
[JsonSerializable(typeof(Manifest))]
internal sealed partial class FormatJsonContext : JsonSerializerContext;
