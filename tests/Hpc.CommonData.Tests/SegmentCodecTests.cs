using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

public class SegmentCodecTests
{
    private static byte[] Random(int n, int seed = 1) { var b = new byte[n]; new Random(seed).NextBytes(b); return b; }
    private static byte[] Compressible(int n) => Enumerable.Range(0, n).Select(i => (byte)("2024-01-02,INST00042,123.4567\n"[i % 30])).ToArray();

    [Fact]
    public void The_start_up_self_check_passes() => Assert.Null(SegmentCodec.SelfCheck());

    [Theory]
    [InlineData(1)]
    [InlineData(100)]
    [InlineData(SegmentCodec.DefaultSegmentSize)]
    [InlineData(SegmentCodec.DefaultSegmentSize - 1)]
    [InlineData(3 * SegmentCodec.DefaultSegmentSize)]
    public void Round_trips_random_and_compressible_segments(int length)
    {
        foreach (var raw in new[] { Random(length), Compressible(length) })
        {
            var stored = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
            var n = SegmentCodec.Encode(raw, stored);
            var back = new byte[raw.Length];
            Assert.Null(SegmentCodec.TryDecode(stored.AsSpan(0, n), SegmentId.Of(raw), back));
            Assert.Equal(raw, back);
        }
    }

    /// <summary>
    /// EncodeHead gives LZ4 only a little more room than the raw length; segments that LZ4 shrinks by a few bytes only
    /// must still get exactly the block that LZ4 writes with its full worst-case room, and the rest be stored raw.
    /// </summary>
    [Fact]
    public void Encoding_with_the_header_apart_writes_what_full_room_writes_also_for_barely_compressible_segments()
    {
        var rng = new Random(7);
        var full = new byte[Lz4.MaximumOutputLength(SegmentCodec.DefaultSegmentSize)];
        var head = new byte[SegmentCodec.MaxHeadLength(SegmentCodec.DefaultSegmentSize)];
        var stored = new byte[SegmentCodec.MaxEncodedLength(SegmentCodec.DefaultSegmentSize)];
        int nearRaw = 0, rawStored = 0;
        for (var trial = 0; trial < 400; trial++)
        {
            var length = trial % 2 == 0 ? SegmentCodec.DefaultSegmentSize : rng.Next(1, SegmentCodec.DefaultSegmentSize);
            var raw = Random(length, trial);
            // A run of repeated bytes somewhere: from nothing to a little more than LZ4's own overhead on random bytes.
            var run = rng.Next(0, Math.Min(length, 600));
            Array.Fill(raw, (byte)'x', rng.Next(0, length - run + 1), run);
            var reference = Lz4.Encode(raw, full);
            var n = SegmentCodec.EncodeHead(raw, head, compress: true, out var storedRaw);
            // Also raw: what the probe of three pieces finds incompressible (the run lies between them), never tried whole.
            Assert.Equal(reference == 0 || reference >= length || SegmentCodec.LooksIncompressible(raw), storedRaw);
            if (storedRaw)
            {
                rawStored++;
                Assert.Equal(SegmentCodec.HeaderLength, n);
            }
            else
            {
                if (reference > length - 64) nearRaw++;
                Assert.Equal(full.AsSpan(0, reference).ToArray(), head.AsSpan(SegmentCodec.HeaderLength, reference).ToArray());
            }
            // Header and payload apart are byte for byte the segment Encode writes.
            var whole = SegmentCodec.Encode(raw, stored);
            var apart = storedRaw ? [.. head.AsSpan(0, n), .. raw] : head.AsSpan(0, n).ToArray();
            Assert.Equal(stored.AsSpan(0, whole).ToArray(), apart);
        }
        Assert.True(nearRaw > 5 && rawStored > 5, $"{nearRaw} segments within 64 bytes of raw, {rawStored} stored raw: the trial data missed the edge");
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(17)]
    [InlineData(240)]
    [InlineData(241)]
    [InlineData(1025)]
    [InlineData(SegmentCodec.DefaultSegmentSize)]
    [InlineData(262144)]
    public void A_raw_stored_segment_carries_the_XXH3_64_of_its_bytes_as_its_checksum(int length)
    {
        var raw = Random(length, length);
        var head = new byte[SegmentCodec.MaxHeadLength(length)];
        Assert.Equal(SegmentCodec.HeaderLength, SegmentCodec.EncodeHead(raw, head, compress: false, out var storedRaw));
        Assert.True(storedRaw);
        Assert.Equal(XxHash.Hash64Of(raw), System.Buffers.Binary.BinaryPrimitives.ReadUInt64LittleEndian(head.AsSpan(16)));
    }

