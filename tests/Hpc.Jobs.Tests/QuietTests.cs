using System.Text.Json;
using System.Text.RegularExpressions;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// <c>--quiet</c> on the verbs that show progress or print a summary: nothing on a terminal or stdout but what went
/// wrong (on stderr) and the job's or <c>--json</c>'s own output; the exit codes are those of the same run without it.
/// </summary>
public sealed class QuietTests
{
    public static TheoryData<string> QuietVerbs => ["stage", "get", "nodeprep", "prestage"];

    [Theory]
    [MemberData(nameof(QuietVerbs))]
    public async Task Each_verb_that_shows_progress_or_a_summary_declares_quiet_in_the_same_words(string verb)
    {
        await using var s = new Sandbox();
        var help = await s.HpcdataAsync([verb, "--help"]);
        Assert.Equal(0, help.Code);
        var entry = Regex.Match(help.Out, @"^  -q, --quiet +(?<text>.*(\n {20,}.*)*)", RegexOptions.Multiline);
        Assert.True(entry.Success, $"{verb} --help has no -q, --quiet:\n{help.Out}");
        Assert.StartsWith(QuietSwitch.Help, Regex.Replace(entry.Groups["text"].Value, @"\s+", " "));
    }

    [Fact]
    public async Task Quiet_stage_and_get_print_nothing_and_still_stage_and_write_the_data()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var bytes = Sandbox.RandomBytes(2_000_000, seed: 8);
        var file = s.WriteFile("quiet.bin", bytes);

        // The short form, read by the stager's own command line.
        var stage = await s.HpcdataAsync(["stage", file, "--name", "risk/quiet", "--cache-hosts", s.HostList, "-q"]);
        Assert.True(stage.Code == 0, stage.Stderr);
        Assert.DoesNotContain(stage.Stdout, l => l.Length > 0);
        Assert.Equal("", stage.Stderr.Trim());

        // --json is what a script asked for: --quiet leaves it.
        var json = await s.HpcdataAsync(["stage", file, "--name", "risk/quiet", "--cache-hosts", s.HostList, "--quiet", "--json"]);
        Assert.Equal(0, json.Code);
        var result = JsonSerializer.Deserialize<StageResult>(Assert.Single(json.Stdout, l => l.Length > 0), JsonSerializerOptions.Web)!;
        Assert.Equal("risk/quiet", result.Name);
        Assert.True(result.Unchanged);

