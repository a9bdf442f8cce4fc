using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;

namespace Hpc.Jobs.Tests;

/// <summary>How every verb names a dataset: <c>NAME[@VERSION]</c>, by default the job's.</summary>
public class DatasetArgumentTests
{
    private static readonly Dictionary<string, string?> Job = new() { ["HPCDATA_DATASET"] = "risk/prices", ["HPCDATA_VERSION"] = "v7" };

    [Theory]
    [InlineData("risk/prices", "risk/prices", null)]
    [InlineData("risk/prices@abc123", "risk/prices", "abc123")]
    public void A_name_may_carry_its_version_after_an_at_sign(string given, string name, string? version) =>
        Assert.Equal(new DatasetArgument(name, version), DatasetArgument.Parse(given));

    [Theory]
    [InlineData("prices", "dataset name 'prices' must have the form owner/name")]
    [InlineData("risk/prices@", "no version after @")]
    public void A_malformed_name_is_a_usage_error_that_quotes_it(string given, string says)
    {
        var e = Assert.Throws<CommandException>(() => DatasetArgument.Parse(given));
        Assert.Equal(ExitCodes.Usage, e.ExitCode);
        Assert.Contains(says, e.Message);
    }

    [Fact]
    public void Without_a_name_a_node_side_verb_takes_the_jobs_dataset_at_the_jobs_version() =>
        Assert.Equal(new DatasetArgument("risk/prices", "v7"), DatasetArgument.OrJob(null, v => Job.GetValueOrDefault(v)));

    [Fact]
    public void The_jobs_version_applies_to_the_jobs_dataset_only()
    {
        Assert.Equal(new DatasetArgument("risk/prices", "v7"), DatasetArgument.OrJob("risk/prices", v => Job.GetValueOrDefault(v)));
        Assert.Equal(new DatasetArgument("risk/other", null), DatasetArgument.OrJob("risk/other", v => Job.GetValueOrDefault(v)));
        Assert.Equal(new DatasetArgument("risk/prices", "v1"), DatasetArgument.OrJob("risk/prices@v1", v => Job.GetValueOrDefault(v)));
    }

    [Fact]
    public void Outside_a_job_with_no_name_there_is_no_dataset() => Assert.Null(DatasetArgument.OrJob(null, _ => null));
}
