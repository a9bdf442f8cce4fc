using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;

namespace Hpc.Bench;

/// <summary>
/// CPU seconds around one measurement: the client's (this process, or redis-benchmark once reaped), and the whole
/// machine's from /proc/stat, so a table can show what the store, the client and everything else on the cores used.
/// </summary>
public static class CpuClock
{
    private const double TicksPerSecond = 100; // USER_HZ

    public static double SelfSeconds() => Process.GetCurrentProcess().TotalProcessorTime.TotalSeconds;

    /// <summary>Busy time of all cores together (user, nice, system, irq, softirq, steal).</summary>
    public static double MachineBusySeconds()
    {
        try
        {
            var first = File.ReadLines("/proc/stat").First();
            var f = first.Split(' ', StringSplitOptions.RemoveEmptyEntries);
            long T(int i) => i < f.Length ? long.Parse(f[i], CultureInfo.InvariantCulture) : 0;
            return (T(1) + T(2) + T(3) + T(6) + T(7) + T(8)) / TicksPerSecond;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException) { return double.NaN; }
    }

    [StructLayout(LayoutKind.Sequential)]
    private struct RUsage
    {
        public long UserSeconds, UserMicroseconds, SystemSeconds, SystemMicroseconds;
        public long MaxRss, IxRss, IdRss, IsRss, MinFlt, MajFlt, NSwap, InBlock, OuBlock, MsgSnd, MsgRcv, NSignals, NvCsw, NivCsw;
    }

    [DllImport("libc", EntryPoint = "getrusage", SetLastError = true)]
    private static extern int GetRUsage(int who, out RUsage usage);

    /// <summary>CPU of children that have exited and been reaped (RUSAGE_CHILDREN): the stores keep running, so a
    /// difference around one redis-benchmark run is that run's.</summary>
    public static double ReapedChildrenSeconds()
    {
        if (!OperatingSystem.IsLinux() || GetRUsage(-1, out var u) != 0) return double.NaN;
        return u.UserSeconds + u.UserMicroseconds / 1e6 + u.SystemSeconds + u.SystemMicroseconds / 1e6;
    }
}
