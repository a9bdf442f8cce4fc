using System.Text.Json;
using Hpc.Bench;

namespace Hpc.Bench.Tests;

/// <summary>
/// <c>hpcdata bench imports</c>, small: a file server namespace behind a shaped link, sshfs mounts, a cache host, an
/// agent's node copy and squashfs images, all real. It needs root (CI runs as root); elsewhere it must refuse cleanly.
/// </summary>
[Collection(LabNamespaces.Name)]
public class ImportsBenchTests
{
    [Fact]
    public async Task Every_source_is_timed_cold_and_warm_and_only_the_network_file_system_sees_the_ranks_requests()
    {
        var dir = Directory.CreateTempSubdirectory("hcd-imports-test-").FullName;
        var instance = Shell.IsRoot ? Topology.FreeInstance(from: 1) : 1;
        var started = DateTime.Now;
        try
        {
            var r = await HpcdataProcess.RunAsync(TimeSpan.FromMinutes(5), "bench", "imports", "--import", "numpy", "--ranks", "2", "--repeat", "1",
                "--instance", $"{instance}", "--out", dir);
            if (!Shell.IsRoot)
            {
                Assert.Equal(2, r.Code);
                Assert.Contains("needs", r.Stderr);
                return;
            }
            Assert.True(r.Code == 0, $"bench imports exited {r.Code}: {r.Stderr}");
            Assert.Empty(Topology.Leftovers(instance));
            Assert.DoesNotContain("hpcdata-imports-", File.ReadAllText("/proc/self/mountinfo"));
            // The node copies in /dev/shm are removed with their agents.
            Assert.DoesNotContain(Directory.GetDirectories("/dev/shm", "hcd-imports-*"), d => Directory.GetCreationTime(d) >= started);

            var cells = File.ReadAllLines(Path.Combine(dir, "imports.jsonl")).Select(l => JsonDocument.Parse(l).RootElement).ToDictionary(c => c.GetProperty("source").GetString()!);
            Assert.Equal(["node copy", "network file system", "squashfs image, node copy", "squashfs image on the network file system"], cells.Keys);
            Assert.All(cells.Values, c =>
            {
                Assert.True(c.GetProperty("coldSeconds").GetDouble() > 0 && c.GetProperty("warmSeconds").GetDouble() > 0);
                // Python's start and numpy's import name hundreds of paths whatever they are read from.
                Assert.True(c.GetProperty("fileCallsPerRank").GetInt64() > 100);
            });
            foreach (var node in new[] { "node copy", "squashfs image, node copy" })
            {
                Assert.True(cells[node].GetProperty("nodePrepSeconds").GetDouble() > 0);
                Assert.Equal(0, cells[node].GetProperty("serverMetadataRequestsPerRank").GetInt64() + cells[node].GetProperty("serverReadRequestsPerRank").GetInt64());
            }
            // Over the network every look-up and open of the tree is a request to the server; an image is only read.
            Assert.True(cells["network file system"].GetProperty("serverMetadataRequestsPerRank").GetInt64() > 100);
            Assert.True(cells["network file system"].GetProperty("serverReadRequestsPerRank").GetInt64() > 0);
            Assert.True(cells["squashfs image on the network file system"].GetProperty("serverReadRequestsPerRank").GetInt64() > 0);
            Assert.True(cells["squashfs image on the network file system"].GetProperty("serverMetadataRequestsPerRank").GetInt64() <
                        cells["network file system"].GetProperty("serverMetadataRequestsPerRank").GetInt64() / 10);
            foreach (var chart in new[] { "imports-cold-time-vs-ranks.svg", "imports-warm-time-vs-ranks.svg" })
                Assert.Equal("svg", System.Xml.Linq.XDocument.Load(Path.Combine(dir, chart)).Root!.Name.LocalName);
        }
        finally { Directory.Delete(dir, recursive: true); }
    }
}
