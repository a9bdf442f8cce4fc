using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using Hpc.CommonData.Format;
using Hpc.CommonData.Fanout;
using Hpc.Jobs.Fanout;
using static Hpc.Jobs.Tests.RingData;

namespace Hpc.Jobs.Tests;

/// <summary>The fan-out's ring over TCP connections between neighbours on loopback, set up through a rank group.</summary>
public sealed class TcpRingTests
{
    private static Manifest ManifestOf(int segments) => RingData.ManifestOf(segments, seed: 3);

    private static Task<TcpRing[]> ConnectAll(IReadOnlyList<IRankGroup> groups, CancellationToken ct) =>
        Task.WhenAll(groups.Select(g => Task.Run(() => TcpRing.ConnectAsync(g, IPAddress.Loopback, TimeSpan.FromSeconds(20), ct))));

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(4)]
    public async Task Every_rank_receives_every_block_over_its_neighbours_connections(int ranks)
    {
        var manifest = ManifestOf(120);
        var plan = new FanoutPlan(manifest, ranks, maxBlockBytes: 256 << 10);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(60));
        var links = await ConnectAll(InProcessRanks.Create(ranks), timeout.Token);
        var delivered = Enumerable.Range(0, ranks).Select(_ => new ConcurrentDictionary<int, byte[]>()).ToArray();
        try
        {
            await Task.WhenAll(links.Select(link => Task.Run(() => RingAllGather.RunAsync(plan, link,
                (block, message, _) =>
                {
                    var at = BlockMessage.HeaderLength;
                    for (var i = block.First; i < block.First + block.Count; i++)
                        at += BlockMessage.WriteRecord(message.Span[at..], i, StoredBytes(manifest, i));
                    BlockMessage.WriteHeader(message.Span, block, at);
                    return Task.FromResult(at);
                },
                (message, _) =>
                {
                    foreach (var (index, stored) in BlockMessage.Records(message, plan))
                        Assert.True(delivered[link.Rank].TryAdd(index, stored.ToArray()), $"rank {link.Rank} got segment {index} twice");
                    return ValueTask.CompletedTask;
                }, timeout.Token))));
        }
        finally
        {
            foreach (var link in links) await link.DisposeAsync();
        }
        foreach (var got in delivered)
        {
            Assert.Equal(Enumerable.Range(0, manifest.Segments.Count), got.Keys.Order());
            Assert.All(got, kv => Assert.Equal(StoredBytes(manifest, kv.Key), kv.Value));
        }
    }

    [Fact]
    public async Task A_send_or_receive_over_a_dropped_link_fails_its_task_instead_of_throwing_past_the_caller()
    {
        // A bypass drops the dead neighbour's link a moment before the sender moves on to the next member; a send begun
        // in that moment must come back as a failed send, which the sender watches, not escape it as an exception.
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var links = await ConnectAll(InProcessRanks.Create(3), timeout.Token);
        try
        {
            links[0].Drop(1);
            links[0].Drop(2);
            var send = links[0].SendToAsync(1, new byte[8], timeout.Token);
            var receive = links[0].ReceiveFromAsync(2, new byte[8], timeout.Token);
            Assert.Contains("has no link to rank 1", (await Assert.ThrowsAsync<IOException>(() => send)).Message);
            Assert.Contains("has no link from rank 2", (await Assert.ThrowsAsync<IOException>(() => receive)).Message);
        }
        finally
        {
            foreach (var link in links) await link.DisposeAsync();
        }
    }

    [Fact]
    public async Task Connections_without_the_ranks_secret_are_closed_and_the_ring_still_forms()
    {
        // Two strangers reach rank 0's port before its left neighbour does: one claims to be rank 1 without the secret,
        // one connects and says nothing. Rank 1 is held back until both are connected.
        var groups = InProcessRanks.Create(2).Select(g => new Spied(g)).ToArray();
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var connecting = ConnectAll(groups, timeout.Token);
        var port = (await groups[0].Ports.Task.WaitAsync(timeout.Token))[0];
        using var forger = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        using var silent = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await silent.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port), timeout.Token);
        await forger.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port), timeout.Token);
        var forged = new byte[20];
        BitConverter.GetBytes(1).CopyTo(forged, 16);
        await forger.SendAsync(forged, SocketFlags.None, timeout.Token);
        groups[1].Gate.SetResult();

        var links = await connecting;
        try
        {
            // Each rank's first message is its neighbour's, never a stranger's bytes.
            var sends = links.Select(l => l.SendAsync(new byte[] { (byte)(10 + l.Rank) }, timeout.Token)).ToArray();
            var buffers = links.Select(_ => new byte[8]).ToArray();
            var lengths = await Task.WhenAll(links.Select((l, i) => l.ReceiveAsync(buffers[i], timeout.Token)));
            await Task.WhenAll(sends);
            Assert.Equal([1, 1], lengths);
            Assert.Equal(11, buffers[0][0]);
            Assert.Equal(10, buffers[1][0]);
            // The forger was hung up on.
            Assert.Equal(0, await forger.ReceiveAsync(new byte[1], SocketFlags.None, timeout.Token));
        }
        finally
        {
            foreach (var link in links) await link.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_message_longer_than_the_receive_buffer_is_refused_with_its_length()
    {
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        var links = await ConnectAll(InProcessRanks.Create(2), timeout.Token);
        try
        {
            var sending = links[0].SendAsync(new byte[100], timeout.Token);
            var e = await Assert.ThrowsAsync<InvalidDataException>(() => links[1].ReceiveAsync(new byte[10], timeout.Token));
            Assert.Contains("100 bytes", e.Message);
            await sending;
        }
        finally
        {
            foreach (var link in links) await link.DisposeAsync();
        }
    }

    /// <summary>A rank group that lets the test see the ports the ranks announce, and hold a rank back after the all-gather.</summary>
    private sealed class Spied(IRankGroup inner) : IRankGroup
    {
        public TaskCompletionSource<int[]> Ports { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
        public TaskCompletionSource Gate { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
        public int Rank => inner.Rank;
        public int Size => inner.Size;
        public IRingLink Ring => inner.Ring;
        public Task<byte[]> BroadcastAsync(byte[]? fromRoot, CancellationToken ct) => inner.BroadcastAsync(fromRoot, ct);

        public async Task<byte[][]> AllGatherAsync(byte[] mine, CancellationToken ct)
        {
            var all = await inner.AllGatherAsync(mine, ct);
            Ports.TrySetResult(all.Select(e => (e[16] << 8) | e[17]).ToArray());
            if (Rank != 0) await Gate.Task.WaitAsync(ct);
            return all;
        }
    }
}
