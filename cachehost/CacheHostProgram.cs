using Hpc.CacheHost.Server;
using Hpc.CacheHost.Storage;
using Hpc.CommonData.Hosting;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Console;
using Microsoft.Extensions.Options;
using Contract = Hpc.CommonData.Hosting.ProgramContract<Hpc.CommonData.Hosting.CacheHostOptions>;

namespace Hpc.CacheHost;

/// <summary>
/// The cache host's whole program: the entry of its own executable, and what a native <c>hpcdata</c> runs in its own process
/// (one executable compiled with every program in it; ComponentLocator starts it as <c>hpcdata Hpc.CacheHost …</c>).
/// </summary>
public static class CacheHostProgram
{
    public static async Task<int> RunAsync(string[] args)
    {
        // Every source in one order, bound and checked (--help answered, a bad value refused with exit 2) before anything starts.
        var resolved = Contract.ResolveThisProcess(args);
        if (Contract.Answer(resolved) is { } exit)
            return exit;
        var options = resolved.Options;

        // Socket completions run a session's parse-execute-send step on the epoll thread instead of hopping to the thread
        // pool: the step never blocks, and the hop (a context switch per read) cost about a third of the host's CPU under
        // redis-benchmark. It must be set before the first socket exists; an operator's explicit setting wins.
        const string InlineCompletions = "DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS";
        if (Environment.GetEnvironmentVariable(InlineCompletions) is null)
            Environment.SetEnvironmentVariable(InlineCompletions, "1");
        // With requests executed on the socket engine's threads, one engine per core (the runtime's choice once completions run
        // inline) leaves nothing for the kernel's network work and the clients beside it: on 2 cores, one GET per round trip
        // from 16 connections had a p99 of 1.5-5 ms with two engines and 0.5-2 ms with one, and no less throughput.
        const string SocketThreads = "DOTNET_SYSTEM_NET_SOCKETS_THREAD_COUNT";
        if (Environment.GetEnvironmentVariable(SocketThreads) is null)
            Environment.SetEnvironmentVariable(SocketThreads, Math.Max(1, Environment.ProcessorCount / 2).ToString(System.Globalization.CultureInfo.InvariantCulture));

        // The host's own sections (logging) come from the same files; the options above were resolved from them already.
        var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings
        {
            ContentRootPath = AppContext.BaseDirectory,
            Configuration = new ConfigurationManager { ["hostBuilder:reloadConfigOnChange"] = "false" },
        });
        builder.AddSiteSettings();

        CacheUsers users;
        try
        {
            users = CacheUsers.Load(options);
        }
        catch (FormatException e)
        {
            return Contract.Refuse(e.Message);
        }

        // stdout carries only the READY line that launchers parse; every log line goes to stderr.
        builder.Services.Configure<ConsoleLoggerOptions>(o => o.LogToStandardErrorThreshold = LogLevel.Trace);
        builder.Services.AddSingleton(Options.Create(options));
        builder.Services.AddSingleton(TimeProvider.System);
        builder.Services.AddSingleton(sp => new CacheStore(options.MaxMemoryBytes.Bytes, sp.GetRequiredService<TimeProvider>()));
        builder.Services.AddSingleton(users);
        if (options.TlsCertificateFile is { Length: > 0 } certificateFile)
        {
            try
            {
                builder.Services.AddSingleton(ServerCertificate.Load(certificateFile, options.TlsKeyFile!));
            }
            catch (Exception e) when (e is System.Security.Cryptography.CryptographicException or IOException or ArgumentException)
            {
                return Contract.Refuse($"--tls-cert/--tls-key: {e.Message}");
            }
        }
        // Bound before anything starts: a taken port or an address this machine lacks is one line and exit 1.
        BoundListener listening;
        try
        {
            listening = await CacheServer.ListenAsync(options, CancellationToken.None);
        }
        catch (System.Net.Sockets.SocketException e)
        {
            Console.Error.WriteLine($"{CacheHostOptions.ProgramName}: cannot listen on {options.Address}:{options.Port}: {e.Message}" +
                                    (e.SocketErrorCode == System.Net.Sockets.SocketError.AddressAlreadyInUse ? " (another cache host or Redis? --port chooses another)" : ""));
            return 1;
        }
        builder.Services.AddSingleton(listening);
        builder.Services.AddSingleton<ServerContext>();
        builder.Services.AddSingleton<HostMetrics>();
        // Before the server: hosted services start in order, and a SIGHUP sent once READY is printed must find its handler.
        builder.Services.AddHostedService<UsersReload>();
        builder.Services.AddHostedService<CacheServer>();
        builder.Services.AddHostedService<ExpirySweeper>();
        // After the server, so READY=1 to a service manager follows the bound port.
        builder.AddServiceManagers("hpcdata-cache");

        using var host = builder.Build();
        if (args.Any(a => a.Equals("--password", StringComparison.OrdinalIgnoreCase) || a.StartsWith("--password=", StringComparison.OrdinalIgnoreCase)))
            Log.PasswordOnCommandLine(host.Services.GetRequiredService<ILogger<CacheServer>>());
        // The meter exists for dotnet-counters whether or not an exporter is configured.
        _ = host.Services.GetRequiredService<HostMetrics>();
        OpenTelemetry.Metrics.MeterProvider? exporter;
        try
        {
            exporter = Hpc.CommonData.Telemetry.MetricsExport.Start(options.Metrics, Hpc.CommonData.Hosting.HpcMetrics.CacheHostMeter);
        }
        catch (Hpc.CommonData.CommonDataException e)
        {
            return Contract.Fail(e);
        }
        using var metricsExport = exporter;
        try
        {
            await host.RunAsync();
            return 0;
        }
        catch (Exception ex) when (ex is InvalidOperationException or System.Net.Sockets.SocketException)
        {
            // A taken port and the like: the host has already logged why; exit non-zero without a second stack trace.
            return 1;
        }
    }
}
