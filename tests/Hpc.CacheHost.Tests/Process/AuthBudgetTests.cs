using System.Diagnostics;
using System.Net;
using Xunit.Abstractions;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// Wrong passwords are budgeted across connections: per client address, and per account for addresses that have been
/// failing. A guesser that opens a new connection per guess gets a handful of checked guesses, then refusals that do
/// not look at the password; a node that has not been guessing still logs in. Clients come from distinct loopback
/// addresses (127.0.0.x), which Linux routes to the host like separate machines.
/// </summary>
[Collection(ProcessTests.Collection)]
public sealed class AuthBudgetTests : IDisposable
{
    private readonly ITestOutputHelper? _output;

    private const string TooMany = "WRONGPASS too many failed AUTH attempts";
    private readonly string _usersFile = WriteUsers();
    private readonly CacheHostProcess _host;

    public AuthBudgetTests(ITestOutputHelper output) : this() => _output = output;

    private static string WriteUsers()
    {
        var file = Path.GetTempFileName();
        File.WriteAllText(file, "node reader node-pass\nops admin ops-pass\n");
        return file;
    }

    private AuthBudgetTests() => _host = CacheHostProcess.Start(o => o.UsersFile = _usersFile);

    private CacheHostProcess Host => _host;

    private object? AuthFrom(IPAddress from, string user, string password)
    {
        using var client = new RespTestClient(Host, from);
        return client.Call("AUTH", user, password);
    }

    [Fact]
    public void Guessing_over_a_new_connection_per_guess_is_cut_off_per_address_and_logged()
    {
        var guesser = IPAddress.Parse("127.0.0.2");
        var replies = new List<string>();
        var clock = Stopwatch.StartNew();
        // 16 threads, one connection per guess, for at most 2 s or 4,000 guesses: the attack as it was measured before.
        // The address earns a guess back every 6 s, so the right password tried next still finds the budget spent even
        // when the machine pauses the test for a few seconds in between.
        Parallel.For(0, 4000, new ParallelOptions { MaxDegreeOfParallelism = 16 }, (i, loop) =>
        {
            if (clock.Elapsed > TimeSpan.FromSeconds(2)) { loop.Stop(); return; }
            var reply = AuthFrom(guesser, "node", $"guess-{i}");
            lock (replies) replies.Add(Assert.IsType<RespError>(reply).Message);
        });
        var elapsed = clock.Elapsed;
        int @checked = replies.Count(r => r.StartsWith("WRONGPASS invalid username-password pair", StringComparison.Ordinal));
        int refused = replies.Count(r => r.StartsWith(TooMany, StringComparison.Ordinal));
        _output?.WriteLine($"{replies.Count} attempts in {elapsed.TotalSeconds:F1} s: {@checked} passwords checked ({@checked / elapsed.TotalSeconds:F1}/s), {refused} refused unchecked");

        Assert.Equal(replies.Count, @checked + refused);
        Assert.InRange(@checked, 10, 12); // the address's burst, plus what its budget refills meanwhile
        Assert.Contains("(address 127.0.0.2): try again in", replies.First(r => r.StartsWith(TooMany, StringComparison.Ordinal)));
        // Even the right password is not looked at from that address now; another address logs in at once.
        Assert.StartsWith(TooMany, Assert.IsType<RespError>(AuthFrom(guesser, "node", "node-pass")).Message);
        Assert.Equal("OK", AuthFrom(IPAddress.Parse("127.0.0.3"), "node", "node-pass"));
        Assert.Contains("Failed-AUTH budget spent", Host.Log);
    }

    [Fact]
    public void Guessing_one_account_from_many_addresses_is_bounded_by_the_accounts_budget_but_its_nodes_still_log_in()
    {
        // Nine wrong passwords from each of four addresses: under each address's budget, over the account's.
        for (int a = 10; a < 14; a++)
            for (int i = 0; i < 9; i++)
                Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(AuthFrom(IPAddress.Parse($"127.0.0.{a}"), "node", $"guess-{a}-{i}")).Message);

        // An address that has been failing gets no more checked guesses at that account...
        Assert.StartsWith("WRONGPASS", Assert.IsType<RespError>(AuthFrom(IPAddress.Parse("127.0.0.20"), "node", "one-guess")).Message);
        var refusal = Assert.IsType<RespError>(AuthFrom(IPAddress.Parse("127.0.0.20"), "node", "node-pass")).Message;
        Assert.StartsWith(TooMany + " (account node)", refusal);
        // ...but may still log in to another account, and a node that never failed logs in to this one.
        Assert.Equal("OK", AuthFrom(IPAddress.Parse("127.0.0.20"), "ops", "ops-pass"));
        Assert.Equal("OK", AuthFrom(IPAddress.Parse("127.0.0.21"), "node", "node-pass"));
    }

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
