using System.Buffers.Binary;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

/// <summary>
/// Segments and ids written by earlier builds still read. The values and the segment files under Fixtures/ were
/// recorded with the reference C implementations (liblz4 1.9.4, libxxhash 0.8.1) from <see cref="FormatCompatibilityInputs"/>:
/// content ids, checksums, placement hashes, dataset hashes and manifest version ids must stay bit-identical, stored
/// segments must keep decoding, and new encodings must decode to the same bytes under the same ids.
/// </summary>
public class FormatCompatibilityTests
{
    public sealed record Vector(
        string Name, int Length, string Id128, ulong Hash64, ulong Hash64Seeded, string ManifestVersion, string FirstSegmentFile);

    private static readonly Vector[] Vectors =
    [
        new("empty", 0, "99aa06d3014798d86001c324468d497f", 0x2D06800538D394C2, 0x602B0E2CD6662C8B, "cf9ec4015fa46a55cdccedf8842a53c9", "empty.seg"),
        new("one-byte", 1, "14c9ae9594c463c479d03016b7aeed0d", 0x79D03016B7AEED0D, 0x3F609BB7D5AE9A0D, "320f88dc9061500003e20132f808e037", "one-byte.seg"),
        new("text-64k", 65536, "9bdbf643f0d534797b47aa0b5dc52e9e", 0x7B47AA0B5DC52E9E, 0xD82C96705B06375E, "b6c37bd000e8e2387ad0efe189c9be65", "text-64k.seg"),
        new("random-64k", 65536, "cb506e53eec4a89a75a03e940b73e1d7", 0x75A03E940B73E1D7, 0x738B26A9F9713002, "161b5fadc8bb8cae561841c83b8547cc", "random-64k.seg"),
        new("mixed-1m", 1_052_675, "dd60bce818b056d58d8a65f52f84371b", 0x8D8A65F52F84371B, 0x7BB7D2939D1D09C7, "d9d86fe5e0498e81e44980a1394ed792", ""),
    ];

    /// <summary>The 64 KB segments of mixed-1m as the stager stores them: content id, codec, stored length, payload checksum.</summary>
    private static readonly (string Id, SegmentCodecKind Codec, int Stored, ulong Checksum)[] MixedSegments =
    [
        ("e1bfedb42b894d28544bf4ee01addbdd", SegmentCodecKind.Lz4, 23524, 0x6C8441C9152D66C9),
        ("6fe9698d437e89f792c84d80a914dab0", SegmentCodecKind.Raw, 65560, 0x92C84D80A914DAB0),
        ("902a8cd5ece63c497c3e412db8dfa907", SegmentCodecKind.Lz4, 2872, 0xDEFF13AD35A867BA),
        ("ba088b84f2e6f6864465f6d2db826b09", SegmentCodecKind.Lz4, 44702, 0x11FDB51EDAD8F393),
        ("b659b8f1a42bbe5c480da8473a657f65", SegmentCodecKind.Lz4, 23893, 0xE96B057157660360),
        ("b39b7659a33277916fb137a41d6fa984", SegmentCodecKind.Raw, 65560, 0x6FB137A41D6FA984),
        ("b853e7fbaf30ec819f49adf2c3f3feb5", SegmentCodecKind.Lz4, 2742, 0x6332EB83692DED89),
        ("73ce8f37b144fdc219c73e51f4869704", SegmentCodecKind.Lz4, 44979, 0x4BF45D295D8D4716),
        ("1b17abb6184fc3173f1e0b9327f5dd40", SegmentCodecKind.Lz4, 23662, 0x0A9BF44780F65DDE),
        ("003179853c5ca6e99c48eaad9bf0b0d7", SegmentCodecKind.Raw, 65560, 0x9C48EAAD9BF0B0D7),
        ("dc6590265b1ab7ecefb4547051672bea", SegmentCodecKind.Lz4, 2844, 0xB2CA69C000B2666A),
        ("6f19d64a0545fe8588c5d0277895de3c", SegmentCodecKind.Lz4, 44620, 0x98D6069AF4E44F51),
        ("5a8515c118662d04e31d9d78d42d201c", SegmentCodecKind.Lz4, 23398, 0xAAFF6260C85B79B0),
        ("c5cd6414c7dcbf42e431f9aee4a72e81", SegmentCodecKind.Raw, 65560, 0xE431F9AEE4A72E81),
        ("dd261c48ac9c48e5a0b8fc08ba93f34d", SegmentCodecKind.Lz4, 2936, 0xD03211F36A7F38AF),
        ("c0e13c6d4335f4ca39eba39c87cfd3db", SegmentCodecKind.Lz4, 44878, 0x842F07483B12667A),
        ("9af6ecfb8b8b329c841bb6b9b386d0db", SegmentCodecKind.Lz4, 1541, 0x39D945DE05ECB190),
    ];

