using Hpc.CommonData.Hosting;
using Hpc.NodeAgent;

namespace Hpc.NodeAgent.Tests;

/// <summary>The pieces that keep one local user from taking the agent from the others, each on its own.</summary>
public class LimitsTests
{
    private sealed class Holder(long stalledAfterMs) : VersionWriters.IStallable
    {
        private readonly long _since = Environment.TickCount64;
        public int Abandoned;

        public bool AbandonIfStalled(TimeSpan stall)
        {
            if (Environment.TickCount64 - _since < Math.Max(stalledAfterMs, (long)stall.TotalMilliseconds)) return false;
            Interlocked.Increment(ref Abandoned);
            return true;
        }
    }

    [Fact]
    public async Task A_writer_waiting_with_a_stall_timeout_abandons_a_holder_that_made_no_progress_and_gets_the_turn_once_it_lets_go()
    {
        var writers = new VersionWriters();
        var held = await writers.AcquireAsync("v1", default);
        var holder = new Holder(stalledAfterMs: 0);
        held.Occupy(holder);
        // The holder lets go when abandoned, as an ingest's connection does.
        _ = Task.Run(async () =>
        {
            while (Volatile.Read(ref holder.Abandoned) == 0) await Task.Delay(10);
            held.Dispose();
        });

        var clock = System.Diagnostics.Stopwatch.StartNew();
        using var next = await writers.AcquireAsync("v1", default, TimeSpan.FromMilliseconds(300)).WaitAsync(TimeSpan.FromSeconds(10));

        Assert.Equal(1, holder.Abandoned);
        Assert.InRange(clock.Elapsed.TotalSeconds, 0.25, 5);
    }

    [Fact]
    public async Task A_writer_waiting_without_a_stall_timeout_never_abandons_the_holder()
    {
        var writers = new VersionWriters();
        using var held = await writers.AcquireAsync("v1", default);
        var holder = new Holder(stalledAfterMs: 0);
        held.Occupy(holder);

        var waiting = writers.AcquireAsync("v1", default);

        await Assert.ThrowsAsync<TimeoutException>(() => waiting.WaitAsync(TimeSpan.FromMilliseconds(500)));
        Assert.Equal(0, holder.Abandoned);
        held.Dispose();
        (await waiting).Dispose();
    }

    [Fact]
    public void A_warning_kind_is_let_through_once_per_interval_and_the_next_one_carries_the_count_held_back()
    {
        var throttle = new LogThrottle(TimeSpan.FromMilliseconds(200));

        Assert.True(throttle.Allow(LogThrottle.Kind.RequestRefused, out var first));
        var held = Enumerable.Range(0, 50).Count(_ => !throttle.Allow(LogThrottle.Kind.RequestRefused, out _));
        Assert.True(throttle.Allow(LogThrottle.Kind.BadFrame, out _)); // kinds are counted apart
        Thread.Sleep(250);
        Assert.True(throttle.Allow(LogThrottle.Kind.RequestRefused, out var next));

        Assert.Equal((0, 50, 50), (first, held, next));
    }

    [LinuxFact]
    public void Each_user_has_its_own_share_and_root_and_the_agents_user_are_not_counted()
    {
        var limits = new UserLimits(new NodeAgentOptions { MaxConnections = 8, MaxIngestsPerUser = 1 }, agentUid: 500);

        Assert.All(Enumerable.Range(0, 2), _ => Assert.Null(limits.TryEnter(1001, UserLimits.Kind.Connection)));
        var refused = limits.TryEnter(1001, UserLimits.Kind.Connection);
        Assert.Null(limits.TryEnter(1002, UserLimits.Kind.Connection));
        Assert.All(Enumerable.Range(0, 20), _ => Assert.Null(limits.TryEnter(0, UserLimits.Kind.Connection)));
        Assert.Null(limits.TryEnter(500, UserLimits.Kind.Ingest));
        Assert.Null(limits.TryEnter(500, UserLimits.Kind.Ingest));
        limits.Leave(1001, UserLimits.Kind.Connection);
        Assert.Null(limits.TryEnter(1001, UserLimits.Kind.Connection));

        Assert.NotNull(refused);
        Assert.Equal(ErrorCode.Limit, refused.Code);
        Assert.Contains("--max-connections-per-user 2", refused.Message); // a quarter of --max-connections by default
        Assert.Contains("uid 1001", refused.Message);
    }

    [LinuxFact]
    public void However_many_users_take_all_they_may_a_user_who_comes_later_still_gets_connections()
    {
        var limits = new UserLimits(new NodeAgentOptions { MaxConnections = 4096 }, agentUid: 500);
        int Flood(uint uid) { var n = 0; while (limits.TryEnter(uid, UserLimits.Kind.Connection) is null) n++; return n; }

        // Four users each take every connection they may: the quarter each had used to fill the node.
        var taken = Enumerable.Range(0, 4).Select(u => Flood(1001 + (uint)u)).ToArray();
        var fifth = limits.TryEnter(1004, UserLimits.Kind.Connection)!;
        var latecomers = Enumerable.Range(0, 40).Select(u => Flood(2001 + (uint)u)).ToArray();

        // The fourth stops where the last eighth (512) begins; thirty-two users arriving later get 16 each from it.
        Assert.Equal([1024, 1024, 1024, 512], taken);
        Assert.Contains("the last 512 of --max-connections 4096 are kept for users holding fewer than 16", fifth.Message);
        Assert.Equal(Enumerable.Repeat(16, 32).Concat(Enumerable.Repeat(0, 8)), latecomers);

        // With a higher per-user limit the share binds: the second user may take 100 / (2 + 1), not 50; with four users
        // holding connections, each is held to 100 / (4 + 1).
        var roomy = new UserLimits(new NodeAgentOptions { MaxConnections = 100, MaxConnectionsPerUser = 50 }, agentUid: 500);
        int FloodRoomy(uint uid) { var n = 0; while (roomy.TryEnter(uid, UserLimits.Kind.Connection) is null) n++; return n; }
        Assert.Equal([50, 33, 5, 1], Enumerable.Range(0, 4).Select(u => FloodRoomy(1001 + (uint)u)));
        Assert.Contains("its share while 4 users hold connections", roomy.TryEnter(1002, UserLimits.Kind.Connection)!.Message);
    }

    [Fact]
    public void A_per_user_connection_limit_that_lets_one_user_take_every_connection_is_refused_at_start()
    {
        var options = new NodeAgentOptions { MaxConnections = 100, MaxConnectionsPerUser = 100 };

        var problem = Assert.Single(options.Validate(), p => p.Contains("--max-connections-per-user"));

        Assert.Contains("below --max-connections (100)", problem);
        Assert.DoesNotContain(new NodeAgentOptions { MaxConnections = 100, MaxConnectionsPerUser = 99 }.Validate(), p => p.Contains("--max-connections-per-user"));
    }
}
