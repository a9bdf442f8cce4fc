using System.Buffers.Binary;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

/// <summary>
/// The format as recorded. The XXH3 values (segment checksums, placement hashes, whole-dataset hashes) and the segment
/// files under Fixtures/ were recorded with the reference C implementations (liblz4 1.9.4, libxxhash 0.8.1) from
/// <see cref="FormatCompatibilityInputs"/> and must stay bit-identical. Content ids are BLAKE3-256: the values here were
/// recorded with the Blake3 package, which <see cref="SegmentIdTests"/> holds to the published BLAKE3 test vectors.
/// The fixture segments (format 1) and manifest (encoding 1) were written when content ids were XXH3-128: they are
/// refused with a request to re-stage, while their payloads stay byte-identical to what the codec writes today.
/// </summary>
public class FormatCompatibilityTests
{
    /// <param name="Xxh128">XXH3-128 of the input: its whole-dataset hash, and the content id earlier builds gave it.</param>
    /// <param name="Blake3">BLAKE3-256 of the input: its content id.</param>
    /// <param name="LegacyJsonVersion">The version id (XXH3-128) of its JSON manifest as earlier builds staged it.</param>
    public sealed record Vector(
        string Name, int Length, string Xxh128, string Blake3, ulong Hash64, ulong Hash64Seeded, string LegacyJsonVersion, string FirstSegmentFile);

    private static readonly Vector[] Vectors =
    [
        new("empty", 0, "99aa06d3014798d86001c324468d497f", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
            0x2D06800538D394C2, 0x602B0E2CD6662C8B, "cf9ec4015fa46a55cdccedf8842a53c9", "empty.seg"),
        new("one-byte", 1, "14c9ae9594c463c479d03016b7aeed0d", "867e33a48d89930123c07816936e824560a1b7b81d29d3e83168a1cb227a765f",
            0x79D03016B7AEED0D, 0x3F609BB7D5AE9A0D, "320f88dc9061500003e20132f808e037", "one-byte.seg"),
        new("text-64k", 65536, "9bdbf643f0d534797b47aa0b5dc52e9e", "9ae914cd8e5cb935469a5edbb05ac146c9c920ff05a4bb376db56f7c9725d5f2",
            0x7B47AA0B5DC52E9E, 0xD82C96705B06375E, "b6c37bd000e8e2387ad0efe189c9be65", "text-64k.seg"),
        new("random-64k", 65536, "cb506e53eec4a89a75a03e940b73e1d7", "66cc1cd9018ca23f7c7babea045077a51b1aadcabf414fb8a773975542f8f2ee",
            0x75A03E940B73E1D7, 0x738B26A9F9713002, "161b5fadc8bb8cae561841c83b8547cc", "random-64k.seg"),
        new("mixed-1m", 1_052_675, "dd60bce818b056d58d8a65f52f84371b", "ebaab45f4e5e384a0ecd42f27079c984d397b23db0bdd607f9782c772ae74a5c",
            0x8D8A65F52F84371B, 0x7BB7D2939D1D09C7, "d9d86fe5e0498e81e44980a1394ed792", ""),
    ];

