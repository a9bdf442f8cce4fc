using System.IO.Pipelines;
using System.IO.Pipes;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Agent;

/// <summary>
/// A connection to the node agent over its named pipe (a Unix domain socket on Linux). While it stays open, every
/// dataset opened through it is leased: the agent will not evict it.
/// </summary>
public sealed class AgentClient : IAsyncDisposable
{
    public const string PipeVariable = "HPCDATA_AGENT_PIPE";
    public const string DefaultPipe = "hpcdata-agent";

    private readonly NamedPipeClientStream _pipe;
    private readonly PipeReader _reader;
    private readonly PipeWriter _writer;
    private readonly SemaphoreSlim _gate = new(1, 1);

    public string PipeName { get; }

    private AgentClient(string pipeName, NamedPipeClientStream pipe)
    {
        PipeName = pipeName;
        _pipe = pipe;
        _reader = PipeReader.Create(pipe, new StreamPipeReaderOptions(bufferSize: AgentFrames.DataFrameSize + 64, leaveOpen: true));
        _writer = PipeWriter.Create(pipe, new StreamPipeWriterOptions(leaveOpen: true));
    }

    public static string PipeFromEnvironment() =>
        Environment.GetEnvironmentVariable(PipeVariable) is { Length: > 0 } p ? p : DefaultPipe;

    /// <summary>Connects, or throws <see cref="TimeoutException"/> / <see cref="IOException"/> when no agent listens.</summary>
    public static async Task<AgentClient> ConnectAsync(string? pipeName = null, TimeSpan? timeout = null, CancellationToken ct = default)
    {
        pipeName ??= PipeFromEnvironment();
        var pipe = new NamedPipeClientStream(".", pipeName, PipeDirection.InOut, System.IO.Pipes.PipeOptions.Asynchronous);
        try
        {
            await pipe.ConnectAsync(timeout ?? TimeSpan.FromSeconds(2), ct);
        }
        catch
        {
            await pipe.DisposeAsync();
            throw;
        }
        return new AgentClient(pipeName, pipe);
    }

    public async Task<AgentResponse> SendAsync(AgentRequest request, CancellationToken ct = default)
    {
        await _gate.WaitAsync(ct);
        try
        {
            await AgentFrames.WriteMessageAsync(_writer, request, () => AgentJson.Default.AgentRequest, ct);
            return await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, ct)
                   ?? throw new IOException($"node agent on pipe '{PipeName}' closed the connection");
        }
        finally { _gate.Release(); }
    }

    private async Task<LocalDataset> DatasetCallAsync(AgentRequest request, CancellationToken ct)
    {
        var response = await SendAsync(request, ct);
        if (!response.Ok || response.Dataset is null) throw response.ToException("agent returned no dataset");
        return response.Dataset;
    }

    /// <summary>Makes the dataset local (fetching it once if needed) and leases it for this connection.</summary>
    public Task<LocalDataset> OpenAsync(string name, string? version = null, CancellationToken ct = default) =>
        DatasetCallAsync(new AgentRequest { Op = AgentOps.Open, Dataset = DatasetName.Validate(name), Version = version }, ct);

    /// <summary>Makes the dataset local; with a pin it stays until <see cref="ReleaseAsync"/> with the same pin.</summary>
    public Task<LocalDataset> PrefetchAsync(string name, string? version = null, string? pin = null, CancellationToken ct = default) =>
        DatasetCallAsync(new AgentRequest { Op = AgentOps.Prefetch, Dataset = DatasetName.Validate(name), Version = version, Pin = pin }, ct);

    public async Task ReleaseAsync(string name, string? version, string pin, bool evict = false, CancellationToken ct = default)
    {
        var response = await SendAsync(new AgentRequest { Op = AgentOps.Release, Dataset = DatasetName.Validate(name), Version = version, Pin = pin, Evict = evict }, ct);
        if (!response.Ok) throw response.ToException("release failed");
    }

    public async Task<AgentStatus> StatusAsync(CancellationToken ct = default)
    {
        var response = await SendAsync(new AgentRequest { Op = AgentOps.Status }, ct);
        return response.Status ?? throw response.ToException("no status");
    }

    /// <summary>
    /// Stream mode, for workers that cannot map the file: the agent sends the bytes over the pipe. Each chunk is
    /// handed to <paramref name="onData"/> with its offset; the span is valid only during the call.
    /// </summary>
    public async Task<LocalDataset> StreamAsync(string name, string? version, SpanAction onData, CancellationToken ct = default, Action<long>? onHeader = null)
    {
        await _gate.WaitAsync(ct);
        try
        {
            await AgentFrames.WriteMessageAsync(_writer, new AgentRequest { Op = AgentOps.Stream, Dataset = DatasetName.Validate(name), Version = version },
                () => AgentJson.Default.AgentRequest, ct);
            var header = await AgentFrames.ReadMessageAsync(_reader, () => AgentJson.Default.AgentResponse, ct)
                         ?? throw new IOException($"node agent on pipe '{PipeName}' closed the connection");
            if (!header.Ok || header.Dataset is null) throw header.ToException("stream refused");
            onHeader?.Invoke(header.Dataset.Length);
            long offset = 0;
            while (true)
            {
                var result = await _reader.ReadAsync(ct);
                var buffer = result.Buffer;
                var ended = false;
                while (AgentFrames.TryParse(ref buffer, AgentFrames.DataFrameSize, out var payload))
                {
                    if (payload.Length == 0) { ended = true; break; }
                    foreach (var piece in payload)
                    {
                        if (offset + piece.Length > header.Dataset.Length) throw new InvalidDataException("agent sent more bytes than the dataset holds");
                        onData(offset, piece.Span);
                        offset += piece.Length;
                    }
                }
                _reader.AdvanceTo(buffer.Start, buffer.End);
                if (ended) break;
                if (result.IsCompleted) throw new IOException("node agent closed the stream before the end of the data");
            }
            if (offset != header.Dataset.Length) throw new InvalidDataException($"agent streamed {offset} of {header.Dataset.Length} bytes");
            return header.Dataset;
        }
        finally { _gate.Release(); }
    }

    public delegate void SpanAction(long offset, ReadOnlySpan<byte> data);

    public async ValueTask DisposeAsync()
    {
        await _reader.CompleteAsync();
        await _writer.CompleteAsync();
        await _pipe.DisposeAsync();
    }
}
