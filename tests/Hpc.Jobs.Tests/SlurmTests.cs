using System.Diagnostics;
using System.Runtime.Versioning;

namespace Hpc.Jobs.Tests;

/// <summary>
/// prestage against a real single-machine Slurm: munged, slurmctld and slurmd from Debian's slurm-wlm and munge
/// packages, started in the foreground by the test with a private configuration and stopped afterwards.
/// <para>
/// Runs when Slurm is installed (<c>/usr/sbin/slurmctld</c> exists, as <c>.ci/run</c> installs it) and the tests run
/// as root (slurmd launches job steps). Then it must pass: a Slurm that will not start fails it with the daemons'
/// own log lines. On a machine without Slurm it returns at once, saying so on stderr.
/// </para>
/// </summary>
[CollectionDefinition(Collection, DisableParallelization = true)]
[Collection(Collection)]
public class SlurmTests
{
    /// <summary>One Slurm at a time: each test's slurmd registers the same node name on this machine.</summary>
    public const string Collection = "Slurm";

    internal static bool Available(out string why)
    {
        why = !File.Exists("/usr/sbin/slurmctld") || !File.Exists("/usr/sbin/slurmd") || !File.Exists("/usr/sbin/munged") ? "slurm-wlm and munge are not installed"
            : Environment.UserName != "root" ? "not running as root" : "";
        return why == "";
    }

    [Fact]
    [SupportedOSPlatform("linux")] // Slurm's daemons and the job's file modes
    public async Task A_slurm_job_prepares_its_node_runs_the_service_hosts_and_releases_also_when_cancelled()
    {
        if (!Available(out var why)) { Console.Error.WriteLine($"Slurm test not run: {why}"); return; }
        await using var s = new Sandbox();
        await using var slurm = await SingleNodeSlurm.StartAsync(s);
        await s.StartCacheHostAsync(configure: o => o.Password = "tier-secret-4711");
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(3_000_000));
        var pipe = Path.Combine(slurm.Directory, "agent.sock");
        var env = slurm.Environment(s);
        // The user stages with the password in a variable; the node reaches the tier with its own settings file, which
        // names a password file (as a site's client.conf names the nodes' account). The job itself carries no password.
        var passwordFile = Path.Combine(slurm.Directory, "node.password");
        File.WriteAllText(passwordFile, "tier-secret-4711\n");
        File.SetUnixFileMode(passwordFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var clientConf = Path.Combine(slurm.Directory, "client.conf");
        File.WriteAllText(clientConf, $"cache-password-file = {passwordFile}\n");
        env[Hpc.CommonData.Cache.CacheTierOptions.PasswordVariable] = "tier-secret-4711";
        env[Hpc.CommonData.Hosting.ClientConfig.FileVariable] = clientConf;

        var submit = await s.HpcdataAsync(["prestage", data, "--name", "risk/slurm", "--scheduler", "slurm", "--nodes", "1", "--hosts-per-node", "2",
            "--cache-hosts", s.HostList, "--pipe", pipe, "--work-dir", slurm.Directory, "--", "/bin/sh", "-c", "echo host $SLURM_PROCID $HPCDATA_DATASET $HPCDATA_JOB_ID password=${HPCDATA_CACHE_PASSWORD:-none}"], env);
        Assert.True(submit.Code == 0, submit.Stderr + submit.Out);
        var job = submit.Stdout.Single(l => l.Contains("submitted job")).Split(' ')[3];
        var output = await slurm.WaitForJobAsync(job, TimeSpan.FromMinutes(3));
        Assert.Contains($"dataset=risk/slurm", output);
        Assert.Contains($"host 0 risk/slurm {job} password=none", output);
        Assert.Contains($"host 1 risk/slurm {job} password=none", output);
        // Nor does Slurm keep it: not in the job's stored environment, the spool or any log.
        var kept = System.IO.Directory.EnumerateFiles(slurm.Directory, "*", SearchOption.AllDirectories)
            .Where(f => f != passwordFile && !f.EndsWith(".sock", StringComparison.Ordinal) && new FileInfo(f).Length < (16 << 20))
            .Where(f => { try { return File.ReadAllText(f).Contains("tier-secret-4711"); } catch (IOException) { return false; } catch (UnauthorizedAccessException) { return false; } });
        Assert.Empty(kept);
        Assert.Contains($"job={job} released", output);
        Assert.Empty(Sandbox.ProcessesMentioning(pipe)); // the agent nodeprep started was stopped by node release

        // Cancelled while the service hosts run: the batch shell's trap can no longer start a step, the Epilog releases.
        var second = await s.HpcdataAsync(["prestage", "risk/slurm", "--scheduler", "slurm", "--cache-hosts", s.HostList, "--pipe", pipe,
            "--work-dir", slurm.Directory, "--", "sleep", "300"], env);
        Assert.True(second.Code == 0, second.Stderr);
        var cancelled = second.Stdout.Single(l => l.Contains("submitted job")).Split(' ')[3];
        await slurm.WaitForOutputAsync(cancelled, "dataset=risk/slurm", TimeSpan.FromMinutes(2));
        Assert.Equal(0, (await slurm.RunAsync("scancel", cancelled)).Code);
        await slurm.WaitForJobAsync(cancelled, TimeSpan.FromMinutes(2));
        for (var i = 0; i < 100 && Sandbox.ProcessesMentioning(pipe).Count > 0; i++) await Task.Delay(200);
        Assert.Empty(Sandbox.ProcessesMentioning(pipe));
        Assert.Contains($"job={cancelled} released", File.ReadAllText(Path.Combine(slurm.Directory, "epilog.log")));
        // The stopped agent's copies in memory went with it.
        Assert.False(Directory.Exists(Hpc.Jobs.Commands.NodePrepCommand.DefaultDataDirectory(pipe)));
    }

