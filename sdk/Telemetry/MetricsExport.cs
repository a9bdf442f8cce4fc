using Hpc.CommonData.Hosting;
using OpenTelemetry;
using OpenTelemetry.Exporter;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;

namespace Hpc.CommonData.Telemetry;

/// <summary>
/// Exports one component's meter as <see cref="MetricsOptions"/> says: a Prometheus scrape endpoint, an OTLP push, both
/// or neither. The meter itself exists either way, so <c>dotnet-counters</c> needs no configuration.
/// </summary>
public static class MetricsExport
{
    /// <summary>OTLP pushes this often; a short-lived stager also pushes once when the provider is disposed at exit.</summary>
    private const int OtlpIntervalMilliseconds = 10_000;

    /// <summary>
    /// Starts the configured exporters for <paramref name="meterName"/>; dispose the result at exit (it flushes the
    /// OTLP push). Null when nothing is configured. A Prometheus prefix that cannot be bound throws
    /// <see cref="System.Net.HttpListenerException"/> here, before the component starts serving.
    /// </summary>
    public static MeterProvider? Start(MetricsOptions options, string meterName, string? instance = null)
    {
        if (!options.Enabled) return null;
        var builder = Sdk.CreateMeterProviderBuilder()
            .AddMeter(meterName)
            .ConfigureResource(r => r.AddService(meterName, serviceInstanceId: instance ?? Environment.MachineName));
        if (options.PrometheusEndpoint is { } scrape)
            builder.AddPrometheusHttpListener(o => { o.Host = scrape.Host; o.Port = scrape.Port; });
        if (!string.IsNullOrWhiteSpace(options.Otlp))
        {
            var endpoint = new Uri(options.Otlp);
            builder.AddOtlpExporter((exporter, reader) =>
            {
                exporter.Endpoint = endpoint;
                exporter.Protocol = endpoint.AbsolutePath.EndsWith("/v1/metrics", StringComparison.Ordinal) ? OtlpExportProtocol.HttpProtobuf : OtlpExportProtocol.Grpc;
                reader.PeriodicExportingMetricReaderOptions.ExportIntervalMilliseconds = OtlpIntervalMilliseconds;
            });
        }
        return builder.Build();
    }
}
