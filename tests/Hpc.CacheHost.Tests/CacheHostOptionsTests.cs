using Hpc.CacheHost.Server.Commands;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;

namespace Hpc.CacheHost.Tests;

public class CacheHostOptionsTests
{
    [Theory]
    [InlineData("1024", 1024L)]
    [InlineData("512MB", 512L << 20)]
    [InlineData("2GB", 2L << 30)]
    [InlineData("2gb", 2L << 30)]
    [InlineData("64 KiB", 64L << 10)]
    [InlineData("1T", 1L << 40)]
    public void Byte_sizes_accept_plain_numbers_and_binary_suffixes(string text, long expected)
    {
        Assert.True(ByteSize.TryParse(text, out var size));
        Assert.Equal(expected, size.Bytes);
    }

    [Theory]
    [InlineData("")]
    [InlineData("MB")]
    [InlineData("-1")]
    [InlineData("12XB")]
    [InlineData("99999999999TB")]
    public void Byte_sizes_reject_anything_else(string text)
    {
        Assert.False(ByteSize.TryParse(text, out _));
    }

    [Fact]
    public void Command_line_switches_bind_to_the_options()
    {
        var resolved = ProgramContract<CacheHostOptions>.Resolve(
            ["--port", "0", "--address", "0.0.0.0", "--max-memory", "2GB", "--max-frame", "1MB", "--password", "x", "--max-clients", "7"], _ => null, []);
        Assert.Null(resolved.Problem);

        var options = resolved.Options;

        Assert.Equal(0, options.Port);
        Assert.Equal("0.0.0.0", options.Address);
        Assert.Equal(2L << 30, options.MaxMemoryBytes.Bytes);
        Assert.Equal(1L << 20, options.MaxFrameBytes.Bytes);
        Assert.Equal("x", options.Password);
        Assert.Equal(7, options.MaxClients);
        Assert.Empty(options.Validate());
    }

    [Fact]
    public void Launcher_arguments_carry_every_setting_but_the_password_which_goes_in_the_environment()
    {
        var options = new CacheHostOptions { Address = "0.0.0.0", Port = 0, MaxMemoryBytes = new(3L << 30), MaxFrameBytes = new(1L << 20), MaxClients = 9, Password = "s3cret" };

        var args = ProgramContract<CacheHostOptions>.ToArguments(options);
        var environment = ProgramContract<CacheHostOptions>.SecretEnvironment(options);

        Assert.Equal(["--address", "0.0.0.0", "--port", "0", "--max-memory", "3GB", "--max-frame", "1MB", "--max-clients", "9"], args);
        Assert.DoesNotContain("s3cret", args);
        Assert.Equal("s3cret", environment["HPCDATA_CACHE_PASSWORD"]);
        var resolved = ProgramContract<CacheHostOptions>.Resolve(args, v => environment.GetValueOrDefault(v), []);
        Assert.Null(resolved.Problem);
        Assert.Equivalent(options, resolved.Options);
    }

    [Fact]
    public void The_password_can_come_from_a_file()
    {
        var file = Path.GetTempFileName();
        try
        {
            File.WriteAllText(file, "from-file\n");
            var options = new CacheHostOptions { PasswordFile = file };

            Assert.Empty(options.Validate());
            Assert.Null(options.LoadPasswordFile());
            Assert.Equal("from-file", options.Password);
            Assert.Contains(options.Validate(), p => p.Contains("--password-file"));
        }
        finally
        {
            File.Delete(file);
        }
    }

    [Fact]
    public void Defaults_match_the_documented_ones()
    {
        var options = new CacheHostOptions();

        Assert.Equal("127.0.0.1", options.Address);
        Assert.Equal(6380, options.Port);
        Assert.Equal(1L << 30, options.MaxMemoryBytes.Bytes);
        Assert.Equal(64L << 20, options.MaxFrameBytes.Bytes);
        Assert.Null(options.Password);
        Assert.Empty(ProgramContract<CacheHostOptions>.ToArguments(options));
    }

    [Fact]
    public void Out_of_range_settings_are_reported_naming_the_switch()
    {
        var options = new CacheHostOptions { Port = 70000, MaxClients = 0, MaxFrameBytes = new ByteSize(10), PasswordFile = "/nonexistent/pw" };

        var problems = options.Validate().ToList();

        Assert.Equal(4, problems.Count);
        Assert.StartsWith("--port", problems[0]);
        Assert.StartsWith("--max-frame", problems[1]);
        Assert.StartsWith("--max-clients", problems[2]);
        Assert.StartsWith("--password-file", problems[3]);
    }

    [Fact]
    public void The_command_table_is_well_formed_and_finds_commands_in_any_case()
    {
        Assert.True(CommandTable.Count > 20);
        Assert.Equal("get", CommandTable.Lookup("GET"u8)!.Name);
        Assert.Equal("flushall", CommandTable.Lookup("FlushAll"u8)!.Name);
        Assert.Null(CommandTable.Lookup("GETX"u8));
        Assert.Null(CommandTable.Lookup(""u8));
        Assert.Null(CommandTable.Lookup("averyveryverylongcommandname"u8));
        Assert.All(CommandTable.All, c => Assert.Same(c, CommandTable.Lookup(c.LowerName)));
        Assert.True(CommandTable.Lookup("auth"u8)!.AllowedBeforeAuth);
        Assert.False(CommandTable.Lookup("get"u8)!.AllowedBeforeAuth);
    }

    private static CacheHostOptions Bind(IReadOnlyDictionary<string, string?> settings) =>
        new ConfigurationBuilder().AddInMemoryCollection(settings).Build()
            .GetSection(CacheHostOptions.SectionName).Get<CacheHostOptions>()!;
}
