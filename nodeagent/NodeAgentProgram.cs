using Hpc.CommonData.Cache;
using Hpc.CommonData.Hosting;
using Hpc.NodeAgent.Pipe;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.NodeAgent;

/// <summary>
/// The node agent's whole program: the entry of its own executable, and what a native <c>hpcdata</c> runs in its own process
/// (one executable compiled with every program in it; ComponentLocator starts it as <c>hpcdata Hpc.NodeAgent …</c>).
/// </summary>
public static class NodeAgentProgram
{
    public static async Task<int> RunAsync(string[] args)
    {
        var code = await RunCoreAsync(args);
        if (Environment.GetEnvironmentVariable(NodeAgentOptions.ExitFileVariable) is { Length: > 0 } exitFile)
            try { await File.WriteAllTextAsync(exitFile, code.ToString(System.Globalization.CultureInfo.InvariantCulture)); }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException) { } // the launcher then says "exited", without the class
        return code;
    }

    private static async Task<int> RunCoreAsync(string[] args)
    {
        // A launcher that cannot keep our stdout and stderr open (node prep on Windows, which exits while we serve) names a
        // log file instead; everything, the READY line included, is appended there.
        if (Environment.GetEnvironmentVariable(NodeAgentOptions.LogVariable) is { Length: > 0 } logFile)
        {
            var logWriter = new StreamWriter(new FileStream(logFile, FileMode.Append, FileAccess.Write, FileShare.ReadWrite | FileShare.Delete)) { AutoFlush = true };
            Console.SetOut(logWriter);
            Console.SetError(logWriter);
        }

        // Every source in one order, bound and checked: --help, an unknown switch or a bad value ends here.
        var resolved = ProgramContract<NodeAgentOptions>.ResolveThisProcess(args);
        if (ProgramContract<NodeAgentOptions>.Answer(resolved) is { } exit) return exit;
        var options = resolved.Options;
        if (AgentConfiguration.Check(options) is { } refused) return refused;

        // appsettings.json is read from beside the program, once. The default (content root = working directory, reload on
        // change) puts a recursive inotify watch on wherever the daemon was started, e.g. /tmp, and wakes it on every file
        // written there.
        var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings
        {
            ContentRootPath = AppContext.BaseDirectory,
            Configuration = new ConfigurationManager { ["hostBuilder:reloadConfigOnChange"] = "false" },
        });
        builder.AddSiteSettings();

        OpenTelemetry.Metrics.MeterProvider? exporter;
        try
        {
            exporter = Hpc.CommonData.Telemetry.MetricsExport.Start(options.Metrics, HpcMetrics.NodeAgentMeter, options.NodeName);
        }
        catch (Hpc.CommonData.CommonDataException e)
        {
            return ProgramContract<NodeAgentOptions>.Fail(e);
        }
        using var metricsExport = exporter;

        builder.Logging.AddConsole(o => o.LogToStandardErrorThreshold = LogLevel.Trace);
        // The pipe server says why it cannot serve, in one line or with the trace of an unexpected error: the host's own
        // "hosting failed to start" would repeat it as twenty lines of stack.
        builder.Logging.AddFilter("Microsoft.Extensions.Hosting.Internal.Host", LogLevel.None);
        builder.Services.AddSingleton(options);
        builder.Services.AddSingleton(sp => new CacheTierClient(options.CacheTier, sp.GetRequiredService<ILoggerFactory>().CreateLogger<CacheTierClient>(), AgentMetrics.Instance));
        builder.Services.AddSingleton<ISegmentSource, CacheTierSource>();
        builder.Services.AddSingleton(sp => new DatasetStore(options, sp.GetRequiredService<ISegmentSource>(), sp.GetRequiredService<ILoggerFactory>()));
        builder.Services.AddHostedService<PipeServer>();
        builder.Services.AddHostedService<Fanout.PeerService>();
        builder.AddServiceManagers("hpcdata-agent");
        try
        {
            await builder.Build().RunAsync();
        }
        catch (Exception) when (Environment.ExitCode != 0)
        {
            // The pipe could not be served: PipeServer has logged why and set the exit code of its class.
            return Environment.ExitCode;
        }
        return Environment.ExitCode;
    }
}
