using Hpc.CommonData.Fanout;

namespace Hpc.Jobs.Tests;

/// <summary>
/// A node's links that hand it each message <paramref name="delay"/> late, as a node behind a slow link takes its blocks;
/// with <paramref name="oneAtATime"/>, one message per delay from whichever sender, so a node fed by several at once is
/// no faster for it.
/// </summary>
internal sealed class SlowReceivingLink(IPeerLinks inner, TimeSpan delay, bool oneAtATime = false) : IPeerLinks
{
    private readonly SemaphoreSlim _link = new(1);

    public int Rank => inner.Rank;
    public int Size => inner.Size;
    public int SendWindow => inner.SendWindow;
    public Task SendAsync(ReadOnlyMemory<byte> message, CancellationToken ct) => inner.SendAsync(message, ct);
    public Task<int> ReceiveAsync(Memory<byte> buffer, CancellationToken ct) => inner.ReceiveAsync(buffer, ct);
    public Task ConnectPeersAsync(IReadOnlyList<int> sendTo, IReadOnlyList<int> receiveFrom, TimeSpan timeout, CancellationToken ct) =>
        inner.ConnectPeersAsync(sendTo, receiveFrom, timeout, ct);
    public Task SendToAsync(int rank, ReadOnlyMemory<byte> message, CancellationToken ct) => inner.SendToAsync(rank, message, ct);

    public async Task<int> ReceiveFromAsync(int rank, Memory<byte> buffer, CancellationToken ct)
    {
        if (!oneAtATime) await Task.Delay(delay, ct);
        else
        {
            await _link.WaitAsync(ct);
            try { await Task.Delay(delay, ct); }
            finally { _link.Release(); }
        }
        return await inner.ReceiveFromAsync(rank, buffer, ct);
    }
}
