namespace Hpc.Mpi.Tests;

/// <summary>Finding the library, in this process and without initializing MPI.</summary>
public sealed class LibraryLoadingTests
{
    [Fact]
    public void Without_a_launcher_the_probe_order_is_open_mpi_then_the_mpich_family_then_ms_mpi()
    {
        Assert.Equal(["libmpi.so.40", "libmpich.so.12", "libmpi.so.12", "msmpi.dll"], MpiLibrary.ProbeOrder(_ => null));
    }

    [Fact]
    public void Under_hydra_the_mpich_family_goes_first_so_a_rank_does_not_load_open_mpi_as_a_singleton()
    {
        var hydra = new Dictionary<string, string> { ["PMI_RANK"] = "1", ["PMI_SIZE"] = "3" };
        Assert.Equal(["libmpich.so.12", "libmpi.so.12", "msmpi.dll", "libmpi.so.40"], MpiLibrary.ProbeOrder(hydra.GetValueOrDefault));

        var openMpi = new Dictionary<string, string> { ["OMPI_COMM_WORLD_SIZE"] = "3" };
        Assert.Equal("libmpi.so.40", MpiLibrary.ProbeOrder(openMpi.GetValueOrDefault)[0]);
    }

    [Fact]
    public void A_library_named_by_the_variable_that_does_not_load_is_a_clear_unavailable_error()
    {
        string missing = Path.Combine(Path.GetTempPath(), "no-such-dir", "libmpi-missing.so");
        string? before = Environment.GetEnvironmentVariable(MpiLibrary.PathVariable);
        Environment.SetEnvironmentVariable(MpiLibrary.PathVariable, missing);
        try
        {
            var e = Assert.Throws<MpiUnavailableException>(() => MpiRuntime.Initialize());
            Assert.Contains(missing, e.Message);
            Assert.Contains("HPCDATA_MPI_LIBRARY", e.Message);
            Assert.Single(e.Tried);
        }
        finally
        {
            Environment.SetEnvironmentVariable(MpiLibrary.PathVariable, before);
        }
    }
}
