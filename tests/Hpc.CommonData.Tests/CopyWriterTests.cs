using System.Collections.Concurrent;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

/// <summary>
/// A copy's one writer thread: segments posted from several threads in any order land at their offsets (adjacent ones
/// coalesced), each is told once and only after it is written, a failure reaches the posters, and closing writes what
/// was queued.
/// </summary>
public sealed class CopyWriterTests : IDisposable
{
    private readonly string _root = Path.Combine(Path.GetTempPath(), $"hcd-cw-{Guid.NewGuid():N}");

    public CopyWriterTests() => Directory.CreateDirectory(_root);

    public void Dispose()
    {
        if (Directory.Exists(_root)) TreeWriter.Delete(_root);
    }

    private static byte[] Bytes(int n)
    {
        var b = new byte[n];
        new Random(7).NextBytes(b);
        return b;
    }

    private static Manifest OneFile(byte[] data) => new()
    {
        Name = "t/one", RawLength = data.Length, StoredLength = data.Length, Hash = XxHash.Hash128Of(data).ToString("x32"),
        SegmentSize = 4096, Segments = [new ManifestSegment(SegmentId.Of(data).ToString(), data.Length, data.Length)],
    };

    private static byte[] Rented(CopyWriter writer, byte[] data, int offset, int length)
    {
        var b = writer.Rent(length);
        data.AsSpan(offset, length).CopyTo(b);
        return b;
    }

    [Fact]
    public void Segments_posted_from_several_threads_in_any_order_are_written_and_told_once_each()
    {
        const int block = 4096, count = 600; // more than the writer lends at once: decoders wait for it
        var data = Bytes(block * count);
        var path = Path.Combine(_root, "copy");
        var told = new ConcurrentBag<int>();
        using (var files = DatasetFiles.Create(path, OneFile(data)))
        using (var writer = new CopyWriter(files, i =>
               {
                   // Told only once the bytes are in the file.
                   var back = new byte[block];
                   files.Read(back, (long)i * block);
                   Assert.True(back.AsSpan().SequenceEqual(data.AsSpan(i * block, block)));
                   told.Add(i);
               }))
        {
            var order = Enumerable.Range(0, count).OrderBy(i => (i * 7919) % count).ToArray();
            Parallel.ForEach(order, new ParallelOptions { MaxDegreeOfParallelism = 4 },
                i => writer.Post(Rented(writer, data, i * block, block), block, (long)i * block, i));
            writer.Drain();
            Assert.Equal(Enumerable.Range(0, count), told.Order());
        }
        Assert.Equal(data, File.ReadAllBytes(path));
    }

    [Fact]
    public void Closing_writes_what_was_queued_and_tells_of_it()
    {
        var data = Bytes(3 * 1000);
        var path = Path.Combine(_root, "copy");
        var told = new List<int>();
        using (var files = DatasetFiles.Create(path, OneFile(data)))
        {
            using (var writer = new CopyWriter(files, i => { lock (told) told.Add(i); }))
                for (var i = 0; i < 3; i++) writer.Post(Rented(writer, data, i * 1000, 1000), 1000, i * 1000, i);
            Assert.Equal([0, 1, 2], told.Order());
        }
        Assert.Equal(data, File.ReadAllBytes(path));
    }

    [Fact]
    public void A_failure_on_the_writers_thread_reaches_the_next_post_and_the_drain()
    {
        var data = Bytes(2 * 1000);
        using var files = DatasetFiles.Create(Path.Combine(_root, "copy"), OneFile(data));
        using var writer = new CopyWriter(files, _ => throw new IOException("journal full"));
        writer.Post(Rented(writer, data, 0, 1000), 1000, 0, 0);
        Assert.Equal("journal full", Assert.Throws<IOException>(writer.Drain).Message);
        Assert.Equal("journal full", Assert.Throws<IOException>(() => writer.Post(Rented(writer, data, 1000, 1000), 1000, 1000, 1)).Message);
    }

    [Fact]
    public void A_vectored_write_across_member_files_of_a_tree_lands_in_each()
    {
        var data = Bytes(10_000);
        long offset = 0;
        var entries = new List<DatasetFile>();
        foreach (var (p, n) in new[] { ("a", 3000), ("b", 10), ("c", 6990) })
        {
            entries.Add(new DatasetFile(p, offset, n, 0b110_100_100));
            offset += n;
        }
        var manifest = new Manifest
        {
            Name = "t/tree", RawLength = data.Length, StoredLength = data.Length, Hash = XxHash.Hash128Of(data).ToString("x32"),
            SegmentSize = 4096, Segments = [new ManifestSegment(SegmentId.Of(data).ToString(), data.Length, data.Length)], Files = entries,
        };
        var root = Path.Combine(_root, "tree");
        using (var files = DatasetFiles.Create(root, manifest))
        {
            Assert.True(files.IsTree);
            files.Write([data.AsMemory(0, 2000), data.AsMemory(2000, 1500), data.AsMemory(3500, 6500)], 0, data.Length);
        }
        Assert.Equal(data[..3000], File.ReadAllBytes(Path.Combine(root, "a")));
        Assert.Equal(data[3000..3010], File.ReadAllBytes(Path.Combine(root, "b")));
        Assert.Equal(data[3010..], File.ReadAllBytes(Path.Combine(root, "c")));
    }
}
