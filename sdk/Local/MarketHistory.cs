using System.Buffers.Text;
using System.Text;

namespace Hpc.CommonData.Local;

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

    /// <summary>Bytes of one row, "yyyy-MM-dd,INSTnnnnn,ppp.pppp\n", for sizing: prices run from a few to a few thousand.</summary>
    private const int TypicalRowBytes = 30;

    /// <summary>
    /// Version <paramref name="version"/> of a market history kept the way such files are (ordered by instrument, then
    /// date): version 0 has as many days as fit <paramref name="targetBytes"/>; each later version adds one trading day at
    /// the end of every instrument's rows — an insertion at every instrument, all through the file — and revises ten
    /// past closes. Each instrument's prices come from its own seeded walk, so a day's close is the same in every version
    /// unless revised. Reproducible from <paramref name="seed"/>.
    /// </summary>
    public static (int Days, int Instruments) GenerateByInstrument(string path, long targetBytes, int version = 0, int instruments = DefaultInstruments, int seed = 42)
    {
        var days = BaseDays(targetBytes, instruments) + version;
        var revised = Revisions(version, instruments, days, seed);
        using var file = new FileStream(path, FileMode.Create, FileAccess.Write, FileShare.None, 1 << 20);
        file.Write("date,symbol,close\n"u8);
        var line = new byte[64];
        for (var i = 0; i < instruments; i++)
            WriteInstrument(file, line, i, days, seed, revised);
        return (days, instruments);
    }

    /// <summary>
    /// Version <paramref name="version"/> of the same history as a directory of per-instrument files (INSTnnnnn.csv):
    /// each version adds a day to every file and replaces about 1% of the files outright (a re-issued instrument's whole
    /// history). Reproducible from <paramref name="seed"/>.
    /// </summary>
    public static (int Days, int Instruments) GenerateInstrumentFiles(string directory, long targetBytes, int version = 0, int instruments = DefaultInstruments, int seed = 42)
    {
        var days = BaseDays(targetBytes, instruments) + version;
        Directory.CreateDirectory(directory);
        var line = new byte[64];
        for (var i = 0; i < instruments; i++)
        {
            // The latest version that replaced this file decides its walk; 1% of files per version, chosen by hash.
            var walkSeed = seed;
            for (var k = 1; k <= version; k++)
                if (Mix(seed, k, i) % 100 == 0) walkSeed = (int)(Mix(seed, k, i) >> 8);
            using var file = new FileStream(Path.Combine(directory, $"INST{i:00000}.csv"), FileMode.Create, FileAccess.Write, FileShare.None, 1 << 16);
            file.Write("date,symbol,close\n"u8);
            WriteInstrument(file, line, i, days, walkSeed, revised: null);
        }
        return (days, instruments);
    }

    private static int BaseDays(long targetBytes, int instruments) => (int)Math.Max(1, targetBytes / ((long)instruments * TypicalRowBytes));

    private static void WriteInstrument(Stream file, byte[] line, int instrument, int days, int seed, HashSet<(int, int)>? revised)
    {
        var rng = new Random((int)Mix(seed, 0, instrument));
        var price = 10 + rng.NextDouble() * 490;
        var vol = 0.005 + rng.NextDouble() * 0.03;
        var date = new DateOnly(2000, 1, 3);
        for (var d = 0; d < days; d++)
        {
            price *= Math.Exp(vol * Normal(rng) - 0.5 * vol * vol);
            var close = revised is not null && revised.Contains((instrument, d)) ? price * 1.001 : price;
            var n = 0;
            Utf8Formatter.TryFormat(date.Year, line.AsSpan(n), out var w, new System.Buffers.StandardFormat('D', 4)); n += w;
            line[n++] = (byte)'-';
            Utf8Formatter.TryFormat(date.Month, line.AsSpan(n), out w, new System.Buffers.StandardFormat('D', 2)); n += w;
            line[n++] = (byte)'-';
            Utf8Formatter.TryFormat(date.Day, line.AsSpan(n), out w, new System.Buffers.StandardFormat('D', 2)); n += w;
            line[n++] = (byte)',';
            "INST"u8.CopyTo(line.AsSpan(n)); n += 4;
            Utf8Formatter.TryFormat(instrument, line.AsSpan(n), out w, new System.Buffers.StandardFormat('D', 5)); n += w;
            line[n++] = (byte)',';
            Utf8Formatter.TryFormat(Math.Round(close, 4), line.AsSpan(n), out w, new System.Buffers.StandardFormat('F', 4)); n += w;
            line[n++] = (byte)'\n';
            file.Write(line, 0, n);
            date = date.AddDays(date.DayOfWeek == DayOfWeek.Friday ? 3 : 1);
        }
    }

    /// <summary>Ten revised past closes per version, accumulated: version K carries the revisions of versions 1..K.</summary>
    private static HashSet<(int Instrument, int Day)> Revisions(int version, int instruments, int days, int seed)
    {
        var set = new HashSet<(int, int)>();
        for (var k = 1; k <= version; k++)
        {
            var rng = new Random((int)Mix(seed, k, -1));
            var pastDays = days - (version - k) - 1;
            for (var r = 0; r < 10; r++) set.Add((rng.Next(instruments), rng.Next(Math.Max(1, pastDays))));
        }
        return set;
    }

    /// <summary>SplitMix64 of the three inputs: independent, reproducible streams per (seed, version, instrument).</summary>
    private static ulong Mix(int seed, int version, int instrument)
    {
        var z = ((ulong)(uint)seed << 32 | (uint)instrument) + (ulong)(uint)version * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
        return z ^ (z >> 31);
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
