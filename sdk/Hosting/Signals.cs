using System.Runtime.InteropServices;

namespace Hpc.CommonData.Hosting;

/// <summary>The one way a program learns of SIGINT (Ctrl-C) and SIGTERM (scancel, job-manager stop, a parent passing
/// either on): its token is cancelled, and it ends as it would on Ctrl-C.</summary>
public static class Signals
{
    public static IDisposable CancelOn(CancellationTokenSource cancel)
    {
        void Handler(PosixSignalContext c) { c.Cancel = true; cancel.Cancel(); }
        var registrations = new List<IDisposable> { PosixSignalRegistration.Create(PosixSignal.SIGINT, Handler) };
        if (!OperatingSystem.IsWindows()) registrations.Add(PosixSignalRegistration.Create(PosixSignal.SIGTERM, Handler));
        return new Registrations(registrations);
    }

    private sealed class Registrations(List<IDisposable> all) : IDisposable
    {
        public void Dispose() { foreach (var r in all) r.Dispose(); }
    }
}
