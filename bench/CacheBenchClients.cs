using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;
using Hpc.CommonData.Cache;

namespace Hpc.Bench;

/// <summary>A measured command: GET (one key) or MGET of <see cref="KeysPerCommand"/> keys.</summary>
public sealed record CacheOp(string Name, int KeysPerCommand)
{
    public static readonly CacheOp Get = new("GET", 1);
    public static readonly CacheOp Mget = new("MGET", 16);
}

/// <summary>What one client measured: commands, not keys, per second, and per-command latency.</summary>
public sealed record LoadResult(long Commands, double Seconds, double Rps, double AvgMs, double P50Ms, double P99Ms, double? AllocatedBytesPerCommand);

/// <summary>
/// The keys both clients ask for, spelled as redis-benchmark spells <c>key:__rand_int__</c> with <c>-r</c>
/// ("key:" and 12 digits), so the preload fills exactly the keyspace it draws from.
/// </summary>
public sealed class KeySpace
{
    public const int KeyLength = 16;
    private readonly byte[] _table;

    public int Count { get; }
    public int ValueBytes { get; }

    public KeySpace(int count, int valueBytes)
    {
        Count = count;
        ValueBytes = valueBytes;
        _table = new byte[count * KeyLength];
        for (var i = 0; i < count; i++)
            System.Text.Encoding.ASCII.GetBytes($"key:{i:D12}", _table.AsSpan(i * KeyLength, KeyLength));
    }

    public ReadOnlySpan<byte> Key(int index) => _table.AsSpan(index * KeyLength, KeyLength);

    /// <summary>
    /// Stores every key once with random bytes (no store compresses, but none can be flattered by a pattern either),
    /// then checks DBSIZE: a GET of a missing key is a cheap nil and would make a store look faster than it is.
    /// </summary>
    public async Task PreloadAsync(CacheEndpoint endpoint, TimeSpan timeout, CancellationToken ct, CacheTls? tls = null)
    {
        using var bound = CancellationTokenSource.CreateLinkedTokenSource(ct);
        bound.CancelAfter(timeout);
        var value = new byte[ValueBytes];
        new Random(6380).NextBytes(value);
        try
        {
            await using var c = await RespConnection.ConnectAsync(endpoint, null, TimeSpan.FromSeconds(5), bound.Token, tls: tls);
            const int batch = 16;
            for (var first = 0; first < Count; first += batch)
            {
                var n = Math.Min(batch, Count - first);
                for (var i = first; i < first + n; i++)
                {
                    c.BeginCommand(3); c.Argument("SET"u8); c.Argument(Key(i)); c.Argument(value);
                }
                await c.FlushAsync(bound.Token);
                for (var i = 0; i < n; i++)
                {
                    var reply = await c.ReadReplyAsync(bound.Token);
                    if (reply.Text != "OK") throw new InvalidDataException($"{endpoint}: SET answered {reply}");
                }
            }
            c.Command("DBSIZE"u8);
            var size = await c.FlushAndReadAsync(bound.Token);
            if (size.Kind != RespKind.Integer || size.Integer != Count)
                throw new InvalidDataException($"{endpoint}: {Count} keys stored but DBSIZE says {size}");
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested)
        {
            throw new TimeoutException($"{endpoint}: preloading {Count} keys took longer than {timeout.TotalSeconds:0} s");
        }
    }
}

/// <summary>
/// The SDK's own RESP client (<see cref="RespConnection"/>, what the cache-tier client pools) driving one host: one
/// connection per client, each sending <c>pipeline</c> commands per write and reading their replies without copying
/// the values, like the agent's fetch path. Latency runs from just before the write to the end of each reply.
/// </summary>
public static class SdkLoad
{
    public const string ClientName = "hpcdata-sdk";

