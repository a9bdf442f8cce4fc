using Hpc.CommonData.Security;
using System.Diagnostics;
using System.Globalization;
using System.Text;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.Bench;

/// <summary>
/// Our cache host against redis-server (and garnet-server when there is one) on loopback, 64 KB values, GET and a
/// 16-key MGET, each measured by redis-benchmark and by the SDK's own RESP client with the same connections, pipeline
/// depth, key count and request count. Stores run for the whole session; rounds alternate their order, so a slow
/// spell of the shared machine does not land on one store in every round.
/// </summary>
public static class CacheBench
{
    public const int ValueBytes = 64 * 1024;

    public sealed record Options(IReadOnlyList<string> Servers, int Requests, int Clients, int Pipeline, int Keys, int Rounds, string? Out, TimeSpan Timeout,
        bool Plain = true, bool Tls = false);

    public sealed record Outcome(List<CacheRecord> Records, List<string> Notes);

    /// <summary>MGET moves 16 values per command, so it sends a sixteenth of the commands: both move the same bytes.</summary>
    public static int Commands(Options o, CacheOp op) => Math.Max(o.Clients, o.Requests / op.KeysPerCommand);

    public static async Task<Outcome> RunAsync(Options o, CancellationToken ct)
    {
        var notes = new List<string>();
        var clients = new List<string>();
        var redisBenchmark = CacheBenchTools.RedisBenchmark();
        if (redisBenchmark.Path is null) Note(notes, $"redis-benchmark not found: {redisBenchmark.Missing}; measuring with {SdkLoad.ClientName} only");
        else clients.Add(RedisBenchmark.ClientName);
        clients.Add(SdkLoad.ClientName);

        var run = $"cache-{DateTime.UtcNow:yyyyMMdd'T'HHmmss}-{Environment.ProcessId}";
        var machine = BenchJson.Machine();
        var keys = new KeySpace(o.Keys, ValueBytes);
        var servers = new List<CacheBenchServer>();
        var records = new List<CacheRecord>();
        var certificates = o.Tls ? Directory.CreateTempSubdirectory("hpcdata-bench-tls-").FullName : null;
        try
        {
            var tls = certificates is null ? null : SiteCertificates.Create(certificates, ["127.0.0.1"], TimeSpan.FromDays(1));
            foreach (var name in o.Servers)
                foreach (var secured in (bool[])[false, true])
                {
                    if (secured ? !o.Tls : !o.Plain) continue;
                    ct.ThrowIfCancellationRequested();
                    if (await StartAsync(name, notes, secured ? tls : null, ct) is not { } server) continue;
                    servers.Add(server);
                    Console.Error.WriteLine($"  {server.Name}{(server.Version is null ? "" : " " + server.Version)} on {server.Endpoint} (pid {server.Pid}): " +
                                            $"storing {o.Keys} × 64 KB, then a warm-up");
                    await keys.PreloadAsync(server.Endpoint, o.Timeout, ct, server.Tls);
                    await WarmUpAsync(server, keys, o, ct);
                }
            if (servers.Count == 0) throw new BenchRefusedException("no store to measure: " + string.Join("; ", notes), 2);

            for (var round = 1; round <= o.Rounds; round++)
            {
                var order = round % 2 == 1 ? servers : Enumerable.Reverse(servers).ToList();
                foreach (var server in order)
                    foreach (var client in clients)
                        foreach (var op in new[] { CacheOp.Get, CacheOp.Mget })
                        {
                            var r = await MeasureAsync(server, client, redisBenchmark.Path, op, round, keys, o, run, machine, ct);
                            records.Add(r);
                            if (o.Out is not null) BenchJson.Append(o.Out, r);
                            Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                                $"  round {round} {r.Server,-13} {r.Client,-15} {r.Op,-4} {r.Rps,8:0} req/s {r.MebibytesPerSecond,6:0} MiB/s  " +
                                $"p50 {r.P50Ms,6:0.000} ms  p99 {r.P99Ms,7:0.000} ms"));
                        }
            }
        }
        finally
        {
            await Task.WhenAll(servers.Select(s => s.DisposeAsync().AsTask()));
            if (certificates is not null) Directory.Delete(certificates, recursive: true);
        }
        return new Outcome(records, notes);
    }

    private static void Note(List<string> notes, string line)
    {
        notes.Add(line);
        Console.Error.WriteLine($"hpcdata bench cache: {line}");
    }

    private static async Task<CacheBenchServer?> StartAsync(string name, List<string> notes, SiteCertificates? tls, CancellationToken ct)
    {
        switch (name)
        {
            case CacheBenchServer.CacheHost:
                return await CacheBenchServer.StartCacheHostAsync(ct, tls);
            case CacheBenchServer.Redis:
                var redis = CacheBenchTools.RedisServer();
                if (redis.Path is not null) return await CacheBenchServer.StartRedisAsync(redis.Path, ct, tls);
                Note(notes, $"redis-server not found: {redis.Missing}; going on without it (no ratios to redis-server)");
                return null;
            case CacheBenchServer.Garnet when tls is not null:
                Note(notes, "garnet-server over TLS: not set up by this benchmark");
                return null;
            case CacheBenchServer.Garnet:
                var garnet = CacheBenchTools.Garnet();
                if (garnet.Path is not null) return await CacheBenchServer.StartGarnetAsync(garnet.Path, ct);
                Note(notes, $"garnet-server not found: {garnet.Missing}; going on without it");
                return null;
            default:
                throw new FormatException($"unknown store '{name}'");
        }
    }

    /// <summary>
    /// Three of the stores are .NET programs whose hot paths are compiled (and recompiled with profile data) on first
    /// use; a short unmeasured pass of both commands keeps that out of round 1, for every store alike.
    /// </summary>
    private static async Task WarmUpAsync(CacheBenchServer server, KeySpace keys, Options o, CancellationToken ct)
    {
        var warm = o with { Requests = Math.Min(o.Requests, 2000) };
        foreach (var op in new[] { CacheOp.Get, CacheOp.Mget })
            await SdkLoad.RunAsync(server.Endpoint, op, Commands(warm, op), o.Clients, o.Pipeline, keys, o.Timeout, ct, server.Tls);
    }

    private static async Task<CacheRecord> MeasureAsync(CacheBenchServer server, string client, string? redisBenchmark, CacheOp op, int round, KeySpace keys,
        Options o, string run, MachineInfo machine, CancellationToken ct)
    {
        var commands = Commands(o, op);
        var byRedisBenchmark = client == RedisBenchmark.ClientName;
        double ClientCpu() => byRedisBenchmark ? CpuClock.ReapedChildrenSeconds() : CpuClock.SelfSeconds();
        var time = DateTimeOffset.UtcNow;
        var (server0, client0, machine0) = (server.CpuSeconds(), ClientCpu(), CpuClock.MachineBusySeconds());
        var window = Stopwatch.StartNew();
        var result = byRedisBenchmark
            ? await RedisBenchmark.RunAsync(redisBenchmark!, server.Endpoint, op, commands, o.Clients, o.Pipeline, o.Keys, o.Timeout, ct, server.CaFile)
            : await SdkLoad.RunAsync(server.Endpoint, op, commands, o.Clients, o.Pipeline, keys, o.Timeout, ct, server.Tls);
        var windowSeconds = window.Elapsed.TotalSeconds;
        var (server1, client1, machine1) = (server.CpuSeconds(), ClientCpu(), CpuClock.MachineBusySeconds());
        return new CacheRecord("cache", 1, run, time, server.Name, server.Version, client, op.Name, round,
            new CacheConfig(o.Requests, commands, o.Clients, o.Pipeline, o.Keys, ValueBytes, op.KeysPerCommand),
            result.Seconds, result.Rps, result.Rps * op.KeysPerCommand * ValueBytes / 1e6, result.AvgMs, result.P50Ms, result.P99Ms,
            server1 - server0, client1 - client0, machine1 - machine0, windowSeconds, result.AllocatedBytesPerCommand, machine);
    }

    /// <summary>
    /// Medians over rounds per store × client × command, with the rounds' range; the ratio to redis-server is taken
    /// per round (same client, same command, same round) and its median shown.
    /// </summary>

}
