using Hpc.CommonData.Fanout;
using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Hpc.CommonData;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Report;

namespace Hpc.Bench;

public sealed partial class ClusterSession
{
    /// <summary>What <c>bench cluster --scheduler slurm</c> runs as steps of one allocation, each timed by the batch shell.</summary>
    private SlurmLab? _slurm;

    /// <summary>
    /// Slurm's own ways to put a file on every node beside ours, as steps of one allocation of all N nodes, in turn:
    /// <list type="bullet">
    /// <item><c>none</c>, <c>mpi</c>: <c>srun hpcdata nodeprep --fanout none|mpi</c> (ranks through PMI-2), the data
    /// staged to the cache hosts beforehand; the agents start cold, as on nodes without an agent service.</item>
    /// <item><c>sbcast</c>: <c>sbcast --compress=lz4</c> from the batch node at Slurm's defaults (fanout 8: up to 8 nodes
    /// it sends to itself directly); <c>sbcast-f&lt;F&gt;</c> with <c>--fanout=F</c>: the batch node sends each block to F
    /// nodes, each of which forwards it to its share of the rest; <c>-tree&lt;W&gt;</c> also sets <c>TreeWidth=W</c> (in the
    /// configuration, <c>scontrol reconfigure</c>d around the step, outside its time), the width below that first level.</item>
    /// <item><c>srun-bcast</c>: <c>srun --bcast --compress=lz4</c> of the same bytes behind a two-line shell header
    /// (srun broadcasts only the program it runs).</item>
    /// </list>
    /// The source file sits on the storage every node shares; each copy lands in the node's own /dev/shm and is removed
    /// (our modes: released and evicted) before the next mode. Returns one record per mode and repetition.
    /// </summary>
    /// <param name="fault">With burst-buffer: after the healthy runs, one more with this fault (see <see cref="NodeFault"/>).</param>
    /// <param name="peerTimeout">With burst-buffer: the site line's <c>--peer-timeout</c>; null for the product's default. The lab's
    /// controller keeps the site it was started with.</param>
    public async Task<List<BenchRecord>> RunSlurmAsync(long size, string data, IReadOnlyList<string> modes, int repeat, string codec, CancellationToken ct,
        NodeFault? fault = null, TimeSpan? peerTimeout = null)
    {
        if (modes.FirstOrDefault(m => !SlurmModes.IsKnown(m)) is { } bad) throw new ArgumentException($"Slurm mode '{bad}': use {SlurmModes.Help}");
        if (fault is not null && !modes.Contains(SlurmModes.BurstBuffer)) throw new ArgumentException($"a fault with --scheduler slurm is injected into the {SlurmModes.BurstBuffer} mode's jobs");
        var burstBuffer = modes.Contains(SlurmModes.BurstBuffer);
        var steps = modes.Where(m => m != SlurmModes.BurstBuffer).ToList();
        var tier = string.Join(",", _topology.Hosts.Select(h => $"{h.Address}:{CachePort}"));
        _slurm ??= await SlurmLab.StartAsync(_topology, ct, burstBuffer ? new SlurmLab.BurstBufferSite(tier, PeerTimeout: peerTimeout) : null);
        var run = $"{_runId}-s{DateTime.UtcNow:HHmmssfff}";
        const string name = "bench/slurm";
        var processes = new List<ComponentProcess>();
        var shared = Path.Combine(_slurm.Directory, "jobs", run);
        Directory.CreateDirectory(shared);
        try
        {
            var hosts = _topology.Hosts.Select((h, i) => Start(processes,
                new CacheHostOptions { Address = h.Address, Port = CachePort, MaxMemoryBytes = (long)(size * 1.3) + (64L << 20) }, $"cachehost{i + 1}", h)).ToList();
            foreach (var h in hosts) await h.WaitReadyAsync(ReadyTimeout, ct);
            var hostList = string.Join(",", _topology.Hosts.Select(h => $"{h.Address}:{CachePort}"));
            var source = Path.Combine(shared, "data.bin");
            File.Copy(Dataset(size, data), source);
            // A burst-buffer job is a user's: the lab's job user must be among the readers.
            var stager = Start(processes, new StagerOptions { Path = source, Name = name, CacheTier = { Hosts = [hostList] }, Json = true, Codec = codec,
                Readers = burstBuffer ? "all" : null }, "stager", null);
            if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(20), ct) != 0) throw new InvalidOperationException($"staging failed:\n{stager.StandardErrorTail}");
            var stage = JsonSerializer.Deserialize(stager.StandardOutput.Last(), ContractJson.Default.StageResult)!;