    /// <summary>The 64 KB segments of mixed-1m as the stager stores them: content id (BLAKE3-256), content id earlier
    /// builds gave it (XXH3-128), codec, stored length, payload checksum.</summary>
    private static readonly (string Id, string LegacyId, SegmentCodecKind Codec, int Stored, ulong Checksum)[] MixedSegments =
    [
        ("054b0751b3895f2607929a6c74b436724e835f8e4eb5b4190904c8258efb894a", "e1bfedb42b894d28544bf4ee01addbdd", SegmentCodecKind.Lz4, 23524, 0x6C8441C9152D66C9),
        ("a8e4af00697d2a07da3353969b0caad84a90cb8b9b0b216ac9feb1a007157fef", "6fe9698d437e89f792c84d80a914dab0", SegmentCodecKind.Raw, 65560, 0x92C84D80A914DAB0),
        ("3857afced2b58b5207ef9df6e031b2601d1af5e8d8ccef6b95ea01a3464d0026", "902a8cd5ece63c497c3e412db8dfa907", SegmentCodecKind.Lz4, 2872, 0xDEFF13AD35A867BA),
        ("ff5319d7210955c6327f15b700a7acf72eff3c7ac18608be80eccff451b02985", "ba088b84f2e6f6864465f6d2db826b09", SegmentCodecKind.Lz4, 44702, 0x11FDB51EDAD8F393),
        ("192c3677f7a0945d4b6db51c57dcfa351888175d1ecb14ff04f7ab86ccc90e01", "b659b8f1a42bbe5c480da8473a657f65", SegmentCodecKind.Lz4, 23893, 0xE96B057157660360),
        ("67b15f93bd65c2b6bdc51798353b69f80eece5259756f9c41e1c1c5651da1c3e", "b39b7659a33277916fb137a41d6fa984", SegmentCodecKind.Raw, 65560, 0x6FB137A41D6FA984),
        ("13d22fd5bbf1b33a2393cb41e5cc3f0cb59ad8e01bd43bb4ac54189fe71c4205", "b853e7fbaf30ec819f49adf2c3f3feb5", SegmentCodecKind.Lz4, 2742, 0x6332EB83692DED89),
        ("d851e5d3c027fda226cdacf9bf4f8f58e04415a57e9067ca258172933567947d", "73ce8f37b144fdc219c73e51f4869704", SegmentCodecKind.Lz4, 44979, 0x4BF45D295D8D4716),
        ("859214fa4be69ce1cf1000ddc88e0ab5b2b900a29393d5ae9c26cf1b77e1cbb7", "1b17abb6184fc3173f1e0b9327f5dd40", SegmentCodecKind.Lz4, 23662, 0x0A9BF44780F65DDE),
        ("f36601a4c3f27740ad12ce12bf422cc68d6440ef02ec540f7992c9e92693f6b2", "003179853c5ca6e99c48eaad9bf0b0d7", SegmentCodecKind.Raw, 65560, 0x9C48EAAD9BF0B0D7),
        ("10d465fa89cb98fa616f201cdeb7d28748f4bf189315259c828710752108b84e", "dc6590265b1ab7ecefb4547051672bea", SegmentCodecKind.Lz4, 2844, 0xB2CA69C000B2666A),
        ("c901ebea19285d612c6c163318173128900992916fafb129a5a838d5aa291d35", "6f19d64a0545fe8588c5d0277895de3c", SegmentCodecKind.Lz4, 44620, 0x98D6069AF4E44F51),
        ("e804fa6c056864fac1379dc76fa304e7c7ac4529f5669206ecd8417915f62b04", "5a8515c118662d04e31d9d78d42d201c", SegmentCodecKind.Lz4, 23398, 0xAAFF6260C85B79B0),
        ("3b6e7cfe861594af6af9376f5be307ac5c7818147c9bf142a271d69fe2236d3c", "c5cd6414c7dcbf42e431f9aee4a72e81", SegmentCodecKind.Raw, 65560, 0xE431F9AEE4A72E81),
        ("9a6b21fe44ca1429c75f8c5bca9ad447ed4d640ce118007c3bf7d753b6568eb1", "dd261c48ac9c48e5a0b8fc08ba93f34d", SegmentCodecKind.Lz4, 2936, 0xD03211F36A7F38AF),
        ("ee4ce357f958fd4ab4db2bb4e7eb3a8eb4bd6d68c66d3eefa80915fb5451a1ed", "c0e13c6d4335f4ca39eba39c87cfd3db", SegmentCodecKind.Lz4, 44878, 0x842F07483B12667A),
        ("46fdc3dada4c0d5c30d3c39d43ac5b6841e001f295c30c8dca1cac97d77df4fc", "9af6ecfb8b8b329c841bb6b9b386d0db", SegmentCodecKind.Lz4, 1541, 0x39D945DE05ECB190),
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
        Assert.Equal(v.Blake3, SegmentId.Of(data).ToString());
        Assert.Equal(v.Xxh128, XxHash.Hash128Of(data).ToString("x32"));
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
            Assert.Equal(v.Xxh128, h.Digest().ToString("x32"));
        }
        fixed (byte* p = data) Assert.Equal(v.Xxh128, XxHash.Hash128Of(p, data.Length).ToString("x32"));
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
    public void Segments_stored_when_ids_were_XXH3_are_refused_with_a_request_to_re_stage(string file, string input, int index)
    {
        var stored = Fixture(file);
        var raw = SegmentOf(Input(input), index);
        Assert.Equal(SegmentCodec.LegacyFormatVersion, stored[3]);
        Assert.True(SegmentCodec.TryReadRawLength(stored, out var rawLength));
        Assert.Equal(raw.Length, rawLength);
        var back = new byte[rawLength];
        // Not even under the id of the very bytes they hold: the version that names them has only their forgeable ids.
        var problem = SegmentCodec.TryDecode(stored, SegmentId.Of(raw), back);
        Assert.NotNull(problem);
        Assert.Contains("re-stage", problem);
        Assert.NotNull(SegmentCodec.TryDecodeStrict(stored, SegmentId.Of(raw), back));
        Assert.NotNull(SegmentCodec.CheckStored(stored, rawLength));
        var legacyId = input == "mixed-1m" ? MixedSegments[index].LegacyId : VectorOf(input).Xxh128;
        Assert.Equal(legacyId, XxHash.Hash128Of(raw).ToString("x32"));
        Assert.True(SegmentId.IsLegacy(legacyId));
        Assert.False(SegmentId.TryParse(legacyId, out _));
    }

