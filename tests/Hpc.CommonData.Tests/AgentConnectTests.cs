using System.Diagnostics;
using Hpc.CommonData.Agent;

namespace Hpc.CommonData.Tests;

/// <summary>A worker on a node where no agent's socket exists is told so at once, and what names the pipe.</summary>
public class AgentConnectTests
{
    [Theory]
    [InlineData(DataAccessMode.Map)]
    [InlineData(DataAccessMode.Stream)]
    public async Task Without_an_agent_socket_open_fails_at_once_naming_the_socket_and_the_variable(DataAccessMode mode)
    {
        if (OperatingSystem.IsWindows()) return;   // a named pipe there has no file to look for
        var pipe = $"hpcdata-test-absent-{Environment.ProcessId}-{mode}";
        Assert.True(AgentClient.SocketMissing(pipe));
        // A long connect timeout: failing well inside it shows the absent socket was not waited on.
        var options = new DatasetOptions { AgentPipe = pipe, Mode = mode, AgentConnectTimeout = TimeSpan.FromSeconds(30) };

        var clock = Stopwatch.StartNew();
        var e = await Assert.ThrowsAsync<CommonDataException>(() => Dataset.OpenAsync("risk/absent", options));

        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(5), $"took {clock.Elapsed}");
        Assert.Equal(ErrorCode.Unavailable, e.Code);
        Assert.Contains($"no node agent answers on pipe '{pipe}' (no socket at {AgentClient.SocketPath(pipe)})", e.Message);
        Assert.Contains(AgentClient.PipeVariable, e.Message);
        Assert.Contains("hpcdata agent", e.Message);
        Assert.DoesNotContain("timed out", e.Message);
    }
}
