using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Tests;

public sealed class ClientConfigTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("client-config-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private string Write(string name, string text)
    {
        var path = Path.Combine(_dir, name);
        Directory.CreateDirectory(Path.GetDirectoryName(path)!);
        File.WriteAllText(path, text);
        return path;
    }

    private static Func<string, string?> Env(params (string Name, string Value)[] set) =>
        name => set.FirstOrDefault(v => v.Name == name).Value;

    [Fact]
    public void A_file_takes_the_switch_names_or_the_variables_with_comments_quotes_and_a_home_relative_path()
    {
        var file = Write("client.conf", """
            # the site's tier
            cache-hosts = cache1:6380, cache2:6380
            --cache-user = alice
            HPCDATA_CACHE_TLS=on
            cache-password-file = "~/.hpcdata/password"

            """);

        var config = ClientConfig.Load(Env((ClientConfig.FileVariable, file), ("HOME", "/home/alice")));

        Assert.Equal([file], config.Files);
        Assert.Equal("cache1:6380, cache2:6380", config[CacheTierOptions.HostsVariable]);
        Assert.Equal("alice", config[CacheTierOptions.UserVariable]);
        Assert.Equal("on", config[CacheTierOptions.TlsVariable]);
        Assert.Equal("/home/alice/.hpcdata/password", config[CacheTierOptions.PasswordFileVariable]);
        Assert.Null(config[CacheTierOptions.TlsCaVariable]);
    }

    [Fact]
    public void The_users_file_wins_over_the_sites_and_a_set_variable_over_both()
    {
        var home = Path.Combine(_dir, "home");
        Write("home/.config/hpcdata/client.conf", "cache-hosts = mine:6380\n");
        var environment = Env(("HOME", home));

        var config = ClientConfig.Load(environment);
        if (File.Exists(ClientConfig.SiteFile)) Assert.Equal([ClientConfig.SiteFile, Path.Combine(home, ".config", "hpcdata", "client.conf")], config.Files);
        Assert.Equal("mine:6380", config[CacheTierOptions.HostsVariable]);

        Assert.Equal(["exported:6380"], CacheTierOptions.FromEnvironment(Env((CacheTierOptions.HostsVariable, "exported:6380")), config).Hosts);
        Assert.Equal(["mine:6380"], CacheTierOptions.FromEnvironment(Env(), config).Hosts);
    }

    [Fact]
    public void XDG_CONFIG_HOME_moves_the_users_file()
    {
        Assert.Equal(Path.Combine("/x", "hpcdata", "client.conf"), ClientConfig.UserFile(Env(("XDG_CONFIG_HOME", "/x"), ("HOME", "/h"))));
        Assert.Equal(Path.Combine("/h", ".config", "hpcdata", "client.conf"), ClientConfig.UserFile(Env(("HOME", "/h"))));
    }

    [Theory]
    [InlineData("cache-hots = a:1", ":1: unknown setting 'cache-hots'")]
    [InlineData("cache-password = s3cret", ":1: unknown setting 'cache-password'")]
    [InlineData("# fine\njust words", ":2: 'just words' is not 'key = value'")]
    [InlineData("replicas = two", ":1: replicas: 'two' is not a whole number")]
    public void A_line_that_does_not_read_is_refused_naming_the_file_and_the_line(string text, string said)
    {
        var file = Write("bad.conf", text);

        var e = Assert.Throws<FormatException>(() => ClientConfig.Load(Env((ClientConfig.FileVariable, file))));

        Assert.Contains(file + said, e.Message);
    }

    [Fact]
    public void A_file_the_variable_names_must_exist_and_the_files_that_merely_apply_need_not()
    {
        var missing = Path.Combine(_dir, "none.conf");
        var e = Assert.Throws<FormatException>(() => ClientConfig.Load(Env((ClientConfig.FileVariable, missing))));
        Assert.Contains($"'{missing}' does not exist", e.Message);

        var config = ClientConfig.Load(Env(("HOME", Path.Combine(_dir, "nobody"))));
        Assert.DoesNotContain(Path.Combine(_dir, "nobody", ".config", "hpcdata", "client.conf"), config.Files);
    }
}
