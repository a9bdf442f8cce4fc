using System.Diagnostics.Metrics;
using Hpc.CommonData.Hosting;
using Hpc.NodeAgent;

namespace Hpc.NodeAgent.Tests;

/// <summary>The agent's meter is one per process: these tests read it while nothing else in the test run records.</summary>
[CollectionDefinition(nameof(AgentMeter), DisableParallelization = true)]
public sealed class AgentMeter;

[Collection(nameof(AgentMeter))]
public class AgentMetricsTests
{
    [Fact]
    public async Task Fetches_are_timed_and_copies_removed_past_the_budget_are_counted_as_evictions()
    {
        var durations = new List<double>();
        long evictions = 0;
        using var listener = new MeterListener();
        listener.InstrumentPublished = (instrument, l) =>
        {
            if (instrument.Meter.Name == HpcMetrics.NodeAgentMeter) l.EnableMeasurementEvents(instrument);
        };
        listener.SetMeasurementEventCallback<double>((instrument, value, _, _) =>
        {
            if (instrument.Name == HpcMetrics.FetchDuration) lock (durations) durations.Add(value);
        });
        listener.SetMeasurementEventCallback<long>((instrument, value, _, _) =>
        {
            if (instrument.Name == HpcMetrics.Evictions) Interlocked.Add(ref evictions, value);
        });
        listener.Start();

        using var node = new Node(budget: 2 * 8192);
        node.Source.Stage("m/a", FakeSegmentSource.Bytes(8192, 1));
        node.Source.Stage("m/b", FakeSegmentSource.Bytes(8192, 2));
        node.Source.Stage("m/c", FakeSegmentSource.Bytes(8192, 3));
        await node.Prefetch("m/a");
        await node.Prefetch("m/b");
        await node.Prefetch("m/a"); // already on the node: not a fetch
        await node.Prefetch("m/c"); // past the budget: b goes

        Assert.Equal(3, durations.Count);
        Assert.All(durations, d => Assert.InRange(d, 0, 60));
        Assert.Equal(1, Interlocked.Read(ref evictions));
    }
}
