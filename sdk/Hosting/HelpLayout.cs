using System.Text;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// The one layout of every program's and verb's help: a switch and its placeholder in a column of
/// <see cref="LeftWidth"/>, its text wrapped under itself, the whole to <see cref="Columns"/>; examples last.
/// </summary>
public static class HelpLayout
{
    public const int LeftWidth = 28;

    /// <summary>
    /// Columns help is wrapped to: the terminal's width when help goes to one (within 60–160), else 100 (a pager, a
    /// file, the manual page, a test).
    /// </summary>
    public static int Columns
    {
        get
        {
            if (Console.IsOutputRedirected) return 100;
            try { return Console.WindowWidth is var width and > 0 ? Math.Clamp(width, 60, 160) : 100; }
            catch (Exception e) when (e is IOException or PlatformNotSupportedException) { return 100; }
        }
    }

    /// <summary>
    /// One entry: <paramref name="left"/> (switch and placeholder) and <paramref name="text"/> wrapped under itself; a
    /// left side too long for its column takes its own line, the text starting under the others'.
    /// </summary>
    public static string Entry(string left, string text, int columns)
    {
        var indent = new string(' ', LeftWidth + 3);
        var lines = string.Join("\n" + indent, Wrap(text, Math.Max(20, columns - LeftWidth - 3)));
        return left.Length > LeftWidth ? $"  {left}\n{indent}{lines}" : $"  {left.PadRight(LeftWidth)} {lines}";
    }

    /// <summary>
    /// An "Examples:" section: each command on its own line under what it does, a blank line between two; nothing when
    /// there are none. It ends with its last line's newline, so help ends as it did without it.
    /// </summary>
    public static string Examples(IReadOnlyList<(string Command, string What)> examples, int columns)
    {
        if (examples.Count == 0) return "";
        var sb = new StringBuilder("Examples:\n");
        for (var i = 0; i < examples.Count; i++)
        {
            if (i > 0) sb.Append('\n');
            foreach (var line in Wrap(examples[i].What, columns - 4)) sb.Append("  # ").Append(line).Append('\n');
            sb.Append("  ").Append(examples[i].Command).Append('\n');
        }
        return sb.ToString();
    }

    /// <summary>Words of <paramref name="text"/> as lines at most <paramref name="columns"/> wide (<see cref="Width"/>; a longer word stands alone).</summary>
    public static IEnumerable<string> Wrap(string text, int columns)
    {
        var line = new StringBuilder();
        var width = 0;
        foreach (var word in text.Split(' ', StringSplitOptions.RemoveEmptyEntries))
        {
            if (line.Length > 0 && width + 1 + Width(word) > columns) { yield return line.ToString(); line.Clear(); width = 0; }
            if (line.Length > 0) { line.Append(' '); width++; }
            line.Append(word);
            width += Width(word);
        }
        if (line.Length > 0) yield return line.ToString();
    }

    /// <summary>
    /// A text's width as its UTF-8 bytes: a dash or an ellipsis is one column in a UTF-8 terminal but three where help is
    /// read byte by byte (a pager or awk under the C locale, wc -c), and help must fit its columns in both.
    /// </summary>
    public static int Width(string text) => Encoding.UTF8.GetByteCount(text);
}
