using System.Diagnostics;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// <c>hpcdata</c> run on a pseudo-terminal (util-linux <c>script</c>), as a person at a shell runs it: what only a
/// terminal is shown (a progress line) can be seen. Its stdout and stderr arrive as one text, without the terminal's
/// control sequences.
/// </summary>
public static class Terminal
{
    public static async Task<(int Code, string Text)> HpcdataAsync(Sandbox s, string[] args, IDictionary<string, string?>? env = null, TimeSpan? timeout = null)
    {
        var command = Quote(ComponentLocator.Command("hpcdata").Concat(args));
        var info = new ProcessStartInfo("script") { ArgumentList = { "-qefc", command, "/dev/null" }, RedirectStandardOutput = true, RedirectStandardInput = true };
        info.Environment["HPCDATA_STATE_DIR"] = s.StateDirectory;
        foreach (var (name, value) in env ?? new Dictionary<string, string?>()) info.Environment[name] = value;
        using var p = Process.Start(info)!;
        p.StandardInput.Close();
        var text = p.StandardOutput.ReadToEndAsync();
        using var limit = new CancellationTokenSource(timeout ?? TimeSpan.FromMinutes(2));
        try { await p.WaitForExitAsync(limit.Token); }
        catch (OperationCanceledException)
        {
            p.Kill(entireProcessTree: true);
            throw new TimeoutException($"hpcdata {string.Join(' ', args)} on a terminal did not end: {await text}");
        }
        // The runtime sets the terminal's modes as it starts (escape sequences, not text anybody printed).
        return (p.ExitCode, System.Text.RegularExpressions.Regex.Replace(await text, @"\x1b(\[[0-9;?]*[A-Za-z]|[=>])", ""));
    }

    private static string Quote(IEnumerable<string> words) => string.Join(" ", words.Select(w => "'" + w.Replace("'", "'\\''") + "'"));
}
