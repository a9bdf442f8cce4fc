using System.Runtime.ExceptionServices;

namespace Hpc.CommonData.Fetch;

/// <summary>
/// The one thread that writes a copy. Segments are verified and decoded in parallel, each into a pooled buffer, and
/// handed over here (<see cref="Post"/>); this thread writes them — adjacent ones in one vectored write — and then tells
/// <c>written</c> each one's tag, in its own thread, so a segment is journaled only once its bytes are in the file.
/// <para>Why one writer: many threads writing 64 KB blocks into one tmpfs file each take the file's inode lock for the
/// copy, and the kernel spins the waiters on the lock's owner (<c>rwsem_spin_on_owner</c>, up to a fifth of the agent's
/// CPU, and more on a loaded node, where spinning takes the CPU from the job). Here only one thread ever takes it, the
/// decoders never wait for it, and nobody spins: a poster waits (blocked) only when <see cref="Capacity"/> segments are
/// already queued, and the writer sleeps until <see cref="WakeAt"/> are waiting, a drain is asked for, or
/// <see cref="IdleMs"/> pass.</para>
/// <para>Nothing is allocated per segment: the writer owns the buffers (<see cref="Rent"/>), at most
/// <see cref="Capacity"/> of them, and takes each back once written. Buffers rented on the decoding threads from the
/// shared pool and returned on this one defeat the pool's per-thread caches: with many segments queued the pool
/// dropped them and allocated new ones, a fresh 64 KB array (and its pages) per segment.</para>
/// </summary>
public sealed class CopyWriter : IDisposable
{
    /// <summary>Buffers the writer lends at most (4 MiB of 64 KB segments); a decoder beyond waits for the writer.</summary>
    public const int Capacity = 64;
    /// <summary>Queued segments that wake the sleeping writer: a megabyte's worth, written in few calls.</summary>
    private const int WakeAt = 16;
    /// <summary>How long a partial batch waits at most, so a slow sender's segments are journaled soon anyway.</summary>
    private const int IdleMs = 20;
    /// <summary>Buffers in one vectored write (below the kernel's IOV_MAX of 1024).</summary>
    private const int MaxRun = 64;

    private struct Entry
    {
        public byte[] Buffer;
        public int Length;
        public long Offset;
        public int Tag;
    }

    private readonly DatasetFiles _files;
    private readonly Action<int> _written;
    private readonly object _gate = new();
    private readonly Entry[] _ring = new Entry[Capacity];
    private readonly Entry[] _batch = new Entry[Capacity];
    private readonly List<ReadOnlyMemory<byte>> _run = new(MaxRun);
    private readonly Thread _thread;
    private readonly byte[]?[] _free = new byte[Capacity][];
    private int _freeCount, _lent;
    private int _head, _count, _inFlight, _draining;
    private bool _writerAsleep, _postersWaiting, _closed;
    private ExceptionDispatchInfo? _failure;

    /// <param name="written">Told each segment's tag once its bytes are written, on the writer's thread; a throw stops the writer.</param>
    public CopyWriter(DatasetFiles files, Action<int> written)
    {
        (_files, _written) = (files, written);
        _thread = new Thread(Run) { IsBackground = true, Name = "copy writer" };
        _thread.Start();
    }

    /// <summary>
    /// A buffer of at least <paramref name="length"/> bytes to decode a segment into, lent by the writer: hand it back
    /// through <see cref="Post"/>, or <see cref="Return"/> when the segment was rejected. Waits, blocked, while all
    /// <see cref="Capacity"/> are lent. Throws the writer's failure (e.g. a full disk) once it failed.
    /// </summary>
    public byte[] Rent(int length)
    {
        byte[]? buffer;
        lock (_gate)
        {
            while (true)
            {
                _failure?.Throw();
                if (_closed) throw new ObjectDisposedException(nameof(CopyWriter));
                if (_lent < Capacity) break;
                _postersWaiting = true;
                Monitor.Wait(_gate);
            }
            _lent++;
            buffer = _freeCount > 0 ? _free[--_freeCount] : null;
            if (buffer is not null) _free[_freeCount] = null;
        }
        // Allocated once per lent slot (or when a segment is larger than the buffer kept), then reused.
        return buffer is not null && buffer.Length >= length ? buffer : GC.AllocateUninitializedArray<byte>(Math.Max(length, 64 * 1024));
    }

    /// <summary>Takes back a buffer from <see cref="Rent"/> that is not to be written.</summary>
    public void Return(byte[] buffer)
    {
        lock (_gate) GiveBack(buffer);
    }

