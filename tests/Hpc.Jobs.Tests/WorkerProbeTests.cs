using Hpc.CommonData.Cli;

namespace Hpc.Jobs.Tests;

/// <summary>
/// hpcdata worker, the sample worker and the native sample read one declaration of the worker's switches, without a
/// command-line library (the native sample compiles ahead of time).
/// </summary>
public class WorkerProbeTests
{
    [Fact]
    public void Every_declared_switch_is_understood_and_listed_once_in_the_help()
    {
        var help = WorkerProbe.Help("hpcdata worker");
        foreach (var option in WorkerProbe.Switches)
        {
            string[] args = option.Value is null ? ["worker", option.Name] : ["worker", option.Name, option.Name switch { "--reopens" => "7", "--mode" => "map", _ => "all" }];
            Assert.True(WorkerProbe.Parse(args, out var error) is not null, $"{option.Name}: {error}");
            Assert.Contains(option.Help.Split(' ')[0], Assert.Single(help.Split('\n'), l => l.Contains($" {option.Name}")));
        }
        var s = WorkerProbe.Parse(["worker", "risk/a", "--mode", "map", "--wait-go", "--verify", "--touch", "all", "--reopens", "0"], out _)!;
        Assert.Equal(new WorkerProbe.Settings("risk/a", "map", WaitGo: true, Verify: true, Touch: "all", Reopens: 0), s);
    }

    [Fact]
    public void No_switches_give_the_documented_defaults()
    {
        var s = WorkerProbe.Parse(["worker"], out _)!;
        Assert.Equal((null, "auto", false, false, "first", 5), (s.Dataset, s.Mode, s.WaitGo, s.Verify, s.Touch, s.Reopens));
        var help = WorkerProbe.Help("hpcdata worker");
        Assert.Contains("auto (the default)", System.Text.RegularExpressions.Regex.Replace(help, @"\s+", " "));
        Assert.Contains("Default: first", help);
        Assert.Contains("Default: 5", help);
    }

    [Theory]
    [InlineData("unknown option '--colour'", "--colour")]
    [InlineData("option '--mode' needs a value", "--mode")]
    [InlineData("unexpected argument 'risk/b'", "risk/a", "risk/b")]
    [InlineData("option '--reopens': 'abc' is not a whole number", "--reopens", "abc")]
    [InlineData("--reopens must be between 0 and 1000", "--reopens", "5000")]
    [InlineData("--touch 'some' is not first or all", "--touch", "some")]
    [InlineData("--mode 'mmap' is not one of auto, map, stream, direct", "--mode=mmap")]
    public void A_bad_command_line_is_refused_with_the_switch_named(string message, params string[] args)
    {
        Assert.Null(WorkerProbe.Parse(["worker", .. args], out var error));
        Assert.StartsWith(message, error);
    }

    [Fact]
    public void Values_may_follow_an_equals_sign_and_help_is_not_an_error()
    {
        Assert.Equal(new WorkerProbe.Settings("risk/a", Reopens: 3), WorkerProbe.Parse(["worker", "risk/a", "--reopens=3"], out _));
        Assert.Null(WorkerProbe.Parse(["worker", "--help"], out var error));
        Assert.Null(error);
    }
}
