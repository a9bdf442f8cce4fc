using Hpc.CommonData.Hosting;
using System.Text.RegularExpressions;
namespace Hpc.Jobs.Tests;

/// <summary>
/// The command line as users meet it: values that cannot work are refused at once, naming the switch and what it
/// needs, before any process is started or byte is written.
/// </summary>
public sealed class CliTests
{
    [Theory]
    [InlineData("demo")]
    [InlineData("generate")]
    public async Task A_dataset_size_without_a_unit_below_1MB_is_refused_naming_the_unit(string verb)
    {
        await using var s = new Sandbox();
        var target = Path.Combine(s.Root, "out");
        string[] args = verb == "demo" ? ["demo", "--size", "64", "--work-dir", target] : ["generate", target, "--size", "64"];
        var r = await s.HpcdataAsync(args, timeout: TimeSpan.FromSeconds(60));
        Assert.True(r.Code == 2, $"exit {r.Code}: {r.Out}\n{r.Stderr}");
        Assert.Contains("--size 64 has no unit", r.Stderr);
        Assert.Contains("64MB", r.Stderr);
        Assert.False(Path.Exists(target), $"{verb} made {target} before refusing");

        // The help states the rule.
        var help = await s.HpcdataAsync([verb, "--help"]);
        Assert.Contains("a number without a unit is bytes", string.Join(" ", help.Out.Split((char[])[' ', '\n'], StringSplitOptions.RemoveEmptyEntries)));
    }

