using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Local;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.Bench;

/// <summary>One measured run of <c>hpcdata bench fetch</c> (JSON line kind "fetch").</summary>
public sealed record FetchRecord(
    string Kind, int Schema, DateTimeOffset Time, string Data, long RawBytes, long StoredBytes, int Cores, bool Pinned, int Run,
    double DecodeSeconds, double DecodeCpuSeconds, double FetchSeconds, double AgentUserSeconds, double AgentSystemSeconds,
    double CacheHostCpuSeconds, MachineInfo Machine, string? Codec = null, string? Tier = null, double IngestSeconds = 0,
    double IngestAgentCpuSeconds = 0, double IngestSenderCpuSeconds = 0, double IngestAgentUserSeconds = 0, double IngestAgentSystemSeconds = 0,
    string? Load = null);

/// <summary>
/// The node agent fetching a version from a real cache host on loopback (its own process, warm, as a node runs it),
/// against the raw decode path it is built on — every stored segment verified (checksum, LZ4, XXH3-128) and written at
/// its offset into a new file on the same file system, from memory, on the same cores — on the same data in the same run.
/// The agent's CPU is split into user and kernel time: writing a copy into tmpfs and receiving it from a socket are
/// kernel work that the decode baseline shares only in part (it writes, it does not receive).
/// <para>The same agent also takes the version as a fan-out hands it over: every stored segment sent over its pipe as
/// an ingest (from this process's memory, in about 1 MB frames, as a rank forwards received blocks), then the prefetch
/// that verifies the whole copy and publishes it — timed from the ingest's start to the publish.</para>
/// </summary>
public static class FetchBench
{
    /// <param name="AgentCores">0: everything shares every core. N: the decode baseline runs on N threads and the agent is
    /// pinned to cores 0..N-1, the cache host to the rest.</param>
    /// <param name="Tier"><see cref="OurHost"/> or <see cref="RedisCluster"/>.</param>
    /// <param name="Loads"><see cref="Quiet"/>: nothing else runs beside the agent; <see cref="Loaded"/>: a busy node's
    /// other work does (<see cref="BackgroundLoad"/>), and the decode baseline shares the machine with it too.</param>
    public sealed record Options(long Size, IReadOnlyList<string> Data, int Repeat, string? Out, string WorkDir, int AgentCores = 0,
        SegmentCompression? Codec = null, string Tier = OurHost, IReadOnlyList<string>? Loads = null);

    public const string Quiet = "quiet", Loaded = "loaded";

    public const string OurHost = "cachehost";
    public const string RedisCluster = "redis-cluster";

    /// <summary>The cache tier under test: how to reach it and what its processes have spent on the CPU.</summary>
    private sealed class TierUnderTest(CacheTierOptions client, Func<double> cpuSeconds, IAsyncDisposable processes) : IAsyncDisposable
    {
        public CacheTierOptions Client() => new() { Hosts = client.Hosts.ToList(), Cluster = client.Cluster };
        public double CpuSeconds() => cpuSeconds();
        public ValueTask DisposeAsync() => processes.DisposeAsync();

        public static async Task<TierUnderTest> StartAsync(Options o, string[]? pin, CancellationToken ct)
        {
            if (o.Tier == RedisCluster)
            {
                var redis = await RedisClusterNodes.StartAsync(masters: 3, replicasPerMaster: 0);
                return new TierUnderTest(redis.Options(), () => redis.ProcessIds.Sum(id => ProcStats.Read("redis-server", id).CpuSeconds), redis);
            }
            var host = ComponentProcess.Start(new CacheHostOptions { Port = 0, MaxMemoryBytes = (long)(o.Size * 1.3) + (64L << 20) }, name: "cachehost", launcher: pin);
            var endpoint = await host.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            return new TierUnderTest(new CacheTierOptions { Hosts = [endpoint] }, () => ProcStats.Read(host.Name, host.Id).CpuSeconds, host);
        }
    }

    private const string Pin = "bench";

