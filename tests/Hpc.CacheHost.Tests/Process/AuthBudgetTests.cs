using System.Diagnostics;
using System.Net;
using Xunit.Abstractions;

namespace Hpc.CacheHost.Tests.Process;

/// <summary>
/// Passwords checked are budgeted across connections: per client address, and per account across all addresses except
/// those the account has logged in from before. A guesser that opens a new connection per guess, from one address or a
/// thousand, gets a handful of checked guesses, then refusals that do not look at the password; the account's nodes
/// still log in. Clients come from distinct loopback addresses (127.0.x.y), which Linux routes to the host like
/// separate machines.
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
        Assert.Contains("Failed-AUTH budget spent", Host.LogOnceItSays("Failed-AUTH budget spent"));
    }

    [Fact]
    public void Guessing_one_account_from_a_thousand_addresses_gets_no_more_checked_guesses_than_the_accounts_budget_and_its_nodes_still_log_in()
    {
        var node = IPAddress.Parse("127.0.0.21");
        Assert.Equal("OK", AuthFrom(node, "node", "node-pass"));
        // 1,000 guessers, 127.0.1.1 to 127.0.4.250, each well under its own address's budget.
        var guessers = Enumerable.Range(0, 1000).Select(i => new IPAddress([127, 0, (byte)(1 + i / 250), (byte)(1 + i % 250)])).ToArray();
        var replies = new List<string>();
        var nodeLogins = new List<object?>();
        var clock = Stopwatch.StartNew();
        // 16 threads, a new connection per guess, at most 4 guesses per address and 15 s. Every 250th attempt is the
        // account's own node logging in while the guessing goes on.
        Parallel.For(0, 4000, new ParallelOptions { MaxDegreeOfParallelism = 16 }, (i, loop) =>
        {
            if (clock.Elapsed > TimeSpan.FromSeconds(15)) { loop.Stop(); return; }
            if (i % 250 == 249)
            {
                var login = AuthFrom(node, "node", "node-pass");
                lock (nodeLogins) nodeLogins.Add(login);
                return;
            }
            var reply = AuthFrom(guessers[i % guessers.Length], "node", $"guess-{i}");
            lock (replies) replies.Add(Assert.IsType<RespError>(reply).Message);
        });
        var elapsed = clock.Elapsed;
        int @checked = replies.Count(r => r.StartsWith("WRONGPASS invalid username-password pair", StringComparison.Ordinal));
        int refused = replies.Count(r => r.StartsWith(TooMany, StringComparison.Ordinal));
        int budgetLines = Host.Log.Split('\n').Count(l => l.Contains("Failed-AUTH budget spent", StringComparison.Ordinal));
        _output?.WriteLine($"{replies.Count} attempts from {guessers.Length} addresses in {elapsed.TotalSeconds:F1} s: {@checked} passwords checked ({@checked / elapsed.TotalSeconds:F1}/s), {refused} refused unchecked; {budgetLines} budget lines logged");

        Assert.Equal(replies.Count, @checked + refused);
        Assert.True(replies.Count > 1000, $"only {replies.Count} attempts were made");
        // The account's burst of 30, plus one per 10 s of refill while the guessing went on.
        Assert.InRange(@checked, 30, 30 + (int)(elapsed.TotalSeconds / 10) + 1);
        Assert.Contains(replies, r => r.StartsWith(TooMany + " (account node)", StringComparison.Ordinal));
        Assert.NotEmpty(nodeLogins);
        Assert.All(nodeLogins, login => Assert.Equal("OK", login));
        // An address the account has never been used from waits like the guessers; another account is not affected.
        Assert.StartsWith(TooMany + " (account node)", Assert.IsType<RespError>(AuthFrom(IPAddress.Parse("127.0.0.22"), "node", "node-pass")).Message);
        Assert.Equal("OK", AuthFrom(IPAddress.Parse("127.0.0.22"), "ops", "ops-pass"));
    }

    [Fact]
    public void Spent_budgets_and_repeated_failures_are_logged_once_a_minute_however_many_addresses_cause_them()
    {
        // 40 addresses each spend their own budget (12 guesses, a connection each, at a name with no account, so no
        // account's budget runs out first), and 20 connections each fail three times.
        var addresses = Enumerable.Range(0, 40).Select(i => new IPAddress([127, 0, 5, (byte)(1 + i)])).ToArray();
        var clock = Stopwatch.StartNew();
        Parallel.For(0, addresses.Length * 12, new ParallelOptions { MaxDegreeOfParallelism = 16 }, (i, loop) =>
        {
            if (clock.Elapsed > TimeSpan.FromSeconds(30)) { loop.Stop(); return; }
            Assert.IsType<RespError>(AuthFrom(addresses[i % addresses.Length], "nobody", $"guess-{i}"));
        });
        Parallel.For(0, 20, new ParallelOptions { MaxDegreeOfParallelism = 16 }, i =>
        {
            using var client = new RespTestClient(Host, new IPAddress([127, 0, 6, (byte)(1 + i)]));
            for (int attempt = 0; attempt < 3; attempt++)
                Assert.IsType<RespError>(client.Call("AUTH", "nobody", $"guess-{i}-{attempt}"));
        });
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(55), "the attack took longer than the minute the assertions below rely on");

        // The host's console logger writes from its own queue, so a line may land a moment after the reply that caused it;
        // once both kinds have appeared, a further moment lets any extra line of the same burst arrive too.
        static int Count(string[] log, string text) => log.Count(l => l.Contains(text, StringComparison.Ordinal));
        const string Spent = "Failed-AUTH budget spent", Repeated = "has given a wrong password";
        for (var tries = 0; tries < 50 && (Count(Host.Log.Split('\n'), Spent) == 0 || Count(Host.Log.Split('\n'), Repeated) == 0); tries++)
            Thread.Sleep(100);
        Thread.Sleep(300);
        var log = Host.Log.Split('\n');
        int spentLines = Count(log, Spent);
        int repeatedLines = Count(log, Repeated);
        _output?.WriteLine($"in {clock.Elapsed.TotalSeconds:F1} s: {spentLines} budget-spent lines, {repeatedLines} repeated-failure lines");
        Assert.Equal(1, spentLines);
        Assert.Equal(1, repeatedLines);
        Assert.Contains(log, l => l.Contains("Failed-AUTH budget spent for address 127.0.5.", StringComparison.Ordinal));
    }

    public void Dispose()
    {
        _host.Dispose();
        File.Delete(_usersFile);
    }
}
