using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;

namespace Hpc.CommonData.Tests;

public enum SampleMode { Fast, Careful }

public sealed class SampleTier
{
    [Switch("--hosts", "cache hosts")]
    public List<string> Hosts { get; set; } = [];

    [Switch("--attempts", "tries per request")]
    public int Attempts { get; set; } = 3;
}

/// <summary>An options type with one switch of every kind a program uses.</summary>
public sealed class SampleOptions : IProgramOptions
{
    public static string SectionName => "Sample";
    public static string ProgramName => "sample";
    public static string Assembly => "Sample";
    public static string Summary => "exercises the program contract";

    [Switch("", "what to read", Meta = "PATH")]
    public string Path { get; set; } = "";

    [Switch("--name", "a name")]
    public string Name { get; set; } = "default-name";

    [Switch("--count", "how many")]
    public int Count { get; set; } = 1;

    [Switch("--budget", "how much", Environment = "HPCDATA_TEST_BUDGET")]
    public ByteSize Budget { get; set; } = new(1L << 30);

    [Switch("--timeout", "how long")]
    public TimeSpan Timeout { get; set; } = TimeSpan.FromSeconds(30);

    [Switch("--verbose", "say more", Alias = "-v")]
    public bool Verbose { get; set; }

    [Switch("--mode", "how")]
    public SampleMode Mode { get; set; } = SampleMode.Fast;

    [Switch("--token", "a secret", Environment = "HPCDATA_TEST_TOKEN", Secret = true)]
    public string? Token { get; set; }

    public SampleTier Tier { get; set; } = new();

    public IEnumerable<string> Validate()
    {
        if (Count < 0)
            yield return $"--count must not be negative, not {Count}.";
    }
}

/// <summary>Console.Error is one per process: these tests read what they wrote to it while no other test in the run writes there.</summary>
[CollectionDefinition(nameof(ProcessConsole), DisableParallelization = true)]
public sealed class ProcessConsole;

[Collection(nameof(ProcessConsole))]
public class ProgramContractTests
{
    private static SampleOptions Bind(IReadOnlyDictionary<string, string?> settings) =>
        new ConfigurationBuilder().AddInMemoryCollection(settings).Build().GetSection(SampleOptions.SectionName).Get<SampleOptions>() ?? new();

    /// <summary>The program's own resolve, with <paramref name="environment"/> as its variables and <paramref name="json"/>
    /// as its one settings file (none when null).</summary>
    private static Resolution<SampleOptions> Resolve(string[] args, Func<string, string?>? environment = null, string? json = null)
    {
        if (json is null) return ProgramContract<SampleOptions>.Resolve(args, environment ?? (_ => null), []);
        var file = Path.Combine(Path.GetTempPath(), $"contract-{Guid.NewGuid():N}.json");
        File.WriteAllText(file, json);
        try { return ProgramContract<SampleOptions>.Resolve(args, environment ?? (_ => null), [new SettingsFile(file, Optional: false)]); }
        finally { File.Delete(file); }
    }

    private static SampleOptions Resolved(string[] args, Func<string, string?>? environment = null, string? json = null)
    {
        var resolution = Resolve(args, environment, json);
        Assert.Null(resolution.Problem);
        Assert.Empty(resolution.Invalid);
        return resolution.Options;
    }

    /// <summary>The command line alone, resolved as the program resolves it (no variables, no settings file), not yet validated.</summary>
    private static SampleOptions ParseAndBind(params string[] args)
    {
        var resolution = Resolve(args);
        Assert.Null(resolution.Problem);
        Assert.False(resolution.HelpRequested);
        return resolution.Options;
    }

    [Fact]
    public void Switches_of_every_kind_parse_and_bind()
    {
        var o = ParseAndBind("data.bin", "--name", "n1", "--count=7", "--budget", "2GB", "--timeout", "00:01:30", "--verbose", "--mode", "careful",
            "--hosts", "a:1,b:2", "--attempts", "5");

        Assert.Equal("data.bin", o.Path);
        Assert.Equal("n1", o.Name);
        Assert.Equal(7, o.Count);
        Assert.Equal(2L << 30, o.Budget.Bytes);
        Assert.Equal(TimeSpan.FromSeconds(90), o.Timeout);
        Assert.True(o.Verbose);
        Assert.Equal(SampleMode.Careful, o.Mode);
        Assert.Equal(["a:1", "b:2"], o.Tier.Hosts);
        Assert.Equal(5, o.Tier.Attempts);
    }

