using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Hosting.Systemd;
using Microsoft.Extensions.Logging;

namespace Hpc.CommonData.Hosting;

/// <summary>
/// Lets a long-running component (cache host, node agent) run under a service manager: systemd (<c>Type=notify</c>)
/// or the Windows service control manager. In the hosting library, so the worker SDK carries no hosting dependency.
/// </summary>
public static class ServiceHosting
{
    /// <summary>Names a settings file of the site's (e.g. /etc/hpcdata/agent.json) read in addition to appsettings.json.</summary>
    public const string SettingsVariable = "HPCDATA_SETTINGS";

    /// <summary>
    /// An installed tool keeps its programs in a versioned folder that an upgrade replaces, so a service's settings
    /// cannot live beside the program: <see cref="SettingsVariable"/> names a file that is layered right after
    /// appsettings.json — the environment and the command line still win over it.
    /// </summary>
    public static void AddSiteSettings(this HostApplicationBuilder builder)
    {
        if (Environment.GetEnvironmentVariable(SettingsVariable) is not { Length: > 0 } file) return;
        var sources = builder.Configuration.Sources;
        var at = sources.Select((source, i) => (source, i)).LastOrDefault(x => x.source is Microsoft.Extensions.Configuration.Json.JsonConfigurationSource).i;
        var site = new Microsoft.Extensions.Configuration.Json.JsonConfigurationSource { Path = Path.GetFullPath(file), Optional = false, ReloadOnChange = false };
        site.ResolveFileProvider();
        sources.Insert(at + 1, site);
    }

    /// <summary>
    /// The systemd side follows sd_notify(3) rather than <c>AddSystemd()</c>: that one speaks only when the process's
    /// parent is systemd itself, and under <c>hpcdata agent</c> / <c>hpcdata cache-host</c> the parent is hpcdata
    /// (the unit sets <c>NotifyAccess=all</c>). A set <c>NOTIFY_SOCKET</c> is what says a manager is listening.
    /// </summary>
    public static HostApplicationBuilder AddServiceManagers(this HostApplicationBuilder builder, string component)
    {
        // Only acts when the service control manager started us; a console or a job step gets the console lifetime.
        builder.Services.AddWindowsService(o => o.ServiceName = component);
        // journald reads the <N> priority prefix from each line; the plain console format would log everything at one level.
        if (Environment.GetEnvironmentVariable("JOURNAL_STREAM") is { Length: > 0 })
            builder.Logging.AddSystemdConsole();
        var notifier = new SystemdNotifier();
        if (notifier.IsEnabled)
        {
            builder.Services.AddSingleton<ISystemdNotifier>(notifier);
            builder.Services.AddHostedService<ServiceNotifications>();
        }
        return builder;
    }
}

/// <summary>
/// Tells systemd <c>READY=1</c> once every hosted service has started (each component's StartAsync returns only once
/// it accepts work: the cache host's port bound, the agent's pipe listening) and <c>STOPPING=1</c> when a stop begins
/// (SIGTERM), so <c>systemctl start</c> returns when the component really serves and a stop is shown as one.
/// </summary>
internal sealed class ServiceNotifications(ISystemdNotifier notifier, IHostApplicationLifetime lifetime, ILogger<ServiceNotifications> log) : IHostedService
{
    private CancellationTokenRegistration _started, _stopping;

    public Task StartAsync(CancellationToken cancellationToken)
    {
        _started = lifetime.ApplicationStarted.Register(() => Send(ServiceState.Ready, new ServiceState($"STATUS=serving (pid {Environment.ProcessId})")));
        _stopping = lifetime.ApplicationStopping.Register(() => Send(ServiceState.Stopping, new ServiceState("STATUS=stopping")));
        return Task.CompletedTask;
    }

    public Task StopAsync(CancellationToken cancellationToken)
    {
        _started.Dispose();
        _stopping.Dispose();
        return Task.CompletedTask;
    }

    private void Send(params ServiceState[] states)
    {
        foreach (var state in states)
        {
            try
            {
                notifier.Notify(state);
            }
            catch (Exception e) when (e is System.Net.Sockets.SocketException or IOException)
            {
                // A manager that went away must not take the service down with it; it only loses the notice.
                log.LogWarning("Cannot notify the service manager ({State}): {Error}", state, e.Message);
                return;
            }
        }
    }
}