    public static async Task<LoadResult> RunAsync(CacheEndpoint endpoint, CacheOp op, int commands, int clients, int pipeline, KeySpace keys,
        TimeSpan timeout, CancellationToken ct, CacheTls? tls = null)
    {
        var connections = Math.Min(clients, commands);
        var workers = new Worker[connections];
        using var bound = CancellationTokenSource.CreateLinkedTokenSource(ct);
        bound.CancelAfter(timeout);
        try
        {
            for (var i = 0; i < connections; i++)
            {
                var share = commands / connections + (i < commands % connections ? 1 : 0);
                var c = await RespConnection.ConnectAsync(endpoint, null, TimeSpan.FromSeconds(5), bound.Token, tls: tls);
                workers[i] = new Worker(c, op.KeysPerCommand, share, pipeline, keys, seed: 0x9E3779B9u * (uint)(i + 1));
            }
            var tasks = new Task[connections];
            var allocated0 = GC.GetTotalAllocatedBytes(precise: true);
            var start = Stopwatch.GetTimestamp();
            for (var i = 0; i < connections; i++)
            {
                var w = workers[i];
                tasks[i] = Task.Run(() => w.RunAsync(bound.Token), bound.Token);
            }
            await Task.WhenAll(tasks);
            var seconds = Stopwatch.GetElapsedTime(start).TotalSeconds;
            var allocated = GC.GetTotalAllocatedBytes(precise: true) - allocated0;

            var nulls = workers.Sum(w => w.Nulls);
            if (nulls > 0) throw new InvalidDataException($"{endpoint}: {nulls} of {(long)commands * op.KeysPerCommand} values missing; the keyspace was not fully stored");
            var expected = (long)commands * op.KeysPerCommand * keys.ValueBytes;
            var received = workers.Sum(w => w.Bytes);
            if (received != expected) throw new InvalidDataException($"{endpoint}: received {received} value bytes, expected {expected}");

            var all = new long[commands];
            var at = 0;
            foreach (var w in workers) { w.Latencies.CopyTo(all, at); at += w.Latencies.Length; }
            Array.Sort(all);
            double Ms(double ticks) => ticks * 1000.0 / Stopwatch.Frequency;
            return new LoadResult(commands, seconds, commands / seconds, Ms(all.Average()), Ms(Percentile(all, 0.50)), Ms(Percentile(all, 0.99)),
                (double)allocated / commands);
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested)
        {
            throw new TimeoutException($"{ClientName} {op.Name} against {endpoint} did not finish {commands} commands in {timeout.TotalSeconds:0} s");
        }
        finally
        {
            foreach (var w in workers)
                if (w is not null) await w.Connection.DisposeAsync();
        }
    }

    /// <summary>Nearest rank: the smallest sample with at least <paramref name="p"/> of all samples at or below it.</summary>
    public static long Percentile(long[] sorted, double p) => sorted[Math.Clamp((int)Math.Ceiling(p * sorted.Length) - 1, 0, sorted.Length - 1)];

    /// <summary>
    /// One connection's share of the commands. Everything the loop touches is allocated here, before the clock: the
    /// latency array, the key table (shared) and the value callback.
    /// </summary>
    private sealed class Worker
    {
        private readonly int _keysPerCommand, _pipeline;
        private readonly KeySpace _keys;
        private readonly BulkHandler _onValue;
        private uint _random;

        public RespConnection Connection { get; }
        public long[] Latencies { get; }
        public long Bytes { get; private set; }
        public long Nulls { get; private set; }

        public Worker(RespConnection connection, int keysPerCommand, int commands, int pipeline, KeySpace keys, uint seed)
        {
            Connection = connection;
            _keysPerCommand = keysPerCommand;
            _pipeline = pipeline;
            _keys = keys;
            Latencies = new long[commands];
            _random = seed == 0 ? 1 : seed;
            _onValue = OnValue;
        }

        private void OnValue(int index, in ReadOnlySequence<byte> value, bool isNull)
        {
            if (isNull) Nulls++;
            else Bytes += value.Length;
        }

        /// <summary>Uniform like redis-benchmark's <c>random() % keys</c>; xorshift32 because Random.Shared is shared between threads.</summary>
        private int NextKey()
        {
            var x = _random;
            x ^= x << 13; x ^= x >> 17; x ^= x << 5;
            _random = x;
            return (int)((ulong)x * (uint)_keys.Count >> 32);
        }