    [Theory]
    [InlineData("90", 90)]
    [InlineData("90s", 90)]
    [InlineData("2.5s", 2.5)]
    [InlineData("15m", 900)]
    [InlineData("2h", 7200)]
    [InlineData("1d", 86400)]
    [InlineData("00:01:30", 90)]
    public void A_duration_reads_alike_as_a_switch_and_in_the_settings_file_a_bare_number_being_seconds(string text, double seconds)
    {
        Assert.Equal(TimeSpan.FromSeconds(seconds), ParseAndBind("p", "--timeout", text).Timeout);

        var fromFile = Resolved(["p"], json: $"{{ \"Sample\": {{ \"Timeout\": \"{text}\" }} }}");
        Assert.Equal(TimeSpan.FromSeconds(seconds), fromFile.Timeout);

        // The options type writes a command line the program reads back to the same value.
        var written = ProgramContract<SampleOptions>.ToArguments(fromFile);
        Assert.Equal(TimeSpan.FromSeconds(seconds), ParseAndBind([.. written]).Timeout);
    }

    [Theory]
    [InlineData("ten")]
    [InlineData("10x")]
    [InlineData("-5s")]
    public void A_duration_that_does_not_read_is_refused_naming_the_switch_the_value_and_the_units(string text)
    {
        var problem = Resolve(["p", "--timeout", text]).Problem;

        Assert.NotNull(problem);
        Assert.Contains("--timeout", problem);
        Assert.Contains($"'{text}'", problem);
        Assert.Matches("15m|use s, m, h or d", problem);
    }

    [Fact]
    public void A_short_form_stands_for_its_switch_and_help_shows_both()
    {
        Assert.True(ParseAndBind("p", "-v").Verbose);
        Assert.Contains("-v, --verbose", ProgramContract<SampleOptions>.Help());
        Assert.Contains("unknown option '-x'", Resolve(["p", "-x"]).Problem);
    }

    [Fact]
    public void Switch_names_are_case_insensitive_and_a_flag_may_take_an_explicit_value()
    {
        var o = ParseAndBind("p", "--COUNT", "2", "--verbose", "false");

        Assert.Equal(2, o.Count);
        Assert.False(o.Verbose);
    }

    [Fact]
    public void A_settings_files_list_is_bound_unless_the_command_line_gives_one()
    {
        const string json = "{ \"Sample\": { \"Tier\": { \"Hosts\": [ \"a:1\", \"b:2\", \"c:3\" ] } } }";
        Assert.Equal(["a:1", "b:2", "c:3"], Resolved(["p"], json: json).Tier.Hosts);
        Assert.Equal(["d:4"], Resolved(["p", "--hosts", "d:4"], json: json).Tier.Hosts);
    }

    [Fact]
    public void A_list_given_twice_is_replaced_not_merged()
    {
        var o = ParseAndBind("p", "--hosts", "a,b,c", "--hosts", "d");

        Assert.Equal(["d"], o.Tier.Hosts);
    }

    [Theory]
    [InlineData(new[] { "p", "--bogus" }, "unknown option '--bogus'")]
    [InlineData(new[] { "p", "--count" }, "--count needs a value")]
    [InlineData(new[] { "p", "--name", "--count", "1" }, "--name needs a value")]
    [InlineData(new[] { "p", "--budget", "12XB" }, "'12XB' is not a size")]
    [InlineData(new[] { "p", "--count", "many" }, "'many' is not a whole number")]
    [InlineData(new[] { "p", "--mode", "sloppy" }, "'sloppy' is not one of fast, careful")]
    [InlineData(new[] { "p", "--timeout", "soon" }, "'soon' is not a duration")]
    [InlineData(new[] { "p", "q" }, "unexpected argument 'q'")]
    [InlineData(new[] { "p", "-x" }, "unknown option '-x'")]
    [InlineData(new[] { "p", "--", "q" }, "unexpected argument 'q'")]
    [InlineData(new string[0], "missing PATH")]
    public void A_bad_command_line_is_one_error_naming_the_problem(string[] args, string expected)
    {
        var problem = Resolve(args).Problem;

        Assert.NotNull(problem);
        Assert.Contains(expected, problem);
        Assert.DoesNotContain('\n', problem);
    }

    [Theory]
    [InlineData("--help")]
    [InlineData("-h")]
    public void Help_is_recognised_anywhere(string help)
    {
        Assert.True(Resolve(["p", "--count", "1", help]).HelpRequested);
    }

    [Fact]
    public void After_two_dashes_every_word_is_the_argument_and_help_asks_for_help_only_as_the_first_word()
    {
        Assert.Equal("-odd-name", ParseAndBind("--count", "1", "--", "-odd-name").Path);

        Assert.True(Resolve(["help"]).HelpRequested);
        var file = Resolve(["--count", "1", "help"]);
        Assert.False(file.HelpRequested);
        Assert.Null(file.Problem);
        Assert.Equal("help", file.Options.Path);
    }

