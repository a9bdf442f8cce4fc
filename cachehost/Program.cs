using Hpc.CacheHost;
using Hpc.CacheHost.Server;
using Hpc.CacheHost.Storage;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Console;
using Microsoft.Extensions.Options;

// Socket completions run a session's parse-execute-send step on the epoll thread instead of hopping to the thread
// pool: the step never blocks, and the hop (a context switch per read) cost about a third of the host's CPU under
// redis-benchmark. It must be set before the first socket exists; an operator's explicit setting wins.
const string InlineCompletions = "DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS";
if (Environment.GetEnvironmentVariable(InlineCompletions) is null)
    Environment.SetEnvironmentVariable(InlineCompletions, "1");

// Layers, later wins: appsettings.json, environment (CacheHost__Port=...), then the command line, which also takes
// short switches such as --port 0 --max-memory 2GB.
// appsettings.json is read from beside the program, once. The default (content root = working directory, reload on
// change) puts a recursive inotify watch on wherever the daemon was started, e.g. /tmp, and wakes it on every file
// written there.
var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings
{
    Args = args,
    ContentRootPath = AppContext.BaseDirectory,
    Configuration = new ConfigurationManager { ["hostBuilder:reloadConfigOnChange"] = "false" },
});
builder.Configuration.AddCommandLine(args, CacheHostOptions.SwitchMappings);

// stdout carries only the READY line that launchers parse; every log line goes to stderr.
builder.Services.Configure<ConsoleLoggerOptions>(o => o.LogToStandardErrorThreshold = LogLevel.Trace);

builder.Services.AddOptions<CacheHostOptions>()
    .Bind(builder.Configuration.GetSection(CacheHostOptions.SectionName))
    .ValidateOnStart();
builder.Services.AddSingleton<IValidateOptions<CacheHostOptions>, CacheHostOptionsValidator>();
builder.Services.AddSingleton(TimeProvider.System);
builder.Services.AddSingleton(sp => new CacheStore(
    sp.GetRequiredService<IOptions<CacheHostOptions>>().Value.MaxMemoryBytes.Bytes,
    sp.GetRequiredService<TimeProvider>()));
builder.Services.AddSingleton<ServerContext>();
builder.Services.AddHostedService<CacheServer>();
builder.Services.AddHostedService<ExpirySweeper>();

using var host = builder.Build();
try
{
    await host.RunAsync();
    return 0;
}
catch (Exception ex) when (ex is OptionsValidationException or InvalidOperationException or System.Net.Sockets.SocketException)
{
    // Bad options or a taken port: the host has already logged why; exit non-zero without a second stack trace.
    return 1;
}
