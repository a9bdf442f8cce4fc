using System.Buffers.Binary;
using System.IO.Compression;
using System.Text;

namespace Hpc.Bench.Report;

/// <summary>An RGB raster with just the drawing the charts need.</summary>
public sealed class Canvas
{
    public int Width { get; }
    public int Height { get; }
    public byte[] Pixels { get; }   // RGB, row-major, no padding

    public Canvas(int width, int height, uint background = 0xFFFFFF)
    {
        if (width is < 1 or > 10_000 || height is < 1 or > 10_000) throw new ArgumentOutOfRangeException(nameof(width), "1..10000 pixels each way");
        Width = width;
        Height = height;
        Pixels = new byte[width * height * 3];
        FillRect(0, 0, width, height, background);
    }

    public uint GetPixel(int x, int y)
    {
        var i = (y * Width + x) * 3;
        return (uint)(Pixels[i] << 16 | Pixels[i + 1] << 8 | Pixels[i + 2]);
    }

    public void SetPixel(int x, int y, uint rgb)
    {
        if ((uint)x >= (uint)Width || (uint)y >= (uint)Height) return;
        var i = (y * Width + x) * 3;
        Pixels[i] = (byte)(rgb >> 16);
        Pixels[i + 1] = (byte)(rgb >> 8);
        Pixels[i + 2] = (byte)rgb;
    }

    public void FillRect(int x, int y, int w, int h, uint rgb)
    {
        for (var yy = Math.Max(0, y); yy < Math.Min(Height, y + h); yy++)
            for (var xx = Math.Max(0, x); xx < Math.Min(Width, x + w); xx++)
                SetPixel(xx, yy, rgb);
    }

    /// <summary>Bresenham, widened by stamping a square of side <paramref name="thickness"/>; a dash pattern skips every other run.</summary>
    public void Line(int x0, int y0, int x1, int y1, uint rgb, int thickness = 1, int dash = 0)
    {
        int dx = Math.Abs(x1 - x0), dy = -Math.Abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy, step = 0;
        var off = (thickness - 1) / 2;
        while (true)
        {
            if (dash == 0 || step / dash % 2 == 0) FillRect(x0 - off, y0 - off, thickness, thickness, rgb);
            step++;
            if (x0 == x1 && y0 == y1) break;
            var e2 = 2 * err;
            if (e2 >= dy) { err += dy; x0 += sx; }
            if (e2 <= dx) { err += dx; y0 += sy; }
        }
    }

    public void Marker(int x, int y, int kind, uint rgb)
    {
        switch (kind % 4)
        {
            case 0: FillRect(x - 3, y - 3, 7, 7, rgb); break;
            case 1: for (var r = -4; r <= 4; r++) FillRect(x - (4 - Math.Abs(r)), y + r, 2 * (4 - Math.Abs(r)) + 1, 1, rgb); break;
            case 2: for (var r = -4; r <= 4; r++) { var w = (int)Math.Sqrt(16 - r * r); FillRect(x - w, y + r, 2 * w + 1, 1, rgb); } break;
            default: for (var r = 0; r <= 7; r++) FillRect(x - r / 2, y - 4 + r, r + 1, 1, rgb); break;
        }
    }

    public void Text(int x, int y, string text, uint rgb, int scale = 1)
    {
        foreach (var c in text)
        {
            var g = BitmapFont.Glyph(c);
            for (var row = 0; row < BitmapFont.Height; row++)
                for (var col = 0; col < BitmapFont.Width; col++)
                    if (g[row][col] == '#') FillRect(x + col * scale, y + row * scale, scale, scale, rgb);
            x += BitmapFont.Advance * scale;
        }
    }

    /// <summary>Text turned 90° counter-clockwise, read bottom to top (for a y-axis title); (x, y) is its bottom-left corner.</summary>
    public void TextUp(int x, int y, string text, uint rgb, int scale = 1)
    {
        foreach (var c in text)
        {
            var g = BitmapFont.Glyph(c);
            for (var row = 0; row < BitmapFont.Height; row++)
                for (var col = 0; col < BitmapFont.Width; col++)
                    if (g[row][col] == '#') FillRect(x + row * scale, y - col * scale, scale, scale, rgb);
            y -= BitmapFont.Advance * scale;
        }
    }
}

/// <summary>PNG encoding (8-bit truecolour, no interlace): signature, IHDR, one zlib IDAT, IEND, each chunk with its CRC-32.</summary>
public static class PngWriter
{
    public static readonly byte[] Signature = [0x89, (byte)'P', (byte)'N', (byte)'G', 0x0D, 0x0A, 0x1A, 0x0A];

    public static byte[] Encode(Canvas c)
    {
        using var output = new MemoryStream();
        output.Write(Signature);
        var ihdr = new byte[13];
        BinaryPrimitives.WriteInt32BigEndian(ihdr.AsSpan(0), c.Width);
        BinaryPrimitives.WriteInt32BigEndian(ihdr.AsSpan(4), c.Height);
        ihdr[8] = 8;  // bit depth
        ihdr[9] = 2;  // colour type: RGB
        // compression 0 (deflate), filter method 0, interlace 0
        WriteChunk(output, "IHDR", ihdr);
        using (var compressed = new MemoryStream())
        {
            using (var z = new ZLibStream(compressed, CompressionLevel.Optimal, leaveOpen: true))
            {
                var stride = c.Width * 3;
                for (var y = 0; y < c.Height; y++)
                {
                    z.WriteByte(0); // filter type None: flat chart colours deflate well without prediction
                    z.Write(c.Pixels, y * stride, stride);
                }
            }
            WriteChunk(output, "IDAT", compressed.ToArray());
        }
        WriteChunk(output, "IEND", []);
        return output.ToArray();
    }

    public static void Save(Canvas c, string path) => File.WriteAllBytes(path, Encode(c));

    private static void WriteChunk(Stream s, string type, byte[] data)
    {
        Span<byte> four = stackalloc byte[4];
        BinaryPrimitives.WriteInt32BigEndian(four, data.Length);
        s.Write(four);
        var typeBytes = Encoding.ASCII.GetBytes(type);
        s.Write(typeBytes);
        s.Write(data);
        var crc = Crc32.Update(Crc32.Update(0xFFFFFFFFu, typeBytes), data) ^ 0xFFFFFFFFu;
        BinaryPrimitives.WriteUInt32BigEndian(four, crc);
        s.Write(four);
    }
}

/// <summary>CRC-32 as PNG and zlib's crc32 define it (reflected polynomial 0xEDB88320), table-driven.</summary>
public static class Crc32
{
    private static readonly uint[] Table = Build();

    private static uint[] Build()
    {
        var t = new uint[256];
        for (uint n = 0; n < 256; n++)
        {
            var c = n;
            for (var k = 0; k < 8; k++) c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[n] = c;
        }
        return t;
    }

    /// <summary>Continues a running register (start with 0xFFFFFFFF, finish by xor with 0xFFFFFFFF).</summary>
    public static uint Update(uint crc, ReadOnlySpan<byte> data)
    {
        foreach (var b in data) crc = Table[(crc ^ b) & 0xFF] ^ (crc >> 8);
        return crc;
    }

    public static uint Compute(ReadOnlySpan<byte> data) => Update(0xFFFFFFFFu, data) ^ 0xFFFFFFFFu;
}
