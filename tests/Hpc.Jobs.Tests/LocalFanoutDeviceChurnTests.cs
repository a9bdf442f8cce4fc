namespace Hpc.Jobs.Tests;

[CollectionDefinition(nameof(DeviceChurn), DisableParallelization = true)]
public sealed class DeviceChurnCollection;

/// <summary>
/// The local scheduler's MPI fan-out on a machine whose network devices change underneath it. Alone in its collection:
/// the devices it adds would disturb the other tests' MPI ranks, which stand in for separate nodes and use every device.
/// </summary>
[Collection(nameof(DeviceChurn))]
public sealed class LocalFanoutDeviceChurnTests
{
    [Fact]
    public async Task A_local_fanout_starts_its_ranks_while_network_devices_come_and_go_on_the_machine()
    {
        // Containers and VMs starting beside a job add and remove network devices. UCX opens each device it listed a
        // moment earlier, so without care a rank's MPI_Init fails ("init_worker No such device") and the nodes fall
        // back to direct fetch. Creating devices needs root.
        if (Environment.UserName != "root" || !File.Exists("/usr/sbin/ip") && !File.Exists("/usr/bin/ip")) return;
        await using var s = new Sandbox();
        var data = s.WriteFile("prices.bin", Sandbox.RandomBytes(2_000_000, seed: 24));
        await using var churn = DeviceChurn.Start();
        Assert.True(await churn.UnderWayAsync(TimeSpan.FromSeconds(30)), "the churn created no network device");
        for (var run = 0; run < 3; run++)
        {
            var r = await s.HpcdataAsync(["prestage", data, "--name", "risk/churn", "--nodes", "3", "--fanout", "mpi", "--job", $"job-churn-{run}",
                "--", "/bin/sh", "-c", "echo $HPCDATA_DATASET_PATH"]);
            string output = string.Join("\n", r.Stdout) + "\n" + r.Stderr;
            Assert.True(r.Code == 0, output);
            Assert.False(output.Contains("completing them by direct fetch", StringComparison.Ordinal), $"run {run} fell back to direct fetch:\n{output}");
            Assert.Equal(3, r.Stdout.Count(l => l.Contains("nodeprep") && l.Contains("dataset=risk/churn") && l.Contains("fanout=mpi ranks=3")));
        }
        Assert.True(churn.Devices > 0, "no network device was created while the ranks started");
        Assert.Empty(Sandbox.ProcessesMentioning("job-churn"));
    }
}
