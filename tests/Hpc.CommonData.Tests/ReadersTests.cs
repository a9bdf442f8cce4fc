using System.Runtime.Versioning;
using System.Text;
using Hpc.CommonData.Access;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;

namespace Hpc.CommonData.Tests;

/// <summary>A fact that runs only on Linux, where reader names resolve through the C library's account database.</summary>
public sealed class LinuxFactAttribute : FactAttribute
{
    public LinuxFactAttribute()
    {
        if (!OperatingSystem.IsLinux()) Skip = "reader names are resolved on Linux only";
    }
}

public class ManifestReadersTests
{
    private static Manifest Make(DatasetReaders? readers) => new()
    {
        Name = "risk/secret", Created = new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero), RawLength = 10, StoredLength = 10,
        Hash = XxHash.Hash128Of("x"u8).ToString("x32"), Segments = [new ManifestSegment(SegmentId.Of("y"u8).ToString(), 10, 10)], Readers = readers,
    };

    [Fact]
    public void Readers_round_trip_in_format_2_and_are_part_of_the_version()
    {
        var alice = Make(DatasetReaders.Of([1001], [50]));
        var bytes = alice.Serialize();
        var back = Manifest.Parse(bytes);

        Assert.Equal(Manifest.CurrentFormat, back.Format);
        Assert.Equal([1001u], back.Readers!.Users);
        Assert.Equal([50u], back.Readers.Groups);
        Assert.Equal(Manifest.VersionOf(bytes), Manifest.VersionOf(back.Serialize()));
        Assert.NotEqual(Manifest.VersionOf(bytes), Manifest.VersionOf(Make(DatasetReaders.Of([1002], [50])).Serialize()));
        Assert.NotEqual(Manifest.VersionOf(bytes), Manifest.VersionOf(Make(null).Serialize()));
    }

    [Fact]
    public void A_manifest_for_everyone_is_written_exactly_as_before_readers_existed()
    {
        var json = Encoding.UTF8.GetString(Make(null).SerializeJson());
        Assert.StartsWith("{\"format\":1,", json);
        Assert.DoesNotContain("readers", json);
        Assert.Equal(Manifest.OpenFormat, Manifest.Parse(Make(null).Serialize()).Format);
    }

    [Fact]
    public void An_old_manifest_without_readers_still_reads_and_means_everyone()
    {
        var old = """{"format":1,"name":"risk/old","created":"2025-06-01T00:00:00+00:00","rawLength":10,"storedLength":10,"hash":"0123456789abcdef0123456789abcdef","segmentSize":65536,"segments":[{"id":"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff","raw":10,"stored":10}]}""";
        var m = Manifest.Parse(Encoding.UTF8.GetBytes(old));
        Assert.Null(m.Readers);
        Assert.Equal(Manifest.OpenFormat, m.Format);
    }

    [Theory]
    [InlineData("\"format\":2,", "")] // format 2 must say who reads
    [InlineData("\"format\":1,", ",\"readers\":{\"users\":[1],\"groups\":[]}")] // an older agent would ignore readers in format 1
    [InlineData("\"format\":2,", ",\"readers\":{\"users\":null,\"groups\":[]}")]
    [InlineData("\"format\":3,", "")]
    public void A_format_and_readers_that_disagree_are_refused(string format, string readers)
    {
        var json = Encoding.UTF8.GetString(Make(null).Serialize()).Replace("\"format\":1,", format);
        json = json[..^1] + readers + "}";
        Assert.Throws<InvalidDataException>(() => Manifest.Parse(Encoding.UTF8.GetBytes(json)));
    }

    [Fact]
    public void Readers_are_kept_sorted_and_unique_so_equal_lists_give_equal_versions()
    {
        var a = DatasetReaders.Of([3, 1, 3], [9, 2]);
        Assert.Equal([1u, 3u], a.Users);
        Assert.Equal([2u, 9u], a.Groups);
        Assert.True(DatasetReaders.Same(a, DatasetReaders.Of([1, 3], [2, 9])));
        Assert.False(DatasetReaders.Same(a, null));
        Assert.True(DatasetReaders.Same(null, null));
        Assert.Equal(Make(a).Serialize(), Make(DatasetReaders.Of([1, 3], [9, 2])).Serialize());
    }
}

[SupportedOSPlatform("linux")]
public class ReaderSpecTests
{
    [LinuxFact]
    public void Without_the_switch_only_the_staging_user_may_read()
    {
        var readers = ReaderSpec.Resolve(null);
        Assert.Equal([UnixAccounts.EffectiveUserId], readers!.Users);
        Assert.Empty(readers.Groups);
    }

    [LinuxFact]
    public void All_means_everyone_and_stands_alone()
    {
        Assert.Null(ReaderSpec.Resolve("all"));
        var e = Assert.Throws<CommonDataException>(() => ReaderSpec.Resolve("all,user:root"));
        Assert.Equal(ErrorCode.BadRequest, e.Code);
    }

    [LinuxFact]
    public void Names_resolve_to_ids_on_the_staging_machine_and_unknown_digits_are_ids()
    {
        var readers = ReaderSpec.Resolve("user:root, group:root,user:4242424");
        Assert.Equal([0u, 4242424u], readers!.Users);
        Assert.Equal([0u], readers.Groups);
    }

    [LinuxFact]
    public void Unknown_names_and_malformed_entries_are_refused_all_named_in_one_message()
    {
        var e = Assert.Throws<CommonDataException>(() => ReaderSpec.Resolve("user:no-such-user-hcd,group:no-such-group-hcd,alice"));
        Assert.Equal(ErrorCode.BadRequest, e.Code);
        Assert.Contains("unknown user 'no-such-user-hcd'", e.Message);
        Assert.Contains("unknown group 'no-such-group-hcd'", e.Message);
        Assert.Contains("'alice' is not user:NAME", e.Message);
    }

    [LinuxFact]
    public void The_stager_refuses_an_unknown_reader_before_it_starts()
    {
        var o = new StagerOptions { Path = "-", Name = "risk/a", Readers = "user:no-such-user-hcd" };
        Assert.Contains(o.Validate(), p => p.Contains("unknown user 'no-such-user-hcd'"));
        Assert.DoesNotContain(new StagerOptions { Path = "-", Name = "risk/a", Readers = "user:root" }.Validate(), p => p.Contains("readers"));
    }
}
