using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

public class SegmentIdTests
{
    /// <summary>
    /// The first 32 bytes of the "hash" outputs of the BLAKE3 team's test_vectors.json (input: bytes 0, 1, …, 250
    /// repeating), covering one block, one chunk, chunk boundaries, and trees wide enough for every SIMD path.
    /// </summary>
    public static TheoryData<int, string> PublishedVectors => new()
    {
        { 0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262" },
        { 1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213" },
        { 1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11" },
        { 1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7" },
        { 1025, "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444" },
        { 2049, "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030" },
        { 4097, "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995" },
        { 8193, "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b" },
        { 16384, "f875d6646de28985646f34ee13be9a576fd515f76b5b0a26bb324735041ddde4" },
        { 31744, "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47" },
        { 102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085" },
    };

    [Theory]
    [MemberData(nameof(PublishedVectors))]
    public void A_content_id_is_the_BLAKE3_256_of_the_raw_bytes_as_the_published_test_vectors_give_it(int length, string expected)
    {
        var input = new byte[length];
        for (var i = 0; i < length; i++) input[i] = (byte)(i % 251);
        Assert.Equal(expected, SegmentId.Of(input).ToString());
    }

    [Fact]
    public void An_id_reads_back_from_its_hex_and_its_bytes_and_equals_only_itself()
    {
        var id = SegmentId.Of("segment"u8);
        var hex = id.ToString();
        Assert.Equal(SegmentId.HexLength, hex.Length);
        Assert.Equal(id, SegmentId.Parse(hex));
        Assert.Equal(id, SegmentId.Parse(hex.ToUpperInvariant()));
        var bytes = new byte[SegmentId.ByteLength];
        id.WriteBytes(bytes);
        Assert.Equal(id, SegmentId.FromBytes(bytes));
        var ascii = new byte[SegmentId.HexLength];
        id.WriteHex(ascii);
        Assert.Equal(hex, System.Text.Encoding.ASCII.GetString(ascii));
        // Ids differing in any one of their four words differ.
        for (var word = 0; word < 4; word++)
        {
            var other = (byte[])bytes.Clone();
            other[8 * word + 7] ^= 1;
            Assert.NotEqual(id, SegmentId.FromBytes(other));
        }
    }

    [Theory]
    [InlineData("")]
    [InlineData("af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f326")]
    [InlineData("af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f32620")]
    [InlineData("af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f326g")]
    [InlineData(" f1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262")]
    [InlineData("+f1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262")]
    public void Anything_but_64_hex_digits_is_not_a_content_id(string text)
    {
        Assert.False(SegmentId.TryParse(text, out _));
        Assert.Throws<FormatException>(() => SegmentId.Parse(text));
    }

    [Fact]
    public void An_XXH3_128_id_of_an_earlier_version_is_recognised_but_is_never_a_content_id()
    {
        const string legacy = "9bdbf643f0d534797b47aa0b5dc52e9e";
        Assert.True(SegmentId.IsLegacy(legacy));
        Assert.False(SegmentId.TryParse(legacy, out _));
        Assert.Contains("re-stage", Assert.Throws<FormatException>(() => SegmentId.Parse(legacy)).Message);
        Assert.False(SegmentId.IsLegacy(SegmentId.Of("x"u8).ToString()));
        Assert.False(SegmentId.IsLegacy("9bdbf643f0d534797b47aa0b5dc52e9g"));
    }

    /// <summary>
    /// Lengths that exercise every shape the lane hash handles: one chunk and a byte, whole and partial 16-chunk groups,
    /// a last chunk of one byte, one block, a block and a byte, whole and odd parent levels, and the largest segment.
    /// </summary>
    public static TheoryData<int> SegmentShapes => new()
    {
        1025, 1088, 1089, 2048, 2049, 15 * 1024 + 1, 16 * 1024, 16 * 1024 + 1, 17 * 1024, 31 * 1024 + 63, 33 * 1024 + 64,
        64 * 1024, 64 * 1024 + 1, 71 * 1024 + 333, 127 * 1024 + 1000, 129 * 1024, 255 * 1024 + 1, 256 * 1024,
    };

    [Theory]
    [MemberData(nameof(SegmentShapes))]
    public void A_segment_hashed_sixteen_chunks_at_a_time_has_the_id_the_reference_package_gives_it(int length)
    {
        var input = new byte[length + 7];
        new Random(length).NextBytes(input);
        // At an odd offset too: the lanes read blocks wherever the segment lies in its slab.
        foreach (var offset in new[] { 0, 7 })
        {
            var segment = input.AsSpan(offset, length);
            var expected = new byte[32];
            Blake3.Hasher.Hash(segment, expected);
            Assert.Equal(SegmentId.FromBytes(expected), SegmentId.Of(segment));
            if (Blake3Lanes.IsSupported)
            {
                var lanes = new byte[32];
                Blake3Lanes.Hash(segment, lanes);
                Assert.Equal(expected, lanes);
            }
        }
    }

    [Fact]
    public void Random_segment_lengths_hash_as_the_reference_package_hashes_them()
    {
        var data = new byte[Blake3Lanes.MaxLength + 64];
        var random = new Random(42);
        random.NextBytes(data);
        var expected = new byte[32];
        for (var i = 0; i < 500; i++)
        {
            var length = random.Next(1, Blake3Lanes.MaxLength + 1);
            var segment = data.AsSpan(random.Next(0, 64), length);
            Blake3.Hasher.Hash(segment, expected);
            Assert.True(SegmentId.FromBytes(expected) == SegmentId.Of(segment), $"length {length}");
        }
    }

    [Fact]
    public void The_lane_hash_refuses_what_it_does_not_take()
    {
        Assert.False(Blake3Lanes.Takes(1024));
        Assert.False(Blake3Lanes.Takes(Blake3Lanes.MaxLength + 1));
        Assert.Equal(Blake3Lanes.IsSupported, Blake3Lanes.Takes(1025));
        Assert.Throws<ArgumentOutOfRangeException>(() => Blake3Lanes.Hash(new byte[1024], new byte[32]));
    }
}
