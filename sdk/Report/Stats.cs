namespace Hpc.CommonData.Report;

public static class Stats
{
    /// <summary>A mebibyte and a gibibyte: the tables give sizes and rates in powers of 1024, as <see cref="ByteSize.Format"/> does.</summary>
    public const double MiB = 1 << 20, GiB = 1 << 30;

    /// <summary>Mebibytes (2^20 bytes) per second, for a table's MiB/s column.</summary>
    public static double MiBps(long bytes, double seconds) => bytes / MiB / seconds;

    /// <summary>How a run used the cores, as the tables say it: "N pinned" or "all N shared".</summary>
    public static string CoresLabel(int cores, bool pinned) => pinned ? $"{cores} pinned" : $"all {cores} shared";

    /// <summary>The median of the finite values (NaN marks a figure a run did not measure); NaN when there are none.</summary>
    public static double Median(IEnumerable<double> values)
    {
        var v = values.Where(double.IsFinite).Order().ToList();
        return v.Count == 0 ? double.NaN : v.Count % 2 == 1 ? v[v.Count / 2] : (v[v.Count / 2 - 1] + v[v.Count / 2]) / 2;
    }
}
