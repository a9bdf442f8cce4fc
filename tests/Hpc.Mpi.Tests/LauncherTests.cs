using System.Diagnostics;

namespace Hpc.Mpi.Tests;

/// <summary>
/// The binding on 3 real ranks under each installed launcher. One collection, so launches never overlap: MPICH's
/// waiting ranks spin, and the machines have 2 cores.
/// </summary>
[Collection(nameof(LauncherTests))]
public sealed class LauncherTests
{
    public static TheoryData<Launcher> Launchers => new() { Launcher.Hydra, Launcher.OpenMpi };

    [Theory, MemberData(nameof(Launchers))]
    public async Task Every_rank_sees_its_rank_the_size_and_the_library_of_its_launcher(Launcher launcher)
    {
        var run = await MpiRun.ProbeAsync(launcher, "info");

        string abi = launcher == Launcher.Hydra ? "Mpich" : "OpenMpi";
        MpiRun.AssertEveryRank(run, $"^size 3 abi {abi} library ");
        // The runtime's NullReferenceException relies on SIGSEGV, which UCX would otherwise take over.
        MpiRun.AssertEveryRank(run, "^null reference caught$");
        Assert.Contains(run.Of(0), t => t.StartsWith("implementation " + (launcher == Launcher.Hydra ? "MPICH" : "Open MPI"), StringComparison.Ordinal));
    }

