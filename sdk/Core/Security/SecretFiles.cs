namespace Hpc.CommonData.Security;

/// <summary>
/// Files that hold passwords (a password file, a users file) and who else may read them. ssh refuses a key others can
/// read; our programs say so in one line and go on, since refusing would take a running tier or node down over a mode.
/// </summary>
public static class SecretFiles
{
    /// <summary>
    /// Which of <paramref name="files"/> (path and the switch that named it; empty paths and absent files skipped) other
    /// users of the machine can read, as one sentence ending in the fix, or null when none can (and on Windows).
    /// </summary>
    public static string? Exposure(params (string? Path, string Option)[] files) => Exposure("passwords", files);

    /// <summary>As <see cref="Exposure(ValueTuple{string, string}[])"/>, for files that hold <paramref name="holds"/>
    /// (the agents' peer key: "the cluster's peer key").</summary>
    public static string? Exposure(string holds, params (string? Path, string Option)[] files)
    {
        if (OperatingSystem.IsWindows()) return null;
        const UnixFileMode others = UnixFileMode.GroupRead | UnixFileMode.OtherRead;
        var exposed = new List<string>();
        foreach (var (path, option) in files)
        {
            if (string.IsNullOrEmpty(path) || !File.Exists(path)) continue;
            var mode = File.GetUnixFileMode(path);
            if ((mode & others) == 0) continue;
            var who = (mode & UnixFileMode.OtherRead) != 0 ? "every user of this machine" : "the file's group";
            exposed.Add($"{option} {path} is readable by {who} (mode {Convert.ToString((int)mode & 0x1FF, 8).PadLeft(4, '0')})");
        }
        return exposed.Count == 0 ? null
            : string.Join("; ", exposed) + $": it holds {holds}; make it readable by its owner alone (chmod 600 {string.Join(" ", files.Where(f => exposed.Any(e => e.StartsWith($"{f.Option} {f.Path} ", StringComparison.Ordinal))).Select(f => f.Path))})";
    }
}
