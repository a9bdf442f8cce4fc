using System.Diagnostics.Metrics;
using Hpc.CommonData.Hosting;

namespace Hpc.CacheHost.Server;

/// <summary>
/// The cache host's meter (<see cref="HpcMetrics.CacheHostMeter"/>). Every instrument is observed from the counters the
/// sessions and the store already keep for INFO, so the request path does no extra work for metrics: values are read
/// only when a listener (dotnet-counters, an exporter) collects.
/// </summary>
internal sealed class HostMetrics : IDisposable
{
    private readonly Meter _meter;

    public HostMetrics(ServerContext server)
    {
        _meter = new Meter(HpcMetrics.CacheHostMeter, server.Version);
        var stats = server.Stats;
        var store = server.Store;
        _meter.CreateObservableCounter(HpcMetrics.BytesReceived, () => stats.NetInputBytes, "By", "bytes received from clients");
        _meter.CreateObservableCounter(HpcMetrics.BytesSent, () => stats.NetOutputBytes, "By", "bytes sent to clients");
        _meter.CreateObservableCounter(HpcMetrics.Evictions, () => store.ExpiredKeys, "{key}", "keys removed because their lifetime ended");
        _meter.CreateObservableCounter(HpcMetrics.Refusals, () => new Measurement<long>(store.RejectedWrites,
            new KeyValuePair<string, object?>(HpcMetrics.ReasonTag, "no-space")), "{request}", "writes refused past the memory budget");
        _meter.CreateObservableCounter(HpcMetrics.Lookups, () => (IEnumerable<Measurement<long>>)
        [
            new(store.Hits, new KeyValuePair<string, object?>("result", "hit")),
            new(store.Misses, new KeyValuePair<string, object?>("result", "miss")),
        ], "{lookup}", "key lookups, by result");
        _meter.CreateObservableUpDownCounter(HpcMetrics.MemoryUsed, () => store.UsedBytes, "By", "stored bytes counted against the budget");
        _meter.CreateObservableUpDownCounter(HpcMetrics.MemoryLimit, () => store.MaxBytes, "By", "the memory budget");
        _meter.CreateObservableUpDownCounter(HpcMetrics.Keys, () => store.Count, "{key}", "keys held");
    }

    public void Dispose() => _meter.Dispose();
}
