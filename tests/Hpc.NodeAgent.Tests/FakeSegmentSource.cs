using System.Collections.Concurrent;
using Hpc.CommonData.Format;
using Hpc.NodeAgent;
using Hpc.CommonData.Fetch;

namespace Hpc.NodeAgent.Tests;

/// <summary>
/// An in-memory cache tier: datasets staged here have real manifests (real segment ids and dataset hash), and fetches
/// verify and write their stored segments into the agent's file as the cache-tier source does. It can be told to go down, to stop or fail part-way through a fetch, to
/// serve damaged bytes, and it records what it was asked for.
/// </summary>
public sealed class FakeSegmentSource : ISegmentSource
{
    private readonly ConcurrentDictionary<string, string> _latest = new();
    private readonly ConcurrentDictionary<string, (Manifest Manifest, byte[] Data)> _versions = new();
    private readonly ConcurrentDictionary<string, byte[]> _manifestBytes = new();
    private int _fetches;

    public IReadOnlyList<string> Hosts { get; } = ["fake:6380"];

    /// <summary>Every call fails as an unreachable cache tier does.</summary>
    public bool Down { get; set; }

    /// <summary>Fetches made (each <see cref="FetchAsync"/> call).</summary>
    public int Fetches => _fetches;

    /// <summary>Segment indexes written, across all fetches.</summary>
    public ConcurrentQueue<int> SegmentsServed { get; } = new();

    /// <summary>After this many segments of a fetch, the fetch waits for <see cref="Resume"/> (then goes on).</summary>
    public int? PauseAfter { get; set; }

    /// <summary>After this many segments of a fetch, it fails with <see cref="Failure"/>.</summary>
    public int? FailAfter { get; set; }

    public Exception Failure { get; set; } = new CommonDataException(ErrorCode.Unavailable, "cache host fake:6380 unavailable: connection reset");

    /// <summary>How long each segment of a fetch takes to arrive (a cache tier behind a slow link).</summary>
    public TimeSpan SegmentDelay { get; set; }

    /// <summary>Segments served with one byte of their stored form flipped (on every host).</summary>
    public HashSet<int> Damaged { get; } = [];

    private TaskCompletionSource _paused = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private TaskCompletionSource _resume = new(TaskCreationOptions.RunContinuationsAsynchronously);

    /// <summary>Completes when a fetch has reached <see cref="PauseAfter"/>.</summary>
    public Task Paused => _paused.Task;

    public void Resume() => _resume.TrySetResult();

    /// <summary>Stages <paramref name="data"/> as the latest version of <paramref name="name"/>, cut into segments of <paramref name="segmentSize"/>.</summary>
    public string Stage(string name, byte[] data, int segmentSize = 4096, DateTimeOffset? created = null, Hpc.CommonData.Access.DatasetReaders? readers = null,
        IReadOnlyList<DatasetFile>? files = null)
    {
        var segments = data.Chunk(segmentSize).Select(s => new ManifestSegment(SegmentId.Of(s).ToString(), s.Length, s.Length)).ToList();
        var manifest = new Manifest
        {
            Name = name, Created = created ?? DateTimeOffset.UtcNow, RawLength = data.Length, StoredLength = data.Length,
            Hash = XxHash.Hash128Of(data).ToString("x32"), SegmentSize = segmentSize, Segments = segments, Readers = readers, Files = files,
        };
        var serialized = manifest.Serialize();
        var version = Manifest.VersionOf(serialized);
        _versions[version] = (Manifest.Parse(serialized), data);
        _manifestBytes[version] = serialized;
        _latest[name] = version;
        return version;
    }

    /// <summary>The manifest of a staged version as stored: the bytes whose hash is the version id.</summary>
    public byte[] ManifestBytes(string version) => _manifestBytes[version];