    private void GiveBack(byte[] buffer)
    {
        if (_freeCount < Capacity) _free[_freeCount++] = buffer;
        _lent--;
        if (_postersWaiting)
        {
            _postersWaiting = false;
            Monitor.PulseAll(_gate);
        }
    }

    /// <summary>
    /// Queues <paramref name="length"/> bytes of <paramref name="buffer"/> (from <see cref="Rent"/>; the writer takes it
    /// back, also when this throws) to be written at dataset offset <paramref name="offset"/>. Never waits. Throws the
    /// writer's failure (e.g. a full disk) once it failed.
    /// </summary>
    public void Post(byte[] buffer, int length, long offset, int tag)
    {
        lock (_gate)
        {
            if (_failure is not null || _closed)
            {
                GiveBack(buffer);
                _failure?.Throw();
                throw new ObjectDisposedException(nameof(CopyWriter));
            }
            // At most Capacity buffers are lent, so the ring always has room for one of them.
            _ring[(_head + _count) % Capacity] = new Entry { Buffer = buffer, Length = length, Offset = offset, Tag = tag };
            _count++;
            if (_writerAsleep && _count >= WakeAt) Monitor.PulseAll(_gate);
        }
    }

    /// <summary>Why the writer stopped (a write or <c>written</c> threw), or null.</summary>
    public Exception? Failure
    {
        get { lock (_gate) return _failure?.SourceException; }
    }

    /// <summary>Waits until everything posted is written and told; throws the writer's failure, if any.</summary>
    public void Drain()
    {
        lock (_gate)
        {
            _draining++;
            try
            {
                Monitor.PulseAll(_gate);
                while ((_count > 0 || _inFlight > 0) && _failure is null) Monitor.Wait(_gate);
                _failure?.Throw();
            }
            finally { _draining--; }
        }
    }

    private void Run()
    {
        while (true)
        {
            int n;
            bool failed;
            lock (_gate)
            {
                if (_count < WakeAt && _draining == 0 && !_closed)
                {
                    _writerAsleep = true;
                    Monitor.Wait(_gate, IdleMs);
                    _writerAsleep = false;
                }
                if (_count == 0)
                {
                    if (_closed) return;
                    continue;
                }
                n = _count;
                for (var k = 0; k < n; k++) _batch[k] = _ring[(_head + k) % Capacity];
                Array.Clear(_ring);
                (_head, _count, _inFlight) = (0, 0, n);
                failed = _failure is not null;
            }
            try
            {
                if (!failed) Write(n);
            }
            catch (Exception e)
            {
                lock (_gate) _failure ??= ExceptionDispatchInfo.Capture(e);
            }
            lock (_gate)
            {
                for (var k = 0; k < n; k++)
                {
                    GiveBack(_batch[k].Buffer);
                    _batch[k] = default;
                }
                _inFlight = 0;
                if (_draining > 0 || _postersWaiting || _failure is not null) Monitor.PulseAll(_gate);
            }
        }
    }

    /// <summary>Writes the batch in offset order, adjacent segments in one call each, then tells of each.</summary>
    private void Write(int n)
    {
        SortByOffset(n);
        for (var first = 0; first < n;)
        {
            var last = first;
            var bytes = _batch[first].Length;
            while (last + 1 < n && last + 1 - first < MaxRun && _batch[last + 1].Offset == _batch[last].Offset + _batch[last].Length)
                bytes += _batch[++last].Length;
            if (last == first) _files.Write(_batch[first].Buffer.AsSpan(0, _batch[first].Length), _batch[first].Offset);
            else
            {
                _run.Clear();
                for (var k = first; k <= last; k++) _run.Add(_batch[k].Buffer.AsMemory(0, _batch[k].Length));
                _files.Write(_run, _batch[first].Offset, bytes);
            }
            for (var k = first; k <= last; k++) _written(_batch[k].Tag);
            first = last + 1;
        }
    }

    /// <summary>Insertion sort: a batch arrives nearly in order (batches and frames are runs of consecutive segments).</summary>
    private void SortByOffset(int n)
    {
        for (var i = 1; i < n; i++)
        {
            var e = _batch[i];
            var j = i - 1;
            for (; j >= 0 && _batch[j].Offset > e.Offset; j--) _batch[j + 1] = _batch[j];
            _batch[j + 1] = e;
        }
    }

    /// <summary>Writes what is still queued (a broken-off ingest keeps what it verified), then ends the writer's thread.</summary>
    public void Dispose()
    {
        lock (_gate)
        {
            if (_closed) return;
            _closed = true;
            Monitor.PulseAll(_gate);
        }
        _thread.Join();
    }
}
