using Hpc.CommonData.Cache;
using Hpc.NodeAgent;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

// appsettings.json is read from beside the program, once. The default (content root = working directory, reload on
// change) puts a recursive inotify watch on wherever the daemon was started, e.g. /tmp, and wakes it on every file
// written there.
var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings
{
    Args = args,
    ContentRootPath = AppContext.BaseDirectory,
    Configuration = new ConfigurationManager { ["hostBuilder:reloadConfigOnChange"] = "false" },
});
builder.Configuration.AddEnvironmentVariables("HPCDATA_AGENT_");
builder.Configuration.AddCommandLine(args, new Dictionary<string, string>
{
    ["--pipe"] = "Agent:Pipe",
    ["--data-dir"] = "Agent:DataDirectory",
    ["--budget"] = "Agent:BudgetBytes",
    ["--node"] = "Agent:NodeName",
    ["--telemetry"] = "Agent:TelemetryFile",
    ["--cache-hosts"] = "CacheTier:Hosts:0",
    ["--replicas"] = "CacheTier:Replicas",
});
builder.Logging.AddConsole(o => o.LogToStandardErrorThreshold = LogLevel.Trace);
builder.Services.Configure<AgentOptions>(builder.Configuration.GetSection("Agent"));
builder.Services.AddSingleton(sp =>
{
    var tier = CacheTierOptions.FromEnvironment();
    var hosts = builder.Configuration.GetSection("CacheTier:Hosts").Get<string[]>();
    builder.Configuration.GetSection("CacheTier").Bind(tier);
    // "--cache-hosts a:1,b:2" arrives as one entry; split it like the environment variable.
    if (hosts is { Length: > 0 }) tier.Hosts = hosts.SelectMany(CacheEndpoint.ParseList).Select(e => e.ToString()).Distinct().ToList();
    return new CacheTierClient(tier, sp.GetRequiredService<ILoggerFactory>().CreateLogger<CacheTierClient>());
});
builder.Services.AddSingleton<DatasetStore>();
builder.Services.AddHostedService<PipeServer>();
await builder.Build().RunAsync();
