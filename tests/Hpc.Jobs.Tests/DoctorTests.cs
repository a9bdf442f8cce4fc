using System.Text.Json;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary><c>hpcdata doctor</c>: one row per check, what to fix for each that is not well, and an exit code by the first failure's kind.</summary>
public sealed class DoctorTests
{
    private static Dictionary<string, JsonElement> Rows(Sandbox.Result r) =>
        JsonDocument.Parse(r.Out).RootElement.EnumerateArray().ToDictionary(c => c.GetProperty("check").GetString()!);

    [Fact]
    public async Task With_a_host_that_answers_and_an_agent_every_check_passes_and_the_account_is_named()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        var agent = s.Track(ComponentProcess.Start("Hpc.NodeAgent", ProgramContract<NodeAgentOptions>.ToArguments(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = Path.Combine(s.Root, "node"), CacheTier = new CacheTierOptions { Hosts = s.Hosts.ToList() },
        }), name: "agent"));
        await agent.WaitReadyAsync(Sandbox.Ready);

        var r = await s.HpcdataAsync(["doctor", "--pipe", pipe, "--cache-hosts", s.HostList, "--json"]);

        Assert.True(r.Code == 0, r.Stderr);
        var rows = Rows(r);
        Assert.All(rows.Values, c => Assert.Equal("ok", c.GetProperty("result").GetString()));
        Assert.Contains("hpc-cachehost", rows[$"cache host {s.Hosts[0]}"].GetProperty("found").GetString());
        Assert.Contains("may read and stage", rows["account"].GetProperty("found").GetString());
        Assert.Contains(Path.Combine(s.Root, "node"), rows["data directory"].GetProperty("found").GetString());
        Assert.Contains($"pipe '{pipe}'", rows["agent"].GetProperty("found").GetString());
    }

    [Fact]
    public async Task A_wrong_password_a_host_nobody_listens_on_and_no_agent_each_say_what_to_do_and_the_exit_says_the_first()
    {
        await using var s = new Sandbox();
        var users = Path.Combine(s.Root, "users");
        File.WriteAllText(users, "node reader node-pass\n");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(users, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        await s.StartCacheHostAsync(configure: o => o.UsersFile = users);
        var password = Path.Combine(s.Root, "password");
        File.WriteAllText(password, "not-the-password\n");
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(password, UnixFileMode.UserRead | UnixFileMode.UserWrite);

        var r = await s.HpcdataAsync(["doctor", "--pipe", s.NewPipe(), "--cache-hosts", $"{s.HostList},127.0.0.1:1", "--cache-user", "node", "--cache-password-file", password]);

        Assert.Equal(77, r.Code); // the first failure: the account the host refused
        Assert.Contains(r.Stdout, l => l.StartsWith($"cache host {s.Hosts[0]}", StringComparison.Ordinal) && l.Contains("fail"));
        Assert.Contains($"hpcdata doctor: cache host {s.Hosts[0]}: check cache-user and the password", r.Stderr);
        Assert.Contains("hpcdata doctor: cache host 127.0.0.1:1: nothing listens on port 1 there", r.Stderr);
        Assert.Contains("hpcdata doctor: agent: start it", r.Stderr);

        // The right password: the host and the account pass; a reader is said to be one.
        File.WriteAllText(password, "node-pass\n");
        var right = await s.HpcdataAsync(["doctor", "--no-agent", "--cache-hosts", s.HostList, "--cache-user", "node", "--cache-password-file", password, "--json"]);
        Assert.True(right.Code == 0, right.Stderr);
        Assert.Contains("may read, not stage", Rows(right)["account"].GetProperty("found").GetString());
        // Each setting says where it came from.
        Assert.EndsWith("(from the command line (--cache-hosts))", Rows(right)["cache hosts"].GetProperty("found").GetString());
        Assert.EndsWith("(from the command line (--cache-password-file))", Rows(right)["password file"].GetProperty("found").GetString());

        // The same hosts from a client's settings file: its path and line.
        var conf = Path.Combine(Path.GetDirectoryName(password)!, "client.conf");
        File.WriteAllText(conf, $"# the site's tier\ncache-hosts = {s.HostList}\n");
        var fromFile = await s.HpcdataAsync(["doctor", "--no-agent", "--cache-user", "node", "--cache-password-file", password, "--json"],
            new Dictionary<string, string?> { [ClientConfig.FileVariable] = conf, [CacheTierOptions.HostsVariable] = "" });
        Assert.True(fromFile.Code == 0, fromFile.Stderr);
        Assert.EndsWith($"(from {conf}:2)", Rows(fromFile)["cache hosts"].GetProperty("found").GetString());
    }

    [Fact]
    public async Task No_cache_hosts_given_is_a_warning_that_the_default_is_only_a_default_naming_the_settings_file()
    {
        await using var s = new Sandbox();
        var r = await s.HpcdataAsync(["doctor", "--no-agent", "--json"], new Dictionary<string, string?> { [CacheTierOptions.HostsVariable] = "" });

        var hosts = Rows(r)["cache hosts"];
        Assert.Equal("warn", hosts.GetProperty("result").GetString());
        Assert.Contains("is only the default", hosts.GetProperty("found").GetString());
        Assert.Contains(ClientConfig.SiteFile, hosts.GetProperty("fix").GetString());
    }
}