    public static async Task<List<FetchRecord>> RunAsync(Options o, CancellationToken ct)
    {
        var records = new List<FetchRecord>();
        Directory.CreateDirectory(o.WorkDir);
        var all = Environment.ProcessorCount;
        string[]? Taskset(int first, int last) => o.AgentCores > 0 ? ["taskset", "-c", $"{first}-{last}"] : null;
        var agentPin = Taskset(0, o.AgentCores - 1);
        var hostPin = o.AgentCores > 0 && o.AgentCores < all ? Taskset(o.AgentCores, all - 1) : null;
        var threads = o.AgentCores > 0 ? o.AgentCores : all;
        foreach (var kind in o.Data)
        {
            var path = Path.Combine(o.WorkDir, kind == "random" ? "random.bin" : "market-history.csv");
            if (kind == "random") SampleData.GenerateRandom(path, o.Size);
            else MarketHistory.Generate(path, o.Size);
            var name = $"bench/fetch-{kind}";
            await using var host = await TierUnderTest.StartAsync(o, hostPin, ct);
            await using (var stager = ComponentProcess.Start(new StagerOptions
                         { Path = path, Name = name, Json = true, Codec = (o.Codec ?? SegmentCompression.Lz4).ToString(), CacheTier = host.Client() }, name: "stager"))
                if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(30), ct) != 0) throw new InvalidOperationException($"staging failed:\n{stager.StandardErrorTail}");
            File.Delete(path);

            await using var tier = new CacheTierClient(host.Client());
            var (version, manifest, manifestBytes) = await tier.Catalog.ResolveWithBytesAsync(name, null, ct);
            var stored = await ReadStoredAsync(tier, manifest, ct);
            var target = Path.Combine(o.WorkDir, "decoded.bin");
            DecodeBaseline(manifest, stored, target, threads); // warm-up: JIT and first touch
            File.Delete(target);

            var pipe = Path.Combine(Path.GetTempPath(), $"hcdfetch{Environment.ProcessId}.sock");
            await using var agent = ComponentProcess.Start(new NodeAgentOptions
            {
                Pipe = pipe, DataDirectory = Path.Combine(o.WorkDir, "agent"), CacheTier = host.Client(),
            }, name: "agent", launcher: agentPin);
            await agent.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            await using var client = await AgentClient.ConnectAsync(pipe, ct: ct);
            await FetchOnceAsync(client, name, version, ct); // warm-up: the agent's code compiled and tiered up, as on a node that has worked before
            var blocks = AsBlocks(stored);
            await IngestOnceAsync(client, name, version, manifestBytes, blocks, stored.Length, ct);

