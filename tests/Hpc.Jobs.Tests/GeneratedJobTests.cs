using Hpc.CommonData.Cache;
using Hpc.CommonData.Cli;
using Hpc.Jobs.Scheduling;

namespace Hpc.Jobs.Tests;

/// <summary>
/// The Slurm script and HPC Pack commands prestage generates, compared with reviewed golden files in Golden/.
/// After an intended change, regenerate with HPCDATA_UPDATE_GOLDEN=1 and review the diff.
/// </summary>
public class GeneratedJobTests
{
    private static readonly JobSpec Batch = new("hpcdata-risk-market-history", "risk/market-history", "0123456789abcdef0123456789abcdef",
        new CacheTierOptions { Hosts = ["cache1:6380", "cache2:6380"] }, Nodes: 2, HostsPerNode: 4, Command: ["hpcdata", "worker", "--mode", "map"]);

    private static readonly JobSpec Soa = Batch with
    {
        Command = ["hpcdata", "soa-host"], ClientCommand = ["hpcdata", "soa-client", "--requests", "1000"], AgentPipe = "/run/hpcdata/agent",
        EvictOnRelease = true, LifetimeJob = true, Hpcdata = "/opt/hpcdata/hpcdata",
    };

    [Theory]
    [InlineData("slurm-batch.sbatch", "batch")]
    [InlineData("slurm-soa.sbatch", "soa")]
    public void Slurm_script_matches_its_golden_file(string golden, string which) =>
        Compare(golden, SlurmScript.Generate(which == "soa" ? Soa : Batch));

    [Theory]
    [InlineData("hpcpack-batch.cmd", "batch")]
    [InlineData("hpcpack-soa.cmd", "soa")]
    public void Hpc_pack_commands_match_their_golden_file(string golden, string which) =>
        Compare(golden, HpcPackCommands.Generate(which == "soa" ? Soa : Batch));

    [Fact]
    public void Slurm_script_prepares_nodes_first_and_releases_on_every_way_out()
    {
        var script = SlurmScript.Generate(Batch);
        var prep = script.IndexOf("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 hpcdata nodeprep", StringComparison.Ordinal);
        var hosts = script.IndexOf("srun --nodes=2 --ntasks=8 --ntasks-per-node=4 hpcdata worker", StringComparison.Ordinal);
        Assert.True(prep > 0 && hosts > prep, script);
        Assert.Contains("trap release EXIT", script);
        Assert.Contains("trap 'exit 143' TERM", script);
        Assert.Contains("#SBATCH --signal=B:TERM@60", script);
        Assert.True(script.IndexOf("release() {", StringComparison.Ordinal) < prep);
    }

    [Fact]
    public void Slurm_fanout_runs_node_prep_as_one_mpi_step_and_falls_back_to_a_direct_step_when_it_fails()
    {
        var script = SlurmScript.Generate(Batch with { FanoutMpi = true });
        const string perNode = "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 hpcdata";
        // A task that dies leaves the others running, whatever the site's KillOnBadExit: the ring closes around it.
        var line = Assert.Single(script.Split('\n'), l => l.StartsWith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=0 hpcdata nodeprep --fanout mpi", StringComparison.Ordinal));
        Assert.Contains($"|| {{ echo \"hpcdata: fan-out failed; completing by direct fetch\" >&2; {perNode} nodeprep --fanout none ||", line);
        Assert.EndsWith("exit $rc; }; }", line);
        var bash = System.Diagnostics.Process.Start(new System.Diagnostics.ProcessStartInfo("bash", ["-n"]) { RedirectStandardInput = true, RedirectStandardError = true })!;
        bash.StandardInput.Write(script);
        bash.StandardInput.Close();
        bash.WaitForExit();
        Assert.True(bash.ExitCode == 0, bash.StandardError.ReadToEnd());
    }

    [Fact]
    public void Arguments_with_shell_or_cmd_metacharacters_are_quoted()
    {
        var job = Batch with { Command = ["/bin/sh", "-c", "echo $HOME; rm -rf 'x'"] };
        Assert.Contains("/bin/sh -c 'echo $HOME; rm -rf '\\''x'\\'''", SlurmScript.Generate(job));
        Assert.Equal("\"a b\" \"say \\\"hi\\\"\" plain", Quote.Cmd(["a b", "say \"hi\"", "plain"]));
    }

    private static void Compare(string golden, string actual)
    {
        var path = Path.Combine(AppContext.BaseDirectory, "Golden", golden);
        if (Environment.GetEnvironmentVariable("HPCDATA_UPDATE_GOLDEN") == "1")
        {
            var source = Path.Combine(FindSourceDirectory(), "Golden", golden);
            File.WriteAllText(source, actual);
            return;
        }
        Assert.True(File.Exists(path), $"missing golden file {golden}; run with HPCDATA_UPDATE_GOLDEN=1 to create it");
        Assert.Equal(File.ReadAllText(path), actual);
    }

    private static string FindSourceDirectory()
    {
        for (var d = new DirectoryInfo(AppContext.BaseDirectory); d is not null; d = d.Parent)
        {
            var candidate = Path.Combine(d.FullName, "tests", "Hpc.Jobs.Tests");
            if (Directory.Exists(candidate)) return candidate;
        }
        throw new DirectoryNotFoundException("tests/Hpc.Jobs.Tests");
    }
}
