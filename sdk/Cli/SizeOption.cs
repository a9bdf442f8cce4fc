namespace Hpc.CommonData.Cli;

/// <summary>
/// The dataset size a verb is asked to make (<c>demo --size</c>, <c>generate --size</c>). A bare number is bytes, as
/// every size in these programs reads, but a dataset of less than 1 MB written without a unit is almost always a
/// forgotten one (<c>--size 64</c> meant as 64 MB): such a size is refused, as tools with a minimum size refuse one
/// below it, and the message names the unit to add.
/// </summary>
public static class SizeOption
{
    public const long BareMinimum = 1L << 20;

    /// <summary>What the help says about the option's values.</summary>
    public const string Rule = "a number and a unit, e.g. 64MB or 1.5GB (B, KB, MB, GB, TB: powers of 1024); a number without a unit is bytes and must be at least 1048576";

    /// <summary>The size <paramref name="text"/> gives <paramref name="option"/>; a <see cref="ArgumentException"/> saying what is wrong otherwise.</summary>
    public static long Parse(string option, string text)
    {
        if (!ByteSize.TryParse(text, out var size)) throw new ArgumentException($"{option} '{text}' is not a size (e.g. 64MB, 1GB)");
        var bare = double.TryParse(text.Trim(), System.Globalization.NumberStyles.Float, System.Globalization.CultureInfo.InvariantCulture, out _);
        if (bare && size.Bytes < BareMinimum)
            throw new ArgumentException($"{option} {text.Trim()} has no unit, so it is {size.Bytes} bytes; give the unit (e.g. {text.Trim()}MB, {text.Trim()}KB or {text.Trim()}B)");
        return size.Bytes;
    }
}
