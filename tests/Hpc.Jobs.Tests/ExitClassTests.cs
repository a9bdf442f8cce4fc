using System.Net;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// A failure exits with its own class (docs/jobs.md, "Exit codes (every verb)"), never with one that sends a prolog the
/// wrong way: a refused password is denied (fail the job), not unreachable (requeue, for ever); a login refused by the
/// host's rate limit is temporary, and says so; a missing dataset is not found for every verb.
/// </summary>
public class ExitClassTests
{
    private static Dictionary<string, string?> Node(string pipe) => new() { ["HPCDATA_AGENT_PIPE"] = pipe, ["HPCDATA_JOB_ID"] = "job-1" };

    private static string PasswordFile(Sandbox s, string password)
    {
        var path = s.WriteFile("tier.password", Encoding.UTF8.GetBytes(password + "\n"));
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        return path;
    }

    [Fact]
    public async Task Node_prep_whose_agent_the_tier_refuses_for_a_wrong_password_exits_denied_not_unreachable()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret");
        var pipe = s.NewPipe();

        var prep = await s.HpcdataAsync(["nodeprep", "risk/any", "--cache-hosts", s.HostList, "--cache-password-file", PasswordFile(s, "wrong"),
            "--data-dir", Path.Combine(s.Root, "node")], Node(pipe));

