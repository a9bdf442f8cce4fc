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
public sealed class SlurmClusterTests
{
    [Theory]
    [InlineData("mpi")]
    [InlineData("none")]
    public async Task A_slurm_job_on_three_nodes_prepares_every_node_and_its_service_hosts_read_the_local_copy(string fanout)
    {
        if (SlurmLab.Unavailable() is { } why) { Console.Error.WriteLine($"Slurm cluster test not run: {why}"); return; }
        var topology = new Topology(hosts: 1, nodes: 3, rateMbit: 1000, delayMs: 0, instance: Topology.FreeInstance(from: 40));
        try
        {
            topology.Create();
            await using var c = new Cluster();
            var host = topology.Hosts[0];
            await using var cache = ComponentProcess.Start(new CacheHostOptions { Address = host.Address, Port = 6380 }, name: "cachehost",
                launcher: Topology.Launcher(host));
            await cache.WaitReadyAsync(Cluster.Ready);
            await using var slurm = await SlurmLab.StartAsync(topology);

            var bytes = Cluster.Csvish(5 << 20, seed: fanout.Length);
            var data = Cluster.WriteFile(c.Root, "prices.csv", bytes);
            var expected = Convert.ToHexStringLower(SHA256.HashData(bytes));
            var work = Path.Combine(slurm.Directory, "jobs");
            var submit = await c.RunAsync("hpcdata", ["prestage", data, "--name", $"lab/{fanout}", "--scheduler", "slurm", "--nodes", "3",
                "--hosts-per-node", "1", "--cache-hosts", $"{host.Address}:6380", "--work-dir", work, "--fanout", fanout, "--",
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
        finally
        {
            topology.Destroy();
        }
    }
    [Fact]
    public async Task A_rank_that_never_starts_costs_the_others_the_stall_timeout_and_they_fetch_directly()
    {
        if (SlurmLab.Unavailable() is { } why) { Console.Error.WriteLine($"Slurm cluster test not run: {why}"); return; }
        var topology = new Topology(hosts: 1, nodes: 3, rateMbit: 1000, delayMs: 0, instance: Topology.FreeInstance(from: 40));
        try
        {
            topology.Create();
            await using var c = new Cluster();
            var host = topology.Hosts[0];
            await using var cache = ComponentProcess.Start(new CacheHostOptions { Address = host.Address, Port = 6380 }, name: "cachehost",
                launcher: Topology.Launcher(host));
            await cache.WaitReadyAsync(Cluster.Ready);
            await using var slurm = await SlurmLab.StartAsync(topology);
            var tier = $"{host.Address}:6380";
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
                srun --ntasks-per-node=1 /bin/sh -c 'if [ "$SLURM_PROCID" = 2 ]; then exit 0; fi; exec {hpcdata} nodeprep --fanout mpi --dataset lab/late --job $SLURM_JOB_ID --stall-timeout 5s'
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
        finally
        {
            topology.Destroy();
        }
    }
}
