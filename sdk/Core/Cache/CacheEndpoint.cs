using System.Globalization;

namespace Hpc.CommonData.Cache;

/// <summary>A cache host address, written <c>host:port</c> (IPv6 as <c>[::1]:6380</c>).</summary>
public sealed record CacheEndpoint(string Host, int Port)
{
    public const int DefaultPort = 6380;

    public override string ToString() => Host.Contains(':') ? $"[{Host}]:{Port}" : $"{Host}:{Port}";

    public static CacheEndpoint Parse(string text)
    {
        text = text.Trim();
        if (text.Length == 0) throw new FormatException("empty cache host address");
        string host; var port = DefaultPort;
        if (text.StartsWith('['))
        {
            var close = text.IndexOf(']');
            if (close < 0) throw new FormatException($"cache host '{text}': missing ']'");
            host = text[1..close];
            if (close + 1 < text.Length) port = ParsePort(text, text[(close + 2)..]);
        }
        else
        {
            var colon = text.LastIndexOf(':');
            host = colon < 0 ? text : text[..colon];
            if (colon >= 0) port = ParsePort(text, text[(colon + 1)..]);
        }
        if (host.Length == 0) throw new FormatException($"cache host '{text}': empty host");
        return new CacheEndpoint(host, port);
    }

    public static bool TryParse(string text, out CacheEndpoint? endpoint)
    {
        try { endpoint = Parse(text); return true; }
        catch (FormatException) { endpoint = null; return false; }
    }

    /// <summary>Parses a comma- or whitespace-separated host list, as in HPCDATA_CACHE_HOSTS.</summary>
    public static IReadOnlyList<CacheEndpoint> ParseList(string? text) =>
        (text ?? "").Split([',', ' ', ';', '\n'], StringSplitOptions.RemoveEmptyEntries).Select(Parse).ToArray();

    private static int ParsePort(string text, string port) =>
        int.TryParse(port, NumberStyles.None, CultureInfo.InvariantCulture, out var p) && p is > 0 and < 65536
            ? p : throw new FormatException($"cache host '{text}': bad port '{port}'");
}

/// <summary>A cache host could not be reached or dropped the connection; the message names the host.</summary>
public sealed class CacheHostUnavailableException(CacheEndpoint endpoint, string reason, Exception? inner = null, bool timedOut = false)
    : CommonDataException(ErrorCode.Unavailable, $"cache host {endpoint} unavailable: {reason}", inner)
{
    public CacheEndpoint Endpoint { get; } = endpoint;
    /// <summary>The host said nothing in time (as opposed to refusing or resetting the connection).</summary>
    public bool TimedOut { get; } = timedOut;
    /// <summary>What went wrong, without the host's name.</summary>
    public string Reason { get; } = reason;
}
