using System.Text.Json;
using Hpc.CommonData.Hosting;
using Hpc.Bench;

namespace Hpc.Bench.Tests;

/// <summary>
/// The real thing, small: network namespaces, shaped links, cache host and agents as processes, then the report on its
/// output. It needs root (CI runs as root); elsewhere it checks that the command refuses cleanly instead.
/// </summary>
[Collection(LabNamespaces.Name)]
public class ClusterSmokeTests
{
    [Fact]
    public async Task Bench_cluster_then_report_produce_times_efficiency_and_valid_charts()
    {
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-test-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var instance = OwnInstance();
        try
        {
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(90), "bench", "cluster", "--nodes", "4", "--cache-host-count", "1", "--size", "8MB", "--out", dir, "--calibrate", "--instance", $"{instance}");
            if (!Shell.IsRoot)
            {
                Assert.Equal(2, code);
                Assert.Contains("needs root", stderr);
                return;
            }
            Assert.True(code == 0, $"bench cluster exited {code}: {stderr}");
            Assert.Empty(Topology.Leftovers(instance));

            var lines = File.ReadAllLines(Path.Combine(dir, "results.jsonl"));
            using var cluster = JsonDocument.Parse(lines.First(l => l.Contains("\"kind\":\"cluster\"")));
            var nodes = cluster.RootElement.GetProperty("nodes");
            Assert.Equal(4, nodes.GetArrayLength());
            Assert.All(nodes.EnumerateArray(), n => Assert.True(n.GetProperty("wallSeconds").GetDouble() > 0));
            var efficiency = cluster.RootElement.GetProperty("efficiency").GetDouble();
            Assert.InRange(efficiency, 0.01, 1.5);
            // Which build ran decides the CPU per byte by several times, so the record says so.
            Assert.Contains(cluster.RootElement.GetProperty("programs").GetString(), new[] { "native", "ReadyToRun", "JIT" });
            Assert.True(cluster.RootElement.GetProperty("cacheHosts")[0].GetProperty("netOutputBytes").GetInt64() >=
                        4 * cluster.RootElement.GetProperty("dataset").GetProperty("storedBytes").GetInt64());
            Assert.Contains(lines, l => l.Contains("\"pattern\":\"pull\""));
            Assert.Contains(lines, l => l.Contains("\"pattern\":\"neighbour\""));

            (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(30), "report", dir);
            Assert.True(code == 0, $"report exited {code}: {stderr}");
            var md = File.ReadAllText(Path.Combine(dir, "report.md"));
            Assert.Contains("| data size | N=4 |", md);
            Assert.Matches(@"\| 8 MiB \| [0-9.]+ \([0-9]+%\) \|", md);
            Assert.Contains("| pull | 4 | 1 |", md);
            foreach (var chart in new[] { "time-vs-nodes.svg", "efficiency-vs-nodes.svg" })
                Assert.Equal("1100", (string?)System.Xml.Linq.XDocument.Load(Path.Combine(dir, chart)).Root!.Attribute("width"));
        }
        finally
        {
            if (Shell.IsRoot) Topology.Clean(instance);
            try { Directory.Delete(dir, recursive: true); } catch (IOException) { }
        }
    }

    [Fact]
    public async Task Flow_fair_host_queues_are_a_recorded_configuration_of_their_own()
    {
        if (!Shell.IsRoot) return;
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-test-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var instance = OwnInstance();
        try
        {
            var kernelLacksFqCodel = Topology.QdiscUnavailable("fq_codel") is not null;
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(90), "bench", "cluster", "--nodes", "2", "--cache-host-count", "1", "--size", "4MB", "--out", dir, "--host-queue", "fq_codel", "--instance", $"{instance}");
            if (kernelLacksFqCodel)
            {
                // Refused up front, saying what is missing and what to run instead, with nothing built.
                Assert.Equal(2, code);
                Assert.Contains("fq_codel queueing discipline", stderr);
                Assert.Contains("--host-queue ack-first", stderr);
                Assert.Empty(Topology.Leftovers(instance));
                Assert.False(File.Exists(Path.Combine(dir, "results.jsonl")));
                return;
            }
            Assert.True(code == 0, $"bench cluster exited {code}: {stderr}");
            Assert.Empty(Topology.Leftovers(instance));
            using var run = JsonDocument.Parse(File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Single());
            Assert.Equal("fq_codel", run.RootElement.GetProperty("config").GetProperty("hostQueue").GetString());
            Assert.Equal(2, run.RootElement.GetProperty("nodes").GetArrayLength());

            (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(30), "report", dir);
            Assert.True(code == 0, $"report exited {code}: {stderr}");
            Assert.Contains("fq_codel host queues", File.ReadAllText(Path.Combine(dir, "report.md")));
        }
        finally
        {
            if (Shell.IsRoot) Topology.Clean(instance);
            try { Directory.Delete(dir, recursive: true); } catch (IOException) { }
        }
    }

    [Fact]
    public async Task Ack_first_host_queues_build_on_any_kernel_with_htb_and_are_recorded_as_such()
    {
        if (!Shell.IsRoot) return;
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-test-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var instance = OwnInstance();
        try
        {
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(90), "bench", "cluster", "--nodes", "2", "--cache-host-count", "1", "--size", "4MB", "--out", dir, "--host-queue", "ack-first", "--instance", $"{instance}");
            Assert.True(code == 0, $"bench cluster exited {code}: {stderr}");
            Assert.Empty(Topology.Leftovers(instance));
            using var run = JsonDocument.Parse(File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Single());
            Assert.Equal("ack-first", run.RootElement.GetProperty("config").GetProperty("hostQueue").GetString());
            Assert.Equal(2, run.RootElement.GetProperty("nodes").GetArrayLength());
            var raw = run.RootElement.GetProperty("dataset").GetProperty("rawBytes").GetInt64();
            Assert.All(run.RootElement.GetProperty("nodes").EnumerateArray(), n => Assert.Equal(raw, n.GetProperty("bytes").GetInt64()));
        }
        finally
        {
            if (Shell.IsRoot) Topology.Clean(instance);
            try { Directory.Delete(dir, recursive: true); } catch (IOException) { }
        }
    }

    [Fact]
    public async Task Mpi_fanout_run_is_recorded_with_the_cache_tier_sending_the_data_about_once_over_the_shaped_links()
    {
        if (!Shell.IsRoot || !Shell.Exists("mpiexec.openmpi")) return;
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-test-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var instance = OwnInstance();
        try
        {
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(120), "bench", "cluster", "--nodes", "3", "--cache-host-count", "1", "--size", "4MB",
                "--data", "random", "--no-compress", "--fanout", "mpi", "--out", dir, "--instance", $"{instance}");
            Assert.True(code == 0, $"bench cluster exited {code}: {stderr}");
            Assert.Empty(Topology.Leftovers(instance));
            using var run = JsonDocument.Parse(File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Single());
            var r = run.RootElement;
            Assert.Equal(("cluster", "mpi"), (r.GetProperty("kind").GetString(), r.GetProperty("config").GetProperty("fanout").GetString()));
            var stored = r.GetProperty("dataset").GetProperty("storedBytes").GetInt64();
            Assert.Equal(stored / (100e6 / 8), r.GetProperty("limitSeconds").GetDouble(), 6);
            // Once, not three times, from the cache tier; every node's own shaped link received the whole dataset and
            // passed part of it on: the exchange between ranks went over the veth links.
            Assert.InRange(r.GetProperty("cacheHosts")[0].GetProperty("netOutputBytes").GetInt64(), stored, stored * 13 / 10);
            var nodes = r.GetProperty("nodes").EnumerateArray().ToList();
            Assert.Equal(["node1", "node2", "node3"], nodes.Select(n => n.GetProperty("node").GetString()));
            Assert.All(nodes, n =>
            {
                Assert.True(n.GetProperty("wallSeconds").GetDouble() > 0);
                Assert.InRange(n.GetProperty("linkRxBytes").GetInt64(), stored, stored * 13 / 10);
                Assert.InRange(n.GetProperty("linkTxBytes").GetInt64(), stored / 2, stored * 13 / 10);
            });
        }
        finally
        {
            if (Shell.IsRoot) Topology.Clean(instance);
            try { Directory.Delete(dir, recursive: true); } catch (IOException) { }
        }
    }

    /// <summary>
    /// Eleven nodes in groups of three, node3's link at a tenth of the rate: the ranks' probe makes it a leaf, the others
    /// still run the grid (3 × 3, one group of four) and the leaf takes its copy from its group's members. Real processes under mpiexec over
    /// the shaped links: every node ends with the data, the members before the leaf, and the tier sends it about once.
    /// Which rank a node is, and so the route's numbers, is mpiexec's to decide; on a machine whose two cores every
    /// emulated node shares, the probe may also judge a busy healthy node slow and make it a leaf too (nine members
    /// still make a grid of 3 × 3).
    /// </summary>
    [Fact]
    public async Task A_slow_node_becomes_a_leaf_of_one_group_and_the_others_keep_the_grid_of_rings()
    {
        if (!Shell.IsRoot || !Shell.Exists("mpiexec.openmpi")) return;
        var dir = Path.Combine(Path.GetTempPath(), $"hcd-test-{Environment.ProcessId}-{Guid.NewGuid():N}"[..40]);
        var instance = OwnInstance();
        try
        {
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(240), "bench", "cluster", "--nodes", "11", "--cache-host-count", "1", "--size", "4MB",
                "--data", "random", "--no-compress", "--rate", "25mbit", "--slow-nodes", "3", "--slow-rate", "2.5mbit", "--fanout", "mpi-grid3",
                "--host-queue", "ack-first", "--out", dir, "--instance", $"{instance}");
            Assert.True(code == 0, $"bench cluster exited {code}: {stderr}");
            Assert.Empty(Topology.Leftovers(instance));
            using var run = JsonDocument.Parse(File.ReadAllLines(Path.Combine(dir, "results.jsonl")).Single());
            var r = run.RootElement;
            var nodes = r.GetProperty("nodes").EnumerateArray().ToList();
            Assert.Equal(11, nodes.Count);
            var route = nodes[0].GetProperty("route").GetString()!;
            Assert.All(nodes, n => Assert.Equal(route, n.GetProperty("route").GetString()));
            // The grid of the members, with the leaves beside it.
            Assert.Matches(@"^grid:3x3\+?/leaves:\d+(,\d+)?$", route);
            var stored = r.GetProperty("dataset").GetProperty("storedBytes").GetInt64();
            Assert.All(nodes, n => Assert.InRange(n.GetProperty("linkRxBytes").GetInt64(), stored, stored * 13 / 10));
            // A leaf forwards nothing: node3 is one, and the members did not wait for it.
            bool Forwards(JsonElement n) => n.GetProperty("linkTxBytes").GetInt64() >= stored / 4;
            var slow = nodes.Single(n => n.GetProperty("node").GetString() == "node3");
            Assert.False(Forwards(slow), $"the slow node sent {slow.GetProperty("linkTxBytes").GetInt64()} bytes: it stayed in a ring (route {route})");
            var members = nodes.Where(Forwards).ToList();
            Assert.InRange(members.Count, 9, 10);
            Assert.True(members.Max(n => n.GetProperty("wallSeconds").GetDouble()) < slow.GetProperty("wallSeconds").GetDouble(),
                $"members {string.Join(", ", members.Select(n => n.GetProperty("wallSeconds").GetDouble().ToString("0.00")))} s, the slow leaf {slow.GetProperty("wallSeconds").GetDouble():0.00} s");
            Assert.InRange(r.GetProperty("cacheHosts")[0].GetProperty("netOutputBytes").GetInt64(), stored, stored * 12 / 10);
        }
        finally
        {
            if (Shell.IsRoot) Topology.Clean(instance);
            try { Directory.Delete(dir, recursive: true); } catch (IOException) { }
        }
    }

    [Theory]
    [InlineData("red", 0, "use fifo, fq_codel or ack-first")]
    [InlineData("ack-first", 5, "cannot both be")]
    [InlineData("fq_codel", 5, "cannot both be")]
    public void A_host_queue_the_emulator_cannot_build_is_refused_before_anything_is_created(string queue, double delayMs, string message)
    {
        var e = Assert.Throws<ArgumentException>(() => new Topology(1, 1, 100, delayMs, queue));
        Assert.Contains(message, e.Message);
    }

    [Fact]
    public async Task Refuses_to_start_over_leftovers_of_its_instance_and_clean_removes_only_those()
    {
        if (!Shell.IsRoot) return;
        var mine = OwnInstance();
        var other = Topology.FreeInstance(from: mine + 1);
        var leftover = new Topology(1, 250, 100, 0, instance: mine).Nodes[^1].Namespace;
        var neighbour = new Topology(1, 250, 100, 0, instance: other).Nodes[^1].Namespace;
        try
        {
            Shell.Check("ip", "netns", "add", leftover);
            Shell.Check("ip", "netns", "add", neighbour);
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(30), "bench", "cluster", "--nodes", "1", "--cache-host-count", "1", "--size", "1MB", "--out", Path.GetTempPath(), "--instance", $"{mine}");
            Assert.Equal(3, code);
            Assert.Contains(leftover, stderr);
            Assert.Contains($"hpcdata bench clean --instance {mine}", stderr);
            Assert.DoesNotContain(neighbour, stderr);

            (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(30), "bench", "clean", "--instance", $"{mine}");
            Assert.True(code == 0, stderr);
            Assert.Empty(Topology.Leftovers(mine));
            Assert.Equal([$"namespace {neighbour}"], Topology.Leftovers(other));
        }
        finally
        {
            Shell.Run("ip", "netns", "del", leftover);
            Shell.Run("ip", "netns", "del", neighbour);
        }
    }

    [Fact]
    public void Instances_get_names_and_addresses_of_their_own()
    {
        var first = new Topology(2, 3, 100, 0);
        var seventh = new Topology(2, 3, 100, 0, instance: 7);
        Assert.Equal(("hcd-h1", "hcdh1", "198.18.1.1"), (first.Hosts[0].Namespace, first.Hosts[0].Link, first.Hosts[0].Address));
        Assert.Equal(("hcd7-n3", "hcd7n3", "198.18.30.3"), (seventh.Nodes[2].Namespace, seventh.Nodes[2].Link, seventh.Nodes[2].Address));
        Assert.Equal(("hcdbr7", "198.18.28.1"), (seventh.Bridge, seventh.BridgeAddress));
        var all = new[] { first, seventh }.SelectMany(t => t.Hosts.Concat(t.Nodes)).ToList();
        Assert.Equal(all.Count, all.Select(m => m.Namespace).Distinct().Count());
        Assert.Equal(all.Count, all.Select(m => m.Address).Distinct().Count());
        Assert.All(all, m => Assert.True(m.Link.Length <= 15, m.Link));
        Assert.Throws<ArgumentOutOfRangeException>(() => new Topology(1, 1, 100, 0, instance: Topology.MaxInstance + 1));
    }

    [Fact]
    public async Task Report_of_an_empty_directory_fails_without_crashing()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-report-").FullName;
        try
        {
            File.WriteAllText(Path.Combine(dir, "results.jsonl"), "{\"kind\":\"clus");
            var (code, stderr) = await HpcdataAsync(TimeSpan.FromSeconds(30), "report", dir, "--json");
            Assert.Equal(1, code);
            Assert.DoesNotContain("Unhandled", stderr);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }

    /// <summary>A cluster instance nothing else on the machine uses, so a bench someone runs beside the tests (or the
    /// leftovers of one that was killed) neither breaks them nor is broken by them. 0 is left to people.</summary>
    private static int OwnInstance() => Shell.IsRoot ? Topology.FreeInstance(from: 1) : 1;

    private static async Task<(int Code, string Stderr)> HpcdataAsync(TimeSpan timeout, params string[] args)
    {
        var r = await HpcdataProcess.RunAsync(timeout, args);
        return (r.Code, r.Stderr);
    }
}