        Assert.True(prep.Code == ExitCodes.Denied, $"exit {prep.Code}: {prep.Stderr}");
        Assert.Contains("WRONGPASS", prep.Stderr);
    }

    [Fact]
    public async Task Node_prep_whose_data_directory_is_a_file_exits_cannot_create_and_shows_only_this_starts_log()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var pipe = s.NewPipe();
        // An earlier agent on the same pipe left its own last words in the log this start appends to.
        Directory.CreateDirectory(s.StateDirectory);
        File.WriteAllText(Path.Combine(s.StateDirectory, pipe + ".log"), "an earlier agent's last line\n");
        var file = s.WriteFile("not-a-directory", [1, 2, 3]);

        var prep = await s.HpcdataAsync(["nodeprep", "risk/any", "--cache-hosts", s.HostList, "--data-dir", file], Node(pipe));

        Assert.True(prep.Code == ExitCodes.NoSpace, $"exit {prep.Code}: {prep.Stderr}");
        Assert.Contains("--data-dir", prep.Stderr);
        Assert.DoesNotContain("an earlier agent's last line", prep.Stderr);
    }

    [Fact]
    public void A_login_refused_unchecked_by_the_rate_limit_is_a_limit_not_a_wrong_password()
    {
        var limited = new RespErrorException("h:6380", $"WRONGPASS too many failed AUTH attempts (address 10.0.0.1): try again in 5 s; {RespErrorException.Unchecked}");
        Assert.Equal(ErrorCode.Limit, limited.Code);
        Assert.Contains("rate-limited", limited.Message);
        Assert.DoesNotContain("check the password", limited.Message);

        var wrong = new RespErrorException("h:6380", "WRONGPASS invalid username-password pair or user is disabled.");
        Assert.Equal(ErrorCode.AccessDenied, wrong.Code);
        Assert.Contains("check the password", wrong.Message);
    }

    [Fact]
    public async Task A_verb_whose_login_the_hosts_rate_limit_refused_exits_temporary_and_says_it_was_rate_limited()
    {
        await using var s = new Sandbox();
        var host = await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret");
        // A guesser on this address spends its budget of failed logins (ten in a row), a connection per guess, and keeps
        // spending what refills while the verb runs: the verb's right password is then refused without a look.
        var endpoint = IPEndPoint.Parse(host.Replace("localhost", "127.0.0.1"));
        using var stop = new CancellationTokenSource();
        var spent = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var guessing = Task.Run(async () =>
        {
            for (var i = 0; !stop.IsCancellationRequested; i++)
            {
                try
                {
                    using var guess = new TcpClient();
                    await guess.ConnectAsync(endpoint);
                    var stream = guess.GetStream();
                    await stream.WriteAsync("AUTH guess\r\n"u8.ToArray());
                    _ = await stream.ReadAsync(new byte[512]);
                }
                catch (Exception e) when (e is IOException or SocketException) { } // a refused guess is still a guess
                if (i < 12) continue;
                spent.TrySetResult();
                await Task.Delay(50);
            }
        });
        await spent.Task.WaitAsync(TimeSpan.FromSeconds(60));

        // The limit is per address: the verb logs in from the guesses' own (the sandbox gives each program one of its own).
        var list = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList, "--cache-password-file", PasswordFile(s, "tier-secret"), "--cache-source-address", "127.0.0.1"]);
        stop.Cancel();
        await guessing;

        Assert.True(list.Code == ExitCodes.TryLater, $"exit {list.Code}: {list.Stderr}");
        Assert.Contains("rate-limited", list.Stderr);
        Assert.DoesNotContain("check the password", list.Stderr);
    }

    [Fact]
    public async Task Status_of_the_cache_tier_with_a_wrong_password_exits_denied_and_names_the_host_once()
    {
        await using var s = new Sandbox();
        var host = await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret");

        var status = await s.HpcdataAsync(["status", "--cache-tier", "--cache-hosts", s.HostList, "--cache-password-file", PasswordFile(s, "wrong")]);

        Assert.True(status.Code == ExitCodes.Denied, $"exit {status.Code}: {status.Stderr}");
        var line = Assert.Single(status.Stderr.Split('\n'), l => l.Contains("WRONGPASS"));
        Assert.Single(System.Text.RegularExpressions.Regex.Matches(line, System.Text.RegularExpressions.Regex.Escape(host)));
    }

    [Fact]
    public async Task Remove_of_a_dataset_the_tier_does_not_have_exits_not_found_as_list_and_get_do()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();

        var remove = await s.HpcdataAsync(["remove", "risk/never-staged", "--cache-hosts", s.HostList]);
        var list = await s.HpcdataAsync(["list", "risk/never-staged", "--cache-hosts", s.HostList]);

        Assert.Equal(ExitCodes.NotFound, list.Code);
        Assert.True(remove.Code == ExitCodes.NotFound, $"exit {remove.Code}: {remove.Stderr}");
        Assert.Contains("risk/never-staged", remove.Stderr);
    }

    [Fact]
    public async Task Remove_of_a_whole_version_id_no_host_holds_exits_not_found_but_a_jobs_end_step_after_its_removal_is_done()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(100_000)), "risk/ids");
        var never = new string('0', staged.Version.Length);

        var missing = await s.HpcdataAsync(["remove", $"risk/ids@{never}", "--cache-hosts", s.HostList]);
        var removed = await s.HpcdataAsync(["remove", $"risk/ids@{staged.Version}", "--cache-hosts", s.HostList]);
        var again = await s.HpcdataAsync(["remove", $"risk/ids@{staged.Version}", "--cache-hosts", s.HostList]);
        var endStep = await s.HpcdataAsync(["remove", $"risk/ids@{staged.Version}", "--job", "4242", "--cache-hosts", s.HostList]);

        Assert.True(missing.Code == ExitCodes.NotFound, $"exit {missing.Code}: {missing.Stderr}");
        Assert.Contains(never, missing.Stderr);
        Assert.True(removed.Code == 0, removed.Stderr);
        Assert.True(again.Code == ExitCodes.NotFound, $"exit {again.Code}: {again.Stderr}");
        Assert.True(endStep.Code == 0, $"exit {endStep.Code}: {endStep.Stderr}");
        Assert.Contains("already removed", endStep.Stderr);
    }

    [Fact]
    public async Task A_prometheus_port_already_in_use_is_named_and_exits_cannot_create()
    {
        await using var s = new Sandbox();
        using var taken = new TcpListener(IPAddress.Loopback, 0);
        taken.Start();
        var port = ((IPEndPoint)taken.LocalEndpoint).Port;

        var stage = await s.HpcdataAsync(["stage", s.WriteFile("d.bin", [1, 2, 3]), "--name", "risk/metrics", "--cache-hosts", "127.0.0.1:1",
            "--prometheus", $"127.0.0.1:{port}"]);

        Assert.True(stage.Code == ExitCodes.NoSpace, $"exit {stage.Code}: {stage.Stderr}");
        Assert.Contains($"port {port}", stage.Stderr);
        Assert.Contains("in use", stage.Stderr);
    }

    /// <summary>docs/jobs.md's table is the one place the codes are written down: every class there, and each as ExitCodes has it.</summary>
    [Fact]
    public void The_documented_exit_code_table_is_the_one_the_programs_use()
    {
        var doc = File.ReadAllLines(Path.Combine(ToolInstallTests.RepositoryRoot(), "docs", "jobs.md"));
        var rows = doc.SkipWhile(l => !l.StartsWith("### Exit codes", StringComparison.Ordinal)).SkipWhile(l => !l.StartsWith("| code", StringComparison.Ordinal))
            .Skip(2).TakeWhile(l => l.StartsWith('|'))
            .Select(l => int.Parse(l.Split('|', StringSplitOptions.TrimEntries)[1], System.Globalization.CultureInfo.InvariantCulture)).ToList();
        var declared = typeof(ExitCodes).GetFields().Where(f => f.IsLiteral).Select(f => (int)f.GetRawConstantValue()!).Order().ToList();
        Assert.Equal(declared, rows);
        // Each kind of failure has its row.
        foreach (var kind in Enum.GetValues<ErrorCode>()) Assert.Contains(ExitCodes.For(kind), rows);
    }
}
