using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Hpc.CommonData.Cli;
using SwitchAttribute = Hpc.CommonData.Hosting.SwitchAttribute;
using Hpc.CommonData;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;
using Stats = Hpc.CommonData.Report.Stats;

namespace Hpc.Bench.Commands;

public sealed class BenchTreeOptions : IVerbOptions
{
    public static string Verb => "tree";

    public static string Summary => "A real directory tree staged, written back out with hpcdata get and published on a node by its agent, beside tar | lz4 -1 and cp -a of the same tree, in one run.";

    [Switch("--path", "The tree (e.g. /usr/share/dotnet).", Required = true)]
    public string Path { get; set; } = "";

    [Switch("--work-dir", "Scratch directory for the copies (default: under /dev/shm or the temp directory); removed afterwards.")]
    public string? WorkDir { get; set; }
}

public static class BenchTreeVerb
{
    public static async Task<int> RunAsync(BenchTreeOptions o, CancellationToken ct)
    {
        if (!Directory.Exists(o.Path)) { Console.Error.WriteLine($"hpcdata bench tree: '{o.Path}' is not a directory"); return 2; }
        var work = o.WorkDir ?? System.IO.Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : System.IO.Path.GetTempPath(), $"hpcdata-tree-{Environment.ProcessId}");
        Directory.CreateDirectory(work);
        try
        {
            var files = Directory.EnumerateFiles(o.Path, "*", new EnumerationOptions { RecurseSubdirectories = true, AttributesToSkip = FileAttributes.ReparsePoint }).ToList();
            var bytes = files.Sum(f => new FileInfo(f).Length);
            // Read once, so every contender starts from the page cache.
            await Shell($"tar -cf - -C '{o.Path}' . > /dev/null", ct);

            var tarLz4 = Stopwatch.StartNew();
            var packed = long.Parse((await Shell($"tar -cf - -C '{o.Path}' . | lz4 -1 -q -c | wc -c", ct)).Trim(), CultureInfo.InvariantCulture);
            var tarSeconds = tarLz4.Elapsed.TotalSeconds;

            var cp = Stopwatch.StartNew();
            await Shell($"cp -a '{o.Path}' '{work}/cp'", ct);
            var cpSeconds = cp.Elapsed.TotalSeconds;

            await using var host = ComponentProcess.Start(new CacheHostOptions { Address = "127.0.0.1", Port = 0, MaxMemoryBytes = Math.Max(1L << 30, bytes * 2) }, name: "cachehost");
            var endpoint = await host.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            await using var stager = ComponentProcess.Start(new StagerOptions { Path = o.Path, Name = "bench/tree", Json = true, CacheTier = { Hosts = [endpoint] } }, name: "stager");
            if (await stager.WaitForExitAsync(TimeSpan.FromMinutes(30), ct) != 0) throw new InvalidOperationException($"staging failed:\n{stager.StandardErrorTail}");
            var stage = JsonSerializer.Deserialize(stager.StandardOutput.Last(), ContractJson.Default.StageResult)!;

            var get = Stopwatch.StartNew();
            var jobs = ComponentProcess.Start("hpcdata", ["get", "bench/tree", $"{work}/get", "--cache-hosts", endpoint], new Dictionary<string, string?> { ["HPCDATA_AGENT_PIPE"] = $"none-{Environment.ProcessId}" }, name: "get");
            await using (jobs)
                if (await jobs.WaitForExitAsync(TimeSpan.FromMinutes(30), ct) != 0) throw new InvalidOperationException($"hpcdata get failed:\n{jobs.StandardErrorTail}");
            var getSeconds = get.Elapsed.TotalSeconds;
            var same = await CompareAsync(o.Path, $"{work}/get", ct);

            // A node: its agent fetches the version, verifies it and publishes the read-only tree every worker reads.
            await using var agentProcess = ComponentProcess.Start(new NodeAgentOptions
            {
                Pipe = $"hcd-bench-tree-{Environment.ProcessId}", DataDirectory = $"{work}/node", Budget = Math.Max(1L << 30, bytes * 2), CacheTier = { Hosts = [endpoint] },
            }, name: "agent");
            await agentProcess.WaitReadyAsync(TimeSpan.FromSeconds(30), ct);
            var node = Stopwatch.StartNew();
            LocalDataset published;
            await using (var agent = await AgentClient.ConnectAsync($"hcd-bench-tree-{Environment.ProcessId}", TimeSpan.FromSeconds(10), ct))
                published = await agent.PrefetchAsync("bench/tree", stage.Version, pin: null, ct);
            var nodeSeconds = node.Elapsed.TotalSeconds;
            var nodeSame = await CompareAsync(o.Path, published.Path, ct);

            var inv = CultureInfo.InvariantCulture;
            Console.WriteLine(string.Create(inv, $"tree {o.Path}: {files.Count} files, {ByteSize.Format(bytes)}"));
            Console.WriteLine("| what | seconds | files/s | MiB/s | bytes out |");
            Console.WriteLine("|---|---|---|---|---|");
            Console.WriteLine(string.Create(inv, $"| hpcdata stage (lz4, content-defined) | {stage.Seconds:0.00} | {files.Count / stage.Seconds:0} | {Stats.MiBps(bytes, stage.Seconds):0} | {ByteSize.Format(stage.StoredBytes)} stored ({(double)stage.StoredBytes / bytes:P1}) |"));
            Console.WriteLine(string.Create(inv, $"| tar \\| lz4 -1 | {tarSeconds:0.00} | {files.Count / tarSeconds:0} | {Stats.MiBps(bytes, tarSeconds):0} | {ByteSize.Format(packed)} ({(double)packed / bytes:P1}) |"));
            Console.WriteLine(string.Create(inv, $"| hpcdata get (cache tier → tree, verified) | {getSeconds:0.00} | {files.Count / getSeconds:0} | {Stats.MiBps(bytes, getSeconds):0} | tree {same.Trim()} (diff -r --no-dereference) |"));
            Console.WriteLine(string.Create(inv, $"| node agent (cache tier → read-only tree: fetch, verify, publish) | {nodeSeconds:0.00} | {files.Count / nodeSeconds:0} | {Stats.MiBps(bytes, nodeSeconds):0} | tree {nodeSame.Trim()} |"));
            Console.WriteLine(string.Create(inv, $"| cp -a | {cpSeconds:0.00} | {files.Count / cpSeconds:0} | {Stats.MiBps(bytes, cpSeconds):0} | |"));
            return 0;
        }
        catch (Exception e) when (e is InvalidOperationException or IOException or CommonDataException or TimeoutException)
        {
            Console.Error.WriteLine($"hpcdata bench tree: {e.Message}");
            return 1;
        }
        finally
        {
            await Shell($"chmod -R u+w '{work}' 2>/dev/null; rm -rf '{work}'", CancellationToken.None);
        }
    }

    /// <summary>
    /// diff -r with links compared as links. A link that leads out of the tree is not staged (by design: the stager
    /// never follows one out), so the source has it and the copy does not; those are counted, anything else is a difference.
    /// </summary>
    private static async Task<string> CompareAsync(string source, string copy, CancellationToken ct)
    {
        var lines = (await Shell($"diff -r --no-dereference '{source}' '{copy}' 2>&1", ct)).Split('\n', StringSplitOptions.RemoveEmptyEntries);
        var outside = 0;
        foreach (var line in lines)
        {
            const string only = "Only in ";
            var colon = line.IndexOf(": ", StringComparison.Ordinal);
            if (line.StartsWith(only + source, StringComparison.Ordinal) && colon > 0 &&
                new FileInfo(System.IO.Path.Combine(line[only.Length..colon], line[(colon + 2)..])) is { LinkTarget: { } target } link &&
                !System.IO.Path.GetFullPath(target, link.DirectoryName!).StartsWith(System.IO.Path.GetFullPath(source) + "/", StringComparison.Ordinal))
            {
                outside++;
                continue;
            }
            return $"DIFFERENT ({line})";
        }
        return outside == 0 ? "identical" : $"identical but for {outside} links out of the tree (not staged, by design)";
    }

    private static async Task<string> Shell(string script, CancellationToken ct)
    {
        using var p = Process.Start(new ProcessStartInfo("bash", ["-c", script]) { RedirectStandardOutput = true })!;
        var output = await p.StandardOutput.ReadToEndAsync(ct);
        await p.WaitForExitAsync(ct);
        return output;
    }
}
