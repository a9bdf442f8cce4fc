using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;
using System.Text.Json;
using Hpc.CommonData;
using Hpc.CommonData.Format;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Local;
using static Hpc.CommonData.Report.Stats;

namespace Hpc.Bench;

/// <summary>
/// The stager, as users run it (its own process, sending to real cache hosts on loopback), against the raw codec it is
/// built on (LZ4 + BLAKE3 content id + segment checksum over the same 64 KB segments, from memory, on every core), on the
/// same data in the same run. CPU seconds are reported next to wall time because on a small machine the cache hosts
/// that receive the data share the cores with the stager, and CPU per gigabyte is what carries over to a bigger one.
/// </summary>
public static class CodecBench
{
    /// <param name="StagerCores">0: everything shares every core. N: the codec runs on N threads, the stager is pinned to
    /// cores 0..N-1 and the cache hosts to the rest, so stager and codec have the same cores and the receiving side
    /// does not eat into them.</param>
    /// <param name="Chunkings">The stager's --chunking values to run, each against the same codec pass (content is the default).</param>
    /// <param name="BaselineStager">A folder holding another build of the stager (Hpc.Stager.dll): run too, on the same
    /// data in every run, in alternating order, and recorded as stager "baseline", so a change is measured against what
    /// it replaces under the same conditions.</param>
    /// <param name="AsWriter">Also stage, in every run, to hosts with accounts as a writer account, recorded as stager
    /// "as writer": the hosts then check that every segment a writer sends is the bytes its id names.</param>
    /// <param name="ToRedis">Also stage, in every run, to Debian's redis-server in place of each cache host (same cores),
    /// recorded as stager "to redis-server": what receiving the same segments costs the reference store on this machine.</param>
    public sealed record Options(long Size, IReadOnlyList<string> Data, int Repeat, int Hosts, string? Out, string WorkDir, int StagerCores = 0,
        IReadOnlyList<string>? Chunkings = null, string? BaselineStager = null, bool AsWriter = false, IReadOnlyList<SegmentCompression>? Codecs = null,
        bool ToRedis = false);

    /// <summary>Who stages a run: this build's stager or another, to open hosts, as a writer account, or to redis-server.</summary>
    private sealed record Variant(string? Label, string? Folder, bool Writer, bool Redis = false);

    /// <summary>The label of runs that staged to redis-server instead of the cache hosts.</summary>
    public const string ToRedisLabel = "to redis-server";

