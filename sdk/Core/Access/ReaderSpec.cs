namespace Hpc.CommonData.Access;

/// <summary>
/// The stager's <c>--readers</c> list: <c>all</c>, or comma-separated <c>user:NAME</c>, <c>user:UID</c>,
/// <c>group:NAME</c>, <c>group:GID</c>. Names are resolved to ids here, on the staging machine, because the ids are
/// what nodes compare with a process's credentials. Without the switch, only the staging user may read.
/// </summary>
public static class ReaderSpec
{
    public const string Everyone = "all";

    /// <summary>
    /// The readers a spec names: null for everyone. An empty or missing spec means the staging user's own uid (on
    /// Windows, which has no uids to compare, everyone). Throws <see cref="CommonDataException"/> with
    /// <see cref="ErrorCode.BadRequest"/> naming every entry that is malformed or names no user or group of this machine.
    /// </summary>
    public static DatasetReaders? Resolve(string? spec)
    {
        if (string.IsNullOrWhiteSpace(spec))
            return OperatingSystem.IsLinux() ? DatasetReaders.Of([UnixAccounts.EffectiveUserId], []) : null;
        var entries = spec.Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries);
        if (entries.Any(e => e.Equals(Everyone, StringComparison.OrdinalIgnoreCase)))
        {
            if (entries.Length > 1) throw Bad($"--readers: '{Everyone}' cannot be combined with other readers ('{spec}')");
            return null;
        }
        if (!OperatingSystem.IsLinux()) throw Bad("--readers: naming users and groups is supported on Linux only; use --readers all");

        var users = new List<uint>();
        var groups = new List<uint>();
        var problems = new List<string>();
        foreach (var entry in entries)
        {
            var colon = entry.IndexOf(':');
            var (kind, name) = colon < 0 ? ("", entry) : (entry[..colon].ToLowerInvariant(), entry[(colon + 1)..]);
            if (kind is not ("user" or "group") || name.Length == 0)
            {
                problems.Add($"'{entry}' is not user:NAME, group:NAME or {Everyone}");
                continue;
            }
            // A name is looked up first: a user may well be called "1234"; only an unknown all-digit word is an id.
            var id = kind == "user" ? UnixAccounts.UserId(name) : UnixAccounts.GroupId(name);
            if (id is null && uint.TryParse(name, System.Globalization.NumberStyles.None, null, out var numeric) && numeric != uint.MaxValue) id = numeric;
            if (id is null) problems.Add($"unknown {kind} '{name}'");
            else (kind == "user" ? users : groups).Add(id.Value);
        }
        if (problems.Count > 0) throw Bad($"--readers: {string.Join("; ", problems)}");
        if (users.Count == 0 && groups.Count == 0) throw Bad($"--readers names nobody; name users or groups, or '{Everyone}'");
        return DatasetReaders.Of(users, groups);
    }

    private static CommonDataException Bad(string message) => new(ErrorCode.BadRequest, message);
}
