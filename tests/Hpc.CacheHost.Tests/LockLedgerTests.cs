using Hpc.CacheHost.Server;

namespace Hpc.CacheHost.Tests;

/// <summary>
/// A writer account pays back every millisecond it held a version's lock over three: short holds pass in bursts, a
/// long one keeps it from taking that lock again for a while, and what it owes is paid off with time.
/// </summary>
public sealed class LockLedgerTests
{
    private const string Key = "hcd:lock:0123";
    private readonly ManualTime _time = new();

    [Fact]
    public void Thousands_of_short_holds_never_wait()
    {
        var ledger = new LockLedger(_time);
        for (var i = 0; i < 5_000; i++)
        {
            Assert.Null(ledger.Refusal("alice", Key));
            ledger.Taken("alice", Key, 10_000);
            _time.Advance(TimeSpan.FromMilliseconds(2));
            ledger.Released("alice", Key);
            _time.Advance(TimeSpan.FromMilliseconds(1));
        }
    }

    [Fact]
    public void A_lock_held_to_its_end_is_not_taken_again_until_the_time_over_the_burst_is_paid_back_three_times_over()
    {
        var ledger = new LockLedger(_time);
        ledger.Taken("mallory", Key, 15_000);
        _time.Advance(TimeSpan.FromSeconds(16)); // it expired on the host; nobody released it
        Assert.StartsWith("NOPERM account mallory has held hcd:lock:0123 too long", ledger.Refusal("mallory", Key));
        Assert.Null(ledger.Refusal("alice", Key));
        Assert.Null(ledger.Refusal("mallory", "hcd:lock:4567"));

        // 15 s owed when it expired, paid back at a third of a second per second; 5 s may stay owed: 30 s after it expired.
        _time.Advance(TimeSpan.FromSeconds(28));
        Assert.NotNull(ledger.Refusal("mallory", Key));
        _time.Advance(TimeSpan.FromSeconds(2));
        Assert.Null(ledger.Refusal("mallory", Key));
    }

    [Fact]
    public void A_take_while_the_ledger_counts_a_hold_still_open_adds_the_time_held_so_far()
    {
        var ledger = new LockLedger(_time);
        ledger.Taken("mallory", Key, 15_000);
        _time.Advance(TimeSpan.FromSeconds(4));
        ledger.Taken("mallory", Key, 15_000); // its first hold was deleted by an administrator, or expired early
        _time.Advance(TimeSpan.FromSeconds(4));
        Assert.StartsWith("NOPERM account mallory has held hcd:lock:0123 too long", ledger.Refusal("mallory", Key)); // 8 s held, not 4
    }

    [Fact]
    public void Holding_counts_from_taking_to_releasing()
    {
        var ledger = new LockLedger(_time);
        ledger.Taken("bob", Key, 15_000);
        _time.Advance(TimeSpan.FromSeconds(4));
        ledger.Released("bob", Key);
        Assert.Null(ledger.Refusal("bob", Key)); // 4 s owed, within the burst
        ledger.Taken("bob", Key, 15_000);
        _time.Advance(TimeSpan.FromSeconds(4));
        ledger.Released("bob", Key);
        Assert.NotNull(ledger.Refusal("bob", Key)); // about 8 s owed
    }
}