    public static async Task<List<CodecRecord>> RunAsync(Options o, CancellationToken ct)
    {
        var records = new List<CodecRecord>();
        Directory.CreateDirectory(o.WorkDir);
        foreach (var kind in o.Data)
        {
            var path = Path.Combine(o.WorkDir, kind == "random" ? "random.bin" : "market-history.csv");
            if (kind == "random") SampleData.GenerateRandom(path, o.Size);
            else MarketHistory.Generate(path, o.Size);
            // Read once, so every pass and the stager find it in the page cache; passes read it mapped, in place, any size.
            await using (var warm = File.OpenRead(path)) await warm.CopyToAsync(Stream.Null, ct);
            using var data = new MappedFile(path);
            foreach (var compression in o.Codecs ?? [SegmentCompression.Lz4])
            {
            // Each codec against its own raw pass: the stager's figures are a share of what that codec allows.
            CodecBaseline.Run(data, threads: o.StagerCores, compression: compression);      // warm-up: JIT and first touch of the pool buffers
            for (var run = 1; run <= o.Repeat; run++)
            {
                ct.ThrowIfCancellationRequested();
                var cpu0 = Process.GetCurrentProcess().TotalProcessorTime;
                var codec = CodecBaseline.Run(data, threads: o.StagerCores, compression: compression);
                var codecCpu = (Process.GetCurrentProcess().TotalProcessorTime - cpu0).TotalSeconds;
                if (compression == (o.Codecs ?? [SegmentCompression.Lz4])[0])
                {
                    var (chunkSeconds, chunkCpu) = ChunkerPass(data);
                    // A few MB take less than the process clock's tick: no per-CPU-second figure rather than an infinite one.
                    string PerCpu(double seconds) => seconds > 0 ? (data.Length / MiB / seconds).ToString("0", CultureInfo.InvariantCulture) : "n/a";
                    Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"  {kind,-6} run {run}: content-defined chunker alone, one thread {MiBps(data.Length, chunkSeconds),6:0} MiB/s, {PerCpu(chunkCpu)} MiB per CPU-s " +
                        $"(raw codec on {(o.StagerCores > 0 ? o.StagerCores : Environment.ProcessorCount)} thread(s): {MiBps(data.Length, codec.Seconds):0} MiB/s, {PerCpu(codecCpu)} MiB per CPU-s)"));
                }
                // Chunkings alternate their order run by run, so a slow spell of the machine does not land on one of them every time.
                var chunkings = o.Chunkings ?? ["content"];
                var stagers = new List<Variant> { new(null, null, false) };
                if (o.BaselineStager is { } folder) stagers.Add(new("baseline", folder, false));
                if (o.AsWriter) stagers.Add(new("as writer", null, true));
                if (o.ToRedis) stagers.Add(new(ToRedisLabel, null, false, Redis: true));
                var order = (from c in chunkings from b in stagers select (Chunking: c, Baseline: b)).ToList();
                foreach (var (chunking, baseline) in run % 2 == 1 ? order : Enumerable.Reverse(order))
                {
                    var stage = await StageOnceAsync(path, o.Hosts, o.Size, o.StagerCores, chunking, baseline, o.WorkDir, compression, ct);
                    var r = new CodecRecord("codec", 1, DateTimeOffset.UtcNow, kind, data.Length, stage.StoredBytes, o.StagerCores > 0 ? o.StagerCores : Environment.ProcessorCount, o.StagerCores > 0, o.Hosts, run,
                        codec.Seconds, codecCpu, stage.Seconds, stage.ProcessSeconds, stage.CpuSeconds, stage.HostCpuSeconds, BenchJson.Machine(), chunking,
                        baseline.Label, compression.ToString());
                    records.Add(r);
                    if (o.Out is not null) BenchJson.Append(o.Out, r);
                    Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"  {kind,-6} {compression,-7} run {run} {chunking,-7}{(baseline.Label is { } label ? " " + label : "")}: codec {MiBps(r.RawBytes, r.CodecSeconds),6:0} MiB/s, stager {MiBps(r.RawBytes, r.StagerSeconds),6:0} MiB/s ({r.StagerSeconds / r.CodecSeconds:0.0}× the time), " +
                        $"stager {r.StagerCpuSeconds / (r.RawBytes / GiB):0.00} CPU-s per GiB, stored {100.0 * r.StoredBytes / r.RawBytes:0.0}%"));
                }
            }
            }
            data.Dispose();
            File.Delete(path);
        }
        return records;
    }

    /// <summary>The chunker alone over the data in memory, on this thread: wall and CPU seconds (the bench process is otherwise idle).</summary>
    private static (double Seconds, double CpuSeconds) ChunkerPass(MappedFile data)
    {
        var cpu0 = Process.GetCurrentProcess().TotalProcessorTime;
        var clock = Stopwatch.StartNew();
        // A gigabyte at a time (a span's limit is 2 GB); a segment the window's end would cut short starts the next one.
        for (long at = 0; at < data.Length;)
        {
            var window = data.Slice(at, (int)Math.Min(data.Length - at, 1L << 30));
            var final = at + window.Length == data.Length;
            var used = 0;
            while (used < window.Length && ContentChunker.Default.NextCut(window[used..], final) is var cut and > 0) used += cut;
            at += used;
        }
        return (clock.Elapsed.TotalSeconds, (Process.GetCurrentProcess().TotalProcessorTime - cpu0).TotalSeconds);
    }

    private sealed record StageRun(long StoredBytes, double Seconds, double ProcessSeconds, double CpuSeconds, double HostCpuSeconds);

    /// <summary>Fresh cache hosts every run, so the stager sends every segment instead of finding them already cached.</summary>
    private static async Task<StageRun> StageOnceAsync(string path, int hostCount, long size, int stagerCores, string chunking, Variant variant,
        string workDir, SegmentCompression compression, CancellationToken ct)
    {
        var all = Environment.ProcessorCount;
        string[]? Pin(int first, int last) => stagerCores > 0 ? ["taskset", "-c", $"{first}-{last}"] : null;
        var stagerPin = Pin(0, stagerCores - 1);
        var hostPin = stagerCores < all ? Pin(stagerCores, all - 1) : null;
        var hosts = new List<ComponentProcess>();
        var redis = new List<CacheBenchServer>();
        try
        {
            var budget = (long)(size * 1.2) + (64L << 20);
            var password = Guid.NewGuid().ToString("n");
            var users = Path.Combine(workDir, "users");
            if (variant.Writer) await File.WriteAllTextAsync(users, $"stager writer {password}\n", ct);
            var endpoints = new List<string>();
            if (variant.Redis)
            {
                var program = CacheBenchTools.RedisServer();
                for (var h = 0; h < hostCount; h++)
                {
                    var server = await CacheBenchServer.StartRedisAsync(program.Path ?? throw new InvalidOperationException($"redis-server: {program.Missing}"), ct, maxMemoryBytes: budget);
                    redis.Add(server);
                    // Every thread of it (the I/O and background ones too) on the cache hosts' cores.
                    if (hostPin is not null) Shell.Check("taskset", "-a", "-c", "-p", hostPin[^1], server.Pid.ToString(CultureInfo.InvariantCulture));
                    endpoints.Add(server.Endpoint.ToString());
                }
            }
            else
            {
                for (var h = 0; h < hostCount; h++)
                    hosts.Add(ComponentProcess.Start(new CacheHostOptions { Port = 0, MaxMemoryBytes = budget, UsersFile = variant.Writer ? users : null }, name: $"cachehost{h + 1}", launcher: hostPin));
                foreach (var h in hosts) endpoints.Add(await h.WaitReadyAsync(TimeSpan.FromSeconds(30), ct));
            }
            double ReceiverCpu() => hosts.Sum(h => ProcStats.Read(h.Name, h.Id).CpuSeconds) + redis.Sum(r => r.CpuSeconds());
            var hostCpu0 = ReceiverCpu();
            var children0 = CpuClock.ReapedChildrenSeconds();
            var clock = Stopwatch.StartNew();
            await using var stager = StartStager(new StagerOptions
            {
                Path = path, Name = "bench/codec", Chunking = chunking, Json = true, Codec = compression.ToString(),
                CacheTier = { Hosts = endpoints, User = variant.Writer ? "stager" : null, Password = variant.Writer ? password : null },
            }, stagerPin, variant.Folder);
            if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(30), ct) != 0) throw new InvalidOperationException($"staging failed:\n{stager.StandardErrorTail}");
            var process = clock.Elapsed.TotalSeconds;
            // Children are counted once reaped; the cache hosts are still running, so this is the stager alone.
            var stagerCpu = CpuClock.ReapedChildrenSeconds() - children0;
            var hostCpu = ReceiverCpu() - hostCpu0;
            var summary = JsonSerializer.Deserialize(stager.StandardOutput.Last(), ContractJson.Default.StageResult)!;
            return new StageRun(summary.StoredBytes, summary.Seconds, process, stagerCpu, hostCpu);
        }
        finally
        {
            foreach (var h in hosts) await h.DisposeAsync();
            foreach (var r in redis) await r.DisposeAsync();
        }
    }

    /// <summary>The stager of this build, or the one in <paramref name="folder"/> (found there as an installed program is).</summary>
    private static ComponentProcess StartStager(StagerOptions options, string[]? pin, string? folder)
    {
        if (folder is null) return ComponentProcess.Start(options, name: "stager", launcher: pin);
        var before = Environment.GetEnvironmentVariable(ComponentLocator.BinVariable);
        Environment.SetEnvironmentVariable(ComponentLocator.BinVariable, folder);
        try { return ComponentProcess.Start(options, name: "stager", launcher: pin); }
        finally { Environment.SetEnvironmentVariable(ComponentLocator.BinVariable, before); }
    }

}
