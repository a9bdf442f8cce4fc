using System.Globalization;

namespace Hpc.Bench;

/// <summary>CPU time and peak resident memory of a live process, from /proc (read before the process is stopped).</summary>
public static class ProcStats
{

    /// <summary>USER_HZ is 100 on every Linux ABI .NET runs on; sysconf is not worth a P/Invoke here.</summary>
    private const double TicksPerSecond = 100;

    public static ProcessSample Read(string name, int pid)
    {
        double cpu = double.NaN, user = double.NaN, system = double.NaN;
        long peak = -1;
        try
        {
            var stat = File.ReadAllText($"/proc/{pid}/stat");
            // The command name (field 2) may contain spaces and parentheses; fields are counted after its closing one.
            var rest = stat[(stat.LastIndexOf(')') + 2)..].Split(' ');
            // rest[0] is field 3 (state), so utime (14) and stime (15) are rest[11] and rest[12].
            user = long.Parse(rest[11], CultureInfo.InvariantCulture) / TicksPerSecond;
            system = long.Parse(rest[12], CultureInfo.InvariantCulture) / TicksPerSecond;
            cpu = user + system;
            foreach (var line in File.ReadLines($"/proc/{pid}/status"))
                if (line.StartsWith("VmHWM:", StringComparison.Ordinal))
                    peak = long.Parse(line[6..].Trim().Split(' ')[0], CultureInfo.InvariantCulture) * 1024;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException) { }
        return new ProcessSample(name, pid, cpu, peak, user, system);
    }

    public static ProcessSample Self(string name) => Read(name, Environment.ProcessId);
}