        var destination = Path.Combine(s.Root, "copy.bin");
        var noAgent = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() };
        var get = await s.HpcdataAsync(["get", "risk/quiet", destination, "--cache-hosts", s.HostList, "--quiet"], noAgent);
        Assert.True(get.Code == 0, get.Stderr);
        Assert.DoesNotContain(get.Stdout, l => l.Length > 0);
        Assert.Equal(bytes, File.ReadAllBytes(destination));
        // That no agent answers is a warning, which --quiet does not hide.
        Assert.Contains("hpcdata get: warning: no node agent answers on pipe", get.Stderr);
    }

    [Fact]
    public async Task Quiet_keeps_every_error_on_stderr_and_every_exit_code()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var file = s.WriteFile("e.bin", Sandbox.RandomBytes(100_000));
        var noAgent = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() };

        var stage = await s.HpcdataAsync(["stage", file, "--name", "risk/err", "--cache-hosts", "127.0.0.1:1", "--quiet"]);
        Assert.Equal(ExitCodes.Unavailable, stage.Code);
        Assert.Contains("hpcdata stage: ", stage.Stderr);
        var usage = await s.HpcdataAsync(["stage", file, "--quiet"]);
        Assert.Equal(2, usage.Code);
        Assert.Contains("--name", usage.Stderr);

        var missing = await s.HpcdataAsync(["get", "risk/not-staged", Path.Combine(s.Root, "x"), "--cache-hosts", s.HostList, "--quiet"], noAgent);
        Assert.Equal(ExitCodes.NotFound, missing.Code);
        Assert.Contains("risk/not-staged", missing.Stderr);
        var exists = await s.HpcdataAsync(["get", "risk/not-staged", file, "--cache-hosts", s.HostList, "--quiet"], noAgent);
        Assert.Equal(2, exists.Code);
        Assert.Contains("give --force to replace it", exists.Stderr);

        var prep = await s.HpcdataAsync(["nodeprep", "nobody/staged-this", "--job", "j1", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node"), "--quiet"],
            noAgent);
        Assert.Equal(ExitCodes.NotFound, prep.Code);
        Assert.Contains("nobody/staged-this", prep.Stderr);

        var prestage = await s.HpcdataAsync(["prestage", Path.Combine(s.Root, "no-such-file"), "--quiet", "--", "true"]);
        Assert.Equal(ExitCodes.NotFound, prestage.Code);
        Assert.Contains("hpcdata prestage: ", prestage.Stderr);
    }

    [Fact]
    public async Task On_a_terminal_quiet_stage_and_get_show_no_progress_line_where_the_same_runs_without_it_do()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var file = s.WriteFile("t.bin", Sandbox.RandomBytes(4_000_000, seed: 12));
        var noAgent = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() };

        var loud = await Terminal.HpcdataAsync(s, ["stage", file, "--name", "risk/tty", "--cache-hosts", s.HostList]);
        Assert.True(loud.Code == 0, loud.Text);
        Assert.Contains("segments stored", loud.Text);   // the stager's progress line
        Assert.Contains("staged risk/tty version", loud.Text);
        var quiet = await Terminal.HpcdataAsync(s, ["stage", file, "--name", "risk/tty2", "--cache-hosts", s.HostList, "--quiet"]);
        Assert.True(quiet.Code == 0, quiet.Text);
        Assert.Equal("", quiet.Text.Trim());

        var shown = await Terminal.HpcdataAsync(s, ["get", "risk/tty", Path.Combine(s.Root, "a.bin"), "--cache-hosts", s.HostList], noAgent);
        Assert.True(shown.Code == 0, shown.Text);
        Assert.Contains("writing a.bin: ", shown.Text);
        Assert.Contains("risk/tty version", shown.Text);
        var hidden = await Terminal.HpcdataAsync(s, ["get", "risk/tty", Path.Combine(s.Root, "b.bin"), "--cache-hosts", s.HostList, "--quiet"], noAgent);
        Assert.True(hidden.Code == 0, hidden.Text);
        Assert.DoesNotContain("writing b.bin: ", hidden.Text);
        Assert.DoesNotContain("fetching risk/tty: ", hidden.Text);
        Assert.DoesNotContain('\r', hidden.Text.Replace("\r\n", "\n"));
        Assert.DoesNotContain("risk/tty version", hidden.Text);
        Assert.Equal(File.ReadAllBytes(file), File.ReadAllBytes(Path.Combine(s.Root, "b.bin")));
    }

    [Fact]
    public async Task Quiet_node_prep_prepares_the_node_without_its_line_or_its_notes()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("n.bin", Sandbox.RandomBytes(500_000)), "risk/prepq");
        var pipe = s.NewPipe();
        var env = new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_JOB_ID"] = "job-q" };

        var prep = await s.HpcdataAsync(["nodeprep", "risk/prepq", "--cache-hosts", s.HostList, "--data-dir", Path.Combine(s.Root, "node"), "--quiet"], env);
        Assert.True(prep.Code == 0, prep.Stderr);
        Assert.DoesNotContain(prep.Stdout, l => l.Length > 0);
        Assert.DoesNotContain("starting one", prep.Stderr);
        var copy = Assert.Single((await s.StatusAsync(pipe)).Copies);
        Assert.Equal("complete", copy.State);
        Assert.Equal(0, (await s.HpcdataAsync(["noderelease", "risk/prepq", "--evict"], env)).Code);
    }

    [Fact]
    public async Task Quiet_prestage_prints_the_jobs_own_output_and_none_of_its_own_lines()
    {
        await using var s = new Sandbox();
        var data = s.WriteFile("p.bin", Sandbox.RandomBytes(300_000));
        var r = await s.HpcdataAsync(["prestage", data, "--name", "risk/pquiet", "--nodes", "2", "--job", "job-pq", "--quiet",
            "--", "/bin/sh", "-c", "echo \"job says $HPCDATA_DATASET\""]);
        Assert.True(r.Code == 0, r.Stderr + r.Out);
        var lines = r.Stdout.Where(l => l.Length > 0).ToList();
        Assert.Equal(2, lines.Count);
        Assert.All(lines, l => Assert.Matches(@"^\[node[12]\.1\] job says risk/pquiet$", l));

        // The same job without --quiet says what prestage did around it.
        var loud = await s.HpcdataAsync(["prestage", data, "--name", "risk/pquiet", "--nodes", "2", "--job", "job-pl",
            "--", "/bin/sh", "-c", "echo \"job says $HPCDATA_DATASET\""]);
        Assert.Equal(0, loud.Code);
        Assert.Contains(loud.Stdout, l => l.StartsWith("prestage: ", StringComparison.Ordinal));
        Assert.Contains(loud.Stdout, l => l.Contains("nodeprep") && l.Contains("dataset=risk/pquiet"));
    }
}
