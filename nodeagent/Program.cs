using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.NodeAgent;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

// The command line and the documented HPCDATA_* variables first: --help, an unknown switch or a bad value ends here.
if (ProgramContract<NodeAgentOptions>.Handle(args, out var settings) is { } exit) return exit;

// appsettings.json is read from beside the program, once. The default (content root = working directory, reload on
// change) puts a recursive inotify watch on wherever the daemon was started, e.g. /tmp, and wakes it on every file
// written there.
var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings
{
    ContentRootPath = AppContext.BaseDirectory,
    Configuration = new ConfigurationManager { ["hostBuilder:reloadConfigOnChange"] = "false" },
});
builder.Configuration.AddInMemoryCollection(settings);
if (AgentConfiguration.Bind(builder.Configuration, settings, out var options) is { } refused) return refused;

OpenTelemetry.Metrics.MeterProvider? exporter;
try
{
    exporter = Hpc.CommonData.Telemetry.MetricsExport.Start(options.Metrics, HpcMetrics.NodeAgentMeter, options.NodeName);
}
catch (System.Net.HttpListenerException e)
{
    return ProgramContract<NodeAgentOptions>.Refuse($"--prometheus {options.Metrics.Prometheus}: {e.Message}");
}
using var metricsExport = exporter;

builder.Logging.AddConsole(o => o.LogToStandardErrorThreshold = LogLevel.Trace);
builder.Services.AddSingleton(options);
builder.Services.AddSingleton(sp => new CacheTierClient(options.CacheTier, sp.GetRequiredService<ILoggerFactory>().CreateLogger<CacheTierClient>(), AgentMetrics.Instance));
builder.Services.AddSingleton<ISegmentSource, CacheTierSource>();
builder.Services.AddSingleton(sp => new DatasetStore(options, sp.GetRequiredService<ISegmentSource>(), sp.GetRequiredService<ILoggerFactory>()));
builder.Services.AddHostedService<PipeServer>();
await builder.Build().RunAsync();
return Environment.ExitCode;
