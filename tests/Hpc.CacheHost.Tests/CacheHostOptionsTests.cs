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
    [InlineData("1.5GB")]
    [InlineData("99999999999TB")]
    public void Byte_sizes_reject_anything_else(string text)
    {
        Assert.False(ByteSize.TryParse(text, out _));
    }

    [Fact]
    public void Short_command_line_switches_bind_to_the_options()
    {
        var configuration = new ConfigurationBuilder()
            .AddCommandLine(["--port", "0", "--address", "0.0.0.0", "--max-memory", "2GB", "--password", "x", "--max-clients", "7"],
                CacheHostOptions.SwitchMappings)
            .Build();

        var options = configuration.GetSection(CacheHostOptions.SectionName).Get<CacheHostOptions>()!;

        Assert.Equal(0, options.Port);
        Assert.Equal("0.0.0.0", options.Address);
        Assert.Equal(2L << 30, options.MaxMemoryBytes.Bytes);
        Assert.Equal("x", options.Password);
        Assert.Equal(7, options.MaxClients);
        Assert.Empty(options.Validate());
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
    }

    [Fact]
    public void Out_of_range_settings_are_reported()
    {
        var options = new CacheHostOptions { Port = 70000, MaxClients = 0, MaxFrameBytes = new ByteSize(10) };

        Assert.Equal(3, options.Validate().Count());
    }
}
