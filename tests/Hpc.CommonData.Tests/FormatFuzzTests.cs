using System.Buffers;
using System.Text;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Format;
using Hpc.Fuzzing;

namespace Hpc.CommonData.Tests;

/// <summary>
/// What a node reads from the network or another process, under mutated input: manifests, stored segments and the
/// agent's frames are read, or refused with the error their callers handle; nothing else is thrown and nothing hangs.
/// </summary>
public sealed class FormatFuzzTests
{
    private static byte[] Raw(int length, int seed)
    {
        var rng = new Random(seed);
        var text = new StringBuilder();
        for (var i = 0; text.Length < length; i++) text.Append($"AAPL,2024-01-{i % 28 + 1:00},{rng.Next(1000)}.{rng.Next(100)}\n");
        return Encoding.ASCII.GetBytes(text.ToString())[..length];
    }

    [Fact]
    public async Task Mutated_manifests_parse_or_are_refused_as_invalid_data()
    {
        var segments = Enumerable.Range(0, 3).Select(i => Raw(1000 + i, i)).ToList();
        var manifest = new Manifest
        {
            Name = "risk/fuzz", Hash = new string('a', 32), Created = DateTimeOffset.UnixEpoch, LifetimeSeconds = 3600,
            Segments = segments.Select(s => new ManifestSegment(SegmentId.Of(s).ToString(), s.Length, s.Length / 2)).ToList(),
            RawLength = segments.Sum(s => s.Length), StoredLength = segments.Sum(s => s.Length / 2),
            Files = [new DatasetFile("a/b.csv", 0, 1000, 420), new DatasetFile("c.csv", 1000, 2003, 420)],
        };
        // Both encodings: the binary one the stager writes, and the JSON of versions staged before it.
        byte[][] seeds = [manifest.Serialize(), manifest.SerializeJson(),
            new Manifest { Name = manifest.Name, Hash = manifest.Hash, Segments = manifest.Segments, RawLength = manifest.RawLength,
                StoredLength = manifest.StoredLength, Chunking = ContentChunker.Name, Readers = Hpc.CommonData.Access.DatasetReaders.Of([1000], [100]) }.Serialize()];
        Assert.All(seeds, seed => Assert.Equal(manifest.Name, Manifest.Parse(seed).Name));
        int parsed = 0, refused = 0;
        await Mutator.RunAsync("manifest", seeds, input =>
        {
            try
            {
                var m = Manifest.Parse(input);
                _ = m.Offsets[^1] + m.SegmentIds.Count;
                parsed++;
            }
            catch (InvalidDataException) { refused++; }
        });
        Assert.True(parsed > 0 && refused > 0, $"{parsed} parsed, {refused} refused");
    }

    [Fact]
    public async Task Mutated_stored_segments_decode_to_their_content_or_are_rejected_with_a_reason()
    {
        var raws = new[] { Raw(4096, 1), Raw(65536, 2), new Random(3).GetItems<byte>(Enumerable.Range(0, 256).Select(b => (byte)b).ToArray(), 3000) };
        var cases = raws.SelectMany(raw => new[] { true, false }.Select(compress =>
        {
            var stored = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
            return (Raw: raw, Id: SegmentId.Of(raw), Stored: stored[..SegmentCodec.Encode(raw, stored, compress)]);
        })).ToList();
        int decoded = 0, rejected = 0;
        await Mutator.RunAsync("segment", [.. cases.Select(c => c.Stored)], input =>
        {
            foreach (var (raw, id, _) in cases)
            {
                var destination = new byte[raw.Length];
                var problem = SegmentCodec.TryDecode(input, id, destination);
                if (problem is null)
                {
                    // Accepted only what the id names: the exact original bytes.
                    if (!destination.AsSpan().SequenceEqual(raw)) throw new InvalidOperationException("decoded bytes differ from the segment's content id");
                    decoded++;
                }
                else rejected++;
            }
        });
        Assert.True(decoded > 0 && rejected > 0, $"{decoded} decoded, {rejected} rejected");
    }

    [Fact]
    public async Task Mutated_agent_frames_are_sliced_or_refused_as_invalid_data()
    {
        var writer = new ArrayBufferWriter<byte>();
        AgentFrames.Write(writer, """{"op":"open","dataset":"risk/fuzz"}"""u8);
        AgentFrames.Write(writer, new byte[300]);
        AgentFrames.Write(writer, ReadOnlySpan<byte>.Empty);
        var seed = writer.WrittenSpan.ToArray();
        int frames = 0, refused = 0;
        await Mutator.RunAsync("agent frames", [seed], input =>
        {
            var buffer = new ReadOnlySequence<byte>(input);
            try
            {
                while (AgentFrames.TryParse(ref buffer, 4096, out var payload))
                {
                    if (payload.Length > 4096) throw new InvalidOperationException($"a frame of {payload.Length} bytes passed the limit");
                    frames++;
                }
            }
            catch (InvalidDataException) { refused++; }
        });
        Assert.True(frames > 0 && refused > 0, $"{frames} frames, {refused} refused");
    }
}
