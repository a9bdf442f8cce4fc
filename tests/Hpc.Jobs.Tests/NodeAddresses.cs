using Hpc.CommonData.Cache;

namespace Hpc.Jobs.Tests;

/// <summary>
/// Addresses for the nodes a test simulates on this machine, one each, so that they reach a cache host as a cluster's
/// nodes do: each from an address of its own (on Linux every 127.x.y.z is this machine's, through lo). A cache host
/// counts the connections of each client address (<c>--max-clients-per-address</c>); were all of a test's processes
/// to come from 127.0.0.1, that one count would hold them all, and with them every connection a loaded machine has
/// closed but the host has not yet reaped, so the test would fail on load alone. A test that means one address for
/// many clients says so and sets the host's cap itself.
/// </summary>
public static class NodeAddresses
{
    private static int _given;

    /// <summary>
    /// A loopback address no other node of this test run was given (never 127.0.0.1, which stays what "this machine"
    /// means to the tests that use it); null where the system has no other loopback address than 127.0.0.1.
    /// </summary>
    public static string? Next()
    {
        if (!OperatingSystem.IsLinux()) return null;
        var n = Interlocked.Increment(ref _given);
        return $"127.{100 + n / (254 * 254) % 100}.{n / 254 % 254 + 1}.{n % 254 + 1}";
    }

    /// <summary>
    /// <paramref name="env"/> with a node address of its own for a program started with it (the cache tier's variable,
    /// which the programs and the processes they start read), unless it names one already.
    /// </summary>
    public static Dictionary<string, string?> OwnNode(IDictionary<string, string?>? env)
    {
        var all = new Dictionary<string, string?>(env ?? new Dictionary<string, string?>());
        if (!all.ContainsKey(CacheTierOptions.SourceAddressVariable) && Next() is { } address) all[CacheTierOptions.SourceAddressVariable] = address;
        return all;
    }
}
