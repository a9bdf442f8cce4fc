using System.Diagnostics;
using System.Globalization;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cli;
using Hpc.CommonData.Hosting;
using Hpc.CommonData.Report;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;

namespace Hpc.Bench.Commands;

public sealed class BenchImportsOptions : IVerbOptions
{
    public static string Verb => "imports";

    public static string Summary => "Ranks start Python and import a package set from the node's copy (staged, node prep) and from a network " +
                                    "file system (sshfs from a file server namespace over a shaped link), cold and warm, counting each rank's file-system calls and the server's requests.";

    [Switch("--path", "The tree of Python packages (default: numpy and scipy copied from /usr/lib/python3/dist-packages).")]
    public string? Path { get; set; }

    [Switch("--import", "Comma-separated modules every rank imports.")]
    public string Import { get; set; } = "numpy,scipy.stats";

    [Switch("--ranks", "Comma-separated rank counts.")]
    public string Ranks { get; set; } = "4,8,16";

    [Switch("--rate", "The file server's and the cache host's link, both directions (e.g. 100mbit, 1gbit).")]
    public string Rate { get; set; } = "1gbit";

    [Switch("--delay", "One-way delay added on those links (netem; 0ms: the links' own, tens of microseconds).")]
    public string Delay { get; set; } = "0ms";

    [Switch("--repeat", "Cold and warm runs of each cell; the table shows medians.")]
    public int Repeat { get; set; } = 3;

    [Switch("--instance", "Which emulated cluster (0-63) to build, so runs side by side do not collide (default: the first free one).")]
    public int? Instance { get; set; }

    [Switch("--out", "Directory to write imports.jsonl, imports.md and imports-cold-time-vs-ranks.svg, imports-warm-time-vs-ranks.svg to.")]
    public string? Out { get; set; }
}

/// <summary>
/// A software environment on every node against the same tree on a network file system. The file server is a namespace
/// behind a shaped link running sshd; every rank has a mount of its own, as every node would (its own client caches,
/// one server). The node copy is what node prep leaves: the agent's read-only tree, fetched from a cache host behind a
/// link like the server's. Cold: client caches empty (fresh mounts, a fresh node copy) and the page cache dropped;
/// warm: the same again at once.
/// </summary>
public static partial class BenchImportsVerb
{
    private static readonly CultureInfo Inv = CultureInfo.InvariantCulture;
    private const int SshPort = 2222;

    private sealed record Cell(string Source, int Ranks, double ColdSeconds, double WarmSeconds, double PrepSeconds, long CallsPerRank,
        long MetadataRequestsPerRank, long ReadRequestsPerRank);

