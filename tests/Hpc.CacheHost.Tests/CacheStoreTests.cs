using System.Text;
using Hpc.CacheHost.Storage;

namespace Hpc.CacheHost.Tests;

public class CacheStoreTests
{
    private readonly ManualTime _time = new();

    [Fact]
    public void A_stored_value_reads_back_and_its_cost_is_key_plus_value_plus_overhead()
    {
        var store = new CacheStore(1024 * 1024, _time);

        Assert.Equal(SetOutcome.Stored, store.Set(Key("segment:1"), Value(100)));

        Assert.True(store.TryGet(Key("segment:1"), out var value));
        Assert.Equal(Value(100), value);
        Assert.Equal(CacheStore.EstimateCost(9, 100), store.UsedBytes);
        Assert.Equal(1, store.Count);
        Assert.Equal(1, store.Hits);
    }

    [Fact]
    public void A_missing_key_reads_as_absent_and_counts_a_miss()
    {
        var store = new CacheStore(1024, _time);

        Assert.False(store.TryGet(Key("nope"), out _));
        Assert.Equal(1, store.Misses);
    }

    [Fact]
    public void A_write_past_the_budget_is_refused_and_keeps_what_was_stored()
    {
        long budget = CacheStore.EstimateCost(1, 100) + CacheStore.EstimateCost(1, 50);
        var store = new CacheStore(budget, _time);
        store.Set(Key("a"), Value(100, fill: 1));
        long usedBefore = store.UsedBytes;

        Assert.Equal(SetOutcome.OutOfMemory, store.Set(Key("b"), Value(51)));
        Assert.Equal(SetOutcome.OutOfMemory, store.Set(Key("a"), Value(1000, fill: 2)));

        Assert.True(store.TryGet(Key("a"), out var kept));
        Assert.Equal(Value(100, fill: 1), kept);
        Assert.False(store.Exists(Key("b")));
        Assert.Equal(usedBefore, store.UsedBytes);
        Assert.Equal(2, store.RejectedWrites);
    }

    [Fact]
    public void A_write_that_fits_exactly_is_accepted()
    {
        var store = new CacheStore(CacheStore.EstimateCost(1, 100), _time);

        Assert.Equal(SetOutcome.Stored, store.Set(Key("a"), Value(100)));
        Assert.Equal(store.MaxBytes, store.UsedBytes);
    }

    [Fact]
    public void Overwrite_and_delete_keep_the_accounting_exact()
    {
        var store = new CacheStore(1024 * 1024, _time);

        store.Set(Key("k"), Value(1000));
        store.Set(Key("k"), Value(10));
        Assert.Equal(CacheStore.EstimateCost(1, 10), store.UsedBytes);
        Assert.Equal(1, store.Count);

        Assert.True(store.Delete(Key("k")));
        Assert.False(store.Delete(Key("k")));
        Assert.Equal(0, store.UsedBytes);
        Assert.Equal(0, store.Count);
    }

    [Fact]
    public void Concurrent_sets_overwrites_and_deletes_leave_exact_accounting()
    {
        var store = new CacheStore(long.MaxValue / 2, _time);
        const int Threads = 4;
        const int OperationsPerThread = 20_000;
        const int Keys = 16;

        Parallel.For(0, Threads, new ParallelOptions { MaxDegreeOfParallelism = Threads }, thread =>
        {
            var random = new Random(thread);
            for (int i = 0; i < OperationsPerThread; i++)
            {
                var key = Key($"k{random.Next(Keys)}");
                switch (random.Next(4))
                {
                    case 0: store.Delete(key); break;
                    case 1: store.Set(key, Value(random.Next(0, 300)), SetCondition.IfNotExists); break;
                    default: store.Set(key, Value(random.Next(0, 300))); break;
                }
            }
        });

        long expected = 0;
        int present = 0;
        for (int k = 0; k < Keys; k++)
        {
            if (store.TryGet(Key($"k{k}"), out var value))
            {
                expected += CacheStore.EstimateCost($"k{k}".Length, value.Length);
                present++;
            }
        }
        Assert.Equal(expected, store.UsedBytes);
        Assert.Equal(present, store.Count);

        store.Flush();
        Assert.Equal(0, store.UsedBytes);
        Assert.Equal(0, store.Count);
    }

