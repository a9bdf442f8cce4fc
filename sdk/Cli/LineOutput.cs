using System.Text;

namespace Hpc.CommonData.Cli;

/// <summary>
/// A line for a program that reads it back: written to standard output with one write, so it cannot be split. The ranks
/// of one MPI job share a standard output, and Console writes through a 256-character buffer: a longer line went out
/// in pieces, another rank's line landed between them, and the reader took a prepared node for a missing one.
/// </summary>
public static class LineOutput
{
    private static readonly Lock Gate = new();
    private static Stream? _stdout;

    public static void WriteLine(string line)
    {
        var bytes = Encoding.UTF8.GetBytes(line + "\n");
        lock (Gate)
        {
            Console.Out.Flush();
            _stdout ??= Console.OpenStandardOutput();
            // One write(2) of at most PIPE_BUF bytes is atomic on a pipe; longer lines are rare (a very long path) and
            // are still written in one call.
            _stdout.Write(bytes);
            _stdout.Flush();
        }
    }
}
