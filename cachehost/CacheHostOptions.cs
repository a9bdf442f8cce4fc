using System.ComponentModel;
using System.Globalization;
using Microsoft.Extensions.Options;

namespace Hpc.CacheHost;

/// <summary>Settings of one cache host, bound from the "CacheHost" configuration section.</summary>
public sealed class CacheHostOptions
{
    public const string SectionName = "CacheHost";

    /// <summary>Short command-line switches, so an operator can write <c>--port 6380</c> instead of the section path.</summary>
    public static IDictionary<string, string> SwitchMappings => new Dictionary<string, string>(StringComparer.OrdinalIgnoreCase)
    {
        ["--address"] = $"{SectionName}:{nameof(Address)}",
        ["--port"] = $"{SectionName}:{nameof(Port)}",
        ["--max-memory"] = $"{SectionName}:{nameof(MaxMemoryBytes)}",
        ["--max-frame"] = $"{SectionName}:{nameof(MaxFrameBytes)}",
        ["--password"] = $"{SectionName}:{nameof(Password)}",
        ["--max-clients"] = $"{SectionName}:{nameof(MaxClients)}",
    };

    /// <summary>IP address (or host name) to listen on; 0.0.0.0 or :: for all interfaces.</summary>
    public string Address { get; set; } = "127.0.0.1";

    /// <summary>TCP port; 0 picks a free one, announced on the READY line.</summary>
    public int Port { get; set; } = 6380;

    /// <summary>Budget for stored keys, values and per-entry overhead; writes beyond it are refused, never paged.</summary>
    public ByteSize MaxMemoryBytes { get; set; } = ByteSize.FromMebibytes(1024);

    /// <summary>Largest request frame accepted; it also bounds a single bulk string, an inline line and the argument count.</summary>
    public ByteSize MaxFrameBytes { get; set; } = ByteSize.FromMebibytes(64);

    /// <summary>When set, every connection must AUTH before any data command.</summary>
    public string? Password { get; set; }

    public int MaxClients { get; set; } = 10_000;

    internal IEnumerable<string> Validate()
    {
        if (Port is < 0 or > 65535)
            yield return $"Port must be 0..65535, not {Port}.";
        if (MaxMemoryBytes.Bytes <= 0)
            yield return "MaxMemoryBytes must be positive.";
        if (MaxFrameBytes.Bytes is < 1024 or > int.MaxValue)
            yield return "MaxFrameBytes must be between 1 KiB and 2 GiB.";
        if (MaxClients <= 0)
            yield return "MaxClients must be positive.";
        if (string.IsNullOrWhiteSpace(Address))
            yield return "Address must not be empty.";
    }
}

internal sealed class CacheHostOptionsValidator : IValidateOptions<CacheHostOptions>
{
    public ValidateOptionsResult Validate(string? name, CacheHostOptions options)
    {
        var failures = options.Validate().ToList();
        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures);
    }
}

/// <summary>
/// A byte count that configuration may give as a plain number or with a binary suffix (K/KB/KiB, M/MB/MiB, G/GB/GiB,
/// T/TB/TiB, all powers of 1024), so "--max-memory 2GB" reads the way operators write it.
/// </summary>
[TypeConverter(typeof(ByteSizeConverter))]
public readonly record struct ByteSize(long Bytes)
{
    public static ByteSize FromMebibytes(long mebibytes) => new(mebibytes * 1024 * 1024);

    public static ByteSize Parse(string text)
    {
        if (TryParse(text, out var size))
            return size;
        throw new FormatException($"'{text}' is not a byte size; use a number with an optional suffix such as 512MB or 2GB.");
    }

    public static bool TryParse(string? text, out ByteSize size)
    {
        size = default;
        var s = text.AsSpan().Trim();
        int digits = 0;
        while (digits < s.Length && char.IsAsciiDigit(s[digits]))
            digits++;
        if (digits == 0 || !long.TryParse(s[..digits], NumberStyles.None, CultureInfo.InvariantCulture, out long number))
            return false;

        long multiplier = s[digits..].Trim().ToString().ToUpperInvariant() switch
        {
            "" or "B" => 1,
            "K" or "KB" or "KIB" => 1L << 10,
            "M" or "MB" or "MIB" => 1L << 20,
            "G" or "GB" or "GIB" => 1L << 30,
            "T" or "TB" or "TIB" => 1L << 40,
            _ => 0,
        };
        if (multiplier == 0 || number > long.MaxValue / multiplier)
            return false;
        size = new ByteSize(number * multiplier);
        return true;
    }

    public override string ToString() => Bytes.ToString(CultureInfo.InvariantCulture);
}

internal sealed class ByteSizeConverter : TypeConverter
{
    public override bool CanConvertFrom(ITypeDescriptorContext? context, Type sourceType) =>
        sourceType == typeof(string) || base.CanConvertFrom(context, sourceType);

    public override object? ConvertFrom(ITypeDescriptorContext? context, CultureInfo? culture, object value) =>
        value is string s ? ByteSize.Parse(s) : base.ConvertFrom(context, culture, value);
}