            foreach (var load in o.Loads ?? [Quiet])
            {
                // Started once the agent is warm, stopped after this condition's runs; it stops by itself within the hour anyway.
                await using var busy = load == Loaded ? await BackgroundLoad.StartAsync(Path.Combine(o.WorkDir, "load"), TimeSpan.FromHours(1), ct) : null;
                for (var run = 1; run <= o.Repeat; run++)
                {
                    ct.ThrowIfCancellationRequested();
                    // Alternate which goes first, so a slow spell of the machine does not always land on the same one.
                    (double Seconds, double Cpu) decode = default;
                    (double Seconds, double Agent, double Sender, double User, double System) ingest = default;
                    (double Seconds, double User, double System, double Host) fetch = default;
                    for (var step = 0; step < 2; step++)
                    {
                        if (step == 1)
                        {
                            // The agent's CPU and this process's (the sender, as a rank is) over the hand-over, as the fetch's is read.
                            var a0 = ProcStats.Read(agent.Name, agent.Id);
                            var s0 = Process.GetCurrentProcess().TotalProcessorTime;
                            var (a1, s1) = (a0, s0);
                            var seconds = await IngestOnceAsync(client, name, version, manifestBytes, blocks, stored.Length, ct,
                                () => (a1, s1) = (ProcStats.Read(agent.Name, agent.Id), Process.GetCurrentProcess().TotalProcessorTime));
                            ingest = (seconds, a1.UserSeconds + a1.SystemSeconds - a0.UserSeconds - a0.SystemSeconds, (s1 - s0).TotalSeconds,
                                a1.UserSeconds - a0.UserSeconds, a1.SystemSeconds - a0.SystemSeconds);
                        }
                        if ((step == 0) == (run % 2 == 1))
                        {
                            var cpu0 = Process.GetCurrentProcess().TotalProcessorTime;
                            var seconds = DecodeBaseline(manifest, stored, target, threads);
                            decode = (seconds, (Process.GetCurrentProcess().TotalProcessorTime - cpu0).TotalSeconds);
                            File.Delete(target);
                        }
                        else
                        {
                            var a0 = ProcStats.Read(agent.Name, agent.Id);
                            var h0 = host.CpuSeconds();
                            var (a1, h1) = (a0, h0);
                            var seconds = await FetchOnceAsync(client, name, version, ct,
                                () => (a1, h1) = (ProcStats.Read(agent.Name, agent.Id), host.CpuSeconds()));
                            fetch = (seconds, a1.UserSeconds - a0.UserSeconds, a1.SystemSeconds - a0.SystemSeconds, h1 - h0);
                        }
                    }
                    var r = new FetchRecord("fetch", 1, DateTimeOffset.UtcNow, kind, manifest.RawLength, manifest.StoredLength, threads, o.AgentCores > 0, run,
                        decode.Seconds, decode.Cpu, fetch.Seconds, fetch.User, fetch.System, fetch.Host, BenchJson.Machine(), (o.Codec ?? SegmentCompression.Lz4).ToString(), o.Tier, ingest.Seconds, ingest.Agent, ingest.Sender,
                        ingest.User, ingest.System, load);
                    records.Add(r);
                    if (o.Out is not null) BenchJson.Append(o.Out, r);
                    var gb = r.RawBytes / GiB;
                    Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"  {kind,-6} {load,-6} run {run}: decode {MiBps(r.RawBytes, r.DecodeSeconds),6:0} MiB/s, agent {MiBps(r.RawBytes, r.FetchSeconds),6:0} MiB/s, ingest {MiBps(r.RawBytes, r.IngestSeconds),6:0} MiB/s, " +
                        $"agent {(r.AgentUserSeconds + r.AgentSystemSeconds) / gb:0.00} CPU-s per GiB ({r.AgentUserSeconds / gb:0.00} user, {r.AgentSystemSeconds / gb:0.00} kernel), " +
                        $"ingest agent {r.IngestAgentCpuSeconds / gb:0.00} CPU-s per GiB ({r.IngestAgentUserSeconds / gb:0.00} user, {r.IngestAgentSystemSeconds / gb:0.00} kernel)"));
                }
            }
        }
        return records;
    }

    /// <summary>
    /// Has the agent fetch the version and verify it, timed, then evicts it so the next run fetches it again.
    /// <paramref name="fetched"/> runs between the two: the agent's CPU is read there, so freeing the copy's pages (as
    /// the baseline's file is deleted outside its own measurement) is not counted as fetching.
    /// </summary>
    private static async Task<double> FetchOnceAsync(AgentClient client, string name, string version, CancellationToken ct, Action? fetched = null)
    {
        var clock = Stopwatch.StartNew();
        await client.PrefetchAsync(name, version, Pin, ct);
        var seconds = clock.Elapsed.TotalSeconds;
        fetched?.Invoke();
        await client.ReleaseAsync(name, version, Pin, evict: true, ct);
        return seconds;
    }

    /// <summary>
    /// Hands the agent every stored segment of the version as a fan-out's rank does — an ingest over its pipe, a block of
    /// segments (about a megabyte) to a frame, each block sent from where it was received — then prefetches it, which
    /// verifies the whole copy and publishes it; timed from the ingest's start to the publish, then evicted.
    /// </summary>
    private static async Task<double> IngestOnceAsync(AgentClient client, string name, string version, ReadOnlyMemory<byte> manifest,
        IReadOnlyList<(byte[] Block, StoredSegmentSlice[] Slices)> blocks, int segments, CancellationToken ct, Action? ingested = null)
    {
        var clock = Stopwatch.StartNew();
        int accepted;
        await using (var session = await client.BeginIngestAsync(name, version, manifest, ct))
        {
            if (session.MissingCount != segments) throw new InvalidOperationException($"the agent already held {segments - session.MissingCount} segments of an evicted version");
            foreach (var (block, slices) in blocks) await session.SendAsync(block, slices, ct);
            var report = await session.CompleteAsync(ct);
            accepted = report.Accepted;
            if (report.Missing != 0) throw new InvalidOperationException($"ingest left {report.Missing} segments missing ({report.Rejected} rejected: {report.Rejections?.FirstOrDefault()})");
        }
        await client.PrefetchAsync(name, version, Pin, ct);
        var seconds = clock.Elapsed.TotalSeconds;
        ingested?.Invoke();
        await client.ReleaseAsync(name, version, Pin, evict: true, ct);
        if (accepted != segments) throw new InvalidOperationException($"the ingest took {accepted} of {segments} segments");
        return seconds;
    }

    /// <summary>The stored segments laid out as a fan-out's blocks arrive at a rank: contiguous, about a frame's worth each.</summary>
    private static List<(byte[] Block, StoredSegmentSlice[] Slices)> AsBlocks(byte[][] stored)
    {
        var blocks = new List<(byte[], StoredSegmentSlice[])>();
        for (var first = 0; first < stored.Length;)
        {
            var (end, frame, size) = (first, 0, 0);
            while (end < stored.Length && (end == first || frame + IngestRecord.HeaderLength + stored[end].Length <= AgentFrames.DataFrameSize))
            {
                frame += IngestRecord.HeaderLength + stored[end].Length;
                size += stored[end++].Length;
            }
            var block = new byte[size];
            var slices = new StoredSegmentSlice[end - first];
            for (int i = first, at = 0; i < end; i++)
            {
                stored[i].CopyTo(block, at);
                slices[i - first] = new StoredSegmentSlice(i, at, stored[i].Length);
                at += stored[i].Length;
            }
            blocks.Add((block, slices));
            first = end;
        }
        return blocks;
    }

    private static async Task<byte[][]> ReadStoredAsync(CacheTierClient tier, Manifest manifest, CancellationToken ct)
    {
        var stored = new byte[manifest.Segments.Count][];
        await tier.FetchSegmentsAsync(manifest.SegmentIds, Enumerable.Range(0, stored.Length).ToArray(), (index, bytes) =>
        {
            stored[index] = bytes.ToArray();
            return null;
        }, "decode baseline", ct);
        return stored;
    }

    /// <summary>What a node must do at least: verify and decode every segment and write it at its offset in a new file.</summary>
    private static double DecodeBaseline(Manifest manifest, byte[][] stored, string target, int threads)
    {
        var clock = Stopwatch.StartNew();
        using (var file = File.OpenHandle(target, FileMode.Create, FileAccess.ReadWrite, FileShare.None, FileOptions.None, manifest.RawLength))
        {
            var failures = new ConcurrentBag<string>();
            Parallel.For(0, stored.Length, new ParallelOptions { MaxDegreeOfParallelism = threads },
                () => ArrayPool<byte>.Shared.Rent(SegmentCodec.DefaultSegmentSize * 4),
                (i, _, buffer) =>
                {
                    var length = manifest.Segments[i].RawLength;
                    if (buffer.Length < length) { ArrayPool<byte>.Shared.Return(buffer); buffer = ArrayPool<byte>.Shared.Rent(length); }
                    if (SegmentCodec.TryVerify(stored[i], manifest.SegmentIds[i], buffer.AsSpan(0, length), out var content) is { } problem) failures.Add(problem);
                    else RandomAccess.Write(file, content, manifest.Offsets[i]);
                    return buffer;
                },
                buffer => ArrayPool<byte>.Shared.Return(buffer));
            if (!failures.IsEmpty) throw new InvalidOperationException($"decode baseline: {failures.First()}");
        }
        return clock.Elapsed.TotalSeconds;
    }

    public static string Table(IReadOnlyList<FetchRecord> records)
    {
        var inv = CultureInfo.InvariantCulture;
        var sb = new System.Text.StringBuilder();
        sb.AppendLine("| tier | data | codec | size | stored | cores | load | runs | raw decode MiB/s | agent fetch MiB/s | agent ingest MiB/s | fetch / decode | decode CPU-s per GiB | agent CPU-s per GiB (user + kernel) | agent, runs' range | cache tier CPU-s per GiB | ingest CPU-s per GiB stored: agent + sender |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        foreach (var g in records.GroupBy(r => (Tier: r.Tier ?? OurHost, r.Data, Codec: r.Codec ?? "lz4", r.RawBytes, r.Cores, r.Pinned, Load: r.Load ?? Quiet)))
        {
            double Med(Func<FetchRecord, double> f) => Median(g.Select(f));
            var gb = g.Key.RawBytes / GiB;
            // This machine's runs vary (an outlier run is all kernel time), so the range sits beside the median it qualifies.
            var agentCpu = g.Select(r => (r.AgentUserSeconds + r.AgentSystemSeconds) / gb).ToList();
            sb.AppendLine(inv, $"| {g.Key.Tier} | {g.Key.Data} | {g.Key.Codec} | {ByteSize.Format(g.Key.RawBytes)} | {100.0 * g.First().StoredBytes / g.Key.RawBytes:0.0}% | " +
                               $"{CoresLabel(g.Key.Cores, g.Key.Pinned)} | {g.Key.Load} | {g.Count()} | " +
                               $"{Med(r => MiBps(r.RawBytes, r.DecodeSeconds)):0} | {Med(r => MiBps(r.RawBytes, r.FetchSeconds)):0} | " +
                               $"{(g.Any(r => r.IngestSeconds > 0) ? Med(r => MiBps(r.RawBytes, r.IngestSeconds)).ToString("0", inv) : "–")} | " +
                               $"{100 * Med(r => r.DecodeSeconds / r.FetchSeconds):0}% | {Med(r => r.DecodeCpuSeconds) / gb:0.00} | " +
                               $"{Med(r => r.AgentUserSeconds + r.AgentSystemSeconds) / gb:0.00} ({Med(r => r.AgentUserSeconds) / gb:0.00} + {Med(r => r.AgentSystemSeconds) / gb:0.00}) | " +
                               $"{agentCpu.Min():0.00}–{agentCpu.Max():0.00} | {Med(r => r.CacheHostCpuSeconds) / gb:0.00} | " +
                               // Per stored byte: what the ingest handles (the simulation's calibration is per stored byte too).
                               $"{(g.Any(r => r.IngestAgentCpuSeconds > 0) ? $"{Med(r => r.IngestAgentCpuSeconds) / (g.First().StoredBytes / GiB):0.00} + {Med(r => r.IngestSenderCpuSeconds) / (g.First().StoredBytes / GiB):0.00}" : "–")} |");
        }
        sb.Append(LoadTable(records));
        if (records.Count > 0)
            sb.AppendLine().AppendLine("raw decode: every stored segment verified and decoded from memory and written at its offset into a new file on the " +
                "agent's file system, on the same cores; agent fetch: a warm agent (its own process) fetching the version from a cache host on loopback, " +
                "evicted between runs; agent ingest: the same agent taking every stored segment over its pipe as a fan-out hands " +
                "it over, then verifying the whole copy and publishing it; medians.");
        return sb.ToString();
    }

    /// <summary>
    /// Where a run measured both: what the busy node's other work cost the agent — its fetch's and ingest's time, and its
    /// CPU per GiB, loaded against quiet — beside what it cost the decode baseline on the same cores.
    /// </summary>
    private static string LoadTable(IReadOnlyList<FetchRecord> records)
    {
        var inv = CultureInfo.InvariantCulture;
        var sb = new System.Text.StringBuilder();
        var pairs = records.GroupBy(r => (Tier: r.Tier ?? OurHost, r.Data, Codec: r.Codec ?? "lz4", r.RawBytes, r.Cores, r.Pinned))
            .Select(g => (g.Key, Quiet: g.Where(r => (r.Load ?? Quiet) == Quiet).ToList(), Loaded: g.Where(r => r.Load == Loaded).ToList()))
            .Where(p => p.Quiet.Count > 0 && p.Loaded.Count > 0).ToList();
        if (pairs.Count == 0) return "";
        sb.AppendLine().AppendLine("| tier | data | codec | size | fetch time, loaded ÷ quiet | ingest time, loaded ÷ quiet | decode time, loaded ÷ quiet | " +
                                   "agent fetch CPU-s per GiB, quiet → loaded | agent ingest CPU-s per GiB, quiet → loaded |");
        sb.AppendLine("|---|---|---|---|---|---|---|---|---|");
        foreach (var (key, quiet, loaded) in pairs)
        {
            var gb = key.RawBytes / GiB;
            double Ratio(Func<FetchRecord, double> f) => Median(loaded.Select(f)) / Median(quiet.Select(f));
            string Cpu(List<FetchRecord> runs, Func<FetchRecord, double> f) => (Median(runs.Select(f)) / gb).ToString("0.00", inv);
            var ingest = quiet.Any(r => r.IngestSeconds > 0) && loaded.Any(r => r.IngestSeconds > 0);
            sb.AppendLine(inv, $"| {key.Tier} | {key.Data} | {key.Codec} | {ByteSize.Format(key.RawBytes)} | {Ratio(r => r.FetchSeconds):0.00} | " +
                               $"{(ingest ? Ratio(r => r.IngestSeconds).ToString("0.00", inv) : "–")} | {Ratio(r => r.DecodeSeconds):0.00} | " +
                               $"{Cpu(quiet, r => r.AgentUserSeconds + r.AgentSystemSeconds)} → {Cpu(loaded, r => r.AgentUserSeconds + r.AgentSystemSeconds)} | " +
                               $"{(ingest ? $"{Cpu(quiet, r => r.IngestAgentCpuSeconds)} → {Cpu(loaded, r => r.IngestAgentCpuSeconds)}" : "–")} |");
        }
        return sb.ToString();
    }
}
