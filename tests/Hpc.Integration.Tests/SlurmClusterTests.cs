using System.Runtime.Versioning;
using System.Security.Cryptography;
using Hpc.Bench;
using Hpc.CommonData.Hosting;

namespace Hpc.Integration.Tests;

/// <summary>
/// A Slurm user's job on three nodes: a real slurmctld, and one slurmd per node namespace, each node with its own /tmp
/// and /dev/shm. <c>hpcdata prestage --scheduler slurm</c> stages, submits with sbatch, and the job prepares every
/// node in an srun step (the fan-out's ranks started by Slurm through PMI-2, not by mpiexec), runs a service host per
/// node reading HPCDATA_DATASET_PATH, and releases the nodes.
/// </summary>
[SupportedOSPlatform("linux")] // Slurm's daemons in network namespaces
public sealed class SlurmClusterTests
{
    [Theory]
    [InlineData("mpi")]
    [InlineData("none")]
    public async Task A_slurm_job_on_three_nodes_prepares_every_node_and_its_service_hosts_read_the_local_copy(string fanout)
    {
        await using var lab = await ThreeNodeLab.StartAsync();
        if (lab is null) return;
        var (c, slurm, tier) = (lab.Cluster, lab.Slurm, lab.Tier);
        var bytes = Cluster.Csvish(5 << 20, seed: fanout.Length);
        var data = Cluster.WriteFile(c.Root, "prices.csv", bytes);
        var expected = Convert.ToHexStringLower(SHA256.HashData(bytes));
        var work = Path.Combine(slurm.Directory, "jobs");
        var submit = await c.RunAsync("hpcdata", ["prestage", data, "--name", $"lab/{fanout}", "--scheduler", "slurm", "--nodes", "3",
            "--hosts-per-node", "1", "--cache-hosts", tier, "--work-dir", work, "--fanout", fanout, "--",
            "/bin/sh", "-c", "echo \"host $SLURMD_NODENAME $(sha256sum < \"$HPCDATA_DATASET_PATH\" | cut -c1-64)\""], slurm.Environment);
        Assert.True(submit.Code == 0, string.Join("\n", submit.Stdout) + submit.Stderr);
        var job = submit.Stdout.Single(l => l.Contains("submitted job")).Split(' ')[3];

        var output = await slurm.WaitForJobAsync(job, work, TimeSpan.FromMinutes(4));
        foreach (var node in slurm.NodeNames) Assert.True(output.Contains($"host {node} {expected}"), $"{node} read no verified copy:\n{output}\n{slurm.Logs()}");
        // Each node prepared itself under its own host name.
        var preps = output.Split('\n').Where(l => l.Contains($"dataset=lab/{fanout} ") && l.Contains(" seconds=")).ToList();
        Assert.True(slurm.NodeNames.All(n => preps.Count(l => l.StartsWith($"node={n} ", StringComparison.Ordinal)) == 1), output);
        if (fanout == "mpi") Assert.True(preps.All(l => l.Contains("fanout=mpi ranks=3")), output);
        else Assert.DoesNotContain(preps, l => l.Contains("fanout=mpi"));
        Assert.Equal(3, output.Split('\n').Count(l => l.Contains($"job={job} released")));
        Assert.True(output.Split('\n').Count(l => l.Contains("stopped the node agent node prep had started")) == 3, output);
    }

