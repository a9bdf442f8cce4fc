using Hpc.CacheHost;
using Hpc.CacheHost.Server;
using Hpc.CacheHost.Storage;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Console;
using Microsoft.Extensions.Options;

// Layers, later wins: appsettings.json, environment (CacheHost__Port=...), then the command line, which also takes
// short switches such as --port 0 --max-memory 2GB.
var builder = Host.CreateApplicationBuilder(args);
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
catch (Exception ex) when (ex is OptionsValidationException or InvalidOperationException or System.Net.Sockets.SocketException or FormatException)
{
    // Bad options or a taken port: say so in one line and exit non-zero instead of dumping a stack trace.
    host.Services.GetRequiredService<ILoggerFactory>().CreateLogger("Hpc.CacheHost").LogCritical("Cache host failed to start: {Message}", ex.Message);
    return 1;
}
