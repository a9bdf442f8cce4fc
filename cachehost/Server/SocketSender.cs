using System.Net.Sockets;
using System.Threading.Tasks.Sources;

namespace Hpc.CacheHost.Server;

/// <summary>
/// One reusable send operation per connection: a gather list goes to the kernel as a single sendmsg, and awaiting it
/// allocates nothing (the same shape as Kestrel's socket sender).
/// </summary>
internal sealed class SocketSender : SocketAsyncEventArgs, IValueTaskSource<int>
{
    private ManualResetValueTaskSourceCore<int> _source;

    public SocketSender() : base(unsafeSuppressExecutionContextFlow: true)
    {
        // The session continues straight on the I/O completion; it does not block, so inline continuation is safe.
        _source.RunContinuationsAsynchronously = false;
    }

    /// <summary>Sends every byte of <paramref name="segments"/>; completes with the byte count or throws SocketException.</summary>
    public ValueTask<int> SendAsync(Socket socket, IList<ArraySegment<byte>> segments)
    {
        _source.Reset();
        if (segments.Count == 1)
        {
            BufferList = null;
            SetBuffer(segments[0].Array, segments[0].Offset, segments[0].Count);
        }
        else
        {
            SetBuffer(null, 0, 0);
            BufferList = segments;
        }

        if (socket.SendAsync(this))
            return new ValueTask<int>(this, _source.Version);
        return SocketError == SocketError.Success
            ? new ValueTask<int>(BytesTransferred)
            : ValueTask.FromException<int>(new SocketException((int)SocketError));
    }

    protected override void OnCompleted(SocketAsyncEventArgs e)
    {
        if (SocketError == SocketError.Success)
            _source.SetResult(BytesTransferred);
        else
            _source.SetException(new SocketException((int)SocketError));
    }

    int IValueTaskSource<int>.GetResult(short token) => _source.GetResult(token);

    ValueTaskSourceStatus IValueTaskSource<int>.GetStatus(short token) => _source.GetStatus(token);

    void IValueTaskSource<int>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags) =>
        _source.OnCompleted(continuation, state, token, flags);
}