    /// <summary>The three daemons in the foreground, on free ports, with state, spool, logs and sockets in one directory.</summary>
    internal sealed class SingleNodeSlurm : IAsyncDisposable
    {
        private readonly List<Process> _daemons = [];
        public string Directory { get; }
        private string Conf => Path.Combine(Directory, "slurm.conf");

        private SingleNodeSlurm(string directory) => Directory = directory;

        public Dictionary<string, string?> Environment(Sandbox s) => new() { ["SLURM_CONF"] = Conf };

        /// <param name="moreConf">Lines added to slurm.conf.</param>
        /// <param name="prepare">Writes further files into the directory (beside slurm.conf) before the daemons start.</param>
        public static async Task<SingleNodeSlurm> StartAsync(Sandbox s, string moreConf = "", Action<string>? prepare = null)
        {
            var dir = Path.Combine("/tmp", $"hcd-slurm-{System.Environment.ProcessId}-{Guid.NewGuid():N}");
            System.IO.Directory.CreateDirectory(dir);
            var slurm = new SingleNodeSlurm(dir);
            try
            {
                foreach (var d in new[] { "state", "spool", "munge" }) System.IO.Directory.CreateDirectory(Path.Combine(dir, d));
                var host = System.Net.Dns.GetHostName();
                var memory = File.ReadLines("/proc/meminfo").First(l => l.StartsWith("MemTotal")).Split(' ', StringSplitOptions.RemoveEmptyEntries)[1];
                var hpcdata = string.Join(' ', Hpc.CommonData.Hosting.ComponentLocator.Command("hpcdata"));
                File.WriteAllText(Path.Combine(dir, "epilog.sh"),
                    $"#!/bin/sh\nHPCDATA_STATE_DIR={s.StateDirectory} exec {hpcdata} noderelease --job \"$SLURM_JOB_ID\" --pipe {dir}/agent.sock >>{dir}/epilog.log 2>&1\n");
                if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(Path.Combine(dir, "epilog.sh"), (UnixFileMode)0b111_101_101);
                File.WriteAllText(slurm.Conf, $"""
                    ClusterName=hcdtest
                    SlurmctldHost={host}
                    SlurmUser=root
                    SlurmdUser=root
                    AuthType=auth/munge
                    AuthInfo=socket={dir}/munge/munge.socket
                    StateSaveLocation={dir}/state
                    SlurmdSpoolDir={dir}/spool
                    SlurmctldPidFile={dir}/slurmctld.pid
                    SlurmdPidFile={dir}/slurmd.pid
                    SlurmctldLogFile={dir}/slurmctld.log
                    SlurmdLogFile={dir}/slurmd.log
                    SlurmctldPort={FreePorts.Next()}
                    SlurmdPort={FreePorts.Next()}
                    ProctrackType=proctrack/linuxproc
                    TaskPlugin=task/none
                    SelectType=select/cons_tres
                    SelectTypeParameters=CR_Core
                    JobAcctGatherType=jobacct_gather/none
                    AccountingStorageType=accounting_storage/none
                    MpiDefault=none
                    ReturnToService=2
                    Epilog={dir}/epilog.sh
                    NodeName={host} CPUs={System.Environment.ProcessorCount} RealMemory={long.Parse(memory) / 1024 / 2} State=UNKNOWN
                    PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
                    {moreConf}

                    """);
                prepare?.Invoke(dir);
                slurm.Start("/usr/sbin/munged", "-F", "--force", "-S", $"{dir}/munge/munge.socket", "--pid-file", $"{dir}/munge/munged.pid",
                    "--log-file", $"{dir}/munge/munged.log", "--seed-file", $"{dir}/munge/munged.seed");
                for (var i = 0; i < 50 && !File.Exists($"{dir}/munge/munge.socket"); i++) await Task.Delay(100);
                slurm.Start("/usr/sbin/slurmctld", "-D", "-i", "-f", slurm.Conf);
                slurm.Start("/usr/sbin/slurmd", "-D", "-f", slurm.Conf);
                var clock = Stopwatch.StartNew();
                while (true)
                {
                    var state = await slurm.RunAsync("sinfo", "-h", "-o", "%T");
                    if (state.Code == 0 && state.Output.Trim() == "idle") return slurm;
                    if (clock.Elapsed > TimeSpan.FromSeconds(60) || slurm._daemons.Any(d => d.HasExited))
                        throw new InvalidOperationException($"Slurm did not come up (sinfo: {state.Output.Trim()}):\n{slurm.Logs()}");
                    await Task.Delay(500);
                }
            }
            catch
            {
                await slurm.DisposeAsync();
                throw;
            }
        }

