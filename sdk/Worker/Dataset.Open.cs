using System.Diagnostics;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Cache;
using Hpc.CommonData.Fetch;
using Hpc.CommonData.Format;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

namespace Hpc.CommonData;

public sealed partial class Dataset
{
    /// <summary>
    /// Opens a dataset for reading. With a node agent, the agent's verified local copy is memory-mapped read-only
    /// (every worker on the node shares the same pages); without one, the data is fetched from the cache tier into
    /// private memory and a warning is logged. Every byte returned has been verified against its content hash.
    /// </summary>
    /// <param name="name">The dataset, <c>owner/name</c>.</param>
    /// <param name="options">How to reach it; by default from the job's environment (see <see cref="DatasetOptions"/>).</param>
    /// <param name="ct">Cancels the wait, not a fetch the agent shares with other workers.</param>
    /// <exception cref="CommonDataException"><see cref="ErrorCode.NotFound"/>: no such dataset or version;
    /// <see cref="ErrorCode.Integrity"/>: the data failed verification and nothing was returned;
    /// <see cref="ErrorCode.Unavailable"/>: no agent (in map or stream mode) or no cache host answers;
    /// <see cref="ErrorCode.AccessDenied"/>: this user is not among the dataset's readers, or the agent's socket turned it away.</exception>
    public static async Task<Dataset> OpenAsync(string name, DatasetOptions? options = null, CancellationToken ct = default)
    {
        DatasetName.Validate(name);
        options ??= new DatasetOptions();
        var log = options.Logger ?? NullLogger.Instance;
        var version = options.VersionFor(name);
        var clock = Stopwatch.StartNew();
        if (options.Mode == DataAccessMode.Direct) return await OpenDirectAsync(name, version, options, clock, ct);

        AgentClient agent;
        try
        {
            // A worker does not start the agent, so an absent socket will not appear while it waits: it is said at once,
            // rather than after the connect timeout as the runtime's bare "The operation has timed out.".
            agent = await AgentClient.ConnectIfListeningAsync(options.AgentPipe, options.AgentConnectTimeout, ct);
        }
        // A socket that refuses this user is an agent that is there: not a reason to go around it to the cache tier.
        catch (Exception e) when (options.Mode == DataAccessMode.Auto && e is TimeoutException or IOException)
        {
            log.LogWarning("{NoAgent}; fetching {Dataset} straight from the cache tier into private memory",
                NoAgent(options.AgentPipe, e), name);
            return await OpenDirectAsync(name, version, options, clock, ct);
        }
        catch (Exception e) when (e is TimeoutException or IOException)
        {
            throw new CommonDataException(ErrorCode.Unavailable, NoAgent(options.AgentPipe, e), e);
        }

        try
        {
            if (options.Mode != DataAccessMode.Stream)
            {
                var local = await agent.OpenAsync(name, version, ct);
                try
                {
                    DataBacking backing = DatasetFiles.IsTreeLayout(local.Files, local.Length)
                        ? new TreeBacking(local.Path, local.Files!, local.Length)
                        : new MappedBacking(MappedFile.Open(local.Path, local.Length, writable: false));
                    return new Dataset(local, DataAccessMode.Map, backing, agent, clock.Elapsed);
                }
                catch (Exception e) when (options.Mode == DataAccessMode.Auto && e is IOException or UnauthorizedAccessException)
                {
                    log.LogWarning("Cannot map {Path} ({Reason}); streaming {Dataset} over the pipe instead", local.Path, e.Message, name);
                }
            }
            return await OpenStreamAsync(name, version, agent, clock, ct);
        }
        catch
        {
            await agent.DisposeAsync();
            throw;
        }
    }

    /// <summary>Where the agent was looked for and what sets that: the words a worker's user acts on.</summary>
    private static string NoAgent(string pipe, Exception cause) =>
        $"{AgentClient.NotAnswering(pipe, cause)}; start one with `hpcdata agent`, or set {AgentClient.PipeVariable} " +
        $"(DatasetOptions.AgentPipe) to the pipe this node's agent serves (`hpcdata agent --pipe`)";

    private static async Task<Dataset> OpenStreamAsync(string name, string? version, AgentClient agent, Stopwatch clock, CancellationToken ct)
    {
        NativeBacking? memory = null;
        try
        {
            var local = await agent.StreamAsync(name, version, (offset, data) => memory!.Write(offset, data), ct,
                onHeader: length => memory = new NativeBacking(length));
            return new Dataset(local, DataAccessMode.Stream, memory!, agent, clock.Elapsed, verifyOnOpen: true);
        }
        catch
        {
            memory?.Dispose();
            throw;
        }
    }

    private static async Task<Dataset> OpenDirectAsync(string name, string? version, DatasetOptions options, Stopwatch clock, CancellationToken ct)
    {
        await using var client = new CacheTierClient(options.CacheTier, options.Logger);
        var (v, manifest) = await client.ResolveAsync(name, version, ct);
        RefuseIfNotReader(manifest);
        var memory = new NativeBacking(manifest.RawLength);
        try
        {
            await SegmentFetcher.FetchAsync(client, manifest, v, memory.Address, Enumerable.Range(0, manifest.Segments.Count).ToArray(), null,
                options.Progress, ct);
            var local = new LocalDataset
            {
                Name = name, Version = v, Length = manifest.RawLength, StoredLength = manifest.StoredLength, Hash = manifest.Hash,
                Files = manifest.Files, Source = "cache-tier", Path = "",
            };
            return new Dataset(local, DataAccessMode.Direct, memory, null, clock.Elapsed, verifyOnOpen: true);
        }
        catch
        {
            memory.Dispose();
            throw;
        }
    }

    /// <summary>
    /// Without an agent, the worker reads the cache tier itself, and the cache tier's password is what guards it. The
    /// readers are still honoured here so that a worker gets the same answer with or without an agent on its node.
    /// </summary>
    private static void RefuseIfNotReader(Manifest manifest)
    {
        if (manifest.Readers is not { } readers || !OperatingSystem.IsLinux()) return;
        var uid = Access.UnixAccounts.EffectiveUserId;
        if (uid == 0) return;
        var groups = Access.UnixAccounts.UserName(uid) is { } user ? Access.UnixAccounts.GroupsOf(user, Access.UnixAccounts.EffectiveGroupId) : [];
        if (readers.Admits(uid, groups.Append(Access.UnixAccounts.EffectiveGroupId))) return;
        throw new CommonDataException(ErrorCode.AccessDenied,
            $"access denied: user '{Access.UnixAccounts.UserName(uid) ?? uid.ToString()}' (uid {uid}) is not among the readers of dataset '{manifest.Name}'");
    }

    private readonly LocalDataset _info;
    private readonly DataBacking _backing;
    private readonly AgentClient? _agent;
    private int _disposed;
}