    public static async Task<int> RunAsync(BenchImportsOptions o, CancellationToken ct)
    {
        foreach (var tool in new[] { "sshd", "sshfs", "ssh-keygen", "strace", "python3" })
            if (!Shell.Exists(tool)) { Console.Error.WriteLine($"hpcdata bench imports: needs {tool} (apt-get install openssh-server sshfs strace python3)"); return 2; }
        if (!Shell.IsRoot) { Console.Error.WriteLine("hpcdata bench imports: needs root (namespaces, mounts, dropping the page cache)"); return 2; }
        var (rateMbit, delayMs) = (BenchVerb.ParseRateMbit(o.Rate), BenchVerb.ParseMs(o.Delay));
        if (delayMs > 0 && Topology.QdiscUnavailable("netem delay 1ms") is { } netem)
        {
            Console.Error.WriteLine($"hpcdata bench imports: --delay needs netem, which this kernel lacks ({netem}); use --delay 0");
            return 2;
        }
        var ranks = o.Ranks.Split(',').Select(r => int.Parse(r, Inv)).ToArray();
        var modules = o.Import.Split(',', StringSplitOptions.TrimEntries | StringSplitOptions.RemoveEmptyEntries);
        var work = Directory.CreateTempSubdirectory("hpcdata-imports-").FullName;
        var topology = new Topology(hosts: 2, nodes: 1, rateMbit, delayMs, instance: o.Instance ?? Topology.FreeInstance());
        var processes = new List<ComponentProcess>();
        var mounts = new List<(string Path, Process Sshfs, string Log)>();
        try
        {
            var tree = o.Path ?? CopyPackages(work, modules);
            topology.Create();
            var (cacheNs, serverNs) = (topology.Hosts[0], topology.Hosts[1]);
            var host = Track(processes, ComponentProcess.Start(new CacheHostOptions { Address = cacheNs.Address, Port = 6380, MaxMemoryBytes = new(8L << 30) },
                name: "cachehost", launcher: Topology.Launcher(cacheNs)));
            var endpoint = await host.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            var stageClock = Stopwatch.StartNew();
            await using (var stager = ComponentProcess.Start(new StagerOptions { Path = tree, Name = "sw/python", Json = true, CacheTier = { Hosts = [endpoint] } }, name: "stager"))
                if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(10), ct) != 0) throw new InvalidOperationException($"staging failed:\n{stager.StandardErrorTail}");
            var stageSeconds = stageClock.Elapsed.TotalSeconds;
            var image = System.IO.Path.Combine(work, "env.sqfs");
            Shell.Check("mksquashfs", tree, image, "-noappend", "-quiet", "-no-progress");
            await using (var stager = ComponentProcess.Start(new StagerOptions { Path = image, Name = "sw/python-image", Json = true, CacheTier = { Hosts = [endpoint] } }, name: "stager"))
                if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(10), ct) != 0) throw new InvalidOperationException($"staging the image failed:\n{stager.StandardErrorTail}");
            var identity = StartFileServer(work, serverNs, processes);

            // Each source makes its cold state (a fresh node copy, fresh mounts) and says where each rank imports from.
            async Task<(double Prep, IReadOnlyList<string> Paths, Func<ValueTask> Done)> NodeTree(int n, string tag)
            {
                var (prep, copy, done) = await NodePrepAsync(work, endpoint, "sw/python", "tree-" + tag, ct);
                return (prep, Enumerable.Repeat(copy, n).ToList(), done);
            }
            async Task<(double, IReadOnlyList<string>, Func<ValueTask>)> NodeImage(int n, string tag)
            {
                var (prep, file, done) = await NodePrepAsync(work, endpoint, "sw/python-image", "image-" + tag, ct);
                var at = SquashMount(file, System.IO.Path.Combine(work, $"sq-node-{tag}"));
                return (prep, Enumerable.Repeat(at, n).ToList(), async () => { SquashUnmount(at); await done(); });
            }
            Task<(double, IReadOnlyList<string>, Func<ValueTask>)> NetworkTree(int n, string tag)
            {
                Remount(mounts, n, work, serverNs.Address, identity);
                return Task.FromResult<(double, IReadOnlyList<string>, Func<ValueTask>)>((0, mounts.Take(n).Select(m => m.Path + tree).ToList(), () => ValueTask.CompletedTask));
            }
            Task<(double, IReadOnlyList<string>, Func<ValueTask>)> NetworkImage(int n, string tag)
            {
                Remount(mounts, n, work, serverNs.Address, identity);
                var at = mounts.Take(n).Select((m, i) => SquashMount(m.Path + image, System.IO.Path.Combine(work, $"sq-nfs-{tag}-{i}"))).ToList();
                return Task.FromResult<(double, IReadOnlyList<string>, Func<ValueTask>)>((0, at, () => { at.ForEach(SquashUnmount); return ValueTask.CompletedTask; }));
            }
            var sources = new (string Name, bool Network, Func<int, string, Task<(double, IReadOnlyList<string>, Func<ValueTask>)>> Prepare)[]
            {
                ("node copy", false, NodeTree), ("network file system", true, NetworkTree),
                ("squashfs image, node copy", false, NodeImage), ("squashfs image on the network file system", true, NetworkImage),
            };

            var cells = new List<Cell>();
            foreach (var n in ranks)
            foreach (var (name, network, prepare) in sources)
            {
                var runs = new List<(double Prep, double Cold, double Warm)>();
                long calls = 0, metadata = 0, reads = 0;
                for (var run = 0; run < o.Repeat; run++)
                {
                    var (prep, paths, done) = await prepare(n, $"{n}-{run}");
                    try
                    {
                        DropCaches();
                        var before = network ? Requests(mounts[0].Log) : default;
                        var cold = await RanksAsync(paths, modules, ct);
                        var after = network ? Requests(mounts[0].Log) : default;
                        (metadata, reads) = (after.Metadata - before.Metadata, after.Reads - before.Reads);
                        var warm = await RanksAsync(paths, modules, ct);
                        runs.Add((prep, cold, warm));
                        if (run == o.Repeat - 1) calls = await FileCallsAsync(paths[0], modules, work, ct);
                    }
                    finally { await done(); }
                }
                cells.Add(new Cell(name, n, Median(runs.Select(r => r.Cold)), Median(runs.Select(r => r.Warm)), Median(runs.Select(r => r.Prep)), calls, metadata, reads));
                Console.Error.WriteLine(string.Create(Inv, $"bench imports: {n} ranks, {name}: cold {cells[^1].ColdSeconds:0.00} s, warm {cells[^1].WarmSeconds:0.00} s"));
            }
            Write(o, rateMbit, delayMs, cells, tree, modules, stageSeconds);
            return 0;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or CommonDataException or TimeoutException)
        {
            Console.Error.WriteLine($"hpcdata bench imports: {e.Message}");
            return 1;
        }
        finally
        {
            foreach (var (path, sshfs, _) in mounts) Unmount(path, sshfs);
            foreach (var p in processes) await p.DisposeAsync();
            topology.Destroy();
            Shell.Run("rm", "-rf", work);
        }
    }

    private static ComponentProcess Track(List<ComponentProcess> list, ComponentProcess p) { list.Add(p); return p; }

    /// <summary>The named top-level packages of the system's dist-packages, copied as a site would stage them.</summary>
    private static string CopyPackages(string work, string[] modules)
    {
        const string site = "/usr/lib/python3/dist-packages";
        var tree = System.IO.Path.Combine(work, "tree");
        Directory.CreateDirectory(tree);
        var tops = modules.Select(m => m.Split('.')[0]).Distinct().Select(m => System.IO.Path.Combine(site, m)).ToArray();
        foreach (var t in tops)
            if (!Directory.Exists(t)) throw new InvalidOperationException($"{t} is missing: install python3-{System.IO.Path.GetFileName(t)}, or give --path");
        Shell.Check("cp", ["-a", .. tops, tree]);
        return tree;
    }

    /// <summary>sshd in the file server's namespace, one key for the mounts; returns the client's key file.</summary>
    private static string StartFileServer(string work, Topology.Member server, List<ComponentProcess> processes)
    {
        var keys = System.IO.Path.Combine(work, "ssh");
        Directory.CreateDirectory(keys);
        Directory.CreateDirectory("/run/sshd");
        Shell.Check("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", System.IO.Path.Combine(keys, "host"));
        Shell.Check("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", System.IO.Path.Combine(keys, "client"));
        File.Copy(System.IO.Path.Combine(keys, "client.pub"), System.IO.Path.Combine(keys, "authorized"));
        var config = System.IO.Path.Combine(keys, "sshd_config");
        File.WriteAllText(config, $"""
            Port {SshPort}
            ListenAddress {server.Address}
            HostKey {keys}/host
            AuthorizedKeysFile {keys}/authorized
            PermitRootLogin prohibit-password
            PasswordAuthentication no
            StrictModes no
            UsePAM no
            MaxStartups 100
            MaxSessions 100
            PidFile {keys}/sshd.pid
            Subsystem sftp internal-sftp

            """);
        var sshd = ComponentProcess.Start("/usr/sbin/sshd", ["-D", "-e", "-f", config], name: "sshd", launcher: Topology.Launcher(server));
        processes.Add(sshd);
        for (var i = 0; i < 50 && Shell.Run("ip", "netns", "exec", server.Namespace, "ss", "-ltn", $"sport = :{SshPort}").Stdout.Split('\n').Length < 3; i++)
            Thread.Sleep(100);
        return System.IO.Path.Combine(keys, "client");
    }

    /// <summary>The first <paramref name="n"/> mounts made afresh (empty client caches), more added as needed.</summary>
    private static void Remount(List<(string Path, Process Sshfs, string Log)> mounts, int n, string work, string server, string identity)
    {
        for (var i = 0; i < n; i++)
        {
            if (i < mounts.Count) Unmount(mounts[i].Path, mounts[i].Sshfs);
            var m = Mount(work, i, server, identity);
            if (i < mounts.Count) mounts[i] = m;
            else mounts.Add(m);
        }
    }

    /// <summary>The server's file system, as a node mounts its site's; sshfs in the foreground with its request log, so
    /// the server's requests can be counted per mount.</summary>
    private static (string Path, Process Sshfs, string Log) Mount(string work, int index, string server, string identity)
    {
        var path = System.IO.Path.Combine(work, $"mnt{index}");
        Directory.CreateDirectory(path);
        var log = System.IO.Path.Combine(work, $"sshfs{index}-{Environment.TickCount64}.log");
        var info = new ProcessStartInfo("bash", ["-c", $"exec sshfs -f -o sshfs_debug,ro,IdentityFile={identity},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,LogLevel=ERROR " +
                                                       $"-p {SshPort} root@{server}:/ {path} 2> {log}"]) { UseShellExecute = false };
        var p = Process.Start(info) ?? throw new InvalidOperationException("cannot start sshfs");
        for (var i = 0; i < 100 && !IsMounted(path); i++)
        {
            if (p.HasExited) throw new InvalidOperationException($"sshfs exited: {File.ReadAllText(log)}");
            Thread.Sleep(100);
        }
        if (!IsMounted(path)) throw new TimeoutException($"sshfs did not mount {path}");
        return (path, p, log);
    }

    private static string SquashMount(string image, string at)
    {
        Directory.CreateDirectory(at);
        Shell.Check("squashfuse", image, at);
        return at;
    }

    private static void SquashUnmount(string at) => Shell.Run("umount", "-l", at);

    private static void Unmount(string path, Process sshfs)
    {
        Shell.Run("umount", "-l", path);
        if (!sshfs.WaitForExit(5000)) sshfs.Kill(entireProcessTree: true);
        sshfs.Dispose();
    }

    private static bool IsMounted(string path) => File.ReadAllText("/proc/self/mountinfo").Contains($" {path} ", StringComparison.Ordinal);

    private static void DropCaches()
    {
        Shell.Run("sync");
        try { File.WriteAllText("/proc/sys/vm/drop_caches", "3"); }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException) { /* a container may refuse: warm server caches then */ }
    }

    /// <summary>A fresh agent and data directory, and the time node prep takes to fetch, verify and publish the dataset;
    /// the returned step stops the agent and removes its directory.</summary>
    private static async Task<(double Seconds, string Path, Func<ValueTask> Done)> NodePrepAsync(string work, string endpoint, string dataset, string tag, CancellationToken ct)
    {
        var name = $"hcd-imports-{Environment.ProcessId}-{tag}";
        var dataDir = System.IO.Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : work, name);
        var agent = ComponentProcess.Start(new NodeAgentOptions { Pipe = name, DataDirectory = dataDir, Budget = new(8L << 30), CacheTier = { Hosts = [endpoint] } }, name: "agent");
        async ValueTask Done()
        {
            await agent.DisposeAsync();
            Shell.Run("rm", "-rf", dataDir);
        }
        try
        {
            await agent.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            var clock = Stopwatch.StartNew();
            await using var client = await AgentClient.ConnectAsync(name, TimeSpan.FromSeconds(10), ct);
            var local = await client.PrefetchAsync(dataset, null, pin: null, ct);
            return (clock.Elapsed.TotalSeconds, local.Path, Done);
        }
        catch
        {
            await Done();
            throw;
        }
    }

    /// <summary>Every rank at once, each importing from its own path; seconds until the last is done. A rank that imported
    /// from anywhere else fails the run.</summary>
    private static async Task<double> RanksAsync(IReadOnlyList<string> paths, string[] modules, CancellationToken ct)
    {
        var script = $"import {string.Join(", ", modules)}, sys; print(sys.modules['{modules[0].Split('.')[0]}'].__file__)";
        var clock = Stopwatch.StartNew();
        var ranks = paths.Select(async path =>
        {
            var info = new ProcessStartInfo("python3", ["-c", script]) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
            info.Environment["PYTHONPATH"] = path;
            info.Environment["PYTHONDONTWRITEBYTECODE"] = "1";
            using var p = Process.Start(info)!;
            var output = await p.StandardOutput.ReadToEndAsync(ct);
            var error = await p.StandardError.ReadToEndAsync(ct);
            await p.WaitForExitAsync(ct);
            if (p.ExitCode != 0 || !output.Trim().StartsWith(path + "/", StringComparison.Ordinal))
                throw new InvalidOperationException($"a rank imported from '{output.Trim()}', not {path} (exit {p.ExitCode}): {error}");
        }).ToList();
        await Task.WhenAll(ranks);
        return clock.Elapsed.TotalSeconds;
    }

    /// <summary>File-system calls one rank makes (strace: calls that name a path, and directory reads).</summary>
    private static async Task<long> FileCallsAsync(string path, string[] modules, string work, CancellationToken ct)
    {
        var summary = System.IO.Path.Combine(work, $"strace-{Environment.TickCount64}.txt");
        var info = new ProcessStartInfo("strace", ["-f", "-qq", "-c", "-e", "trace=%file,getdents64", "-o", summary, "python3", "-c", $"import {string.Join(", ", modules)}"])
            { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        info.Environment["PYTHONPATH"] = path;
        info.Environment["PYTHONDONTWRITEBYTECODE"] = "1";
        using var p = Process.Start(info)!;
        await p.WaitForExitAsync(ct);
        var total = File.ReadLines(summary).LastOrDefault(l => l.TrimEnd().EndsWith("total", StringComparison.Ordinal))
                    ?? throw new InvalidOperationException($"strace wrote no summary: {File.ReadAllText(summary)}");
        // "100.00    0.039663           8      4754      1199 total": the calls are the fourth column.
        return long.Parse(total.Split(' ', StringSplitOptions.RemoveEmptyEntries)[3], Inv);
    }

    /// <summary>The requests one mount sent its server so far: metadata (look-ups, opens, closes, directory reads) and reads.</summary>
    private static (long Metadata, long Reads) Requests(string log)
    {
        long metadata = 0, reads = 0;
        using var reader = new StreamReader(new FileStream(log, FileMode.Open, FileAccess.Read, FileShare.ReadWrite));
        while (reader.ReadLine() is { } line)
        {
            var m = RequestLine().Match(line);
            if (!m.Success) continue;
            if (m.Groups[1].Value == "READ") reads++;
            else metadata++;
        }
        return (metadata, reads);
    }

    private static double Median(IEnumerable<double> values)
    {
        var v = values.Order().ToArray();
        return v.Length % 2 == 1 ? v[v.Length / 2] : (v[v.Length / 2 - 1] + v[v.Length / 2]) / 2;
    }

    private static void Write(BenchImportsOptions o, int rateMbit, double delayMs, List<Cell> cells, string tree, string[] modules, double stageSeconds)
    {
        var files = Directory.EnumerateFiles(tree, "*", new EnumerationOptions { RecurseSubdirectories = true, AttributesToSkip = FileAttributes.ReparsePoint }).Count();
        var md = new StringBuilder();
        md.AppendLine(string.Create(Inv, $"`import {string.Join(", ", modules)}` by every rank at once; the tree: {files} files; links {rateMbit} Mbit/s, {delayMs} ms each way; staged once in {stageSeconds:0.00} s; medians of {o.Repeat} runs."));
        md.AppendLine();
        md.AppendLine("| source | ranks | cold s | warm s | node prep s | cold job s (prep + imports) | file-system calls per rank | server requests per rank, cold (metadata / reads) |");
        md.AppendLine("|---|---|---|---|---|---|---|---|");
        foreach (var c in cells)
        {
            var node = c.Source.EndsWith("node copy", StringComparison.Ordinal);
            md.AppendLine(string.Create(Inv, $"| {c.Source} | {c.Ranks} | {c.ColdSeconds:0.00} | {c.WarmSeconds:0.00} | {(node ? c.PrepSeconds.ToString("0.00", Inv) : "")} | {c.PrepSeconds + c.ColdSeconds:0.00} | {c.CallsPerRank} | {(node ? "0 / 0" : $"{c.MetadataRequestsPerRank} / {c.ReadRequestsPerRank}")} |"));
        }
        Console.Write(md.ToString());
        if (o.Out is null) return;
        Directory.CreateDirectory(o.Out);
        File.WriteAllText(System.IO.Path.Combine(o.Out, "imports.md"), md.ToString());
        File.WriteAllLines(System.IO.Path.Combine(o.Out, "imports.jsonl"), cells.Select(c => JsonSerializer.Serialize(new
        {
            kind = "imports", source = c.Source, ranks = c.Ranks, coldSeconds = c.ColdSeconds, warmSeconds = c.WarmSeconds, nodePrepSeconds = c.PrepSeconds,
            fileCallsPerRank = c.CallsPerRank, serverMetadataRequestsPerRank = c.MetadataRequestsPerRank, serverReadRequestsPerRank = c.ReadRequestsPerRank,
            rateMbit = rateMbit, delayMs = delayMs, modules, files, stageSeconds,
        })));
        foreach (var (state, pick) in new (string, Func<Cell, double>)[] { ("cold", c => c.ColdSeconds), ("warm", c => c.WarmSeconds) })
        {
            var chart = new LineChart
            {
                Title = string.Create(Inv, $"import {string.Join(", ", modules)}, every rank at once, {state} ({rateMbit} Mbit/s links)"),
                XLabel = "ranks", YLabel = "seconds until every rank has imported",
            };
            foreach (var source in cells.Select(c => c.Source).Distinct())
                chart.Lines.Add(new LineChart.Series(source, cells.Where(c => c.Source == source).Select(c => ((double)c.Ranks, pick(c))).ToList(),
                    Dashed: source.Contains("network", StringComparison.Ordinal)));
            chart.Save(System.IO.Path.Combine(o.Out, $"imports-{state}-time-vs-ranks.svg"));
        }
    }

    [GeneratedRegex(@"^\[\d+\]\s+([A-Z_]+)\s*$")]
    private static partial Regex RequestLine();
}
