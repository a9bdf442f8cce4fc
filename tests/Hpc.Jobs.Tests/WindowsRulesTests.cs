using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Commands;

namespace Hpc.Jobs.Tests;

/// <summary>Rules that decide what a Windows node or an installed tool gets, checked here on Linux by passing the platform.</summary>
public sealed class WindowsRulesTests
{
    [Theory]
    [InlineData("hpcdata-agent")]
    [InlineData("job42/agent")]
    public void A_plain_name_is_a_valid_pipe_on_windows(string pipe) => Assert.Null(NodeAgentOptions.PipeProblem(pipe, windows: true));

    [Theory]
    [InlineData(@"C:\run\agent", "path")]
    [InlineData(@"agent\one", "path")]
    [InlineData("/run/hpcdata/agent", "path")]
    [InlineData("ANONYMOUS", "reserved")]
    [InlineData("", "empty")]
    public void Windows_refuses_pipe_names_it_cannot_create(string pipe, string why) =>
        Assert.Contains(why, NodeAgentOptions.PipeProblem(pipe, windows: true));

    [Fact]
    public void Windows_refuses_a_pipe_name_over_256_characters()
    {
        Assert.Null(NodeAgentOptions.PipeProblem(new string('p', 256), windows: true));
        Assert.Contains("256", NodeAgentOptions.PipeProblem(new string('p', 257), windows: true));
    }

    [Fact]
    public void Linux_takes_an_absolute_socket_path_but_not_one_too_long_for_the_kernel()
    {
        Assert.Null(NodeAgentOptions.PipeProblem("/run/hpcdata/agent", windows: false));
        Assert.Contains("longer than", NodeAgentOptions.PipeProblem("/run/" + new string('x', 120), windows: false));
    }

    [Fact]
    public void Job_scripts_run_the_installed_tool_by_its_launcher()
    {
        Assert.Equal("/opt/hpcdata/hpcdata", PrestageCommand.InstalledHpcdata("/opt/hpcdata/hpcdata", fromBuildTree: false, _ => null));
        Assert.Equal("'/opt/hpc data/hpcdata'", PrestageCommand.InstalledHpcdata("/opt/hpc data/hpcdata", fromBuildTree: false, _ => null));
    }

    [Fact]
    public void From_a_build_the_nodes_own_installation_on_path_is_used_else_none()
    {
        Assert.Equal("hpcdata", PrestageCommand.InstalledHpcdata("/usr/share/dotnet/dotnet", fromBuildTree: true, _ => "/usr/local/bin/hpcdata"));
        Assert.Equal("hpcdata", PrestageCommand.InstalledHpcdata("/src/artifacts/bin/Hpc.Jobs/release/hpcdata", fromBuildTree: true, _ => "/usr/local/bin/hpcdata"));
        Assert.Null(PrestageCommand.InstalledHpcdata("/src/artifacts/bin/Hpc.Jobs/release/hpcdata", fromBuildTree: true, _ => null));
    }

    [Fact]
    public void A_build_output_is_told_from_an_installation()
    {
        Assert.True(ComponentLocator.IsBuildTree("/src/hpc/artifacts/bin/Hpc.Jobs/release/"));
        Assert.False(ComponentLocator.IsBuildTree("/opt/hpcdata/.store/hpcdata/1.0.0/hpcdata/1.0.0/tools/net10.0/any/"));
    }
}
