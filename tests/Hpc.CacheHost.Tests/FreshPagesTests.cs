using Hpc.CacheHost.Storage;

namespace Hpc.CacheHost.Tests;

public class FreshPagesTests
{
    [Theory]
    [InlineData(FreshPages.MinimumBytes - 1)]
    [InlineData(FreshPages.MinimumBytes)]
    [InlineData(64 * 1024 + 24)]
    [InlineData(300_001)]
    public void Populating_a_values_pages_never_changes_bytes_already_in_them(int length)
    {
        var array = new byte[length];
        Random.Shared.NextBytes(array);
        var before = array.ToArray();

        FreshPages.Populate(array);

        Assert.Equal(before, array);
    }

    [Theory]
    [InlineData(16 * 1024 + 7)]
    [InlineData(64 * 1024 + 24)]
    [InlineData(1 << 20)]
    public void A_segment_sized_value_stored_into_fresh_pages_reads_back_byte_for_byte(int length)
    {
        var store = new CacheStore(64L << 20, new ManualTime());
        var value = new byte[length];
        new Random(length).NextBytes(value);

        Assert.Equal(SetOutcome.Stored, store.Set("segment:x"u8, value));

        Assert.True(store.TryGet("segment:x"u8, out var stored));
        Assert.NotSame(value, stored);
        Assert.Equal(value, stored);
    }
}
