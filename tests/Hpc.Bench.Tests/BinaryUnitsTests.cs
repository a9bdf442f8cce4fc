using System.Text.RegularExpressions;
using Hpc.CommonData.Report;

namespace Hpc.Bench.Tests;

/// <summary>
/// The lab's tables give sizes and rates in powers of 1024 and say so (MiB, MiB/s, GiB), as every other size the tools
/// print does: 64 MiB moved in one second is 64 in a MiB/s column, not 67.
/// </summary>
public class BinaryUnitsTests
{
    private static readonly MachineInfo Machine = new("lab", 2, "6.1", ".NET 10");
    private const long Size = 64L << 20;

    /// <summary>No decimal megabyte or gigabyte label left in <paramref name="table"/>.</summary>
    private static void AssertBinaryLabels(string table)
    {
        Assert.DoesNotMatch(new Regex(@"\bMB\b|\bGB\b|MB/s"), table);
        Assert.Contains("MiB", table);
    }

    [Fact]
    public void The_codec_table_gives_MiB_per_second_and_CPU_seconds_per_GiB()
    {
        var run = new CodecRecord("codec", 1, DateTimeOffset.UnixEpoch, "csv", Size, Size / 4, 2, false, 1, 1,
            CodecSeconds: 0.5, CodecCpuSeconds: 0.125, StagerSeconds: 1.0, StagerProcessSeconds: 1.2, StagerCpuSeconds: 0.25, CacheHostCpuSeconds: 0.0625, Machine);
        var table = CodecResults.Table([run]);
        AssertBinaryLabels(table);
        Assert.Contains("| raw codec MiB/s | stager MiB/s |", table);
        // 64 MiB in 0.5 s and 1 s; 0.125 CPU-s over 1/16 GiB.
        Assert.Contains("| 128 (128–128) | 64 (64–64) | 50% | 2.00 | 4.00 | 1.00 |", table);
    }

    [Fact]
    public void The_fetch_table_gives_MiB_per_second_and_CPU_seconds_per_GiB()
    {
        var run = new FetchRecord("fetch", 1, DateTimeOffset.UnixEpoch, "csv", Size, Size / 4, 2, false, 1,
            DecodeSeconds: 0.25, DecodeCpuSeconds: 0.125, FetchSeconds: 0.5, AgentUserSeconds: 0.125, AgentSystemSeconds: 0.0625, CacheHostCpuSeconds: 0.0625, Machine, IngestSeconds: 1);
        var table = FetchBench.Table([run]);
        AssertBinaryLabels(table);
        Assert.Contains("| raw decode MiB/s | agent fetch MiB/s | agent ingest MiB/s |", table);
        Assert.Contains("| 256 | 128 | 64 | 50% | 2.00 | 3.00 (2.00 + 1.00) | 3.00–3.00 | 1.00 |", table);
        // Records made before the ingest was timed show a dash there.
        Assert.Contains("| 256 | 128 | – | 50% |", FetchBench.Table([run with { IngestSeconds = 0 }]));
        // The ingest's CPU per GiB stored (16 MiB stored here), the agent's and the sender's, or a dash before it was read.
        Assert.Contains("| 1.00 | – |", table);
        Assert.Contains("| 1.00 | 32.00 + 16.00 |", FetchBench.Table([run with { IngestAgentCpuSeconds = 0.5, IngestSenderCpuSeconds = 0.25 }]));
    }

    [Fact]
    public void The_fetch_table_gives_the_range_of_the_agents_CPU_beside_its_median()
    {
        FetchRecord Run(double system) => new("fetch", 1, DateTimeOffset.UnixEpoch, "csv", Size, Size / 4, 2, false, 1,
            DecodeSeconds: 0.25, DecodeCpuSeconds: 0.125, FetchSeconds: 0.5, AgentUserSeconds: 0.125, AgentSystemSeconds: system, CacheHostCpuSeconds: 0.0625, Machine);
        // 3 and 5 CPU-s per GiB: the median says 4, the range says how far the runs were apart.
        var table = FetchBench.Table([Run(0.0625), Run(0.1875)]);
        Assert.Contains("| 4.00 (2.00 + 2.00) | 3.00–5.00 | 1.00 |", table);
    }

    [Fact]
    public void The_cache_table_shows_the_recorded_decimal_rate_in_MiB_per_second()
    {
        // Recorded as 10^6 bytes per second, as every run has been: 1000 GETs of 64 KiB a second.
        var megabytes = 1000 * 65536 / 1e6;
        var run = new CacheRecord("cache", 1, "r1", DateTimeOffset.UnixEpoch, CacheResults.CacheHost, null, "hpcdata-sdk", "GET", 1,
            new CacheConfig(1000, 1000, 1, 1, 1000, 65536, 1), 1.0, 1000, megabytes, 1, 1, 1, 0.5, 0.5, 1, 1, null, Machine);
        var table = CacheResults.Table([run], []);
        AssertBinaryLabels(table);
        Assert.Contains("| req/s | MiB/s |", table);
        Assert.Contains("| 1000 | 63 |", table);   // 62.5 MiB/s, not 66 MB/s
    }

    [Fact]
    public void The_update_table_gives_sizes_in_MiB_and_the_manifest_cost_in_binary_units()
    {
        var row = new UpdateBench.Row("csv", "content", Size, Size / 4, FirstStageSeconds: 2, FullFetchSeconds: 1, Segments: 1024, NewSegments: 16,
            NewRawBytes: 1L << 20, SentStoredBytes: 1L << 19, UpdateStageSeconds: 0.5, NodeFetchedStoredBytes: 1L << 19, NodeReusedBytes: 63L << 20,
            NodeUpdateSeconds: 0.25, ChangedBytes: 1L << 19, EditPlaces: 1, ChunkerMebibytesPerSecond: 900);
        var table = UpdateBench.Table([row]);
        AssertBinaryLabels(table);
        Assert.Contains("| csv | content | 64.0 | 0.5 in 1 |", table);
        Assert.Contains("| 32 |", table);   // 64 MiB staged in 2 s
        Assert.Contains("csv 900 MiB/s", table);
        Assert.Contains("MiB per GiB", table);
    }
}
