namespace Hpc.CommonData.Format;

/// <summary>
/// A version named by the start of its id, as <c>hpcdata status</c> and <c>list</c> print ids (12 digits): resolved
/// against the versions the cache tier or the node's agent knows, and refused when it fits none or several.
/// </summary>
public static class VersionPrefix
{
    /// <summary>Fewer digits would often fit several versions of a busy tier.</summary>
    public const int MinimumLength = 8;

    /// <summary>
    /// Whether <paramref name="text"/> is the start of a version id rather than a whole one: 8 to 63 hex digits. 32 is
    /// left to what it already means, an id of the old format, which is refused as such.
    /// </summary>
    public static bool IsPrefix(string? text) =>
        text is { Length: >= MinimumLength and < SegmentId.HexLength } && text.Length != SegmentId.LegacyHexLength && text.All(char.IsAsciiHexDigit);

    /// <summary>What a version that is neither a whole id nor a usable prefix is told.</summary>
    public static string NotAVersion(string name, string version) =>
        $"dataset '{name}' version '{version}' is not a version id: give its {SegmentId.HexLength} hex digits or at least the first {MinimumLength}";

    /// <summary>
    /// The one of <paramref name="versions"/> that starts with <paramref name="prefix"/>. None: <see cref="ErrorCode.NotFound"/>;
    /// several: <see cref="ErrorCode.BadRequest"/> listing them. <paramref name="where"/> says whose versions they are.
    /// </summary>
    public static string Choose(string name, string prefix, IEnumerable<string> versions, string where)
    {
        var matches = versions.Where(v => v.StartsWith(prefix, StringComparison.OrdinalIgnoreCase)).Distinct(StringComparer.Ordinal).Order(StringComparer.Ordinal).ToList();
        return matches.Count switch
        {
            1 => matches[0],
            0 => throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}': no version {where} starts with '{prefix}'"),
            _ => throw new CommonDataException(ErrorCode.BadRequest,
                $"dataset '{name}': '{prefix}' starts {matches.Count} versions {where}: {string.Join(", ", matches)}; give more digits"),
        };
    }
}
