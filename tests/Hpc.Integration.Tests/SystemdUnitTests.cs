using System.Diagnostics;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Tests;

namespace Hpc.Integration.Tests;

/// <summary>
/// deploy/systemd/hpcdata-agent.service, unchanged, under a real systemd (a Debian container booted with
/// systemd-nspawn): <c>systemctl start</c> returns once the agent serves (<c>Type=notify</c>), the cache password
/// reaches it only as a credential (<c>LoadCredential</c>), a worker of another user reads the dataset through it, and
/// <c>systemctl stop</c> mid-fetch ends it cleanly with what it verified kept for the next start to resume.
/// </summary>
[System.Runtime.Versioning.SupportedOSPlatform("linux")]
public sealed class SystemdUnitTests(Xunit.Abstractions.ITestOutputHelper output)
{
    private const int ReaderUid = 4242;
    private static readonly TimeSpan Command = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task The_agent_unit_is_ready_once_serving_logs_in_with_its_credential_and_resumes_a_fetch_after_a_stop()
    {
        if (await SystemdMachine.UnavailableAsync() is { } why) { Console.Error.WriteLine($"systemd unit test not run: {why}"); return; }
        await using var c = new Cluster();
        var users = Cluster.WriteFile(c.Root, "users", "node reader node-pass\nops admin ops-pass\n"u8.ToArray());
        await c.StartCacheHostAsync(o => o.UsersFile = users);
        const int size = 8 << 20;
        var bytes = Cluster.RandomBytes(size, seed: 29);
        var staged = await c.StageAsync(Cluster.WriteFile(c.Root, "prices.bin", bytes), "site/prices", "--readers", $"user:{ReaderUid}",
            "--cache-user", "ops", "--cache-password-file", Cluster.WriteFile(c.Root, "ops-pass", "ops-pass"u8.ToArray()));
        // 256 KB/s: the fetch lasts about 30 s, long enough to stop the unit in the middle of it.
        await using var slowLink = new ThrottledRelay(c.Hosts[0], 256 << 10);

        var site = Site.Prepare(c.Root, "hpcdata-agent");
        File.Copy(Path.Combine(Cluster.RepositoryRoot, "deploy", "config", "agent.env"), Path.Combine(site.Etc, "agent.env"));
        File.WriteAllText(Path.Combine(site.Etc, "agent.json"), JsonSerializer.Serialize(new
        {
            Agent = new { Pipe = "/run/hpcdata/agent", DataDirectory = "/dev/shm/hpcdata", Budget = "1GB",
                CacheTier = new { Hosts = new[] { slowLink.Address }, Replicas = 1, User = "node" } },
        }));
        // The secret is a root-only file on the host; only systemd's copy of it (%d/cache-password) is the agent's.
        site.Secret("secrets/agent-cache-password", "node-pass");

        await using var machine = await site.BootAsync();
        var dotnetRoot = site.DotnetRoot;
        Assert.Equal(0, (await machine.RunAsync(["useradd", "-u", ReaderUid.ToString(), "-m", "reader"], Command)).Code);
        var env = new Dictionary<string, string> { ["DOTNET_ROOT"] = dotnetRoot, [AgentClient.PipeVariable] = "/run/hpcdata/agent" };

        // Type=notify: start returns once the agent said READY=1, and READY=1 comes once the pipe serves.
        var start = await machine.RunAsync(["systemctl", "start", "hpcdata-agent"], Command);
        Assert.True(start.Code == 0, $"{start}\n{await JournalAsync(machine)}");
        var status = await machine.RunAsync(["/opt/hpcdata/hpcdata", "status"], Command, env);
        Assert.True(status.Code == 0, $"status right after start: {status}\n{await JournalAsync(machine)}");
        Assert.Contains("StatusText=serving", (await machine.RunAsync(["systemctl", "show", "hpcdata-agent", "-p", "StatusText"], Command)).Output);
        // The password is in no file or variable the unit names, only in the credential systemd made for it.
        Assert.DoesNotContain("node-pass", File.ReadAllText(Path.Combine(site.Etc, "agent.env")) + File.ReadAllText(Path.Combine(site.Etc, "agent.json")));
        Assert.Equal("node-pass", File.ReadAllText(machine.HostPath("/run/credentials/hpcdata-agent.service/cache-password")));

        // A node prep starts the fetch; the unit is stopped in the middle of it.
        using var prep = machine.Start(["/opt/hpcdata/hpcdata", "nodeprep", "site/prices", "--job", "j1", "--cache-hosts", slowLink.Address], env);
        var partly = await WaitForProgressAsync(machine, staged.Version, staged.Segments);
        var stopping = Stopwatch.StartNew();
        var stop = await machine.RunAsync(["systemctl", "stop", "hpcdata-agent"], Command);
        Assert.True(stop.Code == 0, stop.ToString());
        var stopped = stopping.Elapsed;
        Assert.True(stopped < TimeSpan.FromSeconds(25), $"the unit took {stopped.TotalSeconds:0} s to stop");
        var result = (await machine.RunAsync(["systemctl", "show", "hpcdata-agent", "-p", "Result", "-p", "ExecMainStatus"], Command)).Output;
        Assert.True(result.Contains("Result=success") && result.Contains("ExecMainStatus=0"), $"{result}\n{await JournalAsync(machine)}");
        try { prep.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }

        Assert.Equal(0, (await machine.RunAsync(["systemctl", "start", "hpcdata-agent"], Command)).Code);
        await using (var agent = await AgentClient.ConnectAsync(machine.HostPath("/run/hpcdata/agent"), TimeSpan.FromSeconds(10)))
        {
            var kept = (await agent.StatusAsync()).Copies.Single(x => x.Version == staged.Version);
            Assert.Equal("partial", kept.State);
            Assert.True(kept.SegmentsDone >= partly, $"verified before the stop: {partly}, kept: {kept.SegmentsDone}");
        }
        var again = await machine.RunAsync(["/opt/hpcdata/hpcdata", "nodeprep", "site/prices", "--job", "j2", "--cache-hosts", slowLink.Address],
            TimeSpan.FromMinutes(2), env);
        Assert.True(again.Code == 0, $"{again}\n{await JournalAsync(machine)}");
        Assert.Matches(@"source=resumed resumed-bytes=[1-9]\d* ", again.Output);
        output.WriteLine($"stopped after {partly} of {staged.Segments} segments in {stopped.TotalSeconds:0.0} s; after the restart: {again.Output.Trim()}");

        // The reader, another user of the node, maps the copy the service fetched.
        var worker = await machine.RunAsync(["setpriv", $"--reuid={ReaderUid}", $"--regid={ReaderUid}", "--clear-groups", "--",
            "/opt/hpcdata/hpcdata", "worker", "site/prices", "--mode", "map", "--verify", "--reopens", "0"], Command, env);
        Assert.True(worker.Code == 0, worker.ToString());
        var seen = WorkerProbe.ReadResult(worker.Output.Trim().Split('\n').Last())!;
        Assert.True(seen.Verified);
        Assert.Equal((staged.Version, (long)size, "map"), (seen.Version, seen.Bytes, seen.Mode));
    }

