using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

public class DatasetNameTests
{
    [Theory]
    [InlineData("risk/market-history")]
    [InlineData("a/b")]
    [InlineData("team_1/genome.v2-index")]
    public void Accepts_owner_slash_name(string name) => Assert.True(DatasetName.TryValidate(name, out _));

    [Theory]
    [InlineData("", "empty")]
    [InlineData("noslash", "owner/name")]
    [InlineData("a/b/c", "owner/name")]
    [InlineData("../b", "starting with '.'")]
    [InlineData("a/..", "starting with '.'")]
    [InlineData("/abs", "empty part")]
    [InlineData("a//", "owner/name")]
    [InlineData("a\\b/c", "'\\'")]
    [InlineData("A/b", "'A'")]
    [InlineData("a/b\n", "control character")]
    [InlineData("a/b\0", "control character")]
    [InlineData("a/b c", "' '")]
    public void Rejects_names_that_could_be_paths_or_tricks(string name, string reason)
    {
        Assert.False(DatasetName.TryValidate(name, out var error));
        Assert.Contains(reason, error);
        Assert.Throws<ArgumentException>(() => DatasetName.Validate(name));
    }

    [Fact]
    public void Rejects_overlong_parts()
    {
        Assert.True(DatasetName.TryValidate("a/" + new string('x', 64), out _));
        Assert.False(DatasetName.TryValidate("a/" + new string('x', 65), out var error));
        Assert.Contains("longer than", error);
    }
}