    [Theory]
    [InlineData("--nodes", "0")]
    [InlineData("--cache-host-count", "0")]
    [InlineData("--workers", "-1")]
    public async Task Demo_refuses_a_count_below_one_at_once(string option, string value)
    {
        await using var s = new Sandbox();
        var work = Path.Combine(s.Root, "demo");
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var r = await s.HpcdataAsync(["demo", option, value, "--size", "8MB", "--work-dir", work], timeout: TimeSpan.FromSeconds(60));
        Assert.True(r.Code == 2, $"exit {r.Code}: {r.Out}\n{r.Stderr}");
        Assert.Contains($"{option} must be at least 1 (got {value})", r.Stderr);
        Assert.DoesNotContain("HPC Common Data demo", r.Out);   // no banner: nothing was started
        Assert.False(Path.Exists(work));
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(10), $"refused only after {clock.Elapsed}");
    }

    [Fact]
    public async Task List_of_a_dataset_that_is_not_on_the_tier_names_it_and_exits_not_found()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("a.bin", Sandbox.RandomBytes(1000)), "risk/here");

        var missing = await s.HpcdataAsync(["list", "risk/not-here", "--cache-hosts", s.HostList]);
        Assert.True(missing.Code == ExitCodes.NotFound, $"exit {missing.Code}: {missing.Out}");
        Assert.Contains("'risk/not-here' has no version on the cache tier", missing.Stderr);
        var json = await s.HpcdataAsync(["list", "risk/not-here", "--cache-hosts", s.HostList, "--json"]);
        Assert.Equal(ExitCodes.NotFound, json.Code);

        // A name that cannot be a dataset's is a usage error, said before the tier is asked.
        var bad = await s.HpcdataAsync(["list", "BadName", "--cache-hosts", s.HostList]);
        Assert.Equal(2, bad.Code);
        Assert.Contains("'BadName' must have the form owner/name", bad.Stderr);

        var there = await s.HpcdataAsync(["list", "risk/here", "--cache-hosts", s.HostList]);
        Assert.Equal(0, there.Code);
        Assert.Contains(there.Stdout, l => l.StartsWith("risk/here", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Stage_refuses_more_replicas_than_cache_hosts_naming_both_numbers()
    {
        await using var s = new Sandbox();
        // Nothing listens there: the refusal must come before any connection is tried.
        var r = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", Sandbox.RandomBytes(1000)), "--name", "risk/r", "--cache-hosts", "127.0.0.1:1", "--replicas", "3"]);
        Assert.True(r.Code == 2, $"exit {r.Code}: {r.Out}\n{r.Stderr}");
        Assert.Contains("--replicas 3 cannot exceed the number of cache hosts (1)", r.Stderr);

        var two = await s.HpcdataAsync(["stage", s.WriteFile("e.bin", Sandbox.RandomBytes(1000)), "--name", "risk/r", "--cache-hosts", "127.0.0.1:1,127.0.0.1:2", "--replicas", "2"],
            timeout: TimeSpan.FromSeconds(90));
        Assert.DoesNotContain("cannot exceed", two.Stderr);   // as many copies as hosts is allowed (it then fails to connect)
    }

    /// <summary>Every verb hpcdata lists (its --help), including the programs it runs for some of them.</summary>
    private static async Task<List<string>> VerbsAsync(Sandbox s)
    {
        var help = await s.HpcdataAsync(["--help"]);
        Assert.Equal(0, help.Code);
        // A verb's line starts two spaces in; its summary's further lines, further in.
        return help.Stdout.SkipWhile(l => l != "commands:").Skip(1).Where(l => l.Length > 2 && l.StartsWith("  ", StringComparison.Ordinal) && l[2] != ' ')
            .Select(l => l.Trim().Split(' ')[0]).ToList();
    }

    [Fact]
    public async Task Dash_h_and_dash_dash_help_print_the_help_of_every_verb()
    {
        await using var s = new Sandbox();
        var verbs = await VerbsAsync(s);
        Assert.Contains("status", verbs);
        Assert.Contains("agent", verbs);
        foreach (var verb in verbs)
        foreach (var flag in new[] { "-h", "--help" })
        {
            var r = await s.HpcdataAsync([verb, flag]);
            Assert.True(r.Code == 0, $"hpcdata {verb} {flag}: exit {r.Code}\n{r.Out}\n{r.Stderr}");
            Assert.Contains("--", r.Out);   // it lists options
            Assert.DoesNotContain("unknown option", r.Out + r.Stderr);
        }
    }

    [Fact]
    public async Task After_dash_dash_a_dash_h_belongs_to_the_command_prestage_runs()
    {
        await using var s = new Sandbox();
        // Not help: prestage goes on to its source, which does not exist, and says so.
        var r = await s.HpcdataAsync(["prestage", Path.Combine(s.Root, "nothing-here"), "--", "ls", "-h"]);
        Assert.NotEqual(0, r.Code);
        Assert.Contains("nothing-here", r.Stderr);
    }

    [Theory]
    [InlineData(new[] { "generate" }, "missing required PATH")]
    [InlineData(new[] { "remove" }, "missing required NAME[@VERSION]")]
    [InlineData(new[] { "get" }, "missing required NAME[@VERSION], DEST")]
    [InlineData(new[] { "get", "risk/a" }, "missing required DEST")]
    [InlineData(new[] { "tls-init" }, "missing required --out, --hosts")]
    [InlineData(new[] { "tls-init", "--out", "x" }, "missing required --hosts")]
    [InlineData(new[] { "report" }, "missing required DIR|FILE.jsonl")]
    public async Task A_missing_required_argument_is_named(string[] args, string expected)
    {
        await using var s = new Sandbox();
        var r = await s.HpcdataAsync(args);
        Assert.Equal(2, r.Code);
        Assert.Contains($"hpcdata {args[0]}: {expected} (see hpcdata {args[0]} --help)", r.Stderr);
    }

    /// <summary>report reads its command line with the engine every verb uses: the same words, suggestions and exit code.</summary>
    [Theory]
    [InlineData(new[] { "report", "results", "--out" }, "--out needs a value")]
    [InlineData(new[] { "report", "results", "--jsno" }, "unknown option '--jsno' (did you mean --json?)")]
    [InlineData(new[] { "report", "a", "b" }, "unexpected argument 'b'")]
    public async Task Report_refuses_a_wrong_command_line_as_every_verb_does(string[] args, string expected)
    {
        await using var s = new Sandbox();
        var r = await s.HpcdataAsync(args);
        Assert.Equal(2, r.Code);
        Assert.Contains($"hpcdata report: {expected} (see hpcdata report --help)", r.Stderr);
        var help = await s.HpcdataAsync(["report", "--help"]);
        Assert.Contains("usage: hpcdata report DIR|FILE.jsonl [options]", help.Out);
        Assert.Contains("--out DIR", help.Out);
    }

    [Fact]
    public async Task An_unknown_option_is_named_as_it_was_typed()
    {
        await using var s = new Sandbox();
        var single = await s.HpcdataAsync(["status", "-x"]);
        Assert.Equal(2, single.Code);
        Assert.Contains("unknown option '-x'", single.Stderr);
        var dashed = await s.HpcdataAsync(["status", "--colour=red"]);
        Assert.Equal(2, dashed.Code);
        Assert.Contains("unknown option '--colour'", dashed.Stderr);
    }

    [Fact]
    public async Task With_a_cache_host_down_stage_and_get_say_each_problem_in_one_line()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        const string dead = "127.0.0.1:1";
        var hosts = $"{s.HostList},{dead}";

        var stage = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", Sandbox.RandomBytes(8 * 65536)), "--name", "risk/down", "--cache-hosts", hosts]);
        Assert.Equal(ExitCodes.Unavailable, stage.Code);
        AssertOneLinePerProblem("hpcdata stage", stage.Stderr, dead);

        // Staged where the host is up; read back through a list naming the dead one too, with no agent on this node.
        await s.StageAsync(s.WriteFile("e.bin", Sandbox.RandomBytes(8 * 65536, seed: 4)), "risk/up");
        var get = await s.HpcdataAsync(["get", "risk/up", Path.Combine(s.Root, "out.bin"), "--cache-hosts", hosts],
            new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() });
        AssertOneLinePerProblem("hpcdata get", get.Stderr, dead);
        Assert.Contains("hpcdata get: warning: no node agent answers on pipe", get.Stderr);
        Assert.DoesNotContain('\r', get.Stderr);   // stderr is not a terminal: no progress line
    }

    private static void AssertOneLinePerProblem(string command, string stderr, string deadHost)
    {
        var lines = stderr.Split('\n', StringSplitOptions.RemoveEmptyEntries).Where(l => l.Trim().Length > 0).ToList();
        Assert.DoesNotContain(lines, l => l.StartsWith("warn:", StringComparison.Ordinal) || l.StartsWith(' '));   // no logger blocks
        Assert.All(lines, l => Assert.StartsWith(command + ": ", l));
        var warnings = lines.Where(l => l.StartsWith(command + ": warning:", StringComparison.Ordinal) && l.Contains(deadHost)).ToList();
        Assert.True(warnings.Count <= 1, $"the dead host is warned about {warnings.Count} times:\n{stderr}");
    }

    /// <summary>Every verb that talks to the cache tier: they take the stager's and the agent's cache-tier switches.</summary>
    public static TheoryData<string> CacheVerbs => ["list", "status", "remove", "gc", "get", "nodeprep", "prestage"];

    [Theory]
    [MemberData(nameof(CacheVerbs))]
    public async Task Cache_tier_switches_are_the_agents_own_listed_once_with_their_variables(string verb)
    {
        await using var s = new Sandbox();
        var help = (await s.HpcdataAsync([verb, "--help"])).Out;
        foreach (var (name, variable) in new[]
                 {
                     ("--cache-hosts", "HPCDATA_CACHE_HOSTS"), ("--cache-user", "HPCDATA_CACHE_USER"), ("--cache-password-file", "HPCDATA_CACHE_PASSWORD_FILE"),
                     ("--cache-tls", "HPCDATA_CACHE_TLS"), ("--cache-ca", "HPCDATA_CACHE_CA"),
                 })
        {
            var entries = HelpEntries(help, name);
            Assert.True(entries.Count == 1, $"{verb} --help lists {name} {entries.Count} times:\n{help}");
            Assert.Contains(variable, entries[0]);
        }
    }

    /// <summary>The help entries of a switch: its line and the lines its text wraps onto, joined.</summary>
    private static List<string> HelpEntries(string help, string name)
    {
        var lines = help.Split('\n');
        var entries = new List<string>();
        for (var i = 0; i < lines.Length; i++)
        {
            if (!Regex.IsMatch(lines[i], $@"^  (-\w, )?{Regex.Escape(name)}( |$)")) continue;
            var entry = lines[i];
            for (var j = i + 1; j < lines.Length && lines[j].StartsWith(new string(' ', 20), StringComparison.Ordinal); j++) entry += " " + lines[j].Trim();
            entries.Add(entry);
        }
        return entries;
    }

    /// <summary>What a help entry says of its switch, without the default and the variable, on one line.</summary>
    private static string HelpText(string entry) => Regex.Replace(Regex.Replace(
        Regex.Match(entry, @"^\s*--\S+(?: \S+)?\s{2,}(?<text>.*)$", RegexOptions.Singleline).Groups["text"].Value,
        @" \(default: [^)]*\)| \[HPCDATA_\w+\]", ""), @"\s+", " ").Trim();

    [Theory]
    [InlineData("get", "NAME[@VERSION] DEST")]
    [InlineData("path", "[NAME[@VERSION]]")]
    [InlineData("remove", "NAME[@VERSION]")]
    [InlineData("nodeprep", "[NAME[@VERSION]]")]
    [InlineData("noderelease", "[NAME[@VERSION]]")]
    [InlineData("list", "[NAME[@VERSION]]")]
    [InlineData("worker", "[NAME[@VERSION]]")]
    public async Task Every_verb_names_its_dataset_the_same_way_as_its_argument(string verb, string arguments)
    {
        await using var s = new Sandbox();
        var help = await s.HpcdataAsync([verb, "--help"]);
        Assert.Contains($"usage: hpcdata {verb} {arguments} [options]", help.Out);
        Assert.DoesNotContain("--dataset", help.Out);
    }

    /// <summary>Every verb that reaches a node agent, with the agent's switches it takes.</summary>
    public static TheoryData<string, string[]> AgentVerbs => new()
    {
        { "status", ["--pipe"] }, { "path", ["--pipe"] }, { "noderelease", ["--pipe"] }, { "prestage", ["--pipe"] },
        { "nodeprep", ["--pipe", "--data-dir", "--budget", "--node"] },
    };

    [Theory]
    [MemberData(nameof(AgentVerbs))]
    public async Task Agent_switches_are_the_agents_own_listed_once_with_their_variables(string verb, string[] switches)
    {
        await using var s = new Sandbox();
        var help = (await s.HpcdataAsync([verb, "--help"])).Out;
        var agentHelp = string.Join("\n", (await s.RunAsync("Hpc.NodeAgent", ["--help"])).Stdout);
        foreach (var name in switches)
        {
            var entries = HelpEntries(help, name);
            Assert.True(entries.Count == 1, $"{verb} --help lists {name} {entries.Count} times:\n{help}");
            // The agent's own help text and variable: one declaration serves both.
            var own = Assert.Single(HelpEntries(agentHelp, name));
            var variable = Regex.Match(own, @"\[(HPCDATA_\w+)\]").Groups[1].Value;
            Assert.StartsWith("HPCDATA_AGENT_", variable);
            Assert.Contains($"[{variable}]", entries[0]);
            Assert.Equal(HelpText(own), HelpText(entries[0]));
        }
    }

    [Theory]
    [InlineData(new[] { "nodeprep", "risk/x", "--job", "--" }, "--job needs a value")]
    [InlineData(new[] { "get", "--cache-user", "--", "risk/x", "dest" }, "--cache-user needs a value")]
    public async Task A_switch_never_takes_the_separator_as_its_value(string[] args, string says)
    {
        await using var s = new Sandbox();
        var r = await s.HpcdataAsync(args);
        Assert.Equal(2, r.Code);
        Assert.Contains(says, r.Stderr);
    }

    [Fact]
    public async Task An_agent_switch_with_a_bad_value_is_refused_by_node_prep_as_the_agent_would_refuse_it()
    {
        await using var s = new Sandbox();
        var r = await s.HpcdataAsync(["nodeprep", "risk/x", "--job", "j", "--budget", "lots"]);
        Assert.Equal(2, r.Code);
        Assert.Contains("hpcdata nodeprep: --budget: 'lots' is not a size", r.Stderr);
    }

    [Theory]
    [InlineData("list")]
    [InlineData("nodeprep")]
    public async Task A_password_file_that_does_not_exist_is_refused_naming_the_switch_before_anything_is_asked(string verb)
    {
        await using var s = new Sandbox();
        var missing = Path.Combine(s.Root, "no-such.password");
        string[] args = verb == "list" ? ["list", "--cache-hosts", "127.0.0.1:1", "--cache-password-file", missing]
            : ["nodeprep", "--fanout", "mpi", "risk/x", "--job", "j", "--no-start", "--pipe", s.NewPipe(), "--cache-hosts", "127.0.0.1:1", "--cache-password-file", missing];
        var r = await s.HpcdataAsync(args, timeout: TimeSpan.FromSeconds(60));
        Assert.True(r.Code is 1 or 2, $"exit {r.Code}: {r.Stderr}");
        Assert.Contains($"--cache-password-file: '{missing}' does not exist", r.Stderr);
    }

    [Fact]
    public async Task A_password_file_other_users_can_read_is_used_with_a_warning_saying_so_and_the_fix_and_one_readable_by_its_owner_alone_without()
    {
        if (OperatingSystem.IsWindows()) return;
        await using var s = new Sandbox();
        var file = Path.Combine(s.Root, "cache.password");
        File.WriteAllText(file, "secret\n");
        string[] args = ["list", "--cache-hosts", "127.0.0.1:1", "--cache-password-file", file];

        File.SetUnixFileMode(file, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead | UnixFileMode.OtherRead);
        var exposed = await s.HpcdataAsync(args, timeout: TimeSpan.FromSeconds(60));
        Assert.Contains($"hpcdata: warning: --cache-password-file {file} is readable by every user of this machine (mode 0644): it holds passwords; " +
                        $"make it readable by its owner alone (chmod 600 {file})", exposed.Stderr);

        File.SetUnixFileMode(file, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var kept = await s.HpcdataAsync(args, timeout: TimeSpan.FromSeconds(60));
        Assert.DoesNotContain("holds passwords", kept.Stderr);
        Assert.Equal(exposed.Code, kept.Code); // the warning changes nothing else: both fail only on the absent host
    }

    [Fact]
    public async Task The_client_settings_file_gives_the_cache_hosts_a_variable_wins_over_it_and_a_switch_over_both()
    {
        await using var s = new Sandbox();
        var file = s.WriteFile("client.conf", "# this site\ncache-hosts = 127.0.0.1:1\n"u8.ToArray());
        var fromFile = new Dictionary<string, string?> { [ClientConfig.FileVariable] = file };

        var r = await s.HpcdataAsync(["list"], fromFile, TimeSpan.FromSeconds(60));
        Assert.Contains("cache host 127.0.0.1:1 unavailable", r.Stderr);

        r = await s.HpcdataAsync(["list"], new Dictionary<string, string?>(fromFile) { ["HPCDATA_CACHE_HOSTS"] = "127.0.0.1:2" }, TimeSpan.FromSeconds(60));
        Assert.Contains("cache host 127.0.0.1:2 unavailable", r.Stderr);

        r = await s.HpcdataAsync(["list", "--cache-hosts", "127.0.0.1:3"], new Dictionary<string, string?>(fromFile) { ["HPCDATA_CACHE_HOSTS"] = "127.0.0.1:2" },
            TimeSpan.FromSeconds(60));
        Assert.Contains("cache host 127.0.0.1:3 unavailable", r.Stderr);
    }

    [Fact]
    public async Task A_client_settings_file_with_an_unknown_key_is_a_usage_error_naming_its_line()
    {
        await using var s = new Sandbox();
        var file = s.WriteFile("client.conf", "cache-hosts = 127.0.0.1:1\ncache-hots = x\n"u8.ToArray());

        var r = await s.HpcdataAsync(["list"], new Dictionary<string, string?> { [ClientConfig.FileVariable] = file }, TimeSpan.FromSeconds(60));

        Assert.Equal(2, r.Code);
        Assert.Contains($"hpcdata list: {file}:2: unknown setting 'cache-hots'", r.Stderr);
    }

    [Fact]
    public async Task A_cache_tier_switch_without_its_value_is_a_usage_error_naming_it()
    {
        await using var s = new Sandbox();
        var r = await s.HpcdataAsync(["list", "--cache-hosts"]);
        Assert.Equal(2, r.Code);
        Assert.Contains("--cache-hosts needs a value", r.Stderr);
    }
}
