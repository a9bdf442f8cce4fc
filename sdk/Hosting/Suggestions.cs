namespace Hpc.CommonData.Hosting;

/// <summary>
/// "Did you mean" for a mistyped switch or command, as git and kubectl answer one: the known name within a couple of
/// edits of what was typed, or the one it is a prefix of (<c>--cache-host</c> for <c>--cache-hosts</c>).
/// </summary>
public static class Suggestions
{
    /// <summary>The closest of <paramref name="known"/> to <paramref name="typed"/>, or null when none is close.</summary>
    public static string? Closest(string typed, IEnumerable<string> known)
    {
        string? best = null;
        var bestDistance = int.MaxValue;
        foreach (var name in known.Where(n => n.Length > 0).Distinct())
        {
            var distance = name.StartsWith(typed, StringComparison.OrdinalIgnoreCase) && typed.TrimStart('-').Length >= 3 ? 1 : Distance(typed.ToLowerInvariant(), name.ToLowerInvariant());
            if (distance < bestDistance) (best, bestDistance) = (name, distance);
        }
        // Two edits on a long name is a typo; on a three-letter one it is another word.
        return best is not null && bestDistance <= Math.Max(1, Math.Min(3, typed.TrimStart('-').Length / 3)) ? best : null;
    }

    /// <summary>" (did you mean X?)" when a name is close, else nothing: ready to append to an error.</summary>
    public static string DidYouMean(string typed, IEnumerable<string> known) =>
        Closest(typed, known) is { } name ? $" (did you mean {name}?)" : "";

    /// <summary>Edits (insert, delete, substitute, swap two neighbours) between two names.</summary>
    private static int Distance(string a, string b)
    {
        var d = new int[a.Length + 1, b.Length + 1];
        for (var i = 0; i <= a.Length; i++) d[i, 0] = i;
        for (var j = 0; j <= b.Length; j++) d[0, j] = j;
        for (var i = 1; i <= a.Length; i++)
            for (var j = 1; j <= b.Length; j++)
            {
                var cost = a[i - 1] == b[j - 1] ? 0 : 1;
                d[i, j] = Math.Min(Math.Min(d[i - 1, j] + 1, d[i, j - 1] + 1), d[i - 1, j - 1] + cost);
                if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i, j] = Math.Min(d[i, j], d[i - 2, j - 2] + 1);
            }
        return d[a.Length, b.Length];
    }
}
