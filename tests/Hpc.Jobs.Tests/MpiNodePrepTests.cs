using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;

namespace Hpc.Jobs.Tests;

/// <summary>
/// <c>hpcdata nodeprep --fanout mpi</c> under the real launchers, three ranks on this machine standing in for three
/// nodes: each rank starts its own agent (<c>{rank}</c> in the pipe and data directory), the ranks share the fetching
/// and exchange the rest, and every node ends with the verified version pinned for the job.
/// </summary>
public sealed class MpiNodePrepTests
{
    public static TheoryData<string> Launchers => ["hydra", "openmpi"];

    private static string[] Launcher(string name) => name == "hydra"
        ? ["mpiexec.hydra", "-n", "3"]
        : ["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-n", "3"];


    [Theory]
    [MemberData(nameof(Launchers))]
    public async Task Three_ranks_prepare_three_nodes_and_the_cache_tier_sends_the_data_about_once(string launcher)
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("prices.bin", Sandbox.RandomBytes(8 << 20, seed: 11)), "risk/mpi");
        await using var tier = new CacheTierClient(new CacheTierOptions { Hosts = [.. s.Hosts] });
        var before = await Sandbox.BytesSentAsync(tier);
        var pipe = s.NewPipe() + "r{rank}";

        await using var job = ComponentProcess.Start("hpcdata",
            ["nodeprep", "--fanout", "mpi", "--dataset", "risk/mpi", "--job", "job-7", "--pipe", pipe,
             "--data-dir", Path.Combine(s.Root, "node{rank}"), "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["HPCDATA_STATE_DIR"] = s.StateDirectory, ["TERM"] = "dumb" }, name: "mpi nodeprep",
            launcher: Launcher(launcher));
        var code = await job.WaitForExitAsync(TimeSpan.FromMinutes(3));
        var lines = job.StandardOutput.Where(l => l.Contains("node=")).ToList();

        Assert.True(code == 0, $"exit {code}: {job.StandardErrorTail}");
        Assert.Equal(3, lines.Count);
        Assert.All(lines, l => Assert.Contains($"version={staged.Version}", l));
        Assert.All(lines, l => Assert.Contains("fanout=mpi ranks=3", l));
        for (var r = 0; r < 3; r++)
        {
            var status = await s.StatusAsync(pipe.Replace("{rank}", r.ToString()));
            var copy = Assert.Single(status.Copies);
            Assert.Equal(("complete", staged.Version), (copy.State, copy.Version));
            Assert.Contains("job-7", copy.Pins);
        }
        // 8 MB to three nodes: each segment left the cache tier once, not three times.
        var sent = await Sandbox.BytesSentAsync(tier) - before;
        Assert.InRange(sent, 8L << 20, (8L << 20) * 13 / 10);
    }

    [Fact]
    public async Task Without_an_mpi_launcher_node_prep_fetches_directly_and_says_so()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();
        var staged = await s.StageAsync(s.WriteFile("d.bin", Sandbox.RandomBytes(1 << 20)), "risk/solo");
        // A single process with the MPI library present is a world of one: the exchange is this node alone.
        var r = await s.HpcdataAsync(["nodeprep", "--fanout", "mpi", "--dataset", "risk/solo", "--job", "j", "--pipe", s.NewPipe(),
            "--data-dir", Path.Combine(s.Root, "n"), "--cache-hosts", s.HostList],
            new Dictionary<string, string?> { ["HPCDATA_MPI_LIBRARY"] = "/nonexistent/libmpi.so" });
        Assert.True(r.Code == 0, r.Stderr);
        Assert.Contains("no MPI for the fan-out here", r.Stderr);
        Assert.Contains($"version={staged.Version}", r.Out);
    }
}
