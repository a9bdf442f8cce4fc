using System.Globalization;
using System.Text;

namespace Hpc.CommonData.Tests;

/// <summary>
/// Deterministic inputs of the format compatibility vectors. They depend on nothing but this code (an own SplitMix64
/// generator, invariant formatting), so the bytes are the same on every runtime and the recorded hashes stay valid.
/// Never change them: the recorded ids, hashes and fixture files were made from exactly these bytes.
/// </summary>
internal static class FormatCompatibilityInputs
{
    /// <summary>The non-zero seed the 64-bit hash is recorded with (placement hashes with per-host seeds).</summary>
    public const ulong Seed = 0x9E3779B97F4A7C15;

    public static byte[] Empty() => [];

    public static byte[] OneByte() => [0x2A];

    /// <summary>64 KB of price rows (date, instrument, close): text that LZ4 shrinks.</summary>
    public static byte[] Text64K() => PriceRows(65536, 1);

    /// <summary>64 KB that LZ4 cannot shrink: stored raw.</summary>
    public static byte[] Random64K() => RandomBytes(65536, 2);

    /// <summary>
    /// 1 MB and a partial tail segment (1,052,675 bytes): rows, random, runs, and half-and-half, 64 KB each in turn.
    /// </summary>
    public static byte[] Mixed1M()
    {
        const int seg = 65536;
        var data = new byte[16 * seg + 4099];
        for (var i = 0; i * seg < data.Length; i++)
        {
            var part = data.AsSpan(i * seg, Math.Min(seg, data.Length - i * seg));
            switch (i % 4)
            {
                case 0: PriceRows(part.Length, 100 + (ulong)i).CopyTo(part); break;
                case 1: RandomBytes(part.Length, 200 + (ulong)i).CopyTo(part); break;
                case 2: Runs(part, 300 + (ulong)i); break;
                default:
                    PriceRows(part.Length / 2, 400 + (ulong)i).CopyTo(part);
                    RandomBytes(part.Length - part.Length / 2, 500 + (ulong)i).CopyTo(part[(part.Length / 2)..]);
                    break;
            }
        }
        return data;
    }

    public static IEnumerable<(string Name, byte[] Data)> All() =>
    [
        ("empty", Empty()), ("one-byte", OneByte()), ("text-64k", Text64K()), ("random-64k", Random64K()), ("mixed-1m", Mixed1M()),
    ];

    private static ulong Next(ref ulong state)
    {
        var z = state += 0x9E3779B97F4A7C15;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
        return z ^ (z >> 31);
    }

    private static byte[] RandomBytes(int n, ulong seed)
    {
        var b = new byte[n];
        for (var i = 0; i < n; i++) b[i] = (byte)Next(ref seed);
        return b;
    }

    private static void Runs(Span<byte> d, ulong seed)
    {
        for (var o = 0; o < d.Length;)
        {
            var r = Next(ref seed);
            var len = (int)Math.Min((long)(1 + (r & 255)), d.Length - o);
            d.Slice(o, len).Fill((byte)(r >> 8));
            o += len;
        }
    }

    private static byte[] PriceRows(int n, ulong seed)
    {
        var sb = new StringBuilder(n + 64);
        var cents = 1_000_000L;
        for (var i = 0; sb.Length < n; i++)
        {
            cents += (long)(Next(ref seed) % 2001) - 1000;
            sb.Append(CultureInfo.InvariantCulture, $"2019-{1 + i / 1000 % 12:D2}-{1 + i / 40 % 28:D2},INST{i % 40:D4},{cents / 10000}.{cents % 10000:D4}\n");
        }
        return Encoding.ASCII.GetBytes(sb.ToString())[..n];
    }
}
