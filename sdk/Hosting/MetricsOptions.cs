namespace Hpc.CommonData.Hosting;

/// <summary>
/// Where a component's meter is exported, nested in each program's options (switches <c>--prometheus</c> and
/// <c>--otlp</c>). Neither set: the meter is still there for <c>dotnet-counters</c>, nothing is served or pushed.
/// </summary>
public sealed class MetricsOptions
{
    /// <summary>Serve the meter for Prometheus scrapes at <c>/metrics</c>: <c>PORT</c> (on localhost) or <c>HOST:PORT</c> (<c>+:9464</c>: every address).</summary>
    [Switch("--prometheus", "serve metrics for Prometheus at /metrics: PORT (localhost) or HOST:PORT (+:PORT for every address)",
        Environment = "HPCDATA_PROMETHEUS", Meta = "[HOST:]PORT")]
    public string? Prometheus { get; set; }

    /// <summary>Push the meter over OTLP (gRPC, or http/protobuf when the URL's path ends in /v1/metrics) every 10 seconds and at exit.</summary>
    [Switch("--otlp", "push metrics over OTLP to this collector, e.g. http://collector:4317 (…/v1/metrics: http/protobuf)",
        Environment = "HPCDATA_OTLP", Meta = "URL")]
    public string? Otlp { get; set; }

    public bool Enabled => !string.IsNullOrWhiteSpace(Prometheus) || !string.IsNullOrWhiteSpace(Otlp);

    /// <summary>The host and port <see cref="Prometheus"/> names, or null when it is off or malformed.</summary>
    public (string Host, int Port)? PrometheusEndpoint
    {
        get
        {
            if (string.IsNullOrWhiteSpace(Prometheus)) return null;
            var colon = Prometheus.LastIndexOf(':');
            var host = colon < 0 ? "localhost" : Prometheus[..colon].Trim('[', ']');
            return int.TryParse(Prometheus[(colon + 1)..], out var port) && port is > 0 and < 65536 && host.Length > 0 ? (host, port) : null;
        }
    }

    public IEnumerable<string> Validate()
    {
        if (!string.IsNullOrWhiteSpace(Prometheus) && PrometheusEndpoint is null)
            yield return $"--prometheus '{Prometheus}' is not PORT or HOST:PORT";
        if (!string.IsNullOrWhiteSpace(Otlp) && !(Uri.TryCreate(Otlp, UriKind.Absolute, out var o) && o.Scheme is "http" or "https"))
            yield return $"--otlp '{Otlp}' is not an http(s) URL";
    }
}
