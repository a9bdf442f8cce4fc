using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Hosting;
using Hpc.CommonData;
using Hpc.CommonData.Cli;

namespace Hpc.CommonData.Local;

/// <summary>
/// The system on this machine, every component its own child process on loopback: cache hosts, the stager, node
/// agents and workers. The demo, <c>bench attach</c> and the tests are built from it. Disposing stops every process that
/// is still running, so a failure or an interrupt leaves none behind.
/// </summary>
public sealed class LocalCluster : IAsyncDisposable
{
    /// <summary>Generous: on a small, busy machine eight .NET processes starting at once take seconds each.</summary>
    public static readonly TimeSpan ReadyTimeout = TimeSpan.FromMinutes(2);

    private readonly List<ComponentProcess> _processes = [];

    /// <summary>One batch of workers released together: the common start (wall clock, Unix ms) and what each printed.</summary>
    public sealed record WorkerBatch(double StartUnixMs, List<WorkerResult> Results);

    /// <summary>Starts a cache host on a free loopback port and returns its <c>host:port</c>.</summary>
    public async Task<string> StartCacheHostAsync(string name, long maxMemoryBytes, CancellationToken ct)
    {
        var p = Track(ComponentProcess.Start(new CacheHostOptions { Port = 0, MaxMemoryBytes = maxMemoryBytes }, name: name));
        return await p.WaitReadyAsync(ReadyTimeout, ct);
    }

    public Task<StageResult> StageAsync(string path, string dataset, string cacheHosts, CancellationToken ct) =>
        ComponentProcess.StageAsync(new StagerOptions { Path = path, Name = dataset, CacheTier = { Hosts = [cacheHosts] }, Json = true }, TimeSpan.FromMinutes(20), ct);

    public async Task StartAgentAsync(string pipe, string dataDirectory, string cacheHosts, string node, long budgetBytes, CancellationToken ct)
    {
        var p = Track(ComponentProcess.Start(new NodeAgentOptions
        {
            Pipe = pipe, DataDirectory = dataDirectory, CacheTier = { Hosts = [cacheHosts] }, NodeName = node, Budget = budgetBytes,
        }, name: $"agent-{node}"));
        await p.WaitReadyAsync(ReadyTimeout, ct);
    }

    /// <summary>Node preparation: the agent fetches and verifies the version (and pins it when <paramref name="pin"/> is set).</summary>
    public static async Task<(LocalDataset Copy, double Seconds)> PrefetchAsync(string pipe, string dataset, string version, string? pin, CancellationToken ct)
    {
        await using var agent = await AgentClient.ConnectAsync(pipe, TimeSpan.FromSeconds(10), ct);
        var clock = Stopwatch.StartNew();
        var copy = await agent.PrefetchAsync(dataset, version, pin, ct);
        return (copy, clock.Elapsed.TotalSeconds);
    }

    /// <summary>
    /// Starts <paramref name="perNode"/> worker processes (<c>hpcdata worker</c>, or the <c>worker</c> verb of
    /// <paramref name="program"/>) per agent pipe and waits until every one is
    /// up, then releases them with one "go" each, so their opens overlap as a job's service hosts would. Returns when
    /// all have exited; the workers are gone afterwards.
    /// </summary>
    public async Task<WorkerBatch> RunWorkersAsync(IReadOnlyList<string> pipes, int perNode, string dataset, string mode, IReadOnlyList<string> extraArgs,
        TimeSpan timeout, CancellationToken ct, string program = "hpcdata", bool fresh = false)
    {
        var workers = new List<ComponentProcess>();
        try
        {
            // Fresh: the clock starts before the processes are launched, so their start-up is in the times. Otherwise they
            // start, say READY, and are released together: the times are the open alone.
            var start = WorkerProbe.UnixMs();
            string[] wait = fresh ? [] : ["--wait-go"];
            foreach (var pipe in pipes)
                for (var w = 0; w < perNode; w++)
                    workers.Add(Track(ComponentProcess.Start(program, ["worker", dataset, "--mode", mode, .. wait, .. extraArgs],
                        new Dictionary<string, string?> { [AgentClient.PipeVariable] = pipe }, name: $"worker-{mode}-{pipe}-{w + 1}")));
            if (!fresh)
            {
                await Task.WhenAll(workers.Select(w => w.WaitReadyAsync(ReadyTimeout, ct)));
                start = WorkerProbe.UnixMs();
                await Task.WhenAll(workers.Select(w => w.SendLineAsync("go")));
            }
            var codes = await Task.WhenAll(workers.Select(w => w.WaitForExitAsync(timeout, ct)));
            var results = new List<WorkerResult>();
            for (var i = 0; i < workers.Count; i++)
            {
                var w = workers[i];
                if (codes[i] != 0) throw new InvalidOperationException($"{w.Name} failed (exit {codes[i]}):\n{w.StandardErrorTail}");
                results.Add(WorkerProbe.ReadResult(w.StandardOutput.LastOrDefault())
                            ?? throw new InvalidOperationException($"{w.Name} printed no result:\n{w.StandardErrorTail}"));
            }
            return new WorkerBatch(start, results);
        }
        catch (TimeoutException)
        {
            throw new TimeoutException($"{mode} workers did not finish within {timeout.TotalMinutes:0} min");
        }
        finally
        {
            await StopAsync(workers);
        }
    }

    private ComponentProcess Track(ComponentProcess p)
    {
        lock (_processes) _processes.Add(p);
        return p;
    }

    private async Task StopAsync(List<ComponentProcess> some)
    {
        await Task.WhenAll(some.Select(p => p.DisposeAsync().AsTask()));
        lock (_processes) _processes.RemoveAll(some.Contains);
    }

    public async ValueTask DisposeAsync()
    {
        List<ComponentProcess> left;
        lock (_processes) left = [.. _processes];
        await StopAsync(left);
    }
}
