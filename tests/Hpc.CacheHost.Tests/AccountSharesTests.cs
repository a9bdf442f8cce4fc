using Hpc.CacheHost.Server;
using Hpc.CommonData.Cache;

namespace Hpc.CacheHost.Tests;

/// <summary>
/// The bookkeeping behind the connection shares: an account stops at its share, writers together at theirs, an
/// administrator is never counted, and however many connections log in and close at once the counts come back to zero.
/// </summary>
public sealed class AccountSharesTests
{
    private static CacheUser User(string name, CacheRole role) => new(name, role, []);

    [Fact]
    public void An_account_stops_at_its_share_writers_together_at_theirs_and_an_administrator_is_not_counted()
    {
        var shares = new AccountShares(maxClients: 10, perAccount: 3, writersTogether: 5);
        var (alice, bob, node, ops) = (User("alice", CacheRole.Writer), User("bob", CacheRole.Writer), User("node", CacheRole.Reader), User("ops", CacheRole.Admin));

        for (var i = 0; i < 3; i++) Assert.Null(shares.TryTake(alice));
        Assert.Equal("ERR max number of clients per account reached (3 of account alice; --max-clients-per-account)", shares.TryTake(alice));
        Assert.Null(shares.TryTake(bob));
        Assert.Null(shares.TryTake(bob));
        Assert.Equal("ERR max number of clients of writer accounts reached (5 of --max-clients 10, all writers together; the rest is kept for readers and administrators)",
            shares.TryTake(bob));
        for (var i = 0; i < 3; i++) Assert.Null(shares.TryTake(node));
        Assert.NotNull(shares.TryTake(node));
        for (var i = 0; i < 100; i++) Assert.Null(shares.TryTake(ops));
        Assert.Equal(0, shares.Held("ops"));
        Assert.Equal(5, shares.Writers);

        // A refusal takes nothing: what was held is all there is to give back.
        shares.Release("alice", writer: true);
        Assert.Null(shares.TryTake(bob));
        Assert.Equal((2, 3, 5), (shares.Held("alice"), shares.Held("bob"), shares.Writers));
    }

    [Fact]
    public async Task Logins_and_closes_from_many_threads_at_once_leave_no_count_behind()
    {
        var shares = new AccountShares(maxClients: 1000, perAccount: 50, writersTogether: 80);
        var users = new[] { User("a", CacheRole.Writer), User("b", CacheRole.Writer), User("n", CacheRole.Reader) };
        var refused = 0;
        await Task.WhenAll(Enumerable.Range(0, 8).Select(t => Task.Run(() =>
        {
            for (var i = 0; i < 20_000; i++)
            {
                var user = users[(t + i) % users.Length];
                if (shares.TryTake(user) is null)
                {
                    Assert.InRange(shares.Held(user.Name), 1, 50);
                    Assert.InRange(shares.Writers, 0, 80);
                    shares.Release(user.Name, user.Role == CacheRole.Writer);
                }
                else
                {
                    Interlocked.Increment(ref refused);
                }
            }
        })));

        Assert.Equal((0, 0, 0, 0), (shares.Held("a"), shares.Held("b"), shares.Held("n"), shares.Writers));
        Assert.Equal(0, refused);
    }
}
