namespace Hpc.CommonData.Fanout;

public static partial class RingAllGather
{
    /// <summary>
    /// The blocks this member sent its right neighbour most recently, kept until <see cref="KeptSentBytes"/> more
    /// follow them. A send completes once the kernel has taken the bytes, so when the neighbour dies or hangs, what sat
    /// in the two sockets' buffers (and what it had read but not yet forwarded) is lost with it; the member after it
    /// is sent those blocks from here, not fetched from the cache tier a second time.
    /// </summary>
    private sealed class SentWindow(long budget) : IDisposable
    {
        private readonly LinkedList<Message> _order = new();
        private readonly Dictionary<int, LinkedListNode<Message>> _byFirst = [];
        private long _bytes;
        private bool _closed;

        /// <summary>Takes over the sender's hold on <paramref name="m"/>; the oldest kept blocks beyond the budget are let go.</summary>
        public void Keep(Message m)
        {
            List<Message> released = [];
            lock (_order)
            {
                if (_closed) released.Add(m);
                else
                {
                    if (_byFirst.Remove(m.First, out var older)) Forget(older, released);
                    _byFirst[m.First] = _order.AddLast(m);
                    _bytes += m.Length;
                    while (_bytes > budget && _order.First is { } oldest && oldest.Value != m)
                    {
                        _byFirst.Remove(oldest.Value.First);
                        Forget(oldest, released);
                    }
                }
            }
            foreach (var r in released) r.Release();
        }

        /// <summary>Copies the kept block that starts at segment <paramref name="first"/> into <paramref name="into"/>;
        /// its length, or -1 when it is no longer kept.</summary>
        public int TryCopy(int first, Memory<byte> into)
        {
            lock (_order)
            {
                if (!_byFirst.TryGetValue(first, out var kept)) return -1;
                kept.Value.Buffer[..kept.Value.Length].CopyTo(into);
                return kept.Value.Length;
            }
        }

        private void Forget(LinkedListNode<Message> node, List<Message> released)
        {
            _order.Remove(node);
            _bytes -= node.Value.Length;
            released.Add(node.Value);
        }

        public void Dispose()
        {
            List<Message> released;
            lock (_order)
            {
                _closed = true;
                released = [.. _order];
                _order.Clear();
                _byFirst.Clear();
                _bytes = 0;
            }
            foreach (var r in released) r.Release();
        }
    }

    /// <summary>What this machine's kernel lets a connection's send and receive buffers grow to together (tcp_wmem's and
    /// tcp_rmem's maxima): at most what a link can hold unread when its receiver stops.</summary>
    public static readonly long SocketBufferBytes = SocketBufferMaximum("/proc/sys/net/ipv4/tcp_wmem") + SocketBufferMaximum("/proc/sys/net/ipv4/tcp_rmem");

    /// <summary>Bytes of sent blocks each member keeps for a repair: <see cref="SocketBufferBytes"/>, at most 16 MiB.</summary>
    public static readonly long KeptSentBytes = Math.Min(16L << 20, SocketBufferBytes);

    private static long SocketBufferMaximum(string file)
    {
        try { return long.Parse(File.ReadAllText(file).Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries)[^1], System.Globalization.CultureInfo.InvariantCulture); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or IndexOutOfRangeException) { return 4L << 20; }
    }
}