    /// <summary>Segments the agent has verified once it is part-way (a tenth or more, not all), read from its status.</summary>
    private static async Task<int> WaitForProgressAsync(SystemdMachine machine, string version, int segments)
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(60);
        while (DateTime.UtcNow < deadline)
        {
            try
            {
                await using var agent = await AgentClient.ConnectAsync(machine.HostPath("/run/hpcdata/agent"), TimeSpan.FromSeconds(5));
                if ((await agent.StatusAsync()).Copies.FirstOrDefault(x => x.Version == version) is { } copy && copy.SegmentsDone * 10 >= segments)
                {
                    Assert.True(copy.SegmentsDone < segments, "the fetch ended before the unit could be stopped in the middle of it");
                    return copy.SegmentsDone;
                }
            }
            catch (Exception e) when (e is CommonDataException or TimeoutException or IOException) { }
            await Task.Delay(200);
        }
        Assert.Fail($"the agent did not fetch a tenth of the dataset within 60 s\n{await JournalAsync(machine)}");
        return 0;
    }

    [Fact]
    public async Task The_cache_host_unit_is_ready_once_listening_serves_TLS_with_its_key_from_credentials_reloads_its_users_file_and_stops_cleanly()
    {
        if (await SystemdMachine.UnavailableAsync() is { } why) { Console.Error.WriteLine($"systemd unit test not run: {why}"); return; }
        await using var c = new Cluster();
        var site = Site.Prepare(c.Root, "hpcdata-cache");
        var tls = Directory.CreateDirectory(Path.Combine(site.Etc, "tls")).FullName;
        var init = await c.RunAsync("hpcdata", ["tls-init", "--out", tls, "--hosts", "127.0.0.1,localhost"]);
        Assert.True(init.Code == 0, init.Stderr);
        File.SetUnixFileMode(Path.Combine(tls, "host.key"), UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var usersFile = Path.Combine(site.Etc, "cache-users");
        File.WriteAllText(usersFile, "ops admin ops-pass\nnode reader node-pass\n");
        File.Copy(Path.Combine(Cluster.RepositoryRoot, "deploy", "config", "cache.env"), Path.Combine(site.Etc, "cache.env"));
        var port = FreePorts.Next();
        File.WriteAllText(Path.Combine(site.Etc, "cache.json"), JsonSerializer.Serialize(new
        {
            CacheHost = new { Address = "127.0.0.1", Port = port, MaxMemoryBytes = "256MB" },
        }));

        await using var machine = await site.BootAsync();
        // As docs/deploy.md installs it: root:hpcdata 0640 (the group exists once the container has booted).
        var owned = await machine.RunAsync(["sh", "-c", "chown root:hpcdata /etc/hpcdata/cache-users && chmod 0640 /etc/hpcdata/cache-users"], Command);
        Assert.True(owned.Code == 0, owned.ToString());
        var start = await machine.RunAsync(["systemctl", "start", "hpcdata-cache"], Command);
        Assert.True(start.Code == 0, $"{start}\n{await JournalAsync(machine, "hpcdata-cache")}");
        // Right after start returns: TLS with the site CA, and the accounts of the users file systemd handed over.
        var ca = Path.Combine(tls, "ca.pem");
        string[] Tier(string user, string password) =>
            ["--cache-hosts", $"127.0.0.1:{port}", "--cache-tls", "--cache-ca", ca, "--cache-user", user, "--cache-password-file", Cluster.WriteFile(c.Root, $"{user}-{password}", System.Text.Encoding.UTF8.GetBytes(password))];
        var staged = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "d.bin", Cluster.RandomBytes(1 << 20, seed: 5)), "--name", "site/tls", .. Tier("ops", "ops-pass")]);
        Assert.True(staged.Code == 0, $"{staged.Stderr}\n{await JournalAsync(machine, "hpcdata-cache")}");
        var list = await c.RunAsync("hpcdata", ["list", .. Tier("node", "node-pass")]);
        Assert.True(list.Code == 0, list.Stderr);
        Assert.Contains(list.Stdout, l => l.Contains("site/tls"));
        var wrong = await c.RunAsync("hpcdata", ["list", .. Tier("node", "guess")]);
        Assert.NotEqual(0, wrong.Code);
        Assert.Contains("WRONGPASS", wrong.Stderr);
        Assert.Contains("StatusText=serving", (await machine.RunAsync(["systemctl", "show", "hpcdata-cache", "-p", "StatusText"], Command)).Output);
        // The private key is readable by this service alone, in its credentials directory.
        Assert.True(File.Exists(machine.HostPath("/run/credentials/hpcdata-cache.service/tls-key")));

        // An account added to the users file logs in after `systemctl reload`, with the data still there (no restart);
        // the account removed from it no longer does.
        var late = await c.RunAsync("hpcdata", ["list", .. Tier("late", "late-pass")]);
        Assert.Contains("WRONGPASS", late.Stderr);
        File.WriteAllText(usersFile, "ops admin ops-pass\nlate reader late-pass\n");
        var reload = await machine.RunAsync(["systemctl", "reload", "hpcdata-cache"], Command);
        Assert.True(reload.Code == 0, $"{reload}\n{await JournalAsync(machine, "hpcdata-cache")}");
        for (var tries = 0; tries < 50 && (late = await c.RunAsync("hpcdata", ["list", .. Tier("late", "late-pass")])).Code != 0; tries++)
            await Task.Delay(200);
        Assert.True(late.Code == 0, $"{late.Stderr}\n{await JournalAsync(machine, "hpcdata-cache")}");
        Assert.Contains(late.Stdout, l => l.Contains("site/tls"));
        Assert.Contains("WRONGPASS", (await c.RunAsync("hpcdata", ["list", .. Tier("node", "node-pass")])).Stderr);
        Assert.Contains("accounts loaded again: 2 in force (1 added, 1 removed, 0 changed)", await JournalAsync(machine, "hpcdata-cache"));

        var stop = await machine.RunAsync(["systemctl", "stop", "hpcdata-cache"], Command);
        Assert.True(stop.Code == 0, stop.ToString());
        var result = (await machine.RunAsync(["systemctl", "show", "hpcdata-cache", "-p", "Result", "-p", "ExecMainStatus"], Command)).Output;
        Assert.True(result.Contains("Result=success") && result.Contains("ExecMainStatus=0"), $"{result}\n{await JournalAsync(machine, "hpcdata-cache")}");
    }

    private static async Task<string> JournalAsync(SystemdMachine machine, string unit = "hpcdata-agent") =>
        (await machine.RunAsync(["journalctl", "-u", unit, "--no-pager", "-n", "40"], Command)).Output;

    /// <summary>
    /// What a site installs for one unit, as docs/deploy.md says: /etc/hpcdata (settings, secrets), the tool as
    /// /opt/hpcdata/hpcdata (this build's, which finds the daemons in the build's output), the service user, the unit
    /// file from deploy/systemd unchanged, and one site drop-in saying where this machine's .NET runtime is (the
    /// container has none of its own).
    /// </summary>
    private sealed record Site(string Root, string Unit, string Etc, string Opt, string DotnetRoot)
    {
        public static Site Prepare(string root, string unit)
        {
            var etc = Directory.CreateDirectory(Path.Combine(root, "etc-hpcdata")).FullName;
            var opt = Directory.CreateDirectory(Path.Combine(root, "opt-hpcdata")).FullName;
            var configuration = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd('/')).Name;
            File.CreateSymbolicLink(Path.Combine(opt, "hpcdata"), $"{Build}/bin/Hpc.Jobs/{configuration}/hpcdata");
            File.WriteAllText(Path.Combine(root, "sysusers.conf"), "u hpcdata - \"HPC Common Data\"\n");
            // The runtime running this test: <root>/shared/Microsoft.NETCore.App/<version>/.
            var dotnetRoot = Path.GetFullPath(Path.Combine(System.Runtime.InteropServices.RuntimeEnvironment.GetRuntimeDirectory(), "..", "..", "..")).TrimEnd('/');
            var dropIn = Directory.CreateDirectory(Path.Combine(root, unit + ".service.d")).FullName;
            File.WriteAllText(Path.Combine(dropIn, "runtime.conf"), $"[Service]\nEnvironment=DOTNET_ROOT={dotnetRoot}\n");
            return new Site(root, unit, etc, opt, dotnetRoot);
        }

        /// <summary>A root-only file under /etc/hpcdata: systemd hands it to the unit as a credential.</summary>
        public void Secret(string relative, string content)
        {
            var path = Path.Combine(Etc, relative);
            Directory.CreateDirectory(Path.GetDirectoryName(path)!);
            File.WriteAllText(path, content);
            File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        }

        /// <summary>
        /// Where the build's output is inside the container: under /opt, since the cache host's unit gives it a private
        /// /tmp and hides /home, where a clone of the repository may be.
        /// </summary>
        private const string Build = "/opt/hpcdata-build/artifacts";

        public Task<SystemdMachine> BootAsync()
        {
            var artifacts = Path.Combine(Cluster.RepositoryRoot, "artifacts");
            return SystemdMachine.BootAsync([
                (DotnetRoot, DotnetRoot, true), (artifacts, Build, true), (Opt, "/opt/hpcdata", true), (Etc, "/etc/hpcdata", false),
                (Path.Combine(Root, "sysusers.conf"), "/etc/sysusers.d/hpcdata.conf", true),
                (Path.Combine(Cluster.RepositoryRoot, "deploy", "systemd", Unit + ".service"), $"/etc/systemd/system/{Unit}.service", true),
                (Path.Combine(Root, Unit + ".service.d"), $"/etc/systemd/system/{Unit}.service.d", true),
            ], TimeSpan.FromMinutes(2));
        }
    }
}
