using System.Text.Json;
using System.Text.Json.Serialization;

namespace Hpc.CommonData.Hosting;

/// <summary>The stager's command line: <c>Hpc.Stager PATH --name owner/name [options]</c>, what <c>hpcdata stage</c> runs.</summary>
public sealed class StagerOptions : IProgramOptions
{
    public static string SectionName => "Stager";
    public static string ProgramName => "hpcdata stage";
    public static string Assembly => "Hpc.Stager";
    public static string Summary => "chunk, compress, checksum and upload a file, a directory or standard input as a new dataset version";

    public static bool ReadsClientFiles => true;
    public static IReadOnlyList<(string Command, string What)> Examples =>
    [
        ("hpcdata stage ./prices.csv --name risk/prices --cache-hosts cache1:6380,cache2:6380",
         "a new version of risk/prices (only the segments the tier lacks are sent)"),
        ("tar c ./env | hpcdata stage - --name sw/env --lifetime 7d",
         "standard input as a dataset that expires after a week"),
    ];

    [Switch("", "File or directory to stage, or - for standard input.", Meta = "PATH")]
    public string Path { get; set; } = "";

    [Switch("--name", "Dataset name, owner/name (a-z 0-9 . _ -).", Alias = "-n", Meta = "OWNER/NAME")]
    public string Name { get; set; } = "";

    /// <summary>Where to stage (its switches: --cache-hosts, --replicas, --cache-password-file); a local cache host by default.</summary>
    public Cache.CacheTierOptions CacheTier { get; set; } = new() { Hosts = [$"127.0.0.1:{Cache.CacheEndpoint.DefaultPort}"] };

    /// <summary>Where the meter is exported (--prometheus, --otlp); off by default.</summary>
    public MetricsOptions Metrics { get; set; } = new();

    [Switch("--chunking", "content (segment boundaries follow the data, so an insert or delete re-sends only the segments around it; 16 KB–256 KB, 64 KB on average) or fixed (--segment-size each).", Meta = "content|fixed")]
    public string Chunking { get; set; } = "content";

    [Switch("--segment-size", "Raw bytes per segment with --chunking fixed.")]
    public ByteSize SegmentSize { get; set; } = new(64 << 10);

    [Switch("--no-compress", "Store segments uncompressed (--codec none).")]
    public bool NoCompress { get; set; }

    [Switch("--codec", Format.SegmentCompression.Help + "; or auto (the default): lz4 or zstd from a sample of the data, the stager's cores and " +
        "--link-rate, the choice and its reason in the summary.", Meta = "CODEC")]
    public string Codec { get; set; } = "auto";

    /// <summary>A site sets it once for every stage (<c>HPCDATA_LINK_RATE</c> in the environment or settings file).</summary>
    [Switch("--link-rate", "--codec auto: the nodes' link rate, e.g. 1gbit or 100MB/s; not known (0, the default): lz4, which no link is too fast for " +
        "(prestage: also for --fanout auto, which measures the link from here when it is not known).",
        Environment = LinkRateVariable, Meta = "RATE")]
    public ByteRate LinkRate { get; set; } = ByteRate.Unlimited;

    public const string LinkRateVariable = "HPCDATA_LINK_RATE";

    /// <summary>--codec auto: the stager chooses from a sample.</summary>
    public bool AutoCodec => !NoCompress && Codec.Trim().Equals("auto", StringComparison.OrdinalIgnoreCase);

    /// <summary>The codec segments are written with: <see cref="Codec"/>, or none with <see cref="NoCompress"/> (LZ4 until auto has chosen).</summary>
    public Format.SegmentCompression Compression =>
        NoCompress ? Format.SegmentCompression.None : AutoCodec ? Format.SegmentCompression.Lz4 : Format.SegmentCompression.Parse(Codec);

    [Switch("--lifetime", "Cache-tier lifetime of the version, e.g. 90m, 12h, 7d (default: until removed).", Meta = "DURATION")]
    public string? Lifetime { get; set; }

    [Switch("--unpublished-lifetime", "How long the segments this stage sends live on the cache tier until it publishes (renewed while it runs): " +
        "a stage that fails or is killed leaves them to expire by themselves.", Meta = "DURATION")]
    public string UnpublishedLifetime { get; set; } = "1h";

    /// <summary>What is wrong with an <c>--unpublished-lifetime</c> value (the stager's and prestage's), or null.</summary>
    public static string? CheckUnpublishedLifetime(string value) =>
        Durations.TryParse(value, out var life) && life >= TimeSpan.FromSeconds(1) ? null
            : $"--unpublished-lifetime '{value}' is not a duration of at least 1s (examples: 90s, 15m, 12h)";

    [Switch("--allow-empty", "Standard input: stage an empty dataset when nothing arrives (refused otherwise: an empty pipe is usually a failed producer).")]
    public bool AllowEmpty { get; set; }

    [Switch("--skip-unreadable", "Directory: leave out files that cannot be read (one warning each) instead of failing the stage before anything is sent.")]
    public bool SkipUnreadable { get; set; }

