using System.Diagnostics;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Adds and removes veth devices on this machine until disposed, as a container runtime does: each device is up with
/// its peer in a network namespace of its own, then gets an address, then goes. Bounded to 2,000 devices and 3 minutes;
/// disposing stops it and removes the namespace and whatever device is left.
/// </summary>
public sealed class DeviceChurn : IAsyncDisposable
{
    private readonly Process process;
    private readonly string name;
    private readonly string countFile;

    private DeviceChurn(Process process, string name, string countFile) => (this.process, this.name, this.countFile) = (process, name, countFile);

    /// <summary>How many devices it has created so far.</summary>
    public int Devices => File.Exists(countFile) && int.TryParse(File.ReadAllText(countFile).Trim(), out int n) ? n : 0;

    /// <summary>Waits until the first device was created, so the churn is under way before what it disturbs starts; false
    /// when none was within <paramref name="limit"/>.</summary>
    public async Task<bool> UnderWayAsync(TimeSpan limit)
    {
        var clock = Stopwatch.StartNew();
        while (Devices == 0 && !process.HasExited && clock.Elapsed < limit) await Task.Delay(20);
        return Devices > 0;
    }

    public static DeviceChurn Start()
    {
        string name = $"hcchurn{Environment.ProcessId % 100000}";
        string countFile = Path.Combine(Path.GetTempPath(), name + ".count");
        // Device names are at most 15 characters: "hc" + up to 5 digits of the pid + "v" + up to 4 of the count.
        string script = $$"""
            ip netns add {{name}} || exit 1
            end=$(( $(date +%s) + 180 )); i=0
            while [ $i -lt 2000 ] && [ $(date +%s) -lt $end ]; do
              i=$((i + 1)); dev=hc{{Environment.ProcessId % 100000}}v$i
              ip link add $dev type veth peer name peer$i netns {{name}} || break
              ip link set $dev up; ip -n {{name}} link set peer$i up
              echo $i > {{countFile}}
              sleep 0.03; ip addr add 10.250.$((i % 250)).1/30 dev $dev; sleep 0.03
              ip link del $dev
            done
            """;
        var start = new ProcessStartInfo("/bin/sh") { ArgumentList = { "-c", script }, RedirectStandardOutput = true, RedirectStandardError = true };
        var process = Process.Start(start)!;
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return new DeviceChurn(process, name, countFile);
    }

    public async ValueTask DisposeAsync()
    {
        if (!process.HasExited) process.Kill(entireProcessTree: true);
        await process.WaitForExitAsync();
        process.Dispose();
        // Deleting the namespace deletes the peers in it, and a veth goes with its peer.
        using var delete = Process.Start(new ProcessStartInfo("ip") { ArgumentList = { "netns", "del", name }, RedirectStandardError = true })!;
        await delete.WaitForExitAsync();
        File.Delete(countFile);
    }
}
