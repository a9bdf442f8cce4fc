using System.Reflection;
using CommandLine;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Commands;

namespace Hpc.Jobs.Tests;

/// <summary>The sample worker compiled to native code reads hpcdata worker's command line without the command-line library.</summary>
public class WorkerProbeTests
{
    [Fact]
    public void Every_switch_of_hpcdata_worker_is_understood_the_same_way()
    {
        var switches = typeof(WorkerOptions).GetProperties().Select(p => p.GetCustomAttribute<OptionAttribute>()).OfType<OptionAttribute>().ToList();
        Assert.NotEmpty(switches);
        foreach (var option in switches)
        {
            string[] args = option.LongName is "wait-go" or "verify" ? ["worker", $"--{option.LongName}"] : ["worker", $"--{option.LongName}", option.LongName == "reopens" ? "7" : "all"];
            Assert.True(WorkerProbe.Parse(args, out var error) is not null, $"--{option.LongName}: {error}");
        }
        var s = WorkerProbe.Parse(["worker", "-d", "risk/a", "--mode", "map", "--wait-go", "--verify", "--touch", "all", "--reopens", "0"], out _)!;
        Assert.Equal(new WorkerProbe.Settings("risk/a", "map", WaitGo: true, Verify: true, Touch: "all", Reopens: 0), s);
    }

    [Fact]
    public void Defaults_are_hpcdata_workers_defaults()
    {
        var cli = new WorkerOptions();
        var s = WorkerProbe.Parse(["worker"], out _)!;
        Assert.Equal((cli.Dataset, cli.Mode, cli.WaitGo, cli.Verify, cli.Touch, cli.Reopens), (s.Dataset, s.Mode, s.WaitGo, s.Verify, s.Touch, s.Reopens));
    }

    [Theory]
    [InlineData("unknown option '--colour'", "--colour")]
    [InlineData("option '--mode' needs a value", "--mode")]
    [InlineData("option '--dataset' needs a value", "--dataset", "--verify")]
    [InlineData("option '--reopens': 'abc' is not a whole number", "--reopens", "abc")]
    public void A_bad_command_line_is_refused_with_the_switch_named(string message, params string[] args)
    {
        Assert.Null(WorkerProbe.Parse(["worker", .. args], out var error));
        Assert.StartsWith(message, error);
    }

    [Fact]
    public void Values_may_follow_an_equals_sign_and_help_is_not_an_error()
    {
        Assert.Equal(new WorkerProbe.Settings("risk/a", Reopens: 3), WorkerProbe.Parse(["worker", "--dataset=risk/a", "--reopens=3"], out _));
        Assert.Null(WorkerProbe.Parse(["worker", "--help"], out var error));
        Assert.Null(error);
    }
}
