using System.Globalization;

namespace Hpc.CommonData.Format;

/// <summary>
/// How a stager compresses segments: <c>lz4</c> (the fast default), <c>zstd</c> or <c>zstd:LEVEL</c> (smaller
/// segments for slower links), or <c>none</c>. Each stored segment's header says which codec wrote it, so readers need no
/// setting and versions staged either way mix freely on a cache tier.
/// </summary>
public readonly record struct SegmentCompression(SegmentCodecKind Codec, int Level = 0)
{
    public static readonly SegmentCompression None = new(SegmentCodecKind.Raw);
    public static readonly SegmentCompression Lz4 = new(SegmentCodecKind.Lz4);
    public static readonly SegmentCompression Zstd = new(SegmentCodecKind.Zstd, Format.Zstd.DefaultLevel);

    public const string Help = "lz4 (fast), zstd or zstd:LEVEL (LEVEL -7…22, default 1: about half LZ4's stored size on text, " +
                               "slower to stage), or none";

    public static SegmentCompression Parse(string text) =>
        TryParse(text, out var c, out var error) ? c : throw new FormatException(error);

    public static bool TryParse(string? text, out SegmentCompression compression, out string? error)
    {
        compression = Lz4;
        error = null;
        var t = text?.Trim().ToLowerInvariant();
        switch (t)
        {
            case "lz4": return true;
            case "none" or "raw": compression = None; return true;
            case "zstd": compression = Zstd; return true;
        }
        if (t is not null && t.StartsWith("zstd:", StringComparison.Ordinal)
            && int.TryParse(t.AsSpan(5), NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out var level))
        {
            if (level is < Format.Zstd.MinLevel or > Format.Zstd.MaxLevel || level == 0)
            {
                error = $"codec '{text}': zstd levels are {Format.Zstd.MinLevel}…-1 and 1…{Format.Zstd.MaxLevel}";
                return false;
            }
            compression = new SegmentCompression(SegmentCodecKind.Zstd, level);
            return true;
        }
        error = $"codec '{text}' is not one of lz4, zstd, zstd:LEVEL, none";
        return false;
    }

    public override string ToString() => Codec switch
    {
        SegmentCodecKind.Raw => "none",
        SegmentCodecKind.Lz4 => "lz4",
        _ => Level == Format.Zstd.DefaultLevel ? "zstd" : string.Create(CultureInfo.InvariantCulture, $"zstd:{Level}"),
    };
}