        private void WriteCommand()
        {
            var c = Connection;
            c.BeginCommand(1 + _keysPerCommand);
            c.Argument(_keysPerCommand == 1 ? "GET"u8 : "MGET"u8);
            for (var k = 0; k < _keysPerCommand; k++) c.Argument(_keys.Key(NextKey()));
        }

        public async Task RunAsync(CancellationToken ct)
        {
            var c = Connection;
            var latencies = Latencies;
            for (var done = 0; done < latencies.Length;)
            {
                var batch = Math.Min(_pipeline, latencies.Length - done);
                for (var b = 0; b < batch; b++) WriteCommand();
                var sent = Stopwatch.GetTimestamp();
                await c.FlushAsync(ct);
                for (var b = 0; b < batch; b++)
                {
                    if (_keysPerCommand == 1) await c.ReadBulkAsync(_onValue, ct);
                    else await c.ReadBulkArrayAsync(_keysPerCommand, _onValue, ct);
                    latencies[done + b] = Stopwatch.GetTimestamp() - sent;
                }
                done += batch;
            }
        }
    }
}

/// <summary>redis-benchmark (7.0), run against any of the stores with the same settings, its --csv line parsed.</summary>
public static class RedisBenchmark
{
    public const string ClientName = "redis-benchmark";

    public static async Task<LoadResult> RunAsync(string program, CacheEndpoint endpoint, CacheOp op, int commands, int clients, int pipeline, int keys,
        TimeSpan timeout, CancellationToken ct, string? caFile = null)
    {
        var inv = CultureInfo.InvariantCulture;
        var args = new List<string>
        {
            "-h", endpoint.Host, "-p", endpoint.Port.ToString(inv), "-c", clients.ToString(inv), "-n", commands.ToString(inv),
            "-P", pipeline.ToString(inv), "-r", keys.ToString(inv), "--csv",
        };
        if (caFile is not null) args.AddRange(["--tls", "--cacert", caFile]);
        if (op.KeysPerCommand == 1) args.AddRange(["-t", "get"]);
        else
        {
            args.Add("MGET");
            for (var k = 0; k < op.KeysPerCommand; k++) args.Add("key:__rand_int__");
        }
        await using var p = ExternalProcess.Start(ClientName, program, args);
        var code = await p.WaitForExitAsync(timeout, ct);
        if (code != 0) throw new InvalidOperationException($"{ClientName} {op.Name} against {endpoint} exited {code}:{Environment.NewLine}{p.Tail}");
        return Parse(p.StandardOutput, op.Name, commands)
               ?? throw new InvalidDataException($"{ClientName} {op.Name} against {endpoint}: no {op.Name} line in its CSV output:{Environment.NewLine}{p.Tail}");
    }

    /// <summary>
    /// The row whose test is <paramref name="op"/> (a custom command's test is the whole command line, so MGET is
    /// matched on its first word), read through the header: test, rps, avg_latency_ms, …, p50_latency_ms, p99_latency_ms.
    /// </summary>
    public static LoadResult? Parse(IEnumerable<string> csv, string op, long commands)
    {
        string[]? header = null;
        foreach (var line in csv)
        {
            var fields = Fields(line);
            if (fields.Length == 0) continue;
            if (fields[0] == "test") { header = fields; continue; }
            if (header is null || fields.Length != header.Length) continue;
            if (fields[0] != op && !fields[0].StartsWith(op + " ", StringComparison.Ordinal)) continue;
            double Column(string name)
            {
                var i = Array.IndexOf(header, name);
                if (i < 0) throw new InvalidDataException($"redis-benchmark CSV has no '{name}' column (header: {string.Join(",", header)})");
                return double.Parse(fields[i], NumberStyles.Float, CultureInfo.InvariantCulture);
            }
            var rps = Column("rps");
            if (rps <= 0) return null;
            return new LoadResult(commands, commands / rps, rps, Column("avg_latency_ms"), Column("p50_latency_ms"), Column("p99_latency_ms"), null);
        }
        return null;
    }

    private static string[] Fields(string line)
    {
        var t = line.Trim();
        if (t.Length == 0) return [];
        return t.Split(',').Select(f => f.Trim().Trim('"')).ToArray();
    }
}
