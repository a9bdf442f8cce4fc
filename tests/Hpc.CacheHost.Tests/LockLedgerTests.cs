using System.Text;
using Hpc.CacheHost.Server;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Tests;

/// <summary>
/// A writer account pays back every millisecond it held a version's lock over three: short holds pass in bursts, a
/// long one keeps it from taking that lock again for a while, and what it owes is paid off with time. While the
/// version's owner or an administrator waits for the lock, the next take is theirs.
/// </summary>
public sealed class LockLedgerTests
{
    private const string Key = "hcd:lock:0123";
    private readonly ManualTime _time = new();
    private static readonly byte[] KeyBytes = Encoding.ASCII.GetBytes(Key);
    private static readonly CacheUser Alice = new("alice", CacheRole.Writer, []), Mallory = new("mallory", CacheRole.Writer, []),
        Ops = new("ops", CacheRole.Admin, []);

    /// <summary>The host holds the version's manifest: it is of alice's dataset.</summary>
    private LockLedger LedgerOfAlicesVersion() => new(_time, _ => "alice/data");

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

    [Fact]
    public void While_the_owner_waits_for_the_lock_no_other_writer_takes_it_and_a_wait_window_after_her_last_poll_they_may_again()
    {
        var ledger = LedgerOfAlicesVersion();
        Assert.False(ledger.HeldBack(Mallory, KeyBytes));
        ledger.Polled(Mallory, KeyBytes); // another account waiting goes before no one
        Assert.False(ledger.HeldBack(Mallory, KeyBytes));

        var almost = TimeSpan.FromMilliseconds(LockLedger.WaitWindowMs - 100);
        ledger.Polled(Alice, KeyBytes);
        _time.Advance(almost);
        Assert.True(ledger.HeldBack(Mallory, KeyBytes));
        Assert.False(ledger.HeldBack(Alice, KeyBytes));
        ledger.Polled(Alice, KeyBytes);
        _time.Advance(almost);
        Assert.True(ledger.HeldBack(Mallory, KeyBytes));
        _time.Advance(TimeSpan.FromMilliseconds(200));
        Assert.False(ledger.HeldBack(Mallory, KeyBytes));
        Assert.False(ledger.HeldBack(Mallory, Encoding.ASCII.GetBytes("hcd:lock:4567")));
    }

    [Fact]
    public void An_administrator_waiting_goes_first_even_where_the_host_cannot_tell_the_owner()
    {
        var ledger = new LockLedger(_time, _ => null); // no manifest here
        ledger.Polled(Alice, KeyBytes);
        Assert.False(ledger.HeldBack(Mallory, KeyBytes));
        ledger.Polled(Ops, KeyBytes);
        Assert.True(ledger.HeldBack(Mallory, KeyBytes));
        Assert.True(ledger.HeldBack(Alice, KeyBytes));
    }

    [Fact]
    public void The_manifest_is_read_once_per_version_however_often_others_poll()
    {
        var reads = 0;
        var ledger = new LockLedger(_time, _ => { reads++; return "alice/data"; });
        for (var i = 0; i < 1_000; i++) ledger.Polled(Mallory, KeyBytes);
        ledger.Polled(Alice, KeyBytes);
        Assert.Equal(1, reads);
        Assert.True(ledger.HeldBack(Mallory, KeyBytes));
    }
}
