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
    /// OTLP push). Null when nothing is configured. A Prometheus port that cannot be listened on throws a
    /// <see cref="CommonDataException"/> naming it here (denied, or no-space: cannot create), before the component starts serving.
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
        try
        {
            return builder.Build();
        }
        catch (Exception e) when (ListenerFailure(e) is { } listener && options.PrometheusEndpoint is { } at)
        {
            // The exporter says only "HttpListener could not be started": the operator needs the port, and the class
            // (denied for a privileged port, cannot create for one in use) for the exit code.
            var denied = listener.ErrorCode is (int)System.Net.Sockets.SocketError.AccessDenied or 13 or 5;
            var inUse = listener.ErrorCode is (int)System.Net.Sockets.SocketError.AddressAlreadyInUse or 98 or 48 or 183;
            var why = denied ? $"not allowed to listen on port {at.Port} of {at.Host} (a port below 1024 takes privileges)"
                : inUse ? $"port {at.Port} on {at.Host} is already in use (another process listens there; choose another port)"
                : $"cannot listen on port {at.Port} of {at.Host}";
            throw new CommonDataException(denied ? ErrorCode.AccessDenied : ErrorCode.NoSpace, $"--prometheus {options.Prometheus}: {why}: {listener.Message}");
        }
    }

    /// <summary>The listener's own failure, however deep the exporter wrapped it.</summary>
    private static System.Net.HttpListenerException? ListenerFailure(Exception? e)
    {
        for (; e is not null; e = e.InnerException)
            if (e is System.Net.HttpListenerException listener) return listener;
        return null;
    }
}
