using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// One value for every program: a setting resolves the same way whichever verb reads it (the command line over the
/// environment over client.conf), and a variable of ours that nothing reads is said, not silently ignored.
/// </summary>
public class OneSettingsValueTests
{
    [Fact]
    public async Task A_password_file_on_the_command_line_wins_over_the_variable_for_stage_as_for_list()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret");
        var file = s.WriteFile("password", "tier-secret\n"u8.ToArray());
        var wrongInTheEnvironment = new Dictionary<string, string?> { [Hpc.CommonData.Cache.CacheTierOptions.PasswordVariable] = "wrong" };

        var stage = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", Sandbox.RandomBytes(10_000)), "--name", "risk/file-wins",
            "--cache-hosts", s.HostList, "--cache-password-file", file], wrongInTheEnvironment);
        var list = await s.HpcdataAsync(["list", "risk/file-wins", "--cache-hosts", s.HostList, "--cache-password-file", file], wrongInTheEnvironment);

        Assert.True(stage.Code == 0, $"stage: exit {stage.Code}: {stage.Stderr}");
        Assert.True(list.Code == 0, $"list: exit {list.Code}: {list.Stderr}");
    }

    [Fact]
    public async Task A_misspelt_variable_is_named_once_with_the_setting_it_was_likely_meant_to_be()
    {
        await using var s = new Sandbox();

        var list = await s.HpcdataAsync(["list", "--cache-hosts", "127.0.0.1:1"], new Dictionary<string, string?> { ["HPCDATA_CACHE_HOST"] = "cache1:6380" });

        var warning = Assert.Single(list.Stderr.Split('\n'), l => l.Contains("HPCDATA_CACHE_HOST "));
        Assert.Equal("hpcdata: warning: HPCDATA_CACHE_HOST is not a setting of hpcdata; did you mean HPCDATA_CACHE_HOSTS?", warning.TrimEnd());
    }

    [Fact]
    public async Task A_variable_like_none_of_ours_is_named_without_a_guess_and_the_verb_still_runs()
    {
        await using var s = new Sandbox();

        var version = await s.HpcdataAsync(["version", "--cache-hosts", "127.0.0.1:1"], new Dictionary<string, string?> { ["HPCDATA_FROBNICATE_EVERYTHING"] = "1" });

        Assert.Equal(0, version.Code);
        var warning = Assert.Single(version.Stderr.Split('\n'), l => l.Contains("is not a setting"));
        Assert.Equal("hpcdata: warning: HPCDATA_FROBNICATE_EVERYTHING is not a setting of hpcdata", warning.TrimEnd());
    }

    [Fact]
    public async Task The_variables_a_job_step_is_given_and_the_settings_spelt_right_draw_no_warning()
    {
        await using var s = new Sandbox();
        var env = new Dictionary<string, string?>
        {
            ["HPCDATA_CACHE_HOSTS"] = "127.0.0.1:1", ["HPCDATA_CACHE_REPLICAS"] = "1", ["HPCDATA_CACHE_TLS"] = "no", ["HPCDATA_MAX_RATE"] = "0",
            ["HPCDATA_DATASET"] = "risk/any@v1", ["HPCDATA_DATASETS"] = "risk/any@v1", ["HPCDATA_DATASET_PATH"] = s.Root,
            ["HPCDATA_VERSION"] = "v1", ["HPCDATA_JOB_ID"] = "job-1", ["HPCDATA_ENDPOINTS_DIR"] = s.Root, ["HPCDATA_SERVICE_ENDPOINTS"] = "a:1",
            ["HPCDATA_AGENT_PIPE"] = s.NewPipe(), ["HPCDATA_AGENT_LOG"] = Path.Combine(s.Root, "agent.log"),
            ["HPCDATA_AGENT_EXIT_FILE"] = Path.Combine(s.Root, "agent.exit"),
        };

        var version = await s.HpcdataAsync(["version"], env);

        Assert.Equal(0, version.Code);
        Assert.DoesNotContain("is not a setting", version.Stderr);
    }

    [Fact]
    public void The_agent_names_a_misspelt_variable_of_its_own_and_leaves_the_rest_to_the_programs_that_read_them()
    {
        string[] names = ["HPCDATA_AGENT_BUGDET", "HPCDATA_AGENT_BUDGET", "HPCDATA_AGENT_PIPE", "HPCDATA_AGENT_LOG", "HPCDATA_AGENT_MANAGED",
            "HPCDATA_LINK_PROBE", "HPCDATA_CACHE_HOST", "PATH"];

        var agent = ProgramContract<NodeAgentOptions>.Resolve([], _ => null, [], names);
        // A cache host shares its variables with every client program, whose settings it does not know: it does not guess.
        var host = ProgramContract<CacheHostOptions>.Resolve([], _ => null, [], names);

        Assert.Null(agent.Problem);
        Assert.Equal("HPCDATA_AGENT_BUGDET is not a setting of hpcdata agent; did you mean HPCDATA_AGENT_BUDGET?", Assert.Single(agent.Warnings));
        Assert.Empty(host.Warnings);
    }

    [Fact]
    public async Task A_misspelt_agent_variable_is_said_once_whether_a_service_unit_or_hpcdata_starts_the_agent()
    {
        await using var s = new Sandbox();
        var env = new Dictionary<string, string?> { ["HPCDATA_AGENT_BUGDET"] = "10GB" };
        const string Expected = "hpcdata agent: warning: HPCDATA_AGENT_BUGDET is not a setting of hpcdata agent; did you mean HPCDATA_AGENT_BUDGET?";
        string[] Arguments(string node) => [.. ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = s.NewPipe(), DataDirectory = Path.Combine(s.Root, node), CacheTier = new() { Hosts = ["127.0.0.1:1"] },
        })];

        var byUnit = s.Track(ComponentProcess.Start("Hpc.NodeAgent", Arguments("unit"), NodeAddresses.OwnNode(env), name: "agent"));
        var byHpcdata = s.StartHpcdata(["agent", .. Arguments("verb")], env);
        foreach (var agent in new[] { byUnit, byHpcdata })
        {
            await agent.WaitReadyAsync(Sandbox.Ready);
            await agent.StopAsync(TimeSpan.FromSeconds(20));
            Assert.Equal(Expected, Assert.Single(agent.StandardErrorTail.Split('\n'), l => l.Contains("HPCDATA_AGENT_BUGDET")).TrimEnd());
        }
    }

    [Fact]
    public void No_variable_the_repository_names_is_taken_for_a_misspelling()
    {
        var root = ToolInstallTests.RepositoryRoot();
        var named = new HashSet<string>(StringComparer.Ordinal);
        var extensions = new[] { ".cs", ".md", ".sh", ".lua", ".py", ".ps1", ".service", ".conf", ".json", ".yml", ".yaml", ".txt", "" };
        foreach (var top in new[] { "jobs", "sdk", "stager", "nodeagent", "cachehost", "samples", "bench", "deploy", "docs" })
            foreach (var file in Directory.EnumerateFiles(Path.Combine(root, top), "*", SearchOption.AllDirectories))
            {
                if (file.Contains($"{Path.DirectorySeparatorChar}bin{Path.DirectorySeparatorChar}") || file.Contains($"{Path.DirectorySeparatorChar}obj{Path.DirectorySeparatorChar}")
                    || !extensions.Contains(Path.GetExtension(file))) continue;
                foreach (System.Text.RegularExpressions.Match m in System.Text.RegularExpressions.Regex.Matches(File.ReadAllText(file), @"\bHPCDATA_[A-Z0-9_]*[A-Z0-9]\b(?!_?\*)"))
                    named.Add(m.Value);
            }
        var known = UnknownVariables.Known(typeof(Hpc.Jobs.Commands.StageVerb).Assembly, typeof(Hpc.CommonData.Cli.JobVariables).Assembly);

        Assert.Empty(UnknownVariables.Warnings("hpcdata", named, known));
    }

    /// <summary>The stager reads all four sources: a switch, its variable, the client's file and the program's JSON settings.</summary>
    private static Resolution<StagerOptions> Stager(string dir, string? commandLine, string? variable, string? clientFile, string? json)
    {
        var files = new List<SettingsFile>();
        if (json is not null)
        {
            var path = Path.Combine(dir, "stager.json");
            File.WriteAllText(path, $$"""{ "Stager": { "CacheTier": { "User": "{{json}}" } } }""");
            files.Add(new SettingsFile(path, Optional: false));
        }
        var conf = Path.Combine(dir, "client.conf");
        File.WriteAllText(conf, clientFile is null ? "# nothing\n" : $"# the user's\ncache-user = {clientFile}\n");
        var environment = new Dictionary<string, string?> { [ClientConfig.FileVariable] = conf, [Hpc.CommonData.Cache.CacheTierOptions.UserVariable] = variable };
        string[] args = commandLine is null ? ["data.bin"] : ["data.bin", "--cache-user", commandLine];
        var resolved = ProgramContract<StagerOptions>.Resolve(args, v => environment.GetValueOrDefault(v), files);
        Assert.Null(resolved.Problem);
        return resolved;
    }

    [Fact]
    public void One_resolve_orders_the_command_line_the_variable_the_clients_file_and_the_json_settings_and_says_which_gave_the_value()
    {
        var dir = Directory.CreateTempSubdirectory("one-resolve-").FullName;
        try
        {
            var all = Stager(dir, "from-switch", "from-variable", "from-conf", "from-json");
            Assert.Equal("from-switch", all.Options.CacheTier.User);
            Assert.Equal(new SettingOrigin(SettingSource.CommandLine, "--cache-user"), all.Origins["--cache-user"]);

            var noSwitch = Stager(dir, null, "from-variable", "from-conf", "from-json");
            Assert.Equal("from-variable", noSwitch.Options.CacheTier.User);
            Assert.Equal("environment variable HPCDATA_CACHE_USER", noSwitch.Origins["--cache-user"].ToString());

            var fileOnly = Stager(dir, null, null, "from-conf", "from-json");
            Assert.Equal("from-conf", fileOnly.Options.CacheTier.User);
            Assert.Equal($"{Path.Combine(dir, "client.conf")}:2", fileOnly.Origins["--cache-user"].ToString());

            var json = Stager(dir, null, null, null, "from-json");
            Assert.Equal("from-json", json.Options.CacheTier.User);
            Assert.Equal($"settings file {Path.Combine(dir, "stager.json")}", json.Origins["--cache-user"].ToString());

            var none = Stager(dir, null, null, null, null);
            Assert.Null(none.Options.CacheTier.User);
            Assert.Equal(SettingSource.Default, none.Origins["--cache-user"].Source);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Fact]
    public void A_value_that_reads_but_cannot_be_used_names_where_it_came_from_for_a_verb_and_a_daemon_alike()
    {
        var dir = Directory.CreateTempSubdirectory("one-resolve-").FullName;
        try
        {
            // A verb: the variable gave it.
            var (list, problem) = Hpc.CommonData.Cli.VerbContract<Hpc.Jobs.Commands.ListOptions>.Parse(["--cache-hosts", "a:1,b:2"],
                v => v == Hpc.CommonData.Cache.CacheTierOptions.ReplicasVariable ? "3" : null);
            Assert.Null(problem);
            var refused = Assert.Throws<ArgumentException>(() => list.CacheTier()).Message;
            Assert.StartsWith("--replicas 3 cannot exceed the number of cache hosts (2)", refused);
            Assert.EndsWith("(from environment variable HPCDATA_CACHE_REPLICAS)", refused);

            // The same verb, the client's file gave it: the file and its line.
            var conf = Path.Combine(dir, "client.conf");
            File.WriteAllText(conf, "cache-hosts = a:1,b:2\nreplicas = 3\n");
            var (fromFile, _) = Hpc.CommonData.Cli.VerbContract<Hpc.Jobs.Commands.ListOptions>.Parse([], _ => null, ClientConfig.Load(v => v == ClientConfig.FileVariable ? conf : null));
            Assert.EndsWith($"(from {conf}:2)", Assert.Throws<ArgumentException>(() => fromFile.CacheTier()).Message);

            // Given on the command line, it is not told where it came from: the user just typed it.
            var (typed, _) = Hpc.CommonData.Cli.VerbContract<Hpc.Jobs.Commands.ListOptions>.Parse(["--cache-hosts", "a:1,b:2", "--replicas", "3"], _ => null);
            Assert.DoesNotContain("(from", Assert.Throws<ArgumentException>(() => typed.CacheTier()).Message);

            // A daemon: its JSON settings gave it.
            var json = Path.Combine(dir, "agent.json");
            File.WriteAllText(json, """{ "Agent": { "CacheTier": { "Hosts": [ "a:1", "b:2" ], "Replicas": 3 } } }""");
            var agent = ProgramContract<NodeAgentOptions>.Resolve([], _ => null, [new SettingsFile(json, Optional: false)]);
            Assert.Null(agent.Problem);
            Assert.Contains(agent.Invalid, p => p.StartsWith("--replicas 3 cannot exceed", StringComparison.Ordinal) && p.EndsWith($"(from settings file {json})", StringComparison.Ordinal));
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    [Fact]
    public void A_password_file_given_above_the_password_wins_for_a_verb_and_a_daemon_by_the_same_rule()
    {
        Func<string, string?> environment = v => v == Hpc.CommonData.Cache.CacheTierOptions.PasswordVariable ? "from-variable" : null;
        var (verb, _) = Hpc.CommonData.Cli.VerbContract<Hpc.Jobs.Commands.ListOptions>.Parse(["--cache-password-file", "/p"], environment);
        Assert.Null(verb.CacheTierSwitches.Password);
        var stager = ProgramContract<StagerOptions>.Resolve(["data.bin", "--cache-password-file", "/p"], environment, []);
        Assert.Null(stager.Options.CacheTier.Password);

        // Within one source the password itself wins, as it always has.
        var bothVariables = (Func<string, string?>)(v => v == Hpc.CommonData.Cache.CacheTierOptions.PasswordFileVariable ? "/p" : environment(v));
        Assert.Equal("from-variable", Hpc.CommonData.Cli.VerbContract<Hpc.Jobs.Commands.ListOptions>.Parse([], bothVariables).Options.CacheTierSwitches.Password);
        Assert.Equal("from-variable", ProgramContract<StagerOptions>.Resolve(["data.bin"], bothVariables, []).Options.CacheTier.Password);
    }

    [Fact]
    public void A_verb_resolves_its_cache_tier_as_a_value_of_its_own_and_leaves_what_it_was_given_as_given()
    {
        var file = Path.GetTempFileName();
        try
        {
            File.WriteAllText(file, "from-file\n");
            var (verb, _) = Hpc.CommonData.Cli.VerbContract<Hpc.Jobs.Commands.ListOptions>.Parse(["--cache-password-file", file], _ => null);

            var resolved = verb.CacheTier();

            Assert.Equal(["127.0.0.1:6380"], resolved.Hosts);
            Assert.Equal("from-file", resolved.Password);
            // What the verb was given is unchanged, so what it hands a program it starts is what it was given: the file, not
            // the secret read from it, and no host it only defaulted.
            Assert.Empty(verb.CacheTierSwitches.Hosts);
            Assert.Null(verb.CacheTierSwitches.Password);
            var handedOn = verb.CacheTierFor(["cache1:6380"]);
            Assert.Null(handedOn.Password);
            Assert.Equal(file, handedOn.PasswordFile);
            Assert.NotSame(resolved, verb.CacheTier());
        }
        finally { File.Delete(file); }
    }
}
