namespace Hpc.CommonData.Report;

public static class Stats
{
    /// <summary>The median of the finite values (NaN marks a figure a run did not measure); NaN when there are none.</summary>
    /// <summary>Megabytes (10^6 bytes) per second.</summary>
    public static double Mbps(long bytes, double seconds) => bytes / 1e6 / seconds;

    /// <summary>How a run used the cores, as the tables say it: "N pinned" or "all N shared".</summary>
    public static string CoresLabel(int cores, bool pinned) => pinned ? $"{cores} pinned" : $"all {cores} shared";

    public static double Median(IEnumerable<double> values)
    {
        var v = values.Where(double.IsFinite).Order().ToList();
        return v.Count == 0 ? double.NaN : v.Count % 2 == 1 ? v[v.Count / 2] : (v[v.Count / 2 - 1] + v[v.Count / 2]) / 2;
    }
}
