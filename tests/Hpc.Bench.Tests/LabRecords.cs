using Hpc.Bench.Simulation;

namespace Hpc.Bench.Tests;

/// <summary>The lab's recorded runs in docs/results, which the simulation's tests calibrate from.</summary>
internal static class LabRecords
{
    public static string RepoRoot()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
            if (File.Exists(Path.Combine(dir.FullName, "Hpc.sln"))) return dir.FullName;
        throw new DirectoryNotFoundException("Hpc.sln not found above the test's directory");
    }

    /// <summary>docs/results/<paramref name="name"/>.</summary>
    public static string Result(string name) => Path.Combine(RepoRoot(), "docs", "results", name);

    /// <summary>The Slurm lab's native runs, and the calibration the simulation reads from them.</summary>
    public static readonly string SlurmNative = Result("slurm-native.jsonl");
    public static readonly Calibration SlurmNativeCalibration = Calibration.FromRecords(Hpc.CommonData.Report.ResultReader.Read(SlurmNative).Records, SlurmNative);
}