    public static TheoryData<string> ProgramsHelp => new()
    {
        ProgramContract<StagerOptions>.Help(), ProgramContract<NodeAgentOptions>.Help(), ProgramContract<CacheHostOptions>.Help(),
    };

    [Theory]
    [MemberData(nameof(ProgramsHelp))]
    public void The_programs_help_is_wrapped_to_a_hundred_columns_and_says_each_default_once(string help)
    {
        Assert.All(help.Split('\n'), line => Assert.True(line.Length <= 100, line));
        // One switch's entry, its wrapped lines joined: "(default" or "the default)" at most once in it.
        var entries = System.Text.RegularExpressions.Regex.Split(help.Replace("\n" + new string(' ', 31), " "), "\n  (?=-)");
        Assert.All(entries, e => Assert.True(System.Text.RegularExpressions.Regex.Matches(e, @"\(default|the default\)").Count <= 1, e));
    }

    [Fact]
    public void Help_lists_every_switch_with_its_default_and_environment_variable_but_no_secret_value()
    {
        var help = ProgramContract<SampleOptions>.Help();

        Assert.Contains("usage: sample PATH [options]", help);
        foreach (var name in (string[])["--name", "--count", "--budget", "--timeout", "--verbose", "--mode", "--token", "--hosts", "--attempts", "--help"])
            Assert.Contains(name, help);
        Assert.Contains("(default: 1GB)", help);
        Assert.Contains("[HPCDATA_TEST_BUDGET]", help);
    }

    [Fact]
    public void Options_survive_the_round_trip_through_a_command_line()
    {
        var options = new SampleOptions
        {
            Path = "/data/set one",
            Name = "--looks-like-a-switch",
            Count = 0,
            Budget = new(3L << 20),
            Timeout = TimeSpan.FromMinutes(2),
            Verbose = true,
            Mode = SampleMode.Careful,
            Token = "t0k3n",
            Tier = new SampleTier { Hosts = ["h1:6380", "h2:6380"], Attempts = 9 },
        };

        var args = ProgramContract<SampleOptions>.ToArguments(options);
        var secrets = ProgramContract<SampleOptions>.SecretEnvironment(options);
        var back = ParseAndBind([.. args]);

        Assert.DoesNotContain("t0k3n", args);
        Assert.Equal("t0k3n", secrets["HPCDATA_TEST_TOKEN"]);
        back.Token = secrets["HPCDATA_TEST_TOKEN"];
        Assert.Equivalent(options, back, strict: true);
    }

    [Fact]
    public void Default_options_spell_out_only_the_positional_one_and_what_a_variable_could_change()
    {
        // The launched program's environment must not change a value its launcher left at the default.
        Assert.Equal(["p", "--budget", "1GB"], ProgramContract<SampleOptions>.ToArguments(new SampleOptions { Path = "p" }));
        Assert.Equivalent(new SampleOptions { Path = "p" }, ParseAndBind("p"), strict: true);
    }

    [Fact]
    public void Documented_environment_variables_lie_under_the_command_line_and_are_checked_too()
    {
        string? Budget(string name) => name == "HPCDATA_TEST_BUDGET" ? "5MB" : null;
        Assert.Equal(5L << 20, Resolved(["p"], Budget).Budget.Bytes);
        Assert.Equal(7L << 20, Resolved(["p", "--budget", "7MB"], Budget).Budget.Bytes);

        var error = new StringWriter();
        var previous = Console.Error;
        Console.SetError(error);
        try
        {
            Assert.Equal(2, ProgramContract<SampleOptions>.Answer(Resolve(["p"], name => name == "HPCDATA_TEST_BUDGET" ? "lots" : null)));
        }
        finally
        {
            Console.SetError(previous);
        }
        Assert.Equal("sample: environment variable HPCDATA_TEST_BUDGET: 'lots' is not a size (examples: 65536, 64KB, 256MB, 1GB)" + Environment.NewLine, error.ToString());
    }

    [Fact]
    public void Options_that_fail_validation_are_refused_with_exit_code_2()
    {
        var error = new StringWriter();
        var previous = Console.Error;
        Console.SetError(error);
        try
        {
            Assert.Null(ProgramContract<SampleOptions>.Answer(Resolve(["p"])));
            Assert.Equal(2, ProgramContract<SampleOptions>.Answer(Resolve(["p", "--count", "-1"])));
        }
        finally
        {
            Console.SetError(previous);
        }
        Assert.Equal("sample: --count must not be negative, not -1." + Environment.NewLine, error.ToString());
    }
}
