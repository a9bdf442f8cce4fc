using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// hpcdata worker, the sample worker and the native sample read one declaration of the worker's switches
/// (<see cref="WorkerOptions"/>) with the engine every verb uses.
/// </summary>
public class WorkerProbeTests
{
    private static (WorkerOptions Options, string? Problem) Parse(params string[] args)
    {
        var (o, problem) = VerbContract<WorkerOptions>.Parse(args, _ => null);
        return (o, problem ?? o.Validate());
    }

    [Fact]
    public void Every_declared_switch_is_understood_and_listed_once_in_the_help()
    {
        var help = VerbContract<WorkerOptions>.Help("hpcdata worker");
        foreach (var option in SwitchGroup.Of(typeof(WorkerOptions)).Switches.Where(s => s.Name.Length > 0))
        {
            var flag = option.Name is "--wait-go" or "--verify";
            string[] args = flag ? [option.Name] : [option.Name, option.Name switch { "--reopens" => "7", "--mode" => "map", "--pipe" => "/run/a.sock", _ => "all" }];
            Assert.Null(Parse(args).Problem);
            // Its help starts on its line, or on the next when the switch and its placeholder fill the column.
            var lines = help.Split('\n');
            var at = Array.IndexOf(lines, Assert.Single(lines, l => l.Contains($" {option.Name}")));
            Assert.Contains(option.Help.Split(' ')[0], lines[at] + " " + lines[at + 1]);
        }
        var (s, _) = Parse("risk/a", "--mode", "map", "--wait-go", "--verify", "--touch", "all", "--reopens", "0", "--pipe", "/run/a.sock");
        Assert.Equal(("risk/a", "map", true, true, "all", 0, "/run/a.sock"), (s.Dataset, s.Mode, s.WaitGo, s.Verify, s.Touch, s.Reopens, s.Pipe));
    }

    [Fact]
    public void No_switches_give_the_documented_defaults()
    {
        var (s, problem) = Parse();
        Assert.Null(problem);
        Assert.Equal(((string?)null, "auto", false, false, "first", 5, (string?)null), (s.Dataset, s.Mode, s.WaitGo, s.Verify, s.Touch, s.Reopens, s.Pipe));
        var help = VerbContract<WorkerOptions>.Help("hpcdata worker");
        Assert.Contains("(default: auto)", help);
        Assert.Contains("(default: first)", help);
        Assert.Contains("(default: 5)", help);
    }

    [Theory]
    [InlineData("unknown option '--colour'", "--colour")]
    [InlineData("unknown option '--reopen' (did you mean --reopens?)", "--reopen", "3")]
    [InlineData("--mode needs a value", "--mode")]
    [InlineData("unexpected argument 'risk/b'", "risk/a", "risk/b")]
    [InlineData("--reopens: 'abc' is not a whole number", "--reopens", "abc")]
    [InlineData("--reopens must be between 0 and 1000", "--reopens", "5000")]
    [InlineData("--touch 'some' is not first or all", "--touch", "some")]
    [InlineData("--mode 'mmap' is not one of auto, map, stream, direct", "--mode=mmap")]
    public void A_bad_command_line_is_refused_with_the_switch_named(string message, params string[] args) =>
        Assert.StartsWith(message, Parse(args).Problem);

    [Fact]
    public void Values_may_follow_an_equals_sign()
    {
        var (s, problem) = Parse("risk/a", "--reopens=3");
        Assert.Null(problem);
        Assert.Equal(("risk/a", 3), (s.Dataset, s.Reopens));
    }
}