    /// <summary>Stored segment files: which input, which 64 KB segment of it.</summary>
    public static TheoryData<string, string, int> Fixtures => new()
    {
        { "empty.seg", "empty", 0 },
        { "one-byte.seg", "one-byte", 0 },
        { "text-64k.seg", "text-64k", 0 },
        { "random-64k.seg", "random-64k", 0 },
        { "mixed-1m.2.seg", "mixed-1m", 2 },
        { "mixed-1m.3.seg", "mixed-1m", 3 },
        { "mixed-1m.16.seg", "mixed-1m", 16 },
    };

    public static TheoryData<string> Names => new(Vectors.Select(v => v.Name));

    private const int Segment = SegmentCodec.DefaultSegmentSize;

    private static byte[] Input(string name) => FormatCompatibilityInputs.All().Single(i => i.Name == name).Data;

    private static Vector VectorOf(string name) => Vectors.Single(v => v.Name == name);

    private static byte[] Fixture(string file) => File.ReadAllBytes(Path.Combine(AppContext.BaseDirectory, "Fixtures", file));

    private static ReadOnlySpan<byte> SegmentOf(byte[] data, int index) =>
        data.AsSpan(Math.Min(index * Segment, data.Length), Math.Clamp(data.Length - index * Segment, 0, Segment));

    [Theory]
    [MemberData(nameof(Names))]
    public void Content_ids_and_checksums_equal_the_recorded_values(string name)
    {
        var v = VectorOf(name);
        var data = Input(name);
        Assert.Equal(v.Length, data.Length);
        Assert.Equal(v.Id128, SegmentId.Of(data).ToString());
        Assert.Equal(v.Id128, XxHash.Hash128Of(data).ToString("x32"));
        Assert.Equal(v.Hash64, XxHash.Hash64Of(data));
        Assert.Equal(v.Hash64Seeded, XxHash.Hash64Of(data, FormatCompatibilityInputs.Seed));
    }

    [Theory]
    [MemberData(nameof(Names))]
    public unsafe void Whole_dataset_hashes_equal_the_recorded_values_however_the_data_is_fed(string name)
    {
        var v = VectorOf(name);
        var data = Input(name);
        foreach (var chunk in new[] { Segment, 1, 7, 1000, 4096 + 3, 1 << 20 })
        {
            if (chunk < 64 && data.Length > Segment) continue;
            using var h = new XxHash.Streaming128();
            for (var o = 0; o < data.Length; o += chunk) h.Append(data.AsSpan(o, Math.Min(chunk, data.Length - o)));
            Assert.Equal(v.Id128, h.Digest().ToString("x32"));
        }
        fixed (byte* p = data) Assert.Equal(v.Id128, XxHash.Hash128Of(p, data.Length).ToString("x32"));
    }

    /// <summary>
    /// A mapped dataset past 2 GB (more than a span can describe) hashes as the reference does: XXH3-128 of 2^31 + 4099
    /// zero bytes, recorded with libxxhash 0.8.1 (<c>head -c 2147487747 /dev/zero | xxhsum -H2</c>). Zeroed pages are
    /// never written, so this costs address space, not memory.
    /// </summary>
    [Fact]
    public unsafe void Datasets_longer_than_2_GB_hash_to_the_recorded_value()
    {
        const long length = (1L << 31) + 4099;
        const string expected = "18845f66f25fc1736067ef0f9561bc5d";
        var p = (byte*)System.Runtime.InteropServices.NativeMemory.AllocZeroed((nuint)length);
        try
        {
            Assert.Equal(expected, XxHash.Hash128Of(p, length).ToString("x32"));
            using var h = new XxHash.Streaming128();
            h.Append(p, 1000);
            h.Append(new ReadOnlySpan<byte>(p + 1000, 3));
            h.Append(p + 1003, length - 1003);
            Assert.Equal(expected, h.Digest().ToString("x32"));
        }
        finally { System.Runtime.InteropServices.NativeMemory.Free(p); }
    }

    [Theory]
    [MemberData(nameof(Fixtures))]
    public void Segments_written_by_earlier_builds_decode_to_the_original_bytes(string file, string input, int index)
    {
        var stored = Fixture(file);
        var raw = SegmentOf(Input(input), index);
        Assert.True(SegmentCodec.TryReadRawLength(stored, out var rawLength));
        Assert.Equal(raw.Length, rawLength);
        var back = new byte[rawLength];
        Assert.Null(SegmentCodec.TryDecode(stored, SegmentId.Of(raw), back));
        Assert.True(raw.SequenceEqual(back));
        if (input == "mixed-1m")
        {
            var (id, codec, length, checksum) = MixedSegments[index];
            Assert.Equal(id, SegmentId.Of(back).ToString());
            Assert.Equal((byte)codec, stored[4]);
            Assert.Equal(length, stored.Length);
            Assert.Equal(checksum, BinaryPrimitives.ReadUInt64LittleEndian(stored.AsSpan(16)));
        }
        else Assert.Equal(VectorOf(input).Id128, SegmentId.Of(back).ToString());
    }

