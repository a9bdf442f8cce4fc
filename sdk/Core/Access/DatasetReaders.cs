using System.Text.Json.Serialization;

namespace Hpc.CommonData.Access;

/// <summary>
/// Who may read a dataset version on a node, as numeric ids resolved when it was staged. It is part of the manifest, so
/// it is part of the version id: changing the readers makes a new version. A manifest without readers (every manifest
/// written before readers existed, and one staged with <c>--readers all</c>) may be read by everyone on the node.
/// Root and the node agent's own user may always read, whatever the list says: they can read the agent's files anyway.
/// </summary>
public sealed class DatasetReaders
{
    /// <summary>User ids that may read, ascending, without repeats (so equal lists serialize to equal bytes).</summary>
    [JsonPropertyName("users")] public IReadOnlyList<uint> Users { get; init; } = [];

    /// <summary>Group ids whose members (primary or supplementary) may read, ascending, without repeats.</summary>
    [JsonPropertyName("groups")] public IReadOnlyList<uint> Groups { get; init; } = [];

    /// <summary>The canonical form of these ids: sorted and deduplicated.</summary>
    public static DatasetReaders Of(IEnumerable<uint> users, IEnumerable<uint> groups) =>
        new() { Users = users.Distinct().Order().ToArray(), Groups = groups.Distinct().Order().ToArray() };

    /// <summary>Whether a process running as <paramref name="uid"/> with these groups is named, by user or by group.</summary>
    public bool Admits(uint uid, IEnumerable<uint> groups) => Users.Contains(uid) || groups.Any(Groups.Contains);

    /// <summary>Both lists hold the same ids (null means everyone, and equals only null).</summary>
    public static bool Same(DatasetReaders? a, DatasetReaders? b) =>
        a is null || b is null ? a is null && b is null : a.Users.SequenceEqual(b.Users) && a.Groups.SequenceEqual(b.Groups);

    /// <summary>The list as <c>user:ID,group:ID</c>, the form <c>--readers</c> accepts (for logs and messages).</summary>
    public override string ToString() =>
        string.Join(',', Users.Select(u => $"user:{u}").Concat(Groups.Select(g => $"group:{g}"))) is { Length: > 0 } s ? s : "(none)";
}