    [Theory]
    [MemberData(nameof(Fixtures))]
    public void New_encodings_differ_from_the_earlier_stored_segments_only_in_the_format_byte(string file, string input, int index)
    {
        var recorded = Fixture(file);
        var raw = SegmentOf(Input(input), index);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var n = SegmentCodec.Encode(raw, buffer);
        var back = new byte[raw.Length];
        Assert.Null(SegmentCodec.TryDecode(buffer.AsSpan(0, n), SegmentId.Of(raw), back));
        Assert.True(raw.SequenceEqual(back));
        // Same compressor output and checksum as the build that wrote the fixture: the format byte says how the segment
        // is named, the rest is unchanged, so stored sizes (and a re-staged dataset's sizes) stay as they were.
        Assert.Equal(SegmentCodec.FormatVersion, buffer[3]);
        recorded[3] = SegmentCodec.FormatVersion;
        Assert.Equal(Convert.ToHexString(recorded), Convert.ToHexString(buffer.AsSpan(0, n)));
    }

    [Fact]
    public void A_dataset_is_segmented_stored_and_named_as_recorded()
    {
        var data = Input("mixed-1m");
        var buffer = new byte[SegmentCodec.MaxEncodedLength(Segment)];
        var back = new byte[Segment];
        var segments = new List<ManifestSegment>();
        for (var i = 0; i * Segment < data.Length; i++)
        {
            var raw = SegmentOf(data, i);
            var n = SegmentCodec.Encode(raw, buffer);
            var (id, _, codec, length, checksum) = MixedSegments[i];
            Assert.Equal(id, SegmentId.Of(raw).ToString());
            Assert.Equal((byte)codec, buffer[4]);
            Assert.Equal(length, n);
            Assert.Equal(checksum, BinaryPrimitives.ReadUInt64LittleEndian(buffer.AsSpan(16)));
            Assert.Null(SegmentCodec.TryDecode(buffer.AsSpan(0, n), SegmentId.Parse(id), back.AsSpan(0, raw.Length)));
            Assert.True(raw.SequenceEqual(back.AsSpan(0, raw.Length)));
            segments.Add(new ManifestSegment(id, raw.Length, n));
        }
        Assert.Equal(MixedSegments.Length, segments.Count);
        Assert.Equal(BinaryVersions["mixed-1m"], Manifest.VersionOf(ManifestOf("mixed-1m", data, segments).Serialize()));
    }

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
        RawLength = data.Length, StoredLength = segments.Sum(s => (long)s.StoredLength), Hash = XxHash.Hash128Of(data).ToString("x32"),
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

    /// <summary>Version ids (BLAKE3-256) of the binary manifests, encoding 2.</summary>
    private static readonly Dictionary<string, string> BinaryVersions = new()
    {
        ["empty"] = "c7634c1c70674992588ca300fb7623a4188680b5157069864bc6b5cb15b79aba",
        ["one-byte"] = "8c21984b720aa6560c5310cce2a15be5fd7b84ec8486c93ae61f3d050eb43f96",
        ["text-64k"] = "f420c6ec3ba42c198f84471c60eee337db82770497a5982377d7647241744dcb",
        ["random-64k"] = "e317fc0a6735dd8ac4edb28dea514e194568f8d63def1e9747c980f63d9abd52",
        ["mixed-1m"] = "b8c73570a715932d664bee803b0b352ceac6648184853c874c91e2c632a765e0",
    };

    /// <summary>
    /// A binary manifest as earlier builds staged it (encoding 1, XXH3-128 ids; Fixtures/text-64k.v1.manifest, version
    /// 4c8b85794da2e16cfa8aa7ab96778792): refused, saying to re-stage, never read with ids a writer could have forged.
    /// </summary>
    [Fact]
    public void A_manifest_staged_with_XXH3_ids_is_refused_with_a_request_to_re_stage()
    {
        var old = Fixture("text-64k.v1.manifest");
        Assert.Equal("4c8b85794da2e16cfa8aa7ab96778792", XxHash.Hash128Of(old).ToString("x32"));
        var e = Assert.Throws<InvalidDataException>(() => Manifest.Parse(old));
        Assert.Equal(Manifest.LegacyIds, e.Message);
        Assert.True(SegmentId.IsLegacy("4c8b85794da2e16cfa8aa7ab96778792"));
    }

    [Theory]
    [MemberData(nameof(Names))]
    public void A_JSON_manifest_staged_with_XXH3_ids_is_refused_with_a_request_to_re_stage(string name)
    {
        var data = Input(name);
        var legacy = SegmentsOf(data).Select((s, i) => s with { Id = name == "mixed-1m" ? MixedSegments[i].LegacyId : VectorOf(name).Xxh128 }).ToList();
        var json = ManifestOf(name, data, legacy).SerializeJson();
        // The bytes are those earlier builds staged: they still hash to the recorded version id.
        Assert.Equal(VectorOf(name).LegacyJsonVersion, XxHash.Hash128Of(json).ToString("x32"));
        if (legacy.Count == 0)
        {
            // No id to forge: it reads, but only under its new version id, which no earlier pointer names.
            Assert.Empty(Manifest.Parse(json).Segments);
            return;
        }
        var e = Assert.Throws<InvalidDataException>(() => Manifest.Parse(json));
        Assert.Contains(Manifest.LegacyIds, e.Message);
    }

    [Fact]
    public void The_start_up_self_check_passes() => Assert.Null(SegmentCodec.SelfCheck());
}
