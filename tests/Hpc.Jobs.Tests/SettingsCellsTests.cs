using Hpc.CommonData;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Settings read the same way in every verb: one grammar of durations, the client's settings files for stage as for the
/// rest, and a release that a mistake in those files cannot fail.
/// </summary>
public class SettingsCellsTests
{
    [Theory]
    [InlineData("00:10:00", 600)]
    [InlineData("1:30:00", 5400)]
    [InlineData("1h30m", 5400)]
    [InlineData("90s", 90)]
    [InlineData("90", 90)]
    [InlineData("2.5m", 150)]
    [InlineData("7d", 604800)]
    public void Every_timeout_takes_one_grammar_of_durations(string text, int seconds)
    {
        Assert.Equal(TimeSpan.FromSeconds(seconds), Durations.Parse(text));
        Assert.Equal(TimeSpan.FromSeconds(seconds), Hpc.CommonData.Hosting.SettingValues.ParseDuration(text));
    }

    [Theory]
    [InlineData(5400)]
    [InlineData(86400 + 3600)]
    [InlineData(61)]
    public void What_Format_writes_Parse_reads_back(long seconds) =>
        Assert.Equal(TimeSpan.FromSeconds(seconds), Durations.Parse(Durations.Format(seconds)));

    [Fact]
    public async Task Node_prep_takes_a_timeout_written_as_the_agents_idle_timeout_is()
    {
        await using var s = new Sandbox();
        var prep = await s.HpcdataAsync(["nodeprep", "risk/any", "--job", "1", "--timeout", "00:10:00", "--start-timeout", "1h30m",
            "--cache-hosts", "127.0.0.1:1", "--no-start"], new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = s.NewPipe() });
        // Accepted: it gets as far as looking for the node's agent, which --no-start does not start.
        Assert.NotEqual(2, prep.Code);
        Assert.DoesNotContain("not a duration", prep.Stderr);
        Assert.Contains("--no-start", prep.Stderr);
    }

    [Fact]
    public async Task Stage_reads_the_clients_settings_file_as_every_verb_does()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var config = s.WriteFile("client.conf", System.Text.Encoding.UTF8.GetBytes($"cache-hosts = {s.HostList}\n"));

        var stage = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", Sandbox.RandomBytes(10_000)), "--name", "risk/from-conf"],
            new Dictionary<string, string?> { ["HPCDATA_CLIENT_CONFIG"] = config, ["HPCDATA_CACHE_HOSTS"] = null });
        Assert.True(stage.Code == 0, $"exit {stage.Code}: {stage.Stderr}");

        var list = await s.HpcdataAsync(["list", "risk/from-conf", "--cache-hosts", s.HostList]);
        Assert.Equal(0, list.Code);
    }

    [Fact]
    public async Task Node_release_in_an_epilog_warns_of_a_mistake_in_the_settings_file_and_does_not_fail()
    {
        await using var s = new Sandbox();
        var config = s.WriteFile("client.conf", "cache-hostz = cache1:6380\n"u8.ToArray());

        var release = await s.HpcdataAsync(["noderelease", "risk/any"],
            new Dictionary<string, string?> { ["HPCDATA_CLIENT_CONFIG"] = config, ["HPCDATA_AGENT_PIPE"] = s.NewPipe(), ["HPCDATA_JOB_ID"] = "job-1" });

        Assert.True(release.Code == 0, $"exit {release.Code}: {release.Stderr}");
        Assert.Contains("warning", release.Stderr);
        Assert.Contains("cache-hostz", release.Stderr);
    }

    [Fact]
    public async Task Other_verbs_still_refuse_a_mistake_in_the_settings_file()
    {
        await using var s = new Sandbox();
        var config = s.WriteFile("client.conf", "cache-hostz = cache1:6380\n"u8.ToArray());
        var list = await s.HpcdataAsync(["list"], new Dictionary<string, string?> { ["HPCDATA_CLIENT_CONFIG"] = config });
        Assert.Equal(2, list.Code);
        Assert.Contains("cache-hostz", list.Stderr);
    }
}

/// <summary>A value in the client's settings file that reads but cannot be used is reported at its file and line.</summary>
public class ClientConfigSourceTests
{
    [Fact]
    public void A_value_out_of_range_names_the_file_and_line_that_gave_it()
    {
        var file = Path.Combine(Path.GetTempPath(), $"hcd-client-{Environment.ProcessId}-{Guid.NewGuid():N}.conf");
        File.WriteAllText(file, "# the site's settings\ncache-hosts = cache1:6380\nreplicas = -1\n");
        try
        {
            var e = Assert.Throws<FormatException>(() => Hpc.CommonData.Hosting.ClientConfig.Load(v => v == "HPCDATA_CLIENT_CONFIG" ? file : null));
            Assert.StartsWith($"{file}:3: ", e.Message);
            Assert.Contains("replicas must be at least 1", e.Message);
            Assert.DoesNotContain("--replicas", e.Message);
        }
        finally { File.Delete(file); }
    }

    [Fact]
    public void Settings_that_depend_on_each_other_or_on_files_elsewhere_are_not_judged_line_by_line()
    {
        var file = Path.Combine(Path.GetTempPath(), $"hcd-client-{Environment.ProcessId}-{Guid.NewGuid():N}.conf");
        File.WriteAllText(file, "cache-user = risk\nreplicas = 2\ncache-password-file = /only/on/the/nodes\n");
        try
        {
            var config = Hpc.CommonData.Hosting.ClientConfig.Load(v => v == "HPCDATA_CLIENT_CONFIG" ? file : null);
            Assert.Equal("2", config["HPCDATA_CACHE_REPLICAS"]);
        }
        finally { File.Delete(file); }
    }
}
