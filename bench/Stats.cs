namespace Hpc.Bench;

public static class Stats
{
    /// <summary>The median of the finite values (NaN marks a figure a run did not measure); NaN when there are none.</summary>
    public static double Median(IEnumerable<double> values)
    {
        var v = values.Where(double.IsFinite).Order().ToList();
        return v.Count == 0 ? double.NaN : v.Count % 2 == 1 ? v[v.Count / 2] : (v[v.Count / 2 - 1] + v[v.Count / 2]) / 2;
    }
}