    [Fact]
    public async Task UCX_leaves_libc_code_alone_unless_the_operator_asks_for_its_memory_hooks()
    {
        // UCX rewrites libc's mmap/brk/... in place while other threads run them unless its memory events are off; a
        // .NET rank always has such threads, and one that ran into a half-written instruction died of SIGILL.
        var log = new Dictionary<string, string> { ["UCX_MEM_LOG_LEVEL"] = "debug" };
        var run = await MpiRun.ProbeAsync(Launcher.Hydra, log, "ring", (1 << 20).ToString());
        MpiRun.AssertEveryRank(run, "^ring ok 1048576 bytes");
        Assert.DoesNotContain("installing bistro hook", run.Output);

        // The operator's own setting wins, and this is how the hooks show when they are installed.
        var asked = await MpiRun.ProbeAsync(Launcher.Hydra, new Dictionary<string, string>(log) { ["UCX_MEM_EVENTS"] = "yes" }, "info");
        Assert.Contains("installing bistro hook for brk", asked.Output);
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task Ranks_that_use_MPI_only_for_collectives_skip_the_fabric_probe_and_their_collectives_still_work(Launcher launcher)
    {
        // Open MPI's cm layer initializes every libfabric provider to look for a fabric (half of MPI_Init here);
        // a rank whose data goes over its own sockets asks for ob1 instead. MPICH ignores the setting.
        var verbose = new Dictionary<string, string> { ["OMPI_MCA_pml_base_verbose"] = "10" };
        var run = await MpiRun.ProbeAsync(launcher, verbose, "allgather+control");
        MpiRun.AssertEveryRank(run, "^allgather ok 5,1000000012,2000000019$");
        if (launcher != Launcher.OpenMpi) return;
        Assert.Contains("component ob1 selected", run.Output);
        Assert.DoesNotContain("found loaded component cm", run.Output);

        // Without the hint Open MPI looks at cm first; and the operator's own choice of layer wins over the hint.
        var plain = await MpiRun.ProbeAsync(launcher, verbose, "allgather");
        Assert.Contains("found loaded component cm", plain.Output);
        var chosen = await MpiRun.ProbeAsync(launcher, new Dictionary<string, string>(verbose) { ["OMPI_MCA_pml"] = "^ucx" }, "allgather+control");
        MpiRun.AssertEveryRank(chosen, "^allgather ok 5,1000000012,2000000019$");
        Assert.Contains("found loaded component cm", chosen.Output);
    }

    [Fact]
    public async Task Ranks_whose_threads_allocate_while_MPI_starts_survive_the_start()
    {
        // Two threads per rank call malloc/free (brk, mmap, munmap) throughout MPI_Init. With UCX's memory hooks on
        // (UCX_MEM_EVENTS=yes) 14 of 30 such launches died of SIGSEGV here, as a fan-out rank once died of SIGILL.
        for (int launch = 0; launch < 10; launch++)
        {
            var run = await MpiRun.ProbeAsync(Launcher.Hydra, "churn");
            MpiRun.AssertEveryRank(run, "^churn survived$");
        }
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task A_ring_of_nonblocking_segment_sends_delivers_every_byte(Launcher launcher)
    {
        var run = await MpiRun.ProbeAsync(launcher, "ring", (4 << 20).ToString());

        MpiRun.AssertEveryRank(run, "^ring ok 4194304 bytes in 64 segments from rank [0-2] in [0-9]+ ms$");
        for (int rank = 0; rank < MpiRun.Ranks; rank++)
        {
            int previous = (rank + MpiRun.Ranks - 1) % MpiRun.Ranks;
            Assert.Contains(run.Of(rank), t => t.Contains($"from rank {previous} in", StringComparison.Ordinal));
        }
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task Broadcast_gives_every_rank_the_roots_bytes(Launcher launcher)
    {
        var run = await MpiRun.ProbeAsync(launcher, "bcast", (3 << 20).ToString());

        MpiRun.AssertEveryRank(run, "^bcast ok 3145728 bytes$");
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task AllGather_gives_every_rank_every_ranks_value(Launcher launcher)
    {
        var run = await MpiRun.ProbeAsync(launcher, "allgather");

        MpiRun.AssertEveryRank(run, "^allgather ok 5,1000000012,2000000019$");
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task SplitByNode_puts_ranks_of_one_machine_in_one_group(Launcher launcher)
    {
        var run = await MpiRun.ProbeAsync(launcher, "split");

        MpiRun.AssertEveryRank(run, "^node rank [0-2] node size 3$");
        MpiRun.AssertEveryRank(run, "^node members 0,1,2$");
        for (int rank = 0; rank < MpiRun.Ranks; rank++) Assert.Contains($"node rank {rank} node size 3", run.Of(rank));
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task An_error_comes_back_as_an_exception_naming_the_call_instead_of_ending_the_job(Launcher launcher)
    {
        var run = await MpiRun.ProbeAsync(launcher, "error");

        MpiRun.AssertEveryRank(run, "^error ok MPI_Send code [1-9][0-9]*: MPI_Send failed with MPI error [0-9]+: .*[Ii]nvalid rank");
    }

    [Theory, MemberData(nameof(Launchers))]
    public async Task A_rank_that_aborts_ends_the_job_with_a_failure_status(Launcher launcher)
    {
        var clock = Stopwatch.StartNew();
        var run = await MpiRun.ProbeAsync(launcher, "abort");

        Assert.True(run.ExitCode != 0, $"the launcher exited 0 although a rank aborted. Output:\n{run.Output}");
        // The aborting rank's own output may be lost with its process (the launcher's forwarding of it is killed too),
        // and so may the last lines of the others, killed by the launcher at the same moment: what must be seen is the
        // abort, or some other rank waiting in the barrier the aborting rank never reached — and none getting past it.
        var abortSeen = run.Of(MpiRun.Ranks - 1).Contains("aborting") || run.Output.Contains("MPI_Abort", StringComparison.OrdinalIgnoreCase);
        var othersBlocked = Enumerable.Range(0, MpiRun.Ranks - 1).Any(r => run.Of(r).Any(l => l.StartsWith("waiting in a barrier", StringComparison.Ordinal)));
        Assert.True(abortSeen || othersBlocked, $"nothing shows the last rank's abort ended the job. Output:\n{run.Output}");
        Assert.DoesNotContain(run.Lines, l => l.Text.StartsWith("FAIL", StringComparison.Ordinal));
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(30), $"the aborted job took {clock.Elapsed.TotalSeconds:F1} s to end");
    }

    [Fact]
    public async Task A_library_that_does_not_match_the_launcher_is_refused_instead_of_running_as_singletons()
    {
        // Open MPI's library under MPICH's launcher initializes as a world of 1 on every rank.
        var run = await MpiRun.ProbeAsync(Launcher.Hydra, new Dictionary<string, string> { ["HPCDATA_MPI_LIBRARY"] = "libmpi.so.40" }, "info");

        Assert.True(run.ExitCode != 0, $"the ranks ran with a mismatched library. Output:\n{run.Output}");
        Assert.Contains("MpiUnavailableException", run.Output);
        Assert.Contains("does not match the launcher", run.Output);
    }
}
