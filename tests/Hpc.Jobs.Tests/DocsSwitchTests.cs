using System.Text.RegularExpressions;

namespace Hpc.Jobs.Tests;

/// <summary>
/// What README.md and docs/*.md promise on the command line is there: every switch they name is one some verb or
/// program declares, and a switch written after <c>hpcdata VERB</c> (or a program's dll) is one that verb declares.
/// </summary>
public sealed partial class DocsSwitchTests
{
    /// <summary>Switches of other tools the docs show next to ours (dotnet, redis-cli, systemd, Slurm, MPI, coreutils…).</summary>
    private static readonly HashSet<string> OtherTools =
    [
        "--add-port", "--permanent", "--reload", "--zone",                        // firewall-cmd
        "--add-source", "--configfile", "--tool-path", "--no-build", "--self-contained", "--list-runtimes", "--filter", "--logger", "--project", // dotnet
        "--cacert", "--tls", "--csv", "--host", "--tls-port",                     // redis-cli, redis-benchmark, redis-server
        "--counters",                                                             // dotnet-counters
        "--no-create-home", "--shell", "--system", "--user",                      // useradd, systemctl --user
        "--now", "--signal",                                                      // systemctl enable --now, kill
        "--ntasks", "--map-by", "--kill-on-bad-exit", "--enable-recovery", "--export", // srun, mpirun, sbatch
        "--no-dereference", "--uts",                                              // cp, unshare
        "--job", "--in",                                                          // BenchmarkDotNet: --job short, --inProcess
    ];

    [GeneratedRegex(@"(?<![\w-])--[a-z][a-z0-9-]*")]
    private static partial Regex Switch();

    // `hpcdata VERB args`, `hpcdata.dll VERB args`, or a program's dll run by dotnet, up to the end of the code or a shell separator.
    [GeneratedRegex(@"(?:\bhpcdata(?:\.dll)?\s+(?<verb>[a-z][a-z-]*)|\b(?<program>Hpc\.(?:CacheHost|NodeAgent|Stager))\.dll)(?<args>[^`|;&]*)")]
    private static partial Regex Command();

    private static readonly Dictionary<string, string> ProgramVerbs = new() { ["Hpc.CacheHost"] = "cache-host", ["Hpc.NodeAgent"] = "agent", ["Hpc.Stager"] = "stage" };

    private static IEnumerable<(string File, int Line, string Text)> Docs()
    {
        var root = ToolInstallTests.RepositoryRoot();
        foreach (var file in Directory.GetFiles(Path.Combine(root, "docs"), "*.md").Prepend(Path.Combine(root, "README.md")))
        {
            var lines = File.ReadAllLines(file);
            for (var i = 0; i < lines.Length; i++) yield return (Path.GetRelativePath(root, file), i + 1, lines[i]);
        }
    }

    /// <summary>The code on a line: all of it inside a fenced block, else its `inline code` spans.</summary>
    private static IEnumerable<(string File, int Line, string Code)> Code()
    {
        var fenced = false;
        string? file = null;
        foreach (var (f, n, text) in Docs())
        {
            if (f != file) (file, fenced) = (f, false);
            if (text.TrimStart().StartsWith("```", StringComparison.Ordinal)) { fenced = !fenced; continue; }
            if (fenced) yield return (f, n, text.Split(" #")[0]);
            else foreach (Match m in Regex.Matches(text, "`([^`]+)`")) yield return (f, n, m.Groups[1].Value);
        }
    }

    private readonly Dictionary<string, string> _help = [];

    private async Task<string> HelpAsync(Sandbox s, params string[] command)
    {
        var key = string.Join(' ', command);
        if (_help.TryGetValue(key, out var text)) return text;
        var r = await s.HpcdataAsync([.. command, "--help"]);
        Assert.True(r.Code == 0, $"hpcdata {key} --help: exit {r.Code}\n{r.Stderr}");
        return _help[key] = r.Out;
    }

    private async Task<List<string[]>> CommandsAsync(Sandbox s)
    {
        List<string[]> Listed(string help, string[] prefix) => help.Split('\n').SkipWhile(l => l != "commands:").Skip(1)
            .Where(l => l.Length > 2 && l.StartsWith("  ", StringComparison.Ordinal) && l[2] != ' ').Select(l => (string[])[.. prefix, l.Trim().Split(' ')[0]]).ToList();
        var top = await s.HpcdataAsync(["--help"]);
        var commands = Listed(top.Out, []);
        commands.AddRange(Listed(await HelpAsync(s, "bench"), ["bench"]));
        // Slurm's hooks run it and the listing leaves it out, but deploy.md names the switches a site sets for it.
        commands.Add(["burst-buffer"]);
        return commands;
    }

