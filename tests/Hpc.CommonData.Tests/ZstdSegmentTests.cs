using System.Diagnostics;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Tests;

/// <summary>
/// Segments compressed with Zstandard: chosen by the stager per dataset, recognised by every reader from the segment
/// header, held to the same checks as LZ4 segments, and standard zstd frames that the reference <c>zstd</c> tool reads.
/// </summary>
public sealed class ZstdSegmentTests
{
    private static byte[] Text(int n)
    {
        // Market-history-like lines: dates, instruments and prices, so the codecs meet the kind of data they are chosen for.
        var rng = new Random(5);
        var sb = new System.Text.StringBuilder();
        while (sb.Length < n) sb.Append($"2024-{rng.Next(1, 13):00}-{rng.Next(1, 29):00},INST{rng.Next(0, 5000):00000},{rng.Next(1000, 900000) / 100.0:0.00}\n");
        return System.Text.Encoding.ASCII.GetBytes(sb.ToString(0, n));
    }

    private static byte[] Stored(byte[] raw, SegmentCompression compression)
    {
        var buffer = new byte[SegmentCodec.MaxEncodedLength(raw.Length)];
        return buffer.AsSpan(0, SegmentCodec.Encode(raw, buffer, compression)).ToArray();
    }

    [Theory]
    [InlineData("zstd")]
    [InlineData("zstd:3")]
    [InlineData("zstd:19")]
    [InlineData("zstd:-5")]
    public void A_zstd_segment_round_trips_and_its_header_names_zstd(string codec)
    {
        var raw = Text(SegmentCodec.DefaultSegmentSize);
        var stored = Stored(raw, SegmentCompression.Parse(codec));
        Assert.Equal((byte)SegmentCodecKind.Zstd, stored[4]);
        var back = new byte[raw.Length];
        Assert.Null(SegmentCodec.TryDecode(stored, SegmentId.Of(raw), back));
        Assert.Equal(raw, back);
        Assert.Null(SegmentCodec.TryDecodeStrict(stored, SegmentId.Of(raw), new byte[raw.Length]));
        Assert.Null(SegmentCodec.CheckStored(stored, raw.Length));
    }

    [Fact]
    public void On_text_zstd_stores_markedly_less_than_lz4()
    {
        var raw = Text(SegmentCodec.DefaultSegmentSize);
        var lz4 = Stored(raw, SegmentCompression.Lz4).Length;
        var zstd = Stored(raw, SegmentCompression.Zstd).Length;
        Assert.True(zstd < 0.8 * lz4, $"zstd {zstd} bytes against lz4 {lz4}");
    }

    [Fact]
    public void Incompressible_bytes_are_stored_raw_whatever_the_codec()
    {
        var raw = new byte[SegmentCodec.DefaultSegmentSize];
        new Random(3).NextBytes(raw);
        Assert.Equal((byte)SegmentCodecKind.Raw, Stored(raw, SegmentCompression.Zstd)[4]);
    }

    [Fact]
    public void A_damaged_zstd_segment_is_rejected_before_and_after_decoding()
    {
        var raw = Text(20_000);
        var stored = Stored(raw, SegmentCompression.Zstd);
        var flipped = stored.ToArray();
        flipped[^5] ^= 0x10;
        Assert.Contains("payload checksum mismatch", SegmentCodec.TryDecode(flipped, SegmentId.Of(raw), new byte[raw.Length]));

        // Damaged and re-checksummed, as a forger would: the frame no longer decodes to the content, and the id catches it.
        var forged = flipped.ToArray();
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64LittleEndian(forged.AsSpan(16), XxHash.Hash64Of(forged.AsSpan(SegmentCodec.HeaderLength)));
        var problem = SegmentCodec.TryDecode(forged, SegmentId.Of(raw), new byte[raw.Length]);
        Assert.NotNull(problem);
        Assert.True(problem.Contains("does not decode") || problem.Contains("content hash mismatch"), problem);
    }

    [Theory]
    [InlineData("gzip")]
    [InlineData("zstd:0")]
    [InlineData("zstd:23")]
    [InlineData("zstd:x")]
    public void An_unknown_codec_or_level_is_refused_naming_what_is_accepted(string codec)
    {
        Assert.False(SegmentCompression.TryParse(codec, out _, out var error));
        Assert.Contains(codec, error);
    }

    [Theory]
    [InlineData("lz4")]
    [InlineData("none")]
    [InlineData("zstd")]
    [InlineData("zstd:9")]
    public void A_codec_reads_back_from_its_own_name(string codec) =>
        Assert.Equal(codec, SegmentCompression.Parse(codec).ToString());

    /// <summary>The payload is one standard Zstandard frame: the reference tool decodes ours, and we decode the tool's.</summary>
    [Fact]
    public async Task The_payload_is_a_frame_the_reference_zstd_tool_reads_and_writes()
    {
        if (OperatingSystem.IsWindows()) return;
        var raw = Text(50_000);
        var dir = Directory.CreateTempSubdirectory("hcd-zstd-").FullName;
        try
        {
            var stored = Stored(raw, SegmentCompression.Zstd);
            await File.WriteAllBytesAsync(Path.Combine(dir, "ours.zst"), stored[SegmentCodec.HeaderLength..]);
            await RunAsync("zstd", "-q", "-d", "-f", Path.Combine(dir, "ours.zst"), "-o", Path.Combine(dir, "ours.raw"));
            Assert.Equal(raw, await File.ReadAllBytesAsync(Path.Combine(dir, "ours.raw")));

            await File.WriteAllBytesAsync(Path.Combine(dir, "theirs.raw"), raw);
            await RunAsync("zstd", "-q", "-19", "-f", Path.Combine(dir, "theirs.raw"), "-o", Path.Combine(dir, "theirs.zst"));
            var frame = await File.ReadAllBytesAsync(Path.Combine(dir, "theirs.zst"));
            var back = new byte[raw.Length];
            Assert.Equal(raw.Length, Zstd.Decode(frame, back));
            Assert.Equal(raw, back);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    private static async Task RunAsync(string program, params string[] args)
    {
        var info = new ProcessStartInfo(program) { RedirectStandardError = true, UseShellExecute = false };
        foreach (var a in args) info.ArgumentList.Add(a);
        using var p = Process.Start(info)!;
        var err = p.StandardError.ReadToEndAsync();
        await p.WaitForExitAsync();
        Assert.True(p.ExitCode == 0, $"{program} {string.Join(' ', args)}: {await err}");
    }
}