    /// <summary>Set by a privileged caller staging a user's files for them (Slurm's burst buffer hooks, as SlurmUser).</summary>
    [Switch("--for-user", "Stage what this user id may read, as a privileged process acting for them (Linux): the file, or every directory and file of " +
        "the tree, is opened without following a link within the tree and checked against the user's permissions on the very file or directory " +
        "opened (an ACL is refused); what is read is what was checked.", Meta = "UID")]
    public string? ForUser { get; set; }

    /// <summary><see cref="ForUser"/> as a user id; null when not set.</summary>
    public uint? ForUserId => uint.TryParse(ForUser, System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var uid) ? uid : null;

    [Switch("--no-space-check", "Send even when a sample says the cache tier's free memory is too small for the new segments.")]
    public bool NoSpaceCheck { get; set; }
    /// <summary>Who may read the version on a node (see <see cref="Access.ReaderSpec"/>); empty: only the staging user.</summary>
    [Switch("--readers", "Who may read it on the nodes: user:NAME, group:NAME (or numeric ids), comma-separated, or all (default: only the staging user).",
        Meta = "LIST")]
    public string? Readers { get; set; }

    [Switch("--json", "Print the summary as one JSON object (a StageResult) on the last line, for scripts.")]
    public bool Json { get; set; }

    /// <summary>
    /// Carried out by <c>hpcdata stage</c>, which runs the stager with its stderr relayed (no terminal: no progress line)
    /// and its stdout dropped unless <see cref="Json"/>; the stager run on its own takes the switch and prints as usual.
    /// </summary>
    [Switch(QuietSwitch.Name, QuietSwitch.Help + " (--json still prints its line).", Alias = QuietSwitch.Alias)]
    public bool Quiet { get; set; }

    [Switch(VerboseSwitch.Name, VerboseSwitch.Help + ".", Alias = VerboseSwitch.Alias, Environment = VerboseSwitch.Variable)]
    public bool Verbose { get; set; }

    public IEnumerable<string> Validate()
    {
        foreach (var problem in Metrics.Validate()) yield return problem;
        if (Path.Length == 0) yield return "no PATH to stage (a file, a directory or -)";
        if (ForUser is not null && ForUserId is null) yield return $"--for-user '{ForUser}' is not a user id";
        if (ForUser is not null && Path == "-") yield return "--for-user stages a file or a directory, not standard input";
        if (Name.Length == 0) yield return "--name is required (owner/name)";
        else if (!Format.DatasetName.TryValidate(Name, out var why)) yield return $"--name: {why}";
        if (SegmentSize.Bytes is < 4096 or > 16 << 20) yield return "--segment-size must be between 4KB and 16MB";
        if (Chunking is not ("content" or "fixed")) yield return $"--chunking must be content or fixed, not '{Chunking}'";
        if (!AutoCodec && !NoCompress && !Format.SegmentCompression.TryParse(Codec, out _, out var codecError)) yield return $"--codec: {codecError}, or auto";
        if (Lifetime is not null && !Durations.TryParse(Lifetime, out _)) yield return $"--lifetime '{Lifetime}' is not a duration (examples: 90s, 15m, 12h, 7d)";
        if (CheckUnpublishedLifetime(UnpublishedLifetime) is { } unpublished) yield return unpublished;
        string? readers = null;
        try { Access.ReaderSpec.Resolve(Readers); }
        catch (CommonDataException e) { readers = e.Message; }
        if (readers is not null) yield return readers;
        foreach (var problem in CacheTier.Validate()) yield return problem;
    }
}

/// <summary>What a staging did: the stager's <c>--json</c> line, read by <c>prestage</c> and the local cluster.</summary>
public sealed record StageResult(
    string Name, string Version, long RawBytes, long StoredBytes, long SentBytes, int Segments, int SkippedSegments,
    bool Unchanged, double Seconds, string Hash, long NewRawBytes = 0, string Codec = "lz4", string? CodecReason = null)
{
    /// <summary>The cache hosts that lacked this version's manifest or "latest" pointer and were given them by this stage.</summary>
    public IReadOnlyList<string> RepairedHosts { get; init; } = [];

    /// <summary>
    /// Segments the tier already held stored otherwise than <see cref="Codec"/> would store them (staged before with
    /// another codec): kept as they are, and counted in <see cref="StoredBytes"/> as stored there.
    /// </summary>
    public int KeptInOtherEncoding { get; init; }

    [JsonIgnore] public double Ratio => RawBytes == 0 ? 1 : (double)StoredBytes / RawBytes;
}

/// <summary>
/// The JSON the programs print for scripts and read from each other (a stager's <see cref="StageResult"/>, a worker's
/// <see cref="WorkerResult"/>): camelCase as <c>status --json</c> and <c>list --json</c> print, read back in any case, so
/// a launcher still reads a line an older program printed. Generated at compile time: native programs print it too.
/// </summary>
[JsonSourceGenerationOptions(JsonSerializerDefaults.Web)]
[JsonSerializable(typeof(StageResult))]
[JsonSerializable(typeof(WorkerResult))]
public sealed partial class ContractJson : JsonSerializerContext;