    [Fact]
    public async Task A_rank_that_never_starts_costs_the_others_the_stall_timeout_and_they_fetch_directly()
    {
        await using var lab = await ThreeNodeLab.StartAsync();
        if (lab is null) return;
        var (c, slurm, tier) = (lab.Cluster, lab.Slurm, lab.Tier);
        var bytes = Cluster.Csvish(2 << 20, seed: 11);
        var stage = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "late.csv", bytes), "--name", "lab/late", "--cache-hosts", tier]);
        Assert.True(stage.Code == 0, stage.Stderr);

        // The third task exits before hpcdata starts: a node whose rank died at launch. srun lets the others run on.
        var work = Path.Combine(slurm.Directory, "jobs");
        Directory.CreateDirectory(work);
        var hpcdata = string.Join(' ', ComponentLocator.Command("hpcdata"));
        var script = Cluster.WriteFile(work, "late.sh", System.Text.Encoding.ASCII.GetBytes($"""
            #!/bin/bash
            export HPCDATA_CACHE_HOSTS={tier}
            srun --ntasks-per-node=1 /bin/sh -c 'if [ "$SLURM_PROCID" = 2 ]; then exit 0; fi; exec {hpcdata} nodeprep --fanout mpi lab/late --job $SLURM_JOB_ID --stall-timeout 5s'
            echo "step exit $?"
            srun --ntasks-per-node=1 {hpcdata} noderelease --job $SLURM_JOB_ID --evict

            """));
        var submit = await slurm.RunAsync("sbatch", "--parsable", "--nodes=3", "--ntasks-per-node=1", $"--chdir={work}", $"--output={work}/slurm-%j.out", script);
        Assert.True(submit.Code == 0, submit.Output);
        var output = await slurm.WaitForJobAsync(submit.Output.Trim().Split(';')[0], work, TimeSpan.FromMinutes(2));

        Assert.Contains("step exit 0", output);
        var preps = output.Split('\n').Where(l => l.Contains("dataset=lab/late ") && l.Contains(" seconds=")).ToList();
        Assert.True(preps.Count == 2, output);
        Assert.All(preps, l => Assert.Contains(" source=fetched fanout=failed", l));
        Assert.Equal(2, output.Split('\n').Count(l => l.Contains("MPI did not start within 5s (--stall-timeout)")));
    }

    [Fact]
    public async Task A_users_own_script_that_names_its_dataset_starts_on_three_nodes_each_holding_the_verified_copy_and_a_dead_node_sends_the_job_back_naming_it()
    {
        await using var lab = await ThreeNodeLab.StartAsync(burstBuffer: true);
        if (lab is null) return;
        var (c, slurm, tier) = (lab.Cluster, lab.Slurm, lab.Tier);
        var bytes = Cluster.Csvish(6 << 20, seed: 17);
        var expected = Convert.ToHexStringLower(SHA256.HashData(bytes));
        var stage = await c.RunStagerAsync([Cluster.WriteFile(c.Root, "curves.csv", bytes), "--name", "lab/bb", "--cache-hosts", tier, "--readers", "all"]);
        Assert.True(stage.Code == 0, stage.Stderr);

        // Nothing in the script but the directive and the work: every node's copy is there before its first line.
        var job = await lab.SubmitAsUserAsync("#BB_LUA hpcdata lab/bb\nsrun /bin/sh -c 'echo \"host $SLURMD_NODENAME $(sha256sum < \"$HPCDATA_DATASET_PATH\" | cut -c1-64)\"'\n");
        var output = await slurm.WaitForJobAsync(job, slurm.JobsDirectory, TimeSpan.FromMinutes(4));
        foreach (var node in slurm.NodeNames) Assert.True(output.Contains($"host {node} {expected}"), $"{node} read no verified copy:\n{output}\n{slurm.Logs()}");
        // The nodes' agents exchanged it among themselves: the pre-run hook's request reached all three.
        Assert.Contains("nodes=3 ready=3 failed=0 dataset=lab/bb", File.ReadAllText(Path.Combine(slurm.Directory, "slurmctld.log")));

        // Node 3 dies (every process of its namespace): the controller still thinks it idle and allocates it; the
        // exchange finds no agent there, and the job goes back to the queue naming the node and its address, its script never run.
        Topology.Fault(lab.Node(2), "kill");
        var second = await lab.SubmitAsUserAsync("#BB_LUA hpcdata lab/bb\necho started\n");
        var clock = System.Diagnostics.Stopwatch.StartNew();
        string shown;
        while (!(shown = (await slurm.RunAsync("scontrol", "show", "job", second)).Output).Contains("Reason=Burst_buffer_pre_run_error"))
        {
            Assert.True(clock.Elapsed < TimeSpan.FromMinutes(2), $"job {second} never said a node was not ready:\n{shown}\n{slurm.Logs()}");
            await Task.Delay(300);
        }
        Assert.Matches($@"SystemComment=.*pre_run: hpcdata: 1 of 3 nodes are not ready: n3 at {System.Text.RegularExpressions.Regex.Escape(lab.Node(2).Address)}:\d+ \(no answer\)", shown);
        Assert.DoesNotContain("JobState=RUNNING", shown);
        // The site drains a node whose agent did not answer, so the requeued job is not given it again.
        var n3 = (await slurm.RunAsync("scontrol", "show", "node", "-o", "n3")).Output;
        Assert.Matches("State=[A-Z+*]*DRAIN", n3);
        Assert.Contains($"Reason=hpcdata: agent did not answer (job {second})", n3);
        await slurm.RunAsync("scancel", second);
        var never = Path.Combine(slurm.JobsDirectory, $"slurm-{second}.out");
        Assert.False(File.Exists(never) && File.ReadAllText(never).Contains("started"));
    }

    /// <summary>Three node namespaces with one slurmd each, a cache host in its own namespace, and a scratch folder.</summary>
    private sealed class ThreeNodeLab : IAsyncDisposable
    {
        private readonly Topology _topology;
        private ComponentProcess? _cache;
        public Cluster Cluster { get; } = new();
        public SlurmLab Slurm { get; private set; } = null!;
        public string Tier => $"{_topology.Hosts[0].Address}:6380";
        public Topology.Member Node(int i) => _topology.Nodes[i];

        private ThreeNodeLab(Topology topology) => _topology = topology;

        /// <summary>The lab, or null (and why, on stderr) where this machine cannot run Slurm.</summary>
        /// <param name="burstBuffer">With the burst buffer plugin and every node's agent running as a service.</param>
        public static async Task<ThreeNodeLab?> StartAsync(bool burstBuffer = false)
        {
            if (SlurmLab.Unavailable() is { } why) { Console.Error.WriteLine($"Slurm cluster test not run: {why}"); return null; }
            var lab = new ThreeNodeLab(new Topology(hosts: 1, nodes: 3, rateMbit: 1000, delayMs: 0, instance: Topology.FreeInstance(from: 40)));
            try
            {
                lab._topology.Create();
                var host = lab._topology.Hosts[0];
                lab._cache = ComponentProcess.Start(new CacheHostOptions { Address = host.Address, Port = 6380 }, name: "cachehost", launcher: Topology.Launcher(host));
                await lab._cache.WaitReadyAsync(Cluster.Ready);
                lab.Slurm = await SlurmLab.StartAsync(lab._topology, site: burstBuffer ? new SlurmLab.BurstBufferSite(lab.Tier, DrainSilentNodes: true) : null);
                return lab;
            }
            catch
            {
                await lab.DisposeAsync();
                throw;
            }
        }

        /// <summary>Submits a script as the lab's job user (Slurm refuses burst buffers to root) on all three nodes; its job id.</summary>
        public async Task<string> SubmitAsUserAsync(string body)
        {
            var script = Path.Combine(Slurm.JobsDirectory, $"job-{Guid.NewGuid():n}.sh");
            await File.WriteAllTextAsync(script, "#!/bin/sh\n" + body);
            File.SetUnixFileMode(script, (UnixFileMode)0b110_100_100);
            var submit = await Slurm.RunAsync("runuser", "-u", SlurmLab.JobUser, "--", "sbatch", "--parsable", "--nodes=3", "--ntasks-per-node=1",
                $"--chdir={Slurm.JobsDirectory}", $"--output={Slurm.JobsDirectory}/slurm-%j.out", script);
            Assert.True(submit.Code == 0, submit.Output + Slurm.Logs());
            return submit.Output.Trim().Split(';')[0];
        }

        public async ValueTask DisposeAsync()
        {
            try
            {
                if (Slurm is not null) await Slurm.DisposeAsync();
                if (_cache is not null) await _cache.DisposeAsync();
                await Cluster.DisposeAsync();
            }
            finally
            {
                _topology.Destroy();
            }
        }
    }
}
