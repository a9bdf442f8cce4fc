using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

/// <summary>A version may be named by the start of its id, as status and list print ids; a start that fits several is refused, naming them.</summary>
public class VersionPrefixTests
{
    private static readonly string A = "0123abcd" + new string('1', 56);
    private static readonly string B = "0123abcd" + new string('2', 56);
    private static readonly string C = "fedc0000" + new string('3', 56);

    [Theory]
    [InlineData("0123abcd", true)]
    [InlineData("0123ABCDef12", true)]
    [InlineData("0123abc", false)]                                   // fewer than 8 digits
    [InlineData("0123abcz", false)]                                  // not hex
    [InlineData("0123abcd0123abcd0123abcd0123abcd", false)]          // 32 digits: an id of the old format, refused as such
    public void A_prefix_is_8_to_63_hex_digits(string text, bool isPrefix) => Assert.Equal(isPrefix, VersionPrefix.IsPrefix(text));

    [Fact]
    public void A_whole_id_is_not_a_prefix() => Assert.False(VersionPrefix.IsPrefix(A));

    [Fact]
    public void The_one_version_that_starts_so_is_chosen_whatever_the_case_of_the_digits()
    {
        Assert.Equal(A, VersionPrefix.Choose("risk/a", "0123ABCD1111", [A, B, C], "on this node"));
        Assert.Equal(C, VersionPrefix.Choose("risk/a", "fedc0000", [A, B, C, C], "on this node"));
    }

    [Fact]
    public void A_start_that_fits_several_versions_is_refused_listing_them()
    {
        var e = Assert.Throws<CommonDataException>(() => VersionPrefix.Choose("risk/a", "0123abcd", [B, A, C], "on cache hosts h1:6380"));
        Assert.Equal(ErrorCode.BadRequest, e.Code);
        Assert.Equal($"dataset 'risk/a': '0123abcd' starts 2 versions on cache hosts h1:6380: {A}, {B}; give more digits", e.Message);
    }

    [Fact]
    public void A_start_that_fits_none_is_not_found()
    {
        var e = Assert.Throws<CommonDataException>(() => VersionPrefix.Choose("risk/a", "99999999", [A, B], "on this node"));
        Assert.Equal(ErrorCode.NotFound, e.Code);
        Assert.Equal("dataset 'risk/a': no version on this node starts with '99999999'", e.Message);
    }
}
