using System.Diagnostics;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The shells' completion scripts and the manual page are made from the same verb and switch tables as the help, and
/// each is checked by the program that reads it: bash, zsh and fish complete with them, groff formats the page.
/// </summary>
public sealed class CompletionAndManTests
{
    private static async Task<string> PrintedAsync(Sandbox s, params string[] args)
    {
        var r = await s.HpcdataAsync(args);
        Assert.True(r.Code == 0, r.Stderr);
        return s.WriteFile(string.Join("-", args) + ".out", System.Text.Encoding.UTF8.GetBytes(string.Join("\n", r.Stdout) + "\n"));
    }

    private static (int Code, string Out, string Err) Run(string program, params string[] args)
    {
        var start = new ProcessStartInfo(program) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in args) start.ArgumentList.Add(a);
        using var p = Process.Start(start)!;
        var output = p.StandardOutput.ReadToEndAsync();
        var error = p.StandardError.ReadToEndAsync();
        if (!p.WaitForExit(60_000)) { p.Kill(entireProcessTree: true); throw new TimeoutException($"{program} did not finish"); }
        return (p.ExitCode, output.Result, error.Result);
    }

    [Fact]
    public async Task Bash_completes_a_verbs_switch_from_the_script()
    {
        await using var s = new Sandbox();
        var script = await PrintedAsync(s, "completion", "bash");

        var (code, output, error) = Run("bash", "-c", $"source '{script}'; COMP_WORDS=(hpcdata nodeprep --cache-h); COMP_CWORD=2; _hpcdata; echo \"${{COMPREPLY[@]}}\"");

        Assert.True(code == 0, error);
        Assert.Equal("--cache-hosts", output.Trim());
    }

    [Fact]
    public async Task Fish_completes_the_verbs_with_their_summaries_and_a_verbs_switches()
    {
        await using var s = new Sandbox();
        var script = await PrintedAsync(s, "completion", "fish");

        var (code, output, error) = Run("fish", "-c", $"source '{script}'; complete -C 'hpcdata nodeprep --cache-h'; echo ---; complete -C 'hpcdata doc'");

        Assert.True(code == 0, error);
        var parts = output.Split("---\n");
        Assert.Equal("--cache-hosts", parts[0].Trim());
        Assert.StartsWith("doctor\tCheck what this machine needs", parts[1]);
    }

    [Fact]
    public async Task The_zsh_script_reads_and_offers_each_verbs_switches()
    {
        await using var s = new Sandbox();
        var script = await PrintedAsync(s, "completion", "zsh");

        var (code, _, error) = Run("zsh", "-n", script);

        Assert.True(code == 0, error);
        var text = File.ReadAllText(script);
        Assert.StartsWith("#compdef hpcdata", text);
        Assert.Contains("'doctor:Check what this machine needs", text);
        Assert.Matches(@"\n    nodeprep\) compadd -- [^\n]*--cache-hosts[^\n]*;;\n", text);
    }

    [Fact]
    public async Task The_manual_page_formats_without_a_warning_and_holds_every_commands_help()
    {
        await using var s = new Sandbox();
        var page = await PrintedAsync(s, "man");

        var (code, _, error) = Run("groff", "-man", "-Tutf8", "-ww", "-z", page);

        Assert.True(code == 0 && error.Length == 0, error);
        var text = File.ReadAllText(page);
        Assert.StartsWith(".TH HPCDATA 1 ", text);
        foreach (var verb in new[] { "STAGE", "NODEPREP", "DOCTOR", "AGENT", "CACHE-HOST" })
            Assert.Contains($".SH \"HPCDATA {verb}\"\n.nf\n", text);
        // The stager's help, printed by another program when asked directly, is in the page too.
        Assert.Contains("\\-\\-name OWNER/NAME", text);
        Assert.Contains(".SH \"EXIT STATUS\"", text);
    }
}
