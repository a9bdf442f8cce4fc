using Hpc.CommonData.Local;

namespace Hpc.Samples;

/// <summary>What the sample services compute from the market history: one-day historical value-at-risk (simple
/// returns) of an equal-weight portfolio.</summary>
public static class ValueAtRisk
{
    public sealed record VarResult(int Days, int Instruments, long Rows, double ValueAtRisk99, double MeanReturn);

    /// <summary>
    /// One pass over the CSV: each day's equal-weight portfolio return from per-instrument returns, then the
    /// 99% one-day historical VaR (the loss exceeded on 1% of days). Reads the bytes in place: no copies, no strings.
    /// </summary>
    public static VarResult Compute(IEnumerable<ReadOnlyMemory<byte>> windows)
    {
        var last = new double[MarketHistory.MaxInstruments];
        var daily = new List<double>();
        double sum = 0; var count = 0; long rows = 0;
        var instruments = 0;
        var currentDate = 0L;
        MarketHistory.ForEachRow(windows, (dateKey, instrument, price) =>
        {
            if (dateKey != currentDate) { Flush(); currentDate = dateKey; }
            rows++;
            var previous = last[instrument];
            if (previous > 0) { sum += price / previous - 1; count++; }
            else instruments++;
            last[instrument] = price;
        });
        Flush();
        daily.Sort();
        var var99 = daily.Count == 0 ? 0 : -daily[(int)Math.Floor(0.01 * (daily.Count - 1))];
        return new VarResult(daily.Count, instruments, rows, var99, daily.Count == 0 ? 0 : daily.Average());

        void Flush()
        {
            if (count > 0) daily.Add(sum / count);
            sum = 0; count = 0;
        }
    }

}