    /// <summary>Segment <paramref name="index"/> of a staged version in its stored form (header, LZ4 or raw payload), as the cache tier holds it.</summary>
    public byte[] StoredSegment(string version, int index)
    {
        var (manifest, data) = _versions[version];
        var raw = data.AsSpan((int)manifest.Offsets[index], manifest.Segments[index].RawLength);
        var stored = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        return stored.AsSpan(0, SegmentCodec.Encode(raw, stored)).ToArray();
    }

    public static byte[] Bytes(int length, int seed = 1)
    {
        var b = new byte[length];
        new Random(seed).NextBytes(b);
        return b;
    }

    public Task<string?[]> ConnectAsync(CancellationToken ct) => Task.FromResult(new string?[] { Down ? "connection refused" : null });

    public Task<string?> GetLatestAsync(string name, CancellationToken ct)
    {
        ThrowIfDown();
        return Task.FromResult(_latest.TryGetValue(name, out var v) ? v : null);
    }

    public Task<string> ResolveVersionPrefixAsync(string name, string prefix, CancellationToken ct)
    {
        ThrowIfDown();
        return Task.FromResult(VersionPrefix.Choose(name, prefix, _versions.Where(v => v.Value.Manifest.Name == name).Select(v => v.Key), "on fake:6380"));
    }

    public Task<Manifest> GetManifestAsync(string name, string version, CancellationToken ct)
    {
        ThrowIfDown();
        if (!_versions.TryGetValue(version, out var v) || v.Manifest.Name != name)
            throw new CommonDataException(ErrorCode.NotFound, $"dataset '{name}' version '{version}' not found");
        return Task.FromResult(v.Manifest);
    }

    private readonly ConcurrentDictionary<string, string> _removed = new();

    /// <summary>The tier forgets everything of the dataset, as hosts restarted empty do; it keeps no record of a removal.</summary>
    public void Forget(string name)
    {
        _latest.TryRemove(name, out _);
        foreach (var (version, held) in _versions)
            if (held.Manifest.Name == name) _versions.TryRemove(version, out _);
    }

    /// <summary>Removes a version as hpcdata remove does: gone, with a record of its removal.</summary>
    public void Remove(string name, string version)
    {
        _removed[version] = name;
        if (_latest.TryGetValue(name, out var latest) && latest == version) _latest.TryRemove(name, out _);
        _versions.TryRemove(version, out _);
    }

    public Task<bool> WasRemovedAsync(string name, string version, CancellationToken ct)
    {
        ThrowIfDown();
        return Task.FromResult(_removed.TryGetValue(version, out var removed) && removed == name);
    }

    public Task<bool> HoldsManifestAsync(string version, CancellationToken ct)
    {
        ThrowIfDown();
        return Task.FromResult(_versions.ContainsKey(version));
    }

    public async Task FetchAsync(Manifest manifest, string version, DatasetFiles file, IReadOnlyList<int> wanted, Action<int> onSegment, CancellationToken ct)
    {
        Interlocked.Increment(ref _fetches);
        ThrowIfDown();
        var written = 0;
        foreach (var i in wanted)
        {
            if (written == FailAfter) throw Failure;
            if (written == PauseAfter)
            {
                _paused.TrySetResult();
                await _resume.Task.WaitAsync(ct);
            }
            if (SegmentDelay > TimeSpan.Zero) await Task.Delay(SegmentDelay, ct);
            // Served in stored form and verified on the way in by the code the cache-tier source uses.
            var stored = StoredSegment(version, i);
            if (Damaged.Contains(i)) stored[^1] ^= 0xFF;
            if (SegmentFetcher.TryWriteSegment(manifest, i, stored, file) is { } problem)
                throw new CommonDataException(ErrorCode.Integrity, $"dataset '{manifest.Name}' version {version}: {problem} on every host");
            SegmentsServed.Enqueue(i);
            onSegment(i);
            written++;
            await Task.Yield();
        }
    }

    private void ThrowIfDown()
    {
        if (Down) throw new CommonDataException(ErrorCode.Unavailable, "cache host fake:6380 unavailable: connection refused");
    }
}
