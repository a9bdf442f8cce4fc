using System.Buffers.Binary;
using System.IO.Compression;
using System.Text;
using Hpc.Bench.Report;

namespace Hpc.Bench.Tests;

public class PngWriterTests
{
    [Fact]
    public void Crc32_matches_the_standard_check_value() =>
        Assert.Equal(0xCBF43926u, Crc32.Compute("123456789"u8));

    [Fact]
    public void Encodes_signature_header_chunks_with_valid_crcs_and_the_exact_pixels()
    {
        var canvas = new Canvas(7, 5);
        canvas.SetPixel(0, 0, 0xFF0000);
        canvas.SetPixel(6, 4, 0x00FF80);
        var png = PngWriter.Encode(canvas);

        var chunks = PngFile.Chunks(png);
        Assert.Equal(["IHDR", "IDAT", "IEND"], chunks.Select(c => c.Type));
        var ihdr = chunks[0].Data;
        Assert.Equal(7, BinaryPrimitives.ReadInt32BigEndian(ihdr));
        Assert.Equal(5, BinaryPrimitives.ReadInt32BigEndian(ihdr.AsSpan(4)));
        Assert.Equal(new byte[] { 8, 2, 0, 0, 0 }, ihdr[8..]);

        using var z = new ZLibStream(new MemoryStream(chunks[1].Data), CompressionMode.Decompress);
        var raw = new MemoryStream();
        z.CopyTo(raw);
        var rows = raw.ToArray();
        Assert.Equal(5 * (1 + 7 * 3), rows.Length);
        Assert.Equal(0, rows[0]); // filter byte
        Assert.Equal(new byte[] { 0xFF, 0, 0 }, rows[1..4]);
        Assert.Equal(new byte[] { 0, 0xFF, 0x80 }, rows[^3..]);
        Assert.Equal(new byte[] { 0xFF, 0xFF, 0xFF }, rows[4..7]);
    }

    [Fact]
    public void Chart_draws_lines_and_text_inside_the_canvas()
    {
        var chart = new LineChart { Title = "t", XLabel = "nodes", YLabel = "s" };
        chart.Lines.Add(new LineChart.Series("a", [(1, 1), (2, 2), (4, 4), (32, 30)]));
        chart.Lines.Add(new LineChart.Series("b", [(1, 2), (32, double.NaN)], Dashed: true));
        var c = chart.Draw(640, 400);
        var colours = new HashSet<uint>();
        for (var y = 0; y < c.Height; y++) for (var x = 0; x < c.Width; x++) colours.Add(c.GetPixel(x, y));
        Assert.Contains(0x1F77B4u, colours);   // first series
        Assert.Contains(0xD62728u, colours);   // second series (its one finite point and legend)
        Assert.Contains(0x202020u, colours);   // axes and text
        PngFile.Chunks(PngWriter.Encode(c));   // well-formed
    }

    [Fact]
    public void Font_has_every_character_the_charts_use()
    {
        foreach (var ch in "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz .,:-+=/%()_×?")
        {
            var g = BitmapFont.Glyph(ch);
            Assert.Equal(BitmapFont.Height, g.Length);
            Assert.All(g, row => Assert.Equal(BitmapFont.Width, row.Length));
            if (ch != ' ') Assert.NotEqual(BitmapFont.Glyph('\u0001'), g);
        }
    }
}

/// <summary>A strict PNG chunk reader for the tests: checks the signature, every length and every CRC.</summary>
public static class PngFile
{
    public sealed record Chunk(string Type, byte[] Data);

    public static List<Chunk> Chunks(byte[] png)
    {
        Assert.True(png.AsSpan(0, 8).SequenceEqual(PngWriter.Signature), "PNG signature");
        var list = new List<Chunk>();
        var pos = 8;
        while (pos < png.Length)
        {
            var length = BinaryPrimitives.ReadInt32BigEndian(png.AsSpan(pos));
            var type = Encoding.ASCII.GetString(png, pos + 4, 4);
            var data = png[(pos + 8)..(pos + 8 + length)];
            var crc = BinaryPrimitives.ReadUInt32BigEndian(png.AsSpan(pos + 8 + length));
            Assert.Equal(Crc32.Compute(png.AsSpan(pos + 4, 4 + length)), crc);
            list.Add(new Chunk(type, data));
            pos += 12 + length;
        }
        Assert.Equal(png.Length, pos);
        Assert.Equal("IHDR", list[0].Type);
        Assert.Equal("IEND", list[^1].Type);
        return list;
    }
}