        private void Start(string program, params string[] args)
        {
            var info = new ProcessStartInfo(program) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (var a in args) info.ArgumentList.Add(a);
            info.Environment["SLURM_CONF"] = Conf;
            var p = Process.Start(info)!;
            p.OutputDataReceived += (_, _) => { };
            p.ErrorDataReceived += (sender, e) => { if (e.Data is not null) lock (_daemons) File.AppendAllText(Path.Combine(Directory, "daemons.err"), e.Data + "\n"); };
            p.BeginOutputReadLine();
            p.BeginErrorReadLine();
            _daemons.Add(p);
        }

        public async Task<(int Code, string Output)> RunAsync(string program, params string[] args)
        {
            var info = new ProcessStartInfo(program) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (var a in args) info.ArgumentList.Add(a);
            info.Environment["SLURM_CONF"] = Conf;
            using var p = Process.Start(info)!;
            var stdout = p.StandardOutput.ReadToEndAsync();
            var stderr = p.StandardError.ReadToEndAsync();
            await p.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(30));
            return (p.ExitCode, await stdout + await stderr);
        }

        /// <summary>Waits until the job has left the queue and returns its output file.</summary>
        public async Task<string> WaitForJobAsync(string job, TimeSpan timeout)
        {
            var clock = Stopwatch.StartNew();
            // Gone from the queue (squeue answered, without it) and its output written; a failing squeue is not an answer.
            var output = Path.Combine(Directory, $"slurm-{job}.out");
            while (await RunAsync("squeue", "-h", "-o", "%i", "-j", job) is var q &&
                   (q.Code != 0 && !q.Output.Contains("Invalid job id") || q.Output.Split('\n').Any(l => l.Trim() == job) || !File.Exists(output)))
            {
                if (clock.Elapsed > timeout) throw new TimeoutException($"Slurm job {job} still queued or running after {timeout}:\n{Logs()}");
                await Task.Delay(500);
            }
            return File.Exists(output) ? await File.ReadAllTextAsync(output) : throw new FileNotFoundException($"no output of job {job} in {Directory} ({string.Join(", ", System.IO.Directory.GetFiles(Directory).Select(Path.GetFileName))}):\n{Logs()}");
        }

        public async Task WaitForOutputAsync(string job, string text, TimeSpan timeout)
        {
            var output = Path.Combine(Directory, $"slurm-{job}.out");
            var clock = Stopwatch.StartNew();
            while (!(File.Exists(output) && (await File.ReadAllTextAsync(output)).Contains(text)))
            {
                if (clock.Elapsed > timeout) throw new TimeoutException($"job {job} never printed '{text}':\n{(File.Exists(output) ? File.ReadAllText(output) : "")}\n{Logs()}");
                await Task.Delay(250);
            }
        }

        public string Logs() => string.Join("\n", new[] { "slurmctld.log", "slurmd.log", "daemons.err", "munge/munged.log" }
            .Select(f => Path.Combine(Directory, f)).Where(File.Exists).Select(f => $"--- {f}\n{string.Join("\n", File.ReadLines(f).TakeLast(15))}"));

        public async ValueTask DisposeAsync()
        {
            foreach (var p in Enumerable.Reverse(_daemons))
            {
                try { if (!p.HasExited) p.Kill(entireProcessTree: true); } catch (InvalidOperationException) { }
                try { await p.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(10)); } catch (TimeoutException) { }
                p.Dispose();
            }
            try { System.IO.Directory.Delete(Directory, recursive: true); } catch (IOException) { } catch (UnauthorizedAccessException) { }
        }
    }
}