    [Fact]
    public void NX_writes_only_a_missing_key()
    {
        var store = new CacheStore(1024 * 1024, _time);

        Assert.Equal(SetOutcome.Stored, store.Set(Key("k"), Value(5, fill: 1), SetCondition.IfNotExists));
        Assert.Equal(SetOutcome.ConditionNotMet, store.Set(Key("k"), Value(7, fill: 2), SetCondition.IfNotExists));

        Assert.True(store.TryGet(Key("k"), out var value));
        Assert.Equal(Value(5, fill: 1), value);
        Assert.Equal(CacheStore.EstimateCost(1, 5), store.UsedBytes);
    }

    [Fact]
    public void XX_writes_only_an_existing_key()
    {
        var store = new CacheStore(1024 * 1024, _time);

        Assert.Equal(SetOutcome.ConditionNotMet, store.Set(Key("k"), Value(5), SetCondition.IfExists));
        Assert.False(store.Exists(Key("k")));
        Assert.Equal(0, store.UsedBytes);

        store.Set(Key("k"), Value(5, fill: 1));
        Assert.Equal(SetOutcome.Stored, store.Set(Key("k"), Value(9, fill: 2), SetCondition.IfExists));
        Assert.True(store.TryGet(Key("k"), out var value));
        Assert.Equal(Value(9, fill: 2), value);
    }

    [Fact]
    public void An_expired_key_counts_as_missing_for_NX_and_XX()
    {
        var store = new CacheStore(1024 * 1024, _time);
        store.Set(Key("k"), Value(5), ttlMs: 10);
        _time.Advance(TimeSpan.FromMilliseconds(10));

        Assert.Equal(SetOutcome.ConditionNotMet, store.Set(Key("k"), Value(6), SetCondition.IfExists));
        Assert.Equal(SetOutcome.Stored, store.Set(Key("k"), Value(7), SetCondition.IfNotExists));
        Assert.Equal(CacheStore.EstimateCost(1, 7), store.UsedBytes);
        Assert.Equal(0, store.ExpiringCount);
    }

    [Fact]
    public void A_key_expires_at_its_deadline_and_releases_its_budget_on_access()
    {
        var store = new CacheStore(1024 * 1024, _time);
        store.Set(Key("k"), Value(100), ttlMs: 1500);

        _time.Advance(TimeSpan.FromMilliseconds(1499));
        Assert.True(store.Exists(Key("k")));
        Assert.Equal(1, store.GetTimeToLiveMs(Key("k")));

        _time.Advance(TimeSpan.FromMilliseconds(1));
        Assert.False(store.TryGet(Key("k"), out _));
        Assert.Equal(-2, store.GetTimeToLiveMs(Key("k")));
        Assert.Equal(0, store.UsedBytes);
        Assert.Equal(0, store.Count);
        Assert.Equal(1, store.ExpiredKeys);
    }

    [Fact]
    public void The_sweep_removes_expired_keys_nobody_reads_a_bounded_slice_at_a_time()
    {
        var store = new CacheStore(1024 * 1024, _time);
        for (int i = 0; i < 10; i++)
            store.Set(Key($"gone{i}"), Value(10), ttlMs: 100);
        store.Set(Key("stays"), Value(10));
        store.Set(Key("later"), Value(10), ttlMs: 10_000);
        _time.Advance(TimeSpan.FromSeconds(1));

        int removed = 0;
        for (int call = 0; call < 20 && store.Count > 2; call++)
            removed += store.SweepExpired(maxExamined: 3);

        Assert.Equal(10, removed);
        Assert.Equal(2, store.Count);
        Assert.Equal(1, store.ExpiringCount);
        Assert.Equal(CacheStore.EstimateCost(5, 10) * 2, store.UsedBytes);
    }