    [Fact]
    public void Incompressible_data_is_stored_raw_and_compressible_data_shrinks()
    {
        var random = Random(65536);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(65536)];
        Assert.Equal(SegmentCodec.HeaderLength + 65536, SegmentCodec.Encode(random, buffer));
        Assert.Equal((byte)SegmentCodecKind.Raw, buffer[4]);

        var n = SegmentCodec.Encode(Compressible(65536), buffer);
        Assert.True(n < 65536 / 4, $"compressible segment stored in {n} bytes");
        Assert.Equal((byte)SegmentCodecKind.Lz4, buffer[4]);
    }

    [Fact]
    public void A_segment_whose_probed_pieces_do_not_compress_is_stored_raw_without_a_full_attempt()
    {
        var buffer = new byte[SegmentCodec.MaxEncodedLength(65536)];
        var random = Random(65536, 11);
        Assert.True(SegmentCodec.LooksIncompressible(random));

        // Compressible bytes anywhere near a probed piece (here the middle) are compressed.
        var middle = Random(65536, 12);
        Compressible(8192).CopyTo(middle, 32768 - 4096);
        Assert.False(SegmentCodec.LooksIncompressible(middle));
        Assert.True(SegmentCodec.Encode(middle, buffer) < 65536 - 6000);
        Assert.Equal((byte)SegmentCodecKind.Lz4, buffer[4]);

        // Compressible bytes only between the pieces are the probe's price: stored raw, still exact.
        var between = Random(65536, 13);
        Compressible(8192).CopyTo(between, 8192);
        Assert.True(SegmentCodec.LooksIncompressible(between));
        Assert.Equal(SegmentCodec.HeaderLength + 65536, SegmentCodec.Encode(between, buffer));
        var back = new byte[65536];
        Assert.Null(SegmentCodec.TryDecode(buffer.AsSpan(0, SegmentCodec.HeaderLength + 65536), SegmentId.Of(between), back));
        Assert.Equal(between, back);

        // Short segments always get the full attempt.
        var shortRun = Random(SegmentCodec.ProbeMinLength - 1, 14);
        Assert.False(SegmentCodec.LooksIncompressible(shortRun));
    }

    [Fact]
    public void An_encoder_going_through_segments_in_order_probes_only_after_a_segment_stored_raw()
    {
        var buffer = new byte[SegmentCodec.MaxEncodedLength(65536)];
        var between = Random(65536, 16);
        Compressible(8192).CopyTo(between, 8192);
        var probe = true;

        // After compressible data the next segment gets the full attempt: the probe would cost LZ4 a tenth more there.
        SegmentCodec.EncodeInOrder(Compressible(65536), buffer, SegmentCompression.Lz4, ref probe);
        Assert.False(probe);
        SegmentCodec.EncodeInOrder(between, buffer, SegmentCompression.Lz4, ref probe);
        Assert.Equal((byte)SegmentCodecKind.Lz4, buffer[4]);

        // Once a segment is stored raw, the next is probed first.
        SegmentCodec.EncodeInOrder(Random(65536, 17), buffer, SegmentCompression.Lz4, ref probe);
        Assert.True(probe);
        SegmentCodec.EncodeInOrder(between, buffer, SegmentCompression.Lz4, ref probe);
        Assert.Equal((byte)SegmentCodecKind.Raw, buffer[4]);
        Assert.True(probe);
    }

    [Fact]
    public void The_LZ4_probe_does_not_keep_zstd_from_text_LZ4_finds_no_repeats_in()
    {
        var text = System.Text.Encoding.ASCII.GetBytes(Convert.ToBase64String(Random(49152, 15)));
        Assert.True(SegmentCodec.LooksIncompressible(text));
        var buffer = new byte[SegmentCodec.MaxEncodedLength(text.Length)];
        var n = SegmentCodec.Encode(text, buffer, SegmentCompression.Parse("zstd"));
        Assert.Equal((byte)SegmentCodecKind.Zstd, buffer[4]);
        Assert.True(n < text.Length * 85 / 100, $"zstd stored {n} of {text.Length} bytes");
    }

    [Fact]
    public void Compression_can_be_turned_off()
    {
        var raw = Compressible(65536);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        Assert.Equal(SegmentCodec.HeaderLength + raw.Length, SegmentCodec.Encode(raw, buffer, compress: false));
    }

    public static TheoryData<string, Action<byte[]>> Damage => new()
    {
        { "checksum", s => s[^1] ^= 0x40 },
        { "checksum", s => s[SegmentCodec.HeaderLength] ^= 1 },
        { "magic", s => s[0] = (byte)'X' },
        { "version", s => s[3] = 9 },
        { "raw length", s => s[8] ^= 1 },
        { "payload length", s => s[12] ^= 1 },
    };

    [Theory]
    [MemberData(nameof(Damage))]
    public void Damaged_segments_are_rejected_with_a_reason(string expected, Action<byte[]> damage)
    {
        var raw = Compressible(65536);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var stored = buffer.AsSpan(0, SegmentCodec.Encode(raw, buffer)).ToArray();
        damage(stored);
        var problem = SegmentCodec.TryDecode(stored, SegmentId.Of(raw), new byte[raw.Length]);
        Assert.NotNull(problem);
        Assert.Contains(expected, problem);
    }

    [Fact]
    public void A_segment_whose_content_does_not_match_its_id_is_rejected()
    {
        var raw = Random(1000);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var n = SegmentCodec.Encode(raw, buffer);
        var other = SegmentId.Of(Random(1000, seed: 2));
        Assert.Contains("content hash mismatch", SegmentCodec.TryDecode(buffer.AsSpan(0, n), other, new byte[1000]));
    }

    [Fact]
    public void A_raw_segment_is_read_by_its_content_id_alone_but_a_host_also_requires_its_payload_checksum()
    {
        var raw = Random(1000); // incompressible: stored raw
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var stored = buffer.AsSpan(0, SegmentCodec.Encode(raw, buffer)).ToArray();
        Assert.Equal(0, stored[4]);
        stored[16] ^= 1; // the checksum field only: the content is intact

        var back = new byte[raw.Length];
        Assert.Null(SegmentCodec.TryDecode(stored, SegmentId.Of(raw), back));
        Assert.Equal(raw, back);
        Assert.Contains("payload checksum mismatch", SegmentCodec.TryDecodeStrict(stored, SegmentId.Of(raw), new byte[raw.Length]));
        Assert.Equal("payload checksum mismatch", SegmentCodec.CheckStored(stored, raw.Length));

        stored[16] ^= 1;
        stored[SegmentCodec.HeaderLength + 7] ^= 1; // the content itself: the id catches it without the checksum
        Assert.Contains("content hash mismatch", SegmentCodec.TryDecode(stored, SegmentId.Of(raw), back));
    }

    [Fact]
    public void Truncated_segments_are_rejected()
    {
        var raw = Random(1000);
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        var n = SegmentCodec.Encode(raw, buffer);
        Assert.NotNull(SegmentCodec.TryDecode(buffer.AsSpan(0, n - 1), SegmentId.Of(raw), new byte[1000]));
        Assert.NotNull(SegmentCodec.TryDecode(buffer.AsSpan(0, 10), SegmentId.Of(raw), new byte[1000]));
    }

    [Fact]
    public void Content_ids_are_stable_hex_and_equal_for_equal_content()
    {
        var a = SegmentId.Of("hello"u8);
        Assert.Equal(a, SegmentId.Of("hello"u8));
        Assert.NotEqual(a, SegmentId.Of("hellp"u8));
        Assert.Equal(64, a.ToString().Length);
        Assert.Equal(a, SegmentId.Parse(a.ToString()));
        Span<byte> hex = stackalloc byte[64];
        a.WriteHex(hex);
        Assert.Equal(a.ToString(), System.Text.Encoding.ASCII.GetString(hex));
    }

    [Fact]
    public void Streaming_hash_equals_one_shot_hash()
    {
        var data = Random(1_000_003);
        using var h = new XxHash.Streaming128();
        for (var o = 0; o < data.Length; o += 65536) h.Append(data.AsSpan(o, Math.Min(65536, data.Length - o)));
        Assert.Equal(XxHash.Hash128Of(data), h.Digest());
    }
}