    [Theory]
    [MemberData(nameof(Fixtures))]
    public void New_encodings_decode_to_the_same_bytes_under_the_same_id_and_equal_the_stored_segments(string file, string input, int index)
    {
        var recorded = Fixture(file);
        var raw = SegmentOf(Input(input), index);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var n = SegmentCodec.Encode(raw, buffer);
        var back = new byte[raw.Length];
        Assert.Null(SegmentCodec.TryDecode(buffer.AsSpan(0, n), SegmentId.Of(raw), back));
        Assert.True(raw.SequenceEqual(back));
        // Same compressor output as the build that wrote the fixture: same stored lengths, so a re-staged unchanged
        // dataset gets the same manifest (and version id) as before.
        Assert.Equal(Convert.ToHexString(recorded), Convert.ToHexString(buffer.AsSpan(0, n)));
    }

    [Fact]
    public void A_dataset_is_segmented_stored_and_named_exactly_as_before()
    {
        var data = Input("mixed-1m");
        var buffer = new byte[SegmentCodec.MaxEncodedLength(Segment)];
        var back = new byte[Segment];
        var segments = new List<ManifestSegment>();
        for (var i = 0; i * Segment < data.Length; i++)
        {
            var raw = SegmentOf(data, i);
            var n = SegmentCodec.Encode(raw, buffer);
            var (id, codec, length, checksum) = MixedSegments[i];
            Assert.Equal(id, SegmentId.Of(raw).ToString());
            Assert.Equal((byte)codec, buffer[4]);
            Assert.Equal(length, n);
            Assert.Equal(checksum, BinaryPrimitives.ReadUInt64LittleEndian(buffer.AsSpan(16)));
            Assert.Null(SegmentCodec.TryDecode(buffer.AsSpan(0, n), SegmentId.Parse(id), back.AsSpan(0, raw.Length)));
            Assert.True(raw.SequenceEqual(back.AsSpan(0, raw.Length)));
            segments.Add(new ManifestSegment(id, raw.Length, n));
        }
        Assert.Equal(MixedSegments.Length, segments.Count);
        Assert.Equal(VectorOf("mixed-1m").ManifestVersion, ManifestVersionOf("mixed-1m", data, segments));
    }

    [Theory]
    [MemberData(nameof(Names))]
    public void Manifest_version_ids_equal_the_recorded_values(string name)
    {
        var data = Input(name);
        var segments = SegmentsOf(data);
        Assert.Equal(VectorOf(name).ManifestVersion, ManifestVersionOf(name, data, segments));
    }

    /// <summary>The recorded ids are of JSON manifests, the encoding of every version staged before the binary one: they must keep
    /// hashing to the same ids, or nodes would not recognise the versions they hold.</summary>
    private static string ManifestVersionOf(string name, byte[] data, List<ManifestSegment> segments) => Manifest.VersionOf(ManifestOf(name, data, segments).SerializeJson());

    /// <summary>The manifest entries of <paramref name="data"/> cut into fixed segments and encoded as the stager does.</summary>
    private static List<ManifestSegment> SegmentsOf(byte[] data)
    {
        var buffer = new byte[SegmentCodec.MaxEncodedLength(Segment)];
        var segments = new List<ManifestSegment>();
        for (var i = 0; i * Segment < data.Length; i++)
        {
            var raw = SegmentOf(data, i);
            segments.Add(new ManifestSegment(SegmentId.Of(raw).ToString(), raw.Length, SegmentCodec.Encode(raw, buffer)));
        }
        return segments;
    }

    private static Manifest ManifestOf(string name, byte[] data, List<ManifestSegment> segments) => new()
    {
        Name = "test/" + name, Created = new DateTimeOffset(2026, 1, 1, 0, 0, 0, TimeSpan.Zero),
        RawLength = data.Length, StoredLength = segments.Sum(s => (long)s.StoredLength), Hash = SegmentId.Of(data).ToString(),
        Segments = segments,
    };

    [Theory]
    [MemberData(nameof(Names))]
    public void Binary_manifests_have_the_recorded_version_ids_and_read_back_as_their_JSON_twins(string name)
    {
        var data = Input(name);
        var segments = SegmentsOf(data);
        var manifest = ManifestOf(name, data, segments);
        var binary = manifest.Serialize();
        Assert.Equal(BinaryVersions[name], Manifest.VersionOf(binary));
        Assert.Equal(manifest.SerializeJson(), Manifest.Parse(binary).SerializeJson());
        Assert.Equal(binary, Manifest.Parse(manifest.SerializeJson()).Serialize());
    }

    private static readonly Dictionary<string, string> BinaryVersions = new()
    {
        ["empty"] = "a0c76dd1cc854db4395d365b381d3f18", ["one-byte"] = "9dd63302378b450e7d7190f1d5621b9d", ["text-64k"] = "4c8b85794da2e16cfa8aa7ab96778792",
        ["random-64k"] = "2ca81aad86803f23d5f4d4e4a2b8636b", ["mixed-1m"] = "5c5c1b34ec7c1c8e51ec84ae598519e4",
    };

    [Fact]
    public void The_start_up_self_check_passes() => Assert.Null(SegmentCodec.SelfCheck());
}
