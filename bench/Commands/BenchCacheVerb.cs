using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.CommonData.Cache;
using Hpc.Bench;

namespace Hpc.Bench.Commands;

public sealed class BenchCacheOptions : IVerbOptions
{
    public static string Verb => "cache";

    public static string Summary => "Our cache host against redis-server and garnet-server on loopback: 64 KB GET and 16-key MGET, measured by redis-benchmark and by the SDK's RESP client.";

    [Switch("--servers", "Stores to start and measure: cachehost, redis, garnet (garnet-server from $HPCDATA_GARNET, PATH, ~/.dotnet/tools or /opt/hpcdata-tools; skipped with a note when absent).")]
    public string Servers { get; set; } = "cachehost,redis,garnet";

    [Switch("--requests", "GET commands per measurement; MGET measurements send a sixteenth as many, moving the same bytes.")]
    public int Requests { get; set; } = 50000;

    [Switch("--clients", "Connections, for both clients.")]
    public int Clients { get; set; } = 16;

    [Switch("--pipeline", "Commands sent per write on each connection before reading their replies.")]
    public int Pipeline { get; set; } = 1;

    [Switch("--keys", "Distinct 64 KB values stored before measuring and drawn uniformly by every command.")]
    public int Keys { get; set; } = 1000;

    [Switch("--rounds", "Rounds of every store × client × command, store order alternating; the table shows medians and ranges.")]
    public int Rounds { get; set; } = 3;

    [Switch("--timeout", "Bound on each preload and each measurement; one that passes it fails the run.")]
    public string Timeout { get; set; } = "2m";

    [Switch("--transport", "plain (TCP), tls (every store serves TLS with a throw-away site CA; clients verify it), or both (each store twice, for the TLS/plain ratio).")]
    public string Transport { get; set; } = "plain";

    [Switch("--out", "Directory to append results.jsonl to (kind \"cache\", one line per measurement).")]
    public string? Out { get; set; }
}

public static class BenchCacheVerb
{
    /// <summary>--servers accepts the short names and the program names.</summary>
    private static readonly Dictionary<string, string> StoreNames = new(StringComparer.OrdinalIgnoreCase)
    {
        ["cachehost"] = CacheBenchServer.CacheHost, ["redis"] = CacheBenchServer.Redis, ["redis-server"] = CacheBenchServer.Redis,
        ["garnet"] = CacheBenchServer.Garnet, ["garnet-server"] = CacheBenchServer.Garnet,
    };

    public static async Task<int> RunAsync(BenchCacheOptions o, CancellationToken ct)
    {
        try
        {
            var outcome = await CacheBench.RunAsync(Parse(o), ct);
            Console.WriteLine(CacheResults.Table(outcome.Records, outcome.Notes));
            return 0;
        }
        catch (FormatException e)
        {
            Console.Error.WriteLine($"hpcdata bench cache: {e.Message}");
            return 2;
        }
        catch (BenchRefusedException e)
        {
            Console.Error.WriteLine($"hpcdata bench cache: {e.Message}");
            return e.ExitCode;
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine("hpcdata bench cache: interrupted; every store it started was stopped");
            return 130;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or TimeoutException or InvalidDataException or RespErrorException)
        {
            Console.Error.WriteLine($"hpcdata bench cache: {e.Message}");
            return 1;
        }
    }

    public static CacheBench.Options Parse(BenchCacheOptions o)
    {
        var servers = o.Servers.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)
            .Select(s => StoreNames.TryGetValue(s, out var name) ? name : throw new FormatException($"--servers: '{s}' is not cachehost, redis or garnet"))
            .Distinct().ToList();
        if (servers.Count == 0) throw new FormatException("--servers: name at least one of cachehost, redis, garnet");
        if (o.Clients is < 1 or > 1000) throw new FormatException("--clients must be between 1 and 1000");
        if (o.Requests < o.Clients || o.Requests > 100_000_000) throw new FormatException("--requests must be at least --clients and at most 100000000");
        if (o.Pipeline is < 1 or > 1000) throw new FormatException("--pipeline must be between 1 and 1000");
        // Every store is capped at 2 GB; 16384 × 64 KB = 1 GB leaves room for their per-key and per-connection overhead.
        if (o.Keys is < 1 or > 16384) throw new FormatException("--keys must be between 1 and 16384 (64 KB each)");
        if (o.Rounds is < 1 or > 50) throw new FormatException("--rounds must be between 1 and 50");
        var timeout = Durations.Parse(o.Timeout);
        var (plain, tls) = o.Transport.ToLowerInvariant() switch
        {
            "plain" => (true, false),
            "tls" => (false, true),
            "both" => (true, true),
            _ => throw new FormatException($"--transport: '{o.Transport}' is not plain, tls or both"),
        };
        return new CacheBench.Options(servers, o.Requests, o.Clients, o.Pipeline, o.Keys, o.Rounds, o.Out, timeout, plain, tls);
    }
}
