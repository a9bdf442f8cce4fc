using Hpc.CommonData.Fetch;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.NodeAgent;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// The real cache-tier adapter against a minimal in-process RESP responder (one thread, no process): it answers MGET
/// of segment keys from memory, and nothing else.
/// </summary>
public class CacheTierSourceTests
{
    [Fact]
    public async Task Fetched_segments_are_verified_and_written_at_their_offsets()
    {
        var data = FakeSegmentSource.Bytes(3 * 4096 + 10);
        await using var tier = new SegmentResponder(data, 4096);
        var manifest = tier.Manifest;
        var path = Path.Combine(Path.GetTempPath(), $"hcd-cts-{Guid.NewGuid():N}");
        try
        {
            using (var file = DatasetFiles.Create(path, manifest))
            {
                var done = new List<int>();
                await tier.Source.FetchAsync(manifest, "v", file, [0, 1, 2, 3], i => { lock (done) done.Add(i); }, CancellationToken.None);
                Assert.Equal([0, 1, 2, 3], done.Order());
            }
            Assert.Equal(data, File.ReadAllBytes(path));
        }
        finally { File.Delete(path); }
    }

    [Fact]
    public async Task A_full_disk_while_writing_is_thrown_as_itself_not_blamed_on_the_cache_host()
    {
        if (!File.Exists("/dev/full")) return; // Linux: every write to /dev/full fails with ENOSPC
        await using var tier = new SegmentResponder(FakeSegmentSource.Bytes(8 * 4096), 4096);
        using var full = DatasetFiles.Open("/dev/full", null, tier.Manifest.RawLength, writable: true);

        var e = await Assert.ThrowsAnyAsync<IOException>(() =>
            tier.Source.FetchAsync(tier.Manifest, "v", full, Enumerable.Range(0, 8).ToArray(), _ => { }, CancellationToken.None));

        Assert.Equal(ErrorCode.NoSpace, CommonDataException.From(e).Code);
        Assert.Equal(1, tier.Connections); // no retries, no reconnects: the host did nothing wrong
    }

    private sealed class SegmentResponder : IAsyncDisposable
    {
        private readonly TcpListener _listener = new(IPAddress.Loopback, 0);
        private readonly Dictionary<string, byte[]> _stored = new();
        private readonly CacheTierClient _client;
        private readonly Task _serving;
        private int _connections;

        public Manifest Manifest { get; }
        public ISegmentSource Source { get; }
        public int Connections => _connections;

        public SegmentResponder(byte[] data, int segmentSize)
        {
            var segments = new List<ManifestSegment>();
            foreach (var raw in data.Chunk(segmentSize))
            {
                var id = SegmentId.Of(raw);
                var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
                var n = SegmentCodec.Encode(raw, buffer);
                _stored[CacheKeys.Segment(id)] = buffer[..n];
                segments.Add(new ManifestSegment(id.ToString(), raw.Length, n));
            }
            Manifest = new Manifest
            {
                Name = "t/data", RawLength = data.Length, StoredLength = segments.Sum(s => (long)s.StoredLength),
                Hash = XxHash.Hash128Of(data).ToString("x32"), Segments = segments,
            };
            _listener.Start();
            _serving = Task.Run(ServeAsync);
            var port = ((IPEndPoint)_listener.LocalEndpoint).Port;
            _client = new CacheTierClient(new CacheTierOptions { Hosts = [$"127.0.0.1:{port}"], ConnectionsPerHost = 1, MaxAttempts = 3, RetryBaseDelay = TimeSpan.FromMilliseconds(5) });
            Source = new CacheTierSource(_client);
        }

        private async Task ServeAsync()
        {
            try
            {
                while (true)
                {
                    var socket = await _listener.AcceptSocketAsync();
                    Interlocked.Increment(ref _connections);
                    _ = Task.Run(() => ServeConnectionAsync(socket));
                }
            }
            catch (Exception e) when (e is SocketException or ObjectDisposedException) { }
        }

        private async Task ServeConnectionAsync(Socket socket)
        {
            await using var stream = new NetworkStream(socket, ownsSocket: true);
            using var reader = new BinaryReader(stream, Encoding.ASCII, leaveOpen: true);
            try
            {
                while (true)
                {
                    var count = int.Parse(Line(reader)[1..]);
                    var args = new string[count];
                    for (var i = 0; i < count; i++)
                    {
                        var length = int.Parse(Line(reader)[1..]);
                        args[i] = Encoding.ASCII.GetString(reader.ReadBytes(length));
                        reader.ReadBytes(2);
                    }
                    using var reply = new MemoryStream();
                    if (args[0] == "MGET")
                    {
                        reply.Write(Encoding.ASCII.GetBytes($"*{count - 1}\r\n"));
                        foreach (var key in args[1..])
                        {
                            if (!_stored.TryGetValue(key, out var value)) { reply.Write("$-1\r\n"u8); continue; }
                            reply.Write(Encoding.ASCII.GetBytes($"${value.Length}\r\n"));
                            reply.Write(value);
                            reply.Write("\r\n"u8);
                        }
                    }
                    else reply.Write("+PONG\r\n"u8);
                    await stream.WriteAsync(reply.ToArray());
                }
            }
            catch (Exception e) when (e is IOException or EndOfStreamException or ObjectDisposedException or FormatException) { }
        }

        private static string Line(BinaryReader reader)
        {
            var sb = new StringBuilder();
            for (char c; (c = (char)reader.ReadByte()) != '\n';) if (c != '\r') sb.Append(c);
            return sb.ToString();
        }

        public async ValueTask DisposeAsync()
        {
            await _client.DisposeAsync();
            _listener.Stop();
            await _serving;
        }
    }
}
