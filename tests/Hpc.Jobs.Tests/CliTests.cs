namespace Hpc.Jobs.Tests;

/// <summary>
/// The command line as users meet it: values that cannot work are refused at once, naming the switch and what it
/// needs, before any process is started or byte is written.
/// </summary>
public sealed class CliTests
{
    [Theory]
    [InlineData("demo")]
    [InlineData("generate")]
    public async Task A_dataset_size_without_a_unit_below_1MB_is_refused_naming_the_unit(string verb)
    {
        await using var s = new Sandbox();
        var target = Path.Combine(s.Root, "out");
        string[] args = verb == "demo" ? ["demo", "--size", "64", "--work-dir", target] : ["generate", target, "--size", "64"];
        var r = await s.HpcdataAsync(args, timeout: TimeSpan.FromSeconds(60));
        Assert.True(r.Code == 2, $"exit {r.Code}: {r.Out}\n{r.Stderr}");
        Assert.Contains("--size 64 has no unit", r.Stderr);
        Assert.Contains("64MB", r.Stderr);
        Assert.False(Path.Exists(target), $"{verb} made {target} before refusing");

        // The help states the rule.
        var help = await s.HpcdataAsync([verb, "--help"]);
        Assert.Contains("a number without a unit is bytes", string.Join(" ", help.Out.Split((char[])[' ', '\n'], StringSplitOptions.RemoveEmptyEntries)));
    }

    [Theory]
    [InlineData("--nodes", "0")]
    [InlineData("--hosts", "0")]
    [InlineData("--workers", "-1")]
    public async Task Demo_refuses_a_count_below_one_at_once(string option, string value)
    {
        await using var s = new Sandbox();
        var work = Path.Combine(s.Root, "demo");
        var clock = System.Diagnostics.Stopwatch.StartNew();
        var r = await s.HpcdataAsync(["demo", option, value, "--size", "8MB", "--work-dir", work], timeout: TimeSpan.FromSeconds(60));
        Assert.True(r.Code == 2, $"exit {r.Code}: {r.Out}\n{r.Stderr}");
        Assert.Contains($"{option} must be at least 1 (got {value})", r.Stderr);
        Assert.DoesNotContain("HPC Common Data demo", r.Out);   // no banner: nothing was started
        Assert.False(Path.Exists(work));
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(10), $"refused only after {clock.Elapsed}");
    }

    [Fact]
    public async Task List_of_a_dataset_that_is_not_on_the_tier_names_it_and_exits_1()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        await s.StageAsync(s.WriteFile("a.bin", Sandbox.RandomBytes(1000)), "risk/here");

        var missing = await s.HpcdataAsync(["list", "risk/not-here", "--cache-hosts", s.HostList]);
        Assert.True(missing.Code == 1, $"exit {missing.Code}: {missing.Out}");
        Assert.Contains("'risk/not-here' has no version on the cache tier", missing.Stderr);
        var json = await s.HpcdataAsync(["list", "risk/not-here", "--cache-hosts", s.HostList, "--json"]);
        Assert.Equal(1, json.Code);

        // A name that cannot be a dataset's is a usage error, said before the tier is asked.
        var bad = await s.HpcdataAsync(["list", "BadName", "--cache-hosts", s.HostList]);
        Assert.Equal(2, bad.Code);
        Assert.Contains("'BadName' must have the form owner/name", bad.Stderr);

        var there = await s.HpcdataAsync(["list", "risk/here", "--cache-hosts", s.HostList]);
        Assert.Equal(0, there.Code);
        Assert.Contains(there.Stdout, l => l.StartsWith("risk/here", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Stage_refuses_more_replicas_than_cache_hosts_naming_both_numbers()
    {
        await using var s = new Sandbox();
        // Nothing listens there: the refusal must come before any connection is tried.
        var r = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", Sandbox.RandomBytes(1000)), "--name", "risk/r", "--cache-hosts", "127.0.0.1:1", "--replicas", "3"]);
        Assert.True(r.Code == 2, $"exit {r.Code}: {r.Out}\n{r.Stderr}");
        Assert.Contains("--replicas 3 cannot exceed the number of cache hosts (1)", r.Stderr);

        var two = await s.HpcdataAsync(["stage", s.WriteFile("e.bin", Sandbox.RandomBytes(1000)), "--name", "risk/r", "--cache-hosts", "127.0.0.1:1,127.0.0.1:2", "--replicas", "2"],
            timeout: TimeSpan.FromSeconds(90));
        Assert.DoesNotContain("cannot exceed", two.Stderr);   // as many copies as hosts is allowed (it then fails to connect)
    }
}
