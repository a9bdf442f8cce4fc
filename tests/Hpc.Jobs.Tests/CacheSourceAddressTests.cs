using Hpc.CommonData;
using Hpc.CommonData.Cache;

namespace Hpc.Jobs.Tests;

/// <summary>
/// <c>--cache-source-address</c>: the address of this machine that a client's connections to the cache tier leave from
/// (a node with several interfaces picks the one on the cache tier's network), which is also the address a cache host
/// counts them against (<c>--max-clients-per-address</c>).
/// </summary>
public sealed class CacheSourceAddressTests
{
    private static readonly byte[] Ping = "PING"u8.ToArray();

    [Fact]
    public async Task A_cache_host_counts_each_client_by_the_address_it_connects_from()
    {
        if (NodeAddresses.Next() is not { } first || NodeAddresses.Next() is not { } second) return; // no loopback address but 127.0.0.1
        await using var s = new Sandbox();
        // One connection per address: this test is about whose address a connection counts against.
        await s.StartCacheHostAsync(configure: o => o.MaxClientsPerAddress = 1);
        CacheTierOptions From(string address) => new() { Hosts = [.. s.Hosts], SourceAddress = address, ConnectionsPerHost = 1, MaxAttempts = 1 };
        await using var node = new CacheTierClient(From(first));
        await using var otherNode = new CacheTierClient(From(second));
        await using var sameNode = new CacheTierClient(From(first));

        await node.ExecuteOnAllAsync(Ping, []);
        await otherNode.ExecuteOnAllAsync(Ping, []);
        var refused = await Assert.ThrowsAnyAsync<CommonDataException>(() => sameNode.ExecuteOnAllAsync(Ping, []));

        Assert.Contains($"(1 from {first}; --max-clients-per-address)", refused.Message);
    }

    [Fact]
    public async Task An_address_this_machine_lacks_or_a_name_instead_of_an_address_is_refused_naming_the_switch()
    {
        await using var s = new Sandbox();
        await s.StartCacheHostAsync();

        // 192.0.2.0/24 is kept for documentation (RFC 5737): no machine has it.
        var lacked = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList, "--cache-source-address", "192.0.2.1"]);
        var named = await s.HpcdataAsync(["list", "--cache-hosts", s.HostList, "--cache-source-address", "node7"]);

        Assert.NotEqual(0, lacked.Code);
        Assert.Contains($"cannot connect to {s.Hosts[0]} from 192.0.2.1 (--cache-source-address, {CacheTierOptions.SourceAddressVariable})", lacked.Stderr);
        Assert.Contains("(it is not an address of this machine)", lacked.Stderr);
        Assert.NotEqual(0, named.Code);
        Assert.Contains("--cache-source-address 'node7' is not an IP address", named.Stderr);
    }
}
