using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary>When a rank may leave without MPI_Finalize: only when srun itself started it and holds its PMI connection;
/// and how long it waits for the others before it leaves MPI behind.</summary>
public sealed class MpiRankGroupTests
{
    private static Func<string, string?> Environment(params (string Name, string Value)[] variables) =>
        name => variables.FirstOrDefault(v => v.Name == name).Value;

    [Fact]
    public void A_rank_srun_started_over_pmi_leaves_without_finalize() =>
        Assert.True(MpiRankGroup.StartedBySrun(Environment(("SLURM_STEP_ID", "0"), ("PMI_FD", "7"), ("PMI_JOBID", "12.0"))));

    [Fact]
    public void A_rank_of_mpiexec_finalizes_even_inside_a_slurm_step() =>
        Assert.False(MpiRankGroup.StartedBySrun(Environment(("SLURM_STEP_ID", "0"), ("PMI_FD", "6"), ("HYDI_CONTROL_FD", "7"))));

    [Fact]
    public void A_rank_without_a_slurm_step_or_pmi_connection_finalizes()
    {
        Assert.False(MpiRankGroup.StartedBySrun(Environment(("PMI_FD", "6"))));
        Assert.False(MpiRankGroup.StartedBySrun(Environment(("SLURM_STEP_ID", "0"), ("PMIX_RANK", "0"))));
    }

    [Fact]
    public void After_a_ring_a_rank_waits_for_the_others_as_long_as_its_exchange_took_and_never_less_than_the_finalize_limit()
    {
        // A ring paced by a slow link: the ranks ended 40.6 to 45.1 s into a 45 s exchange.
        Assert.Equal(TimeSpan.FromSeconds(45), MpiRankGroup.ClosingLimitAfter(TimeSpan.FromSeconds(45)));
        Assert.Equal(MpiRankGroup.FinalizeLimit, MpiRankGroup.ClosingLimitAfter(TimeSpan.FromSeconds(1)));
    }

    [Fact]
    public void After_a_ring_that_went_on_without_a_member_a_rank_waits_the_finalize_limit_only_since_that_member_never_comes()
    {
        Assert.Equal(MpiRankGroup.FinalizeLimit, MpiRankGroup.ClosingLimitAfter(TimeSpan.FromSeconds(45), memberLost: true));
    }
}
