using System.IO.Pipelines;
using Hpc.CommonData.Agent;
using Hpc.CommonData.Fetch;

namespace Hpc.NodeAgent.Pipe;

/// <summary>
/// open, prefetch and stream: the verified copy of a version, fetched first if the node lacks it. Open and stream lease
/// it for the connection's life; prefetch only warms the node, and may pin the copy for a job. Stream then sends the
/// copy itself. A version whose readers do not include the worker is refused before anything is fetched.
/// </summary>
internal static class OpenOperation
{
    public static async Task<bool> RunAsync(PipeConnection connection, AgentRequest request, CancellationToken ct)
    {
        LocalDataset? streamed = null;
        var open = await connection.AnswerAsync(request, async () =>
        {
            var name = request.Dataset ?? throw new ArgumentException("request names no dataset");
            var lease = request.Op != AgentOps.Prefetch;
            var pin = request.Op == AgentOps.Prefetch ? request.Pin : null;
            var peer = request.For is { } user ? connection.Access.ActingFor(connection.Peer.Value, user, request.Op) : connection.Peer.Value;
            var ensured = await connection.Store.EnsureAsync(name, request.Version, lease, pin, ct,
                manifest => { if (manifest.Readers is not null) connection.Access.Check(manifest, peer); },
                pin is null ? AccessPolicy.NoOwner : AccessPolicy.OwnerOf(peer),
                pin is null || connection.Access.IsAgentAdmin(peer) ? null : connection.Options.EffectivePinQuota.Bytes);
            if (lease) connection.Leases.Add(ensured.Version);
            if (request.Op == AgentOps.Stream) streamed = ensured.Dataset;
            return new AgentResponse { Ok = true, Dataset = ensured.Dataset };
        }, ct);
        // Stream: the copy itself follows its answer.
        if (streamed is not null) await StreamAsync(streamed, connection.Writer, ct);
        return open;
    }

    /// <summary>Stream mode: the verified copy (file or tree, in dataset order) in 1 MB frames, then an empty frame.</summary>
    private static async Task StreamAsync(LocalDataset dataset, PipeWriter writer, CancellationToken ct)
    {
        using var files = DatasetFiles.Open(dataset.Path, dataset.Files, dataset.Length, writable: false);
        for (long offset = 0; offset < dataset.Length;)
        {
            var n = (int)Math.Min(AgentFrames.DataFrameSize, dataset.Length - offset);
            var memory = writer.GetMemory(4 + n);
            files.Read(memory.Span.Slice(4, n), offset);
            System.Buffers.Binary.BinaryPrimitives.WriteUInt32LittleEndian(memory.Span, (uint)n);
            writer.Advance(4 + n);
            offset += n;
            await writer.FlushAsync(ct);
        }
        AgentFrames.Write(writer, ReadOnlySpan<byte>.Empty);
        await writer.FlushAsync(ct);
    }
}
