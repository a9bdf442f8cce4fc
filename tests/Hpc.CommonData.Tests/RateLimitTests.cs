using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Time.Testing;

namespace Hpc.CommonData.Tests;

/// <summary>--max-rate: how rates are written, and the token bucket on a fake clock (no test here depends on timing).</summary>
public sealed class RateLimitTests
{
    [Theory]
    [InlineData("100MB", 100L << 20)]
    [InlineData("100MB/s", 100L << 20)]
    [InlineData("64 KB/s", 64L << 10)]
    [InlineData("800mbit", 100_000_000L)]
    [InlineData("800Mbit/s", 100_000_000L)]
    [InlineData("1gbit", 125_000_000L)]
    [InlineData("0", 0L)]
    public void Rates_are_sizes_per_second_or_link_rates_in_bits(string text, long bytesPerSecond)
    {
        var rate = ByteRate.Parse(text);
        Assert.Equal(bytesPerSecond, rate.BytesPerSecond);
        Assert.Equal(rate, ByteRate.Parse(rate.ToExactString()));
    }

    [Theory]
    [InlineData("fast")]
    [InlineData("-5MB")]
    [InlineData("10 mbits per hour")]
    public void A_bad_rate_is_refused_naming_the_text(string text)
    {
        Assert.False(ByteRate.TryParse(text, out _));
        Assert.Contains(text, Assert.Throws<FormatException>(() => ByteRate.Parse(text)).Message);
    }

    [Fact]
    public void The_agent_and_the_stager_take_max_rate_on_the_command_line()
    {
        var agent = ProgramContract<NodeAgentOptions>.Resolve(["--max-rate", "400mbit", "--cache-hosts", "h:1"], _ => null, []);
        Assert.Null(agent.Problem);
        Assert.Equal(ByteRate.Parse("400mbit"), agent.Options.CacheTier.MaxRate);
        var bad = ProgramContract<StagerOptions>.Resolve(["x", "--name", "a/b", "--max-rate", "lots"], _ => null, []);
        Assert.Contains("--max-rate", bad.Problem);
        var tooSlow = new CacheTierOptions { Hosts = ["h:1"], MaxRate = ByteRate.Parse("10KB") };
        Assert.Contains(tooSlow.Validate(), p => p.Contains("--max-rate", StringComparison.Ordinal));
    }

    [Fact]
    public void A_burst_passes_at_once_and_what_exceeds_it_waits_exactly_its_time()
    {
        var time = new FakeTimeProvider();
        var bucket = new TokenBucket(new ByteRate(1_000_000), burst: 100_000, time);
        Assert.Equal(TimeSpan.Zero, bucket.Reserve(100_000));
        Assert.Equal(TimeSpan.FromMilliseconds(50), bucket.Reserve(50_000));
        // The next caller queues behind the debt: its wait includes the first one's.
        Assert.Equal(TimeSpan.FromMilliseconds(100), bucket.Reserve(50_000));
        time.Advance(TimeSpan.FromMilliseconds(100));
        Assert.Equal(TimeSpan.Zero, bucket.Reserve(0));
    }

    [Fact]
    public void An_idle_spell_refills_no_more_than_the_burst()
    {
        var time = new FakeTimeProvider();
        var bucket = new TokenBucket(new ByteRate(1_000_000), burst: 100_000, time);
        time.Advance(TimeSpan.FromHours(1));
        Assert.Equal(TimeSpan.Zero, bucket.Reserve(100_000));
        Assert.Equal(TimeSpan.FromMilliseconds(400), bucket.Reserve(400_000));
    }

    [Fact]
    public void Connections_sharing_the_bucket_together_hold_the_rate()
    {
        // Eight connections each read 256 KB whenever their last wait is over, all charging one bucket; the clock jumps
        // to the next connection that may read. The elapsed time is exactly what the bucket imposed.
        var time = new FakeTimeProvider();
        var rate = new ByteRate(10 << 20);
        var bucket = new TokenBucket(rate, time: time);
        const int Connections = 8, Read = 256 << 10, PerConnection = 8 << 20;
        var readyAt = new DateTimeOffset[Connections];
        var done = new long[Connections];
        var start = time.GetUtcNow();
        for (var c = 0; ; c = Array.IndexOf(readyAt, readyAt.Where((_, i) => done[i] < PerConnection).DefaultIfEmpty(DateTimeOffset.MaxValue).Min()))
        {
            if (c < 0) break;
            if (readyAt[c] > time.GetUtcNow()) time.Advance(readyAt[c] - time.GetUtcNow());
            readyAt[c] = time.GetUtcNow() + bucket.Reserve(Read);
            done[c] += Read;
        }
        // Every connection is through once its last wait is over.
        var seconds = (readyAt.Max() - start).TotalSeconds;
        var bytes = done.Sum();
        Assert.Equal((long)Connections * PerConnection, bytes);
        // 64 MB at 10 MB/s: 6.4 s, less the initial burst (a tenth of a second's worth).
        Assert.InRange(bytes / seconds, rate.BytesPerSecond * 0.99, rate.BytesPerSecond * 1.02);
    }

    [Fact]
    public async Task Reads_through_the_stream_wait_for_the_bucket()
    {
        var time = new FakeTimeProvider();
        var bucket = new TokenBucket(new ByteRate(1 << 20), burst: 64 << 10, time);
        await using var stream = new RateLimitedStream(new MemoryStream(new byte[1 << 20], writable: false), bucket);
        var buffer = new byte[128 << 10];
        var read = stream.ReadAsync(buffer).AsTask();
        // 128 KB against a 64 KB burst at 1 MB/s: the read returns after 62.5 ms of debt, not before.
        Assert.False(read.IsCompleted);
        time.Advance(TimeSpan.FromMilliseconds(61));
        Assert.False(read.IsCompleted);
        time.Advance(TimeSpan.FromMilliseconds(2));
        Assert.Equal(128 << 10, await read.WaitAsync(TimeSpan.FromSeconds(10)));
    }

    [Fact]
    public async Task Writes_are_charged_before_they_leave_in_slices()
    {
        var time = new FakeTimeProvider();
        var bucket = new TokenBucket(new ByteRate(1 << 20), burst: 64 << 10, time);
        var sink = new MemoryStream();
        await using var stream = new RateLimitedStream(sink, bucket);
        var write = stream.WriteAsync(new byte[256 << 10]).AsTask();
        // The burst's slice went out at once; each next 64 KB slice waits 62.5 ms for its tokens.
        Assert.Equal(64 << 10, sink.Length);
        for (var slice = 2; slice <= 4; slice++)
        {
            time.Advance(TimeSpan.FromMilliseconds(62.5));
            await WaitUntil(() => sink.Length == slice * (64 << 10));
        }
        await write.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal(256 << 10, sink.Length);
    }

    private static async Task WaitUntil(Func<bool> condition)
    {
        for (var i = 0; i < 1000 && !condition(); i++) await Task.Delay(1);
        Assert.True(condition());
    }
}
