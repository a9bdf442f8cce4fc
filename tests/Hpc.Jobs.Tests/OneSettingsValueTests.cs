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
}
