using System.Runtime.InteropServices;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Hpc.CacheHost.Server;

/// <summary>
/// SIGHUP loads the users file and password file again (<c>systemctl reload</c>, <c>kill -HUP</c>), as <c>ACL LOAD</c>
/// does from a client: an operator adds, removes or changes an account on every host without a restart, and so without
/// emptying the hosts. Without this handler SIGHUP's default action would end the process.
/// </summary>
internal sealed class UsersReload(ServerContext server, ILogger<UsersReload> logger) : IHostedService, IDisposable
{
    private PosixSignalRegistration? _hangup;

    public Task StartAsync(CancellationToken cancellationToken)
    {
        if (!OperatingSystem.IsWindows())
        {
            // A host started under nohup (or by a shell that ignores hangups) inherits SIGHUP ignored, and the runtime
            // leaves an ignored signal ignored: reloading would then do nothing. Reload is what SIGHUP means here, so
            // the default is put back first; the handler below still keeps a hangup from ending the process.
            if (signal(SigHup, SigDefault) == SigError) Log.HangupNotRestored(logger, Marshal.GetLastPInvokeError());
            _hangup = PosixSignalRegistration.Create(PosixSignal.SIGHUP, context =>
            {
                context.Cancel = true;
                Reload(server, logger, "SIGHUP");
            });
        }
        return Task.CompletedTask;
    }

    private const int SigHup = 1;
    private static readonly nint SigDefault = 0, SigError = -1;

    [DllImport("libc", SetLastError = true)]
    private static extern nint signal(int signum, nint handler);

    public Task StopAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public void Dispose() => _hangup?.Dispose();

    /// <summary>Loads the accounts again and logs the outcome; the reply for a client that asked.</summary>
    public static (bool Loaded, string Message) Reload(ServerContext server, ILogger logger, string trigger)
    {
        var outcome = server.ReloadUsers();
        if (outcome.Loaded)
        {
            Log.UsersReloaded(logger, trigger, outcome.Message);
            if (CacheUsers.Exposure(server.Options) is { } exposure) Log.SecretsExposed(logger, exposure);
        }
        else
            Log.UsersNotReloaded(logger, trigger, outcome.Message);
        return outcome;
    }
}
