using System.Runtime.CompilerServices;

namespace Hpc.CommonData.Cache;

/// <summary>
/// One byte budget per process, shared by every connection: tokens accrue at the configured rate up to a burst, and a
/// transfer larger than what is in the bucket goes into debt and waits until the debt is paid. Debt (rather than
/// refusing until enough tokens exist) keeps large reads from starving behind small ones and makes the waits of
/// concurrent connections queue up behind each other, so together they hold the rate exactly.
/// </summary>
public sealed class TokenBucket
{
    private readonly TimeProvider _time;
    private readonly double _bytesPerTick;
    private readonly double _burst;
    private readonly Lock _lock = new();
    private double _tokens;
    private long _last;

    /// <param name="rate">Bytes per second; must not be unlimited.</param>
    /// <param name="burst">Most bytes that may pass without waiting after an idle spell; by default a tenth of a second's worth (at least 64 KB).</param>
    public TokenBucket(ByteRate rate, long? burst = null, TimeProvider? time = null)
    {
        if (rate.IsUnlimited) throw new ArgumentOutOfRangeException(nameof(rate), "a token bucket needs a finite rate");
        _time = time ?? TimeProvider.System;
        Rate = rate;
        _bytesPerTick = rate.BytesPerSecond / (double)_time.TimestampFrequency;
        _burst = burst ?? Math.Max(64 << 10, rate.BytesPerSecond / 10);
        _tokens = _burst;
        _last = _time.GetTimestamp();
    }

    public ByteRate Rate { get; }

    /// <summary>Charges <paramref name="bytes"/> now and says how long the caller must wait before moving more.</summary>
    public TimeSpan Reserve(long bytes)
    {
        lock (_lock)
        {
            var now = _time.GetTimestamp();
            _tokens = Math.Min(_burst, _tokens + (now - _last) * _bytesPerTick);
            _last = now;
            _tokens -= bytes;
            return _tokens >= 0 ? TimeSpan.Zero : TimeSpan.FromSeconds(-_tokens / Rate.BytesPerSecond);
        }
    }

    /// <summary>Charges <paramref name="bytes"/> and waits until the bucket has paid for them.</summary>
    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    public async ValueTask TakeAsync(long bytes, CancellationToken ct)
    {
        var wait = Reserve(bytes);
        if (wait > TimeSpan.Zero) await Task.Delay(wait, _time, ct);
    }
}

/// <summary>
/// The socket stream below TLS, charged against a <see cref="TokenBucket"/>: bytes received after they arrive (the
/// reader then pauses, the kernel's window fills and the sender slows, so the link carries the rate), bytes sent before
/// they leave.
/// </summary>
internal sealed class RateLimitedStream(Stream inner, TokenBucket bucket) : Stream
{
    public override bool CanRead => inner.CanRead;
    public override bool CanSeek => false;
    public override bool CanWrite => inner.CanWrite;
    public override long Length => throw new NotSupportedException();
    public override long Position { get => throw new NotSupportedException(); set => throw new NotSupportedException(); }
    public override void Flush() => inner.Flush();
    public override Task FlushAsync(CancellationToken ct) => inner.FlushAsync(ct);
    public override long Seek(long offset, SeekOrigin origin) => throw new NotSupportedException();
    public override void SetLength(long value) => throw new NotSupportedException();

    public override int Read(byte[] buffer, int offset, int count)
    {
        var n = inner.Read(buffer, offset, count);
        if (n > 0 && bucket.Reserve(n) is { } wait && wait > TimeSpan.Zero) Thread.Sleep(wait);
        return n;
    }

    public override void Write(byte[] buffer, int offset, int count)
    {
        if (bucket.Reserve(count) is { } wait && wait > TimeSpan.Zero) Thread.Sleep(wait);
        inner.Write(buffer, offset, count);
    }

    public override Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken ct) =>
        ReadAsync(buffer.AsMemory(offset, count), ct).AsTask();

    public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken ct) =>
        WriteAsync(buffer.AsMemory(offset, count), ct).AsTask();

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder<>))]
    public override async ValueTask<int> ReadAsync(Memory<byte> buffer, CancellationToken ct = default)
    {
        var n = await inner.ReadAsync(buffer, ct);
        if (n > 0) await bucket.TakeAsync(n, ct);
        return n;
    }

    /// <summary>A pipelined batch (about 1 MB) goes out in slices, so the link sees an even pace rather than bursts.</summary>
    private const int WriteSlice = 64 << 10;

    [AsyncMethodBuilder(typeof(PoolingAsyncValueTaskMethodBuilder))]
    public override async ValueTask WriteAsync(ReadOnlyMemory<byte> buffer, CancellationToken ct = default)
    {
        while (buffer.Length > 0)
        {
            var slice = buffer[..Math.Min(WriteSlice, buffer.Length)];
            await bucket.TakeAsync(slice.Length, ct);
            await inner.WriteAsync(slice, ct);
            buffer = buffer[slice.Length..];
        }
    }

    protected override void Dispose(bool disposing)
    {
        if (disposing) inner.Dispose();
        base.Dispose(disposing);
    }

    public override ValueTask DisposeAsync() => inner.DisposeAsync();
}
