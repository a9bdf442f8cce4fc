using System.Diagnostics;

namespace Hpc.Bench;

/// <summary>
/// Polls a byte counter (e.g. the cache hosts' INFO totals) while a transfer runs and gives its steady rate: the slope
/// between the moments the transfer had moved 10% and 90% of its bytes. The end-to-end rate also carries what a run
/// does before and after moving data (start-up, manifest, the whole-copy hash, publishing); the steady rate is what a
/// rate limiter actually held.
/// </summary>
public sealed class TrafficSampler : IAsyncDisposable
{
    private readonly List<(double Seconds, long Bytes)> _samples = [];
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _loop;

    public TrafficSampler(Func<CancellationToken, Task<long>> read, TimeSpan every)
    {
        var clock = Stopwatch.StartNew();
        _loop = Task.Run(async () =>
        {
            while (!_stop.IsCancellationRequested)
            {
                try
                {
                    // The counter was read somewhere inside the round trip: stamp it with the round trip's middle.
                    var asked = clock.Elapsed.TotalSeconds;
                    var bytes = await read(_stop.Token);
                    lock (_samples) _samples.Add(((asked + clock.Elapsed.TotalSeconds) / 2, bytes));
                    await Task.Delay(every, _stop.Token);
                }
                catch (OperationCanceledException) when (_stop.IsCancellationRequested) { break; }
                catch (IOException) { /* a sample lost; the next one will do */ }
            }
        });
    }

    /// <summary>Bytes per second between 10% and 90% of the bytes moved, or null with too few samples.</summary>
    public double? SteadyRate(double from = 0.1, double to = 0.9)
    {
        List<(double Seconds, long Bytes)> s;
        lock (_samples) s = _samples.ToList();
        return SteadyRate(s, from, to);
    }

    /// <summary>The slope of a cumulative byte curve between two fractions of its total, each moment interpolated linearly.</summary>
    public static double? SteadyRate(IReadOnlyList<(double Seconds, long Bytes)> samples, double from = 0.1, double to = 0.9)
    {
        if (samples.Count < 4) return null;
        var first = samples[0].Bytes;
        var total = samples[^1].Bytes - first;
        if (total <= 0) return null;
        double? When(double fraction)
        {
            var target = first + fraction * total;
            for (var i = 1; i < samples.Count; i++)
            {
                if (samples[i].Bytes < target) continue;
                var (t0, b0) = samples[i - 1];
                var (t1, b1) = samples[i];
                return b1 == b0 ? t1 : t0 + (t1 - t0) * (target - b0) / (b1 - b0);
            }
            return null;
        }
        return When(from) is { } a && When(to) is { } b && b > a ? (to - from) * total / (b - a) : null;
    }

    /// <summary>The highest rate between two successive samples: how bursty the transfer was at the sampling interval.</summary>
    public double? PeakRate()
    {
        List<(double Seconds, long Bytes)> s;
        lock (_samples) s = _samples.ToList();
        return s.Count < 2 ? null : s.Zip(s.Skip(1), (a, b) => (b.Bytes - a.Bytes) / Math.Max(1e-6, b.Seconds - a.Seconds)).Max();
    }

    public async ValueTask DisposeAsync()
    {
        _stop.Cancel();
        await _loop;
        _stop.Dispose();
    }
}