    [Fact]
    public async Task Every_switch_the_docs_name_is_declared_by_some_verb_or_program()
    {
        await using var s = new Sandbox();
        var helps = new List<string>();
        foreach (var command in await CommandsAsync(s)) helps.Add(await HelpAsync(s, command));
        foreach (var verb in new[] { "worker", "soa-host", "soa-client" })   // the samples program's services, started by jobs
        {
            var r = await s.RunAsync("Hpc.Samples", [verb, "--help"]);
            Assert.Equal(0, r.Code);
            helps.Add(r.Out);
        }
        var declared = helps.SelectMany(h => Switch().Matches(h).Select(m => m.Value)).ToHashSet();

        var unknown = Docs().SelectMany(d => Switch().Matches(d.Text).Select(m => (d.File, d.Line, Switch: m.Value)))
            .Where(x => !declared.Contains(x.Switch) && !OtherTools.Contains(x.Switch)).ToList();
        Assert.True(unknown.Count == 0, "switches the docs name that nothing declares:\n" + string.Join("\n", unknown.Select(u => $"{u.File}:{u.Line}: {u.Switch}")));
    }

    [Fact]
    public async Task A_switch_written_after_hpcdata_VERB_is_one_that_verb_declares()
    {
        await using var s = new Sandbox();
        var commands = await CommandsAsync(s);
        var verbs = commands.Where(c => c.Length == 1).Select(c => c[0]).ToHashSet();
        var wrong = new List<string>();
        var checkedCount = 0;
        foreach (var (file, line, code) in Code())
        foreach (Match m in Command().Matches(code))
        {
            var verb = m.Groups["program"].Success ? ProgramVerbs[m.Groups["program"].Value] : m.Groups["verb"].Value;
            if (!verbs.Contains(verb)) continue;   // prose such as "hpcdata is" or "hpcdata 1.0.0"
            // After `--` come the words of the command prestage runs, not its switches.
            var args = m.Groups["args"].Value.Split(" -- ")[0].Split(' ', StringSplitOptions.RemoveEmptyEntries);
            string[] command = verb == "bench" && args is [var sub, ..] && commands.Any(c => c is ["bench", _] && c[1] == sub) ? ["bench", sub] : [verb];
            var help = await HelpAsync(s, command);
            foreach (var sw in args.SelectMany(a => Switch().Matches(a).Select(x => x.Value)).Where(x => x != "--help"))
            {
                checkedCount++;
                if (!Switch().Matches(help).Any(x => x.Value == sw)) wrong.Add($"{file}:{line}: hpcdata {string.Join(' ', command)} has no {sw}: {code.Trim()}");
            }
        }
        Assert.True(checkedCount > 50, $"only {checkedCount} switches found after hpcdata VERB: is the pattern still right?");
        Assert.True(wrong.Count == 0, string.Join("\n", wrong));
    }

    [Fact]
    public async Task The_verbs_that_read_the_cache_tier_take_its_account_and_TLS_switches_as_the_stager_does()
    {
        await using var s = new Sandbox();
        var stage = await HelpAsync(s, "stage");
        foreach (var verb in new[] { "list", "status", "remove", "gc", "get", "stage", "agent" })
        {
            var help = await HelpAsync(s, verb);
            foreach (var sw in new[] { "--cache-user", "--cache-password-file", "--cache-tls", "--cache-ca" })
            {
                Assert.True(help.Contains(sw + " ") || help.Contains(sw + "\n") || help.Contains(sw + "=") , $"hpcdata {verb} has no {sw}");
                Assert.Contains(sw, stage);
            }
        }
        // Declared and used: they reach the tier's options, which refuse them as the stager's do, before connecting.
        var env = new Dictionary<string, string?> { ["HPCDATA_CACHE_PASSWORD"] = "", ["HPCDATA_CACHE_PASSWORD_FILE"] = "" };
        var user = await s.HpcdataAsync(["list", "--cache-hosts", "127.0.0.1:1", "--cache-user", "bob"], env);
        Assert.Equal(2, user.Code);
        Assert.Contains("--cache-user 'bob' needs a password", user.Stderr);
        var ca = await s.HpcdataAsync(["gc", "--cache-hosts", "127.0.0.1:1", "--cache-ca", Path.Combine(s.Root, "no-ca.pem")], env);
        Assert.Equal(2, ca.Code);
        Assert.Contains("--cache-ca: ", ca.Stderr);
    }
}
