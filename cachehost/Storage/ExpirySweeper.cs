using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.CacheHost.Storage;

/// <summary>
/// Removes expired entries nobody reads any more, so they stop counting against the budget. Each tick examines a
/// bounded slice of the keyspace and resumes where the last one stopped, so a huge store never stalls the host.
/// </summary>
internal sealed class ExpirySweeper(CacheStore store, TimeProvider time, ILogger<ExpirySweeper> logger) : BackgroundService
{
    private static readonly TimeSpan Interval = TimeSpan.FromMilliseconds(100);
    private const int MaxExaminedPerTick = 16_384;

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(Interval, time);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken))
            {
                int removed = store.SweepExpired(MaxExaminedPerTick);
                if (removed > 0)
                    Log.Swept(logger, removed);
            }
        }
        catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
        {
        }
    }
}
