using System.Net;
using System.Net.Sockets;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Loopback ports for the processes a test starts on a port of its own. The kernel may hand a port it just freed out
/// again, and tests run side by side; one port never goes to two of this run's processes, which would otherwise find it
/// taken (or, where a listener shares ports, split each other's connections).
/// </summary>
public static class FreePorts
{
    private static readonly HashSet<int> Given = [];

    public static int Next()
    {
        for (var attempt = 0; ; attempt++)
        {
            using var probe = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            probe.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            var port = ((IPEndPoint)probe.LocalEndPoint!).Port;
            lock (Given)
                if (Given.Add(port) || attempt > 1000) return port;
        }
    }
}
