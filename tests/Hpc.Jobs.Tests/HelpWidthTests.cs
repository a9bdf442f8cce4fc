using System.Text;
using System.Text.RegularExpressions;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Help fits 100 columns (what it is wrapped to in a pager, a file or the manual page) for every verb and daemon, counted
/// as a terminal counts (characters) and as byte-counting tools do (a dash is three bytes under the C locale).
/// </summary>
public class HelpWidthTests
{
    private const int Columns = 100;

    [Fact]
    public async Task Every_verbs_and_daemons_help_fits_in_100_columns()
    {
        await using var s = new Sandbox();
        var top = await s.HpcdataAsync(["--help"]);
        Assert.Equal(0, top.Code);
        var verbs = top.Stdout.SkipWhile(l => l != "commands:").Skip(1).TakeWhile(l => l.Length > 0)
            .Select(l => Regex.Match(l, @"^  ([a-z][a-z-]*)\s").Groups[1].Value).Where(v => v.Length > 0).ToList();
        Assert.Contains("stage", verbs);
        Assert.Contains("agent", verbs);

        var helps = new List<(string Who, List<string> Lines)> { ("hpcdata", top.Stdout) };
        foreach (var verb in verbs)
        {
            var help = await s.HpcdataAsync([verb, "--help"]);
            Assert.True(help.Code == 0, $"hpcdata {verb} --help: exit {help.Code}: {help.Stderr}");
            helps.Add(($"hpcdata {verb}", help.Stdout));
        }
        foreach (var daemon in new[] { "Hpc.CacheHost", "Hpc.NodeAgent", "Hpc.Stager" })
        {
            var help = await s.RunAsync(daemon, ["--help"]);
            Assert.True(help.Code == 0, $"{daemon} --help: exit {help.Code}: {help.Stderr}");
            helps.Add((daemon, help.Stdout));
        }

        var tooWide = helps.SelectMany(h => h.Lines.Where(l => Encoding.UTF8.GetByteCount(l) > Columns)
            .Select(l => $"{h.Who} --help: {l.Length} characters, {Encoding.UTF8.GetByteCount(l)} bytes: {l}")).ToList();
        Assert.True(tooWide.Count == 0, string.Join("\n", tooWide));
    }
}