    [Fact]
    public void The_sweep_follows_deadlines_that_are_removed_and_given_again()
    {
        var store = new CacheStore(1024 * 1024, _time);
        for (int i = 0; i < 1000; i++)
            store.Set(Key($"segment{i}"), Value(10));
        store.Set(Key("lease"), Value(10), ttlMs: 100);
        store.Set(Key("persisted"), Value(10), ttlMs: 100);
        store.Set(Key("deleted"), Value(10), ttlMs: 100);
        Assert.True(store.Persist(Key("persisted")));
        Assert.True(store.Delete(Key("deleted")));
        // A sweep may forget a key that lost its deadline; one given a deadline again must still be found.
        Assert.Equal(0, store.SweepExpired(maxExamined: 100));
        Assert.True(store.SetExpiry(Key("persisted"), 100));
        store.Set(Key("deleted"), Value(10), ttlMs: 100);
        _time.Advance(TimeSpan.FromSeconds(1));

        // Only keys with a deadline are examined, so three calls of three cover them whatever the keyspace's size.
        int removed = 0;
        for (int call = 0; call < 3; call++)
            removed += store.SweepExpired(maxExamined: 3);

        Assert.Equal(3, removed);
        Assert.Equal(1000, store.Count);
        Assert.Equal(0, store.ExpiringCount);
        Assert.Equal(0, store.SweepExpired(maxExamined: 100));
    }

    [Fact]
    public void Expiry_conditions_follow_redis_semantics()
    {
        var store = new CacheStore(1024 * 1024, _time);
        store.Set(Key("k"), Value(1));

        Assert.False(store.SetExpiry(Key("k"), 5000, ExpireCondition.IfHasExpiry));
        Assert.False(store.SetExpiry(Key("k"), 5000, ExpireCondition.IfGreater));
        Assert.True(store.SetExpiry(Key("k"), 5000, ExpireCondition.IfNoExpiry));
        Assert.False(store.SetExpiry(Key("k"), 9000, ExpireCondition.IfNoExpiry));
        Assert.False(store.SetExpiry(Key("k"), 4000, ExpireCondition.IfGreater));
        Assert.True(store.SetExpiry(Key("k"), 4000, ExpireCondition.IfLess));
        Assert.Equal(4000, store.GetTimeToLiveMs(Key("k")));
        Assert.Equal(1, store.ExpiringCount);

        Assert.True(store.Persist(Key("k")));
        Assert.False(store.Persist(Key("k")));
        Assert.Equal(-1, store.GetTimeToLiveMs(Key("k")));
        Assert.Equal(0, store.ExpiringCount);

        Assert.False(store.SetExpiry(Key("missing"), 1000));
    }

    [Fact]
    public void A_non_positive_expiry_deletes_the_key_at_once()
    {
        var store = new CacheStore(1024 * 1024, _time);
        store.Set(Key("k"), Value(1));

        Assert.True(store.SetExpiry(Key("k"), 0));

        Assert.False(store.Exists(Key("k")));
        Assert.Equal(0, store.UsedBytes);
    }

    [Fact]
    public void A_huge_time_to_live_saturates_instead_of_overflowing()
    {
        var store = new CacheStore(1024 * 1024, _time);

        store.Set(Key("k"), Value(1), ttlMs: long.MaxValue);
        _time.Advance(TimeSpan.FromDays(3650));

        Assert.True(store.Exists(Key("k")));
        Assert.True(store.GetTimeToLiveMs(Key("k")) > 0);
    }

    [Fact]
    public void Flush_removes_everything_and_releases_the_budget()
    {
        var store = new CacheStore(1024 * 1024, _time);
        store.Set(Key("a"), Value(10));
        store.Set(Key("b"), Value(10), ttlMs: 1000);

        Assert.Equal(2, store.Flush());
        Assert.Equal(0, store.Count);
        Assert.Equal(0, store.ExpiringCount);
        Assert.Equal(0, store.UsedBytes);
    }

    [Fact]
    public void Keys_are_binary_and_compared_by_content()
    {
        var store = new CacheStore(1024 * 1024, _time);
        byte[] key = [0, 13, 10, 255];

        store.Set(key, Value(3));

        Assert.True(store.Exists(key.ToArray()));
        Assert.False(store.Exists([0, 13, 10]));
    }

    private static byte[] Key(string text) => Encoding.UTF8.GetBytes(text);

    private static byte[] Value(int length, byte fill = 7) => Enumerable.Repeat(fill, length).ToArray();
}

/// <summary>A clock the test moves by hand; its timestamps count milliseconds.</summary>
internal sealed class ManualTime : TimeProvider
{
    private long _timestamp = 1_000_000;

    public override long TimestampFrequency => 1000;

    public override long GetTimestamp() => Volatile.Read(ref _timestamp);

    public void Advance(TimeSpan by) => Interlocked.Add(ref _timestamp, (long)by.TotalMilliseconds);
}
