using System.Buffers.Text;
using System.Text;

namespace Hpc.Jobs.Data;

/// <summary>
/// The generated dataset of <c>hpcdata generate</c>: daily closing prices of thousands of instruments over years, as
/// CSV (<c>date,symbol,close</c>, ordered by date then symbol), and an in-place reader of its rows.
/// </summary>
public static class MarketHistory
{
    public const int DefaultInstruments = 5000;

    /// <summary>Writes about <paramref name="targetBytes"/> of price history (geometric random walks, seeded).</summary>
    public static (int Days, int Instruments) Generate(string path, long targetBytes, int instruments = DefaultInstruments, int seed = 42)
    {
        var rng = new Random(seed);
        var price = new double[instruments];
        var vol = new double[instruments];
        for (var i = 0; i < instruments; i++) { price[i] = 10 + rng.NextDouble() * 490; vol[i] = 0.005 + rng.NextDouble() * 0.03; }
        using var file = new FileStream(path, FileMode.Create, FileAccess.Write, FileShare.None, 1 << 20);
        var line = new byte[64];
        var header = "date,symbol,close\n"u8;
        file.Write(header);
        long written = header.Length;
        var date = new DateOnly(2000, 1, 3);
        var days = 0;
        while (written < targetBytes)
        {
            var market = Normal(rng) * 0.01;
            var d = Encoding.ASCII.GetBytes(date.ToString("yyyy-MM-dd"));
            for (var i = 0; i < instruments && written < targetBytes; i++)
            {
                price[i] *= Math.Exp(market + vol[i] * Normal(rng) - 0.5 * vol[i] * vol[i]);
                var n = 0;
                d.CopyTo(line, 0); n += d.Length;
                line[n++] = (byte)',';
                "INST"u8.CopyTo(line.AsSpan(n)); n += 4;
                Utf8Formatter.TryFormat(i, line.AsSpan(n), out var w, new System.Buffers.StandardFormat('D', 5)); n += w;
                line[n++] = (byte)',';
                Utf8Formatter.TryFormat(Math.Round(price[i], 4), line.AsSpan(n), out w, new System.Buffers.StandardFormat('F', 4)); n += w;
                line[n++] = (byte)'\n';
                file.Write(line, 0, n);
                written += n;
            }
            days++;
            date = date.AddDays(date.DayOfWeek == DayOfWeek.Friday ? 3 : 1);
        }
        return (days, instruments);
    }

    private static bool TryParseDigits(ReadOnlySpan<byte> s, out int value)
    {
        value = 0;
        if (s.IsEmpty || s.Length > 9) return false;
        foreach (var c in s)
        {
            if ((uint)(c - '0') > 9) return false;
            value = value * 10 + (c - '0');
        }
        return true;
    }

    /// <summary>Fixed-point decimals as the generator writes them ("123.4567"): integer arithmetic, one division.</summary>
    private static bool TryParsePrice(ReadOnlySpan<byte> s, out double value)
    {
        long mantissa = 0; var scale = 1L; var afterPoint = false;
        value = 0;
        if (s.IsEmpty || s.Length > 18) return false;
        foreach (var c in s)
        {
            if (c == '.' && !afterPoint) { afterPoint = true; continue; }
            if ((uint)(c - '0') > 9) return false;
            mantissa = mantissa * 10 + (c - '0');
            if (afterPoint) scale *= 10;
        }
        value = (double)mantissa / scale;
        return true;
    }

    private static double Normal(Random r) => Math.Sqrt(-2 * Math.Log(1 - r.NextDouble())) * Math.Cos(2 * Math.PI * r.NextDouble());

    /// <summary>Instrument numbers are below this (INST00000–INST99999 fit).</summary>
    public const int MaxInstruments = 1 << 17;

    public delegate void RowAction(long dateKey, int instrument, double price);

    /// <summary>
    /// Calls <paramref name="action"/> for every row "yyyy-MM-dd,INSTnnnnn,price", parsed in place across window
    /// boundaries (a row split between two windows is joined); the header is skipped. The date comes as a sortable key.
    /// </summary>
    public static void ForEachRow(IEnumerable<ReadOnlyMemory<byte>> windows, RowAction action)
    {
        var carry = new List<byte>();
        foreach (var window in windows)
        {
            var span = window.Span;
            var start = 0;
            if (carry.Count > 0)
            {
                var nl = span.IndexOf((byte)'\n');
                if (nl < 0) { carry.AddRange(span.ToArray()); continue; }
                carry.AddRange(span[..nl].ToArray());
                Row(carry.ToArray(), action);
                carry.Clear();
                start = nl + 1;
            }
            while (start < span.Length)
            {
                var nl = span[start..].IndexOf((byte)'\n');
                if (nl < 0) { carry.AddRange(span[start..].ToArray()); break; }
                Row(span.Slice(start, nl), action);
                start += nl + 1;
            }
        }
        if (carry.Count > 0) Row(carry.ToArray(), action);
    }

    private static void Row(ReadOnlySpan<byte> row, RowAction action)
    {
        if (row.Length < 20 || row.StartsWith("date"u8)) return;
        var dateKey = ((long)row[0] << 56) | ((long)row[1] << 48) | ((long)row[2] << 40) | ((long)row[3] << 32) | ((long)row[5] << 24) | ((long)row[6] << 16) | ((long)row[8] << 8) | row[9];
        var comma = row[11..].IndexOf((byte)',') + 11;
        if (comma < 15 || !TryParseDigits(row[15..comma], out var instrument) || instrument >= MaxInstruments || !TryParsePrice(row[(comma + 1)..], out var price))
            throw new InvalidDataException($"not a market-history row: {Encoding.ASCII.GetString(row)}");
        action(dateKey, instrument, price);
    }
}
