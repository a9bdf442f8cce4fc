namespace Hpc.CommonData.Cli;

/// <summary>Quoting for the two shells the generated job text is read by.</summary>
public static class Quote
{
    /// <summary>POSIX sh: bare when safe, otherwise single-quoted.</summary>
    public static string Sh(string s) =>
        s.Length > 0 && s.All(c => char.IsAsciiLetterOrDigit(c) || "-_./:=,@%+".Contains(c)) ? s : "'" + s.Replace("'", "'\\''") + "'";

    public static string Sh(IEnumerable<string> words) => string.Join(" ", words.Select(Sh));

    /// <summary>Windows command line (CommandLineToArgvW rules).</summary>
    public static string Cmd(string s)
    {
        if (s.Length > 0 && !s.Any(c => char.IsWhiteSpace(c) || c == '"')) return s;
        var sb = new System.Text.StringBuilder("\"");
        var backslashes = 0;
        foreach (var c in s)
        {
            if (c == '\\') { backslashes++; continue; }
            if (c == '"') sb.Append('\\', backslashes * 2 + 1).Append('"');
            else sb.Append('\\', backslashes).Append(c);
            backslashes = 0;
        }
        return sb.Append('\\', backslashes * 2).Append('"').ToString();
    }

    public static string Cmd(IEnumerable<string> words) => string.Join(" ", words.Select(Cmd));
}