            // srun broadcasts the program it runs: the same bytes behind a header that makes them one.
            var program = Path.Combine(shared, "data.run");
            await using (var o = File.Create(program))
            {
                await o.WriteAsync("#!/bin/sh\nexit 0\n"u8.ToArray(), ct);
                await using var i = File.OpenRead(source);
                await i.CopyToAsync(o, ct);
            }
            if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(program, (UnixFileMode)0b111_101_101);

            var records = new List<BenchRecord>();
            if (steps.Count > 0)
            {
                var script = Path.Combine(shared, "modes.sh");
                var order = Enumerable.Range(0, repeat).SelectMany(r => r % 2 == 0 ? steps : Enumerable.Reverse(steps)).ToList();
                await File.WriteAllTextAsync(script, Script(order, hostList, name, stage.Version, source, program, shared), ct);
                var submit = await _slurm.RunAsync("sbatch", "--parsable", $"--nodes={Nodes}", "--ntasks-per-node=1", "--exclusive", $"--chdir={shared}",
                    $"--output={shared}/slurm-%j.out", script);
                if (submit.Code != 0) throw new InvalidOperationException($"sbatch failed: {submit.Output}");
                var job = submit.Output.Trim().Split(';')[0];
                var output = await _slurm.WaitForJobAsync(job, shared, TimeSpan.FromMinutes(10 + repeat * steps.Count * Limits.Fanout(stage.StoredBytes, RateMbit) * Nodes / 60), ct);
                records.AddRange(Records(output, stage, run, codec, data, shared));
            }
            if (burstBuffer) records.AddRange(await RunBurstBufferJobsAsync(name, stage, repeat, fault, run, codec, data, ct));
            return records;
        }
        finally
        {
            await StopAllAsync(processes);
            try { Directory.Delete(shared, recursive: true); } catch (Exception e) when (e is IOException or UnauthorizedAccessException) { }
        }
    }

    private string Script(IReadOnlyList<string> order, string hostList, string name, string version, string source, string program, string shared)
    {
        var hpcdata = string.Join(' ', ComponentLocator.Command("hpcdata"));
        var perNode = $"--nodes={Nodes} --ntasks={Nodes} --ntasks-per-node=1";
        var s = new StringBuilder($"""
            #!/bin/bash
            set -u
            export HPCDATA_CACHE_HOSTS={hostList}
            stamp() {"{"} date +%s.%N; {"}"}
            # One mode: its steps' output to a file of its own, then a line the bench reads.
            # Each node's link as the bridge sees it (this shell shares the machine's /sys): what the node received, what it sent.
            links() {"{"} for l in {string.Join(' ', _topology.Nodes.Select(n => n.Link))}; do printf '%s,%s ' "$(cat /sys/class/net/$l/statistics/tx_bytes)" "$(cat /sys/class/net/$l/statistics/rx_bytes)"; done; {"}"}
            run() {"{"}
              local mode=$1 n=$2; shift 2
              local s b; b=$(links); s=$(stamp)
              "$@" >"{shared}/$mode.$n.out" 2>&1
              local rc=$? e; e=$(stamp)
              echo "MODE $mode $n rc=$rc start=$s end=$e"
              echo "LINKS $n $b| $(links)"
            {"}"}
            # Slurm's tree width is the configuration's: changed for one step and put back, each time waiting for the slurmds.
            tree() {"{"} sed -i "s/^TreeWidth=.*/TreeWidth=$1/" "$SLURM_CONF" && scontrol reconfigure && sleep 3; {"}"}

            """);
        var dest = "/dev/shm/hcd-bench.bin";
        for (var i = 0; i < order.Count; i++)
        {
            var mode = order[i];
            var job = $"bench-{i}";
            s.Append(mode switch
            {
                "none" or "mpi" => $"run {mode} {i} srun {perNode} {hpcdata} nodeprep {name}@{version} --fanout {mode} --job {job}\n" +
                                   $"srun {perNode} {hpcdata} noderelease --job {job} --evict >/dev/null 2>&1\n",
                _ when SlurmModes.TryParseSbcast(mode, out var fanout, out var width) =>
                    (width is { } w ? $"tree {w}\n" : "") +
                    $"run {mode} {i} sbcast --compress=lz4 --force{(fanout is { } f ? $" --fanout={f}" : "")} {source} {dest}\n" +
                    (width is null ? "" : $"tree {SlurmLab.DefaultTreeWidth}\n"),
                "srun-bcast" => $"run {mode} {i} srun {perNode} --bcast={dest} --compress=lz4 {program}\n",
                _ => throw new ArgumentException(mode),
            });
            // Every node holds the whole file, then it goes before the next mode.
            // --overlap: a failed broadcast's step may still be winding down on some node.
            if (mode is not ("none" or "mpi"))
                s.Append($"echo \"SIZES {i} $(srun --overlap {perNode} stat -c %s {dest} 2>/dev/null | sort -u | paste -sd,)\"\nsrun --overlap {perNode} rm -f {dest}\n");
        }
        return s.ToString();
    }

    private List<BenchRecord> Records(string output, StageResult stage, string run, string codec, string data, string shared)
    {
        var lines = output.Split('\n');
        var records = new List<BenchRecord>();
        foreach (var line in lines.Where(l => l.StartsWith("MODE ", StringComparison.Ordinal)))
        {
            var f = line.Split(' ');
            var (mode, index) = (f[1], f[2]);
            var fields = f.Skip(3).Select(x => x.Split('=', 2)).ToDictionary(x => x[0], x => x[1]);
            var seconds = double.Parse(fields["end"], CultureInfo.InvariantCulture) - double.Parse(fields["start"], CultureInfo.InvariantCulture);
            var stepOutput = File.Exists(Path.Combine(shared, $"{mode}.{index}.out")) ? File.ReadAllText(Path.Combine(shared, $"{mode}.{index}.out")) : "";
            var config = Config(stage.RawBytes, true, 0, data);
            config.Codec = codec == "lz4" ? null : codec;
            config.Fanout = $"slurm:{mode}";
            // A mode that fails is a result too (Slurm's broadcasts give up on slow links): recorded, not fatal to the others.
            // The program srun broadcasts carries a 17-byte shell header before the data.
            var failure = fields["rc"] != "0" ? $"exit {fields["rc"]} after {seconds:0.0} s"
                : mode is not ("none" or "mpi") && !lines.Any(l => l.Trim() == $"SIZES {index} {stage.RawBytes + (mode == "srun-bcast" ? 17 : 0)}")
                    ? "not every node holds the whole file" : null;
            if (failure is not null)
            {
                var why = stepOutput.Split('\n').FirstOrDefault(l => l.Contains("error", StringComparison.OrdinalIgnoreCase))?.Trim();
                records.Add(new BenchRecord { Kind = "skipped", Run = $"{run}-{index}", Config = config, Note = $"slurm:{mode} failed: {failure}{(why is null ? "" : $" ({why})")}" });
                continue;
            }
            // Our modes say per node what they fetched from the cache tier and what CPU they spent.
            var preps = stepOutput.Split('\n').Where(l => l.StartsWith("node=", StringComparison.Ordinal) && l.Contains(" seconds=")).ToList();
            foreach (var p in preps) Console.Error.WriteLine($"  slurm:{mode} {p.Trim()}");
            if (mode is "none" or "mpi" && preps.Count != Nodes) throw new InvalidOperationException($"Slurm mode {mode}: {preps.Count} of {Nodes} nodes prepared:\n{stepOutput}");
            var links = lines.First(l => l.StartsWith($"LINKS {index} ", StringComparison.Ordinal))[($"LINKS {index} ".Length)..].Split('|')
                .Select(side => side.Split(' ', StringSplitOptions.RemoveEmptyEntries).Select(x => x.Split(',').Select(long.Parse).ToArray()).ToArray()).ToArray();
            var nodes = mode is "none" or "mpi"
                ? preps.Select(p => new NodeTime(Field(p, "node") ?? "?", seconds, double.Parse(Field(p, "seconds")!, CultureInfo.InvariantCulture), stage.RawBytes,
                    Field(p, "fanout") is null ? "fetched" : "fanout", ExchangeSeconds: Seconds(p, "exchange-seconds"), RingSeconds: Seconds(p, "ring-seconds"),
                    PublishSeconds: Seconds(p, "publish-seconds"), RankCpuSeconds: Seconds(p, "cpu-seconds"), AgentCpuSeconds: Seconds(p, "agent-cpu-seconds"),
                    ShareSeconds: Seconds(p, "share-seconds"))).ToList()
                : _slurm!.NodeNames.Select(n => new NodeTime(n, seconds, seconds, stage.RawBytes, mode)).ToList();
            nodes = nodes.Select((n, k) => n with { LinkRxBytes = links[1][k][0] - links[0][k][0], LinkTxBytes = links[1][k][1] - links[0][k][1] }).ToList();
            var limit = mode == "none" ? Limits.DirectFetch(Nodes, Hosts, stage.StoredBytes, RateMbit) : Limits.Fanout(stage.StoredBytes, RateMbit);
            records.Add(new BenchRecord
            {
                Kind = "cluster", Run = $"{run}-{index}", Config = config, BlockRamp = BlockSizing.RampBlocks,
                Dataset = new DatasetInfo(stage.Version, stage.RawBytes, stage.StoredBytes, stage.Segments, stage.Seconds),
                LimitSeconds = limit, MeasuredSeconds = seconds, Efficiency = limit / seconds, Nodes = nodes, Machine = BenchJson.Machine(),
                // A direct fetch's line says where the copy came from, not how much: a node that fetched took every stored byte.
                CacheTierBytes = mode switch
                {
                    "mpi" => preps.Sum(p => long.TryParse(Field(p, "fetched-bytes"), out var b) ? b : 0),
                    "none" => preps.Count(p => Field(p, "source") == "fetched") * stage.StoredBytes,
                    _ => 0,
                },
            });
        }
        return records;

        static double? Seconds(string line, string name) => Field(line, name) is { } v ? double.Parse(v, CultureInfo.InvariantCulture) : null;

        static string? Field(string line, string name) =>
            line.Split(' ').FirstOrDefault(x => x.StartsWith(name + "=", StringComparison.Ordinal))?[(name.Length + 1)..];
    }

    /// <summary>
    /// A fault injected into a burst-buffer job: <paramref name="Kind"/> (<see cref="Topology.FaultKinds"/>) on the
    /// nodes numbered from 0, <paramref name="At"/> times the healthy runs' median after the job's allocation (a third:
    /// mid-exchange). The nodes are brought back (started again, linked, continued) once the job's fate is known.
    /// </summary>
    public sealed record NodeFault(string Kind, IReadOnlyList<int> Nodes, double At);

    /// <summary>
    /// The burst-buffer mode: per run, a user's own script that names the version with <c>#BB_LUA hpcdata</c> and prints
    /// the time as its first line, submitted by the lab's job user. The time is from slurmctld's allocation (its log) to
    /// that line; the nodes' own lines come from the pre-run hook's log; the tier's bytes from the hosts' counters.
    /// With a fault, one more run after the healthy ones: its record carries the job's fate and the survivors' time (the
    /// pre-run hook's end).
    /// </summary>
    private async Task<List<BenchRecord>> RunBurstBufferJobsAsync(string name, StageResult stage, int repeat, NodeFault? fault, string run, string codec, string data,
        CancellationToken ct)
    {
        var records = new List<BenchRecord>();
        var healthy = new List<double>();
        for (var i = 0; i < repeat + (fault is null ? 0 : 1); i++)
        {
            var faulty = i == repeat ? fault : null;
            var record = await RunBurstBufferJobAsync(name, stage, $"{run}-bb{i}", faulty, faulty is null ? null : faulty.At * healthy.Order().ElementAt(healthy.Count / 2), codec, data, ct);
            if (faulty is null) healthy.Add(record.MeasuredSeconds);
            records.Add(record);
        }
        return records;
    }

    private async Task<BenchRecord> RunBurstBufferJobAsync(string name, StageResult stage, string id, NodeFault? fault, double? faultAfter, string codec, string data,
        CancellationToken ct)
    {
        var lab = _slurm!;
        var script = Path.Combine(lab.JobsDirectory, $"{id}.sh");
        await File.WriteAllTextAsync(script, $$"""
            #!/bin/sh
            #BB_LUA hpcdata {{name}}@{{stage.Version}}
            echo "FIRST $(date +%s.%N)"
            echo "SIZES $(srun stat -c %s "$HPCDATA_DATASET_PATH" | sort -u | paste -sd,)"

            """, ct);
        if (!OperatingSystem.IsWindows()) File.SetUnixFileMode(script, (UnixFileMode)0b110_100_100);
        var before = await InfoAsync(ct);
        var logFrom = lab.ControllerLogLength;
        var submit = await lab.RunAsync("runuser", "-u", SlurmLab.JobUser, "--", "sbatch", "--parsable", $"--nodes={Nodes}", "--ntasks-per-node=1", "--exclusive",
            $"--chdir={lab.JobsDirectory}", $"--output={lab.JobsDirectory}/slurm-%j.out", script);
        if (submit.Code != 0) throw new InvalidOperationException($"sbatch of a burst-buffer job failed: {submit.Output}");
        var job = submit.Output.Trim().Split(';')[0];
        var output = Path.Combine(lab.JobsDirectory, $"slurm-{job}.out");
        var limit = TimeSpan.FromMinutes(5) + TimeSpan.FromSeconds(20 * Limits.Fanout(stage.StoredBytes, RateMbit));
        var clock = Stopwatch.StartNew();
        double? allocated = null, faultAt = null;
        string? fate = null;
        while (true)
        {
            if (clock.Elapsed > limit) throw new TimeoutException($"burst-buffer job {job} neither ran nor was sent back within {limit}:\n{lab.Logs()}");
            allocated ??= lab.AllocatedAt(job);
            if (fault is not null && faultAt is null && allocated is { } a && Now() - a >= faultAfter)
            {
                foreach (var n in fault.Nodes) Topology.Fault(_topology.Nodes[n], fault.Kind);
                faultAt = Now() - a;
                Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture, $"  fault {fault.Kind} on {string.Join(",", fault.Nodes.Select(SlurmLab.NodeName))} at {faultAt:0.00} s"));
            }
            var shown = (await lab.RunAsync("scontrol", "show", "job", "-o", job)).Output;
            // The hook's failure sends the job back: requeued (or held, as the site configures), never started.
            if (shown.Contains("Reason=Burst_buffer_pre_run_error", StringComparison.Ordinal) || shown.Contains("JobState=REQUEUE", StringComparison.Ordinal))
            {
                // The state it settles in (pending again, or held) once its nodes' epilogs end.
                for (var k = 0; k < 50 && Field(shown, "JobState") is "COMPLETING" or "REQUEUED"; k++)
                {
                    await Task.Delay(200, ct);
                    shown = (await lab.RunAsync("scontrol", "show", "job", "-o", job)).Output;
                }
                fate = $"sent back: JobState={Field(shown, "JobState")} Reason={Field(shown, "Reason")}; {Field(shown, "SystemComment")?.Trim()}";
                break;
            }
            if (shown.Contains("Invalid job id", StringComparison.Ordinal) || Field(shown, "JobState") is "COMPLETED" or "FAILED" or "CANCELLED")
            {
                if (File.Exists(output)) break;
            }
            await Task.Delay(fault is not null && faultAt is null ? 50 : 250, ct);
        }
        if (fate is not null)
        {
            await lab.RunAsync("scancel", job);
            for (var i = 0; i < 100 && (await lab.RunAsync("squeue", "-h", "-j", job)).Output.Contains(job, StringComparison.Ordinal); i++) await Task.Delay(200, ct);
        }
        // The tier's bytes for the job's staging are counted before the struck nodes come back: a stopped node that is
        // continued, or one whose link comes up, completes its own copy from the tier, which is that node's catching up
        // and not the job's staging (RecoveryTierBytes).
        var staged = fault is null ? null : await InfoAsync(ct);
        if (fault is not null)
        {
            foreach (var n in fault.Nodes)
                if (fault.Kind == "kill") await lab.StartNodeAsync(n, ct);
                else Topology.Recover(_topology.Nodes[n], fault.Kind);
            // As an operator would: the node's unfinished epilog of the cancelled job is written off, the node resumed.
            foreach (var n in fault.Nodes)
            {
                await lab.RunAsync("scontrol", "update", $"NodeName={SlurmLab.NodeName(n)}", "State=DOWN", "Reason=bench-fault");
                await lab.RunAsync("scontrol", "update", $"NodeName={SlurmLab.NodeName(n)}", "State=RESUME");
            }
            await lab.WaitIdleAsync(ct);
        }
        var after = await InfoAsync(ct);
        var log = lab.ControllerLogSince(logFrom).Split('\n');
        var preRunEnd = log.LastOrDefault(l => l.Contains("hpcdata burst-buffer pre-run: ", StringComparison.Ordinal)) is { } end ? SlurmLab.LogTime(end) : null;
        var lines = log.Select(l => l.IndexOf("node=", StringComparison.Ordinal) is var k and >= 0 ? l[k..].Trim() : null)
            .Where(l => l is not null && l.Contains(" seconds=", StringComparison.Ordinal)).Select(l => l!).Distinct().ToList();
        if (allocated is null) throw new InvalidOperationException($"slurmctld's log has no allocation of job {job}:\n{string.Join("\n", log.Where(l => l.Contains($"JobId={job}", StringComparison.Ordinal)))}");
        var hook = preRunEnd is { } e2 ? e2 - allocated.Value : double.NaN;
        // The hook's own line says when the controller started it: the time before that is the controller's scheduling.
        var hookStarted = log.Select(l => Regex.Match(l, @" hook-started=([0-9.]+) ")).LastOrDefault(m => m.Success) is { } h
            ? double.Parse(h.Groups[1].Value, CultureInfo.InvariantCulture) - allocated.Value : (double?)null;
        var config = Config(stage.RawBytes, true, 0, data);
        config.Codec = codec == "lz4" ? null : codec;
        config.Fanout = $"slurm:{SlurmModes.BurstBuffer}";
        if (fault is not null) (config.Fault, config.FaultNodes, config.FaultSeconds) = (fault.Kind, [.. fault.Nodes.Select(SlurmLab.NodeName)], faultAt);
        config.PeerTimeoutSeconds = lab.Site?.PeerTimeout?.TotalSeconds;
        double seconds;
        if (fate is null)
        {
            var text = await File.ReadAllTextAsync(output, ct);
            var first = text.Split('\n').FirstOrDefault(l => l.StartsWith("FIRST ", StringComparison.Ordinal))
                ?? throw new InvalidOperationException($"burst-buffer job {job} printed no first line:\n{text}\n{lab.Logs()}");
            if (!text.Contains($"SIZES {stage.RawBytes}\n", StringComparison.Ordinal))
                throw new InvalidOperationException($"burst-buffer job {job}: not every node holds the whole copy at $HPCDATA_DATASET_PATH:\n{text}");
            seconds = double.Parse(first["FIRST ".Length..], CultureInfo.InvariantCulture) - allocated.Value;
            fate = fault is null ? null : "ran";
        }
        else seconds = hook;
        var nodes = NodeTimes(lines.ToDictionary(l => l, _ => hook), stage, "agents");
        Console.Error.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"  slurm:{SlurmModes.BurstBuffer} job {job}: {nodes.Count} of {Nodes} nodes ready, pre-run {hookStarted:0.00}–{hook:0.00} s, first line at {seconds:0.00} s from allocation{(fate is null ? "" : $"; {fate}")}"));
        return new BenchRecord
        {
            Kind = "cluster", Run = id, Config = config, BlockRamp = BlockSizing.RampBlocks,
            Dataset = new DatasetInfo(stage.Version, stage.RawBytes, stage.StoredBytes, stage.Segments, stage.Seconds),
            LimitSeconds = Limits.Fanout(stage.StoredBytes, RateMbit), MeasuredSeconds = seconds, Efficiency = Limits.Fanout(stage.StoredBytes, RateMbit) / seconds,
            Nodes = nodes, Machine = BenchJson.Machine(), JobFate = fate,
            CacheTierBytes = (staged ?? after).Zip(before, (x, y) => x.Output - y.Output).Sum(),
            RecoveryTierBytes = staged is null ? null : after.Zip(staged, (x, y) => x.Output - y.Output).Sum(),
            Note = string.Create(CultureInfo.InvariantCulture, $"pre-run hook {hook:0.000} s from allocation{(hookStarted is { } hs ? $", started at {hs:0.000} s" : "")}"),
        };

        static double Now() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalSeconds;
        // A value runs to the next ' Key=' (SystemComment holds spaces).
        static string? Field(string shown, string key) =>
            System.Text.RegularExpressions.Regex.Match(shown, $@"(?:^| ){key}=(.*?)(?= [A-Za-z:]+=|\s*$)") is { Success: true } m ? m.Groups[1].Value : null;
    }

    private async ValueTask DisposeSlurmAsync()
    {
        if (_slurm is not null) await _slurm.DisposeAsync();
    }
}
