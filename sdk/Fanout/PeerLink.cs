using System.Buffers.Binary;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;

namespace Hpc.CommonData.Fanout;

/// <summary>What a frame between agents (or between node prep and the agents) carries.</summary>
public enum PeerFrame : byte
{
    /// <summary>A <see cref="PrepRequest"/>, to the node at its position.</summary>
    Prep = 1,
    /// <summary>The positions of a subtree that took the request, from a child to its parent.</summary>
    Joined = 2,
    /// <summary>The positions that take part, from the root down: each knows its rank among them.</summary>
    Start = 3,
    /// <summary>A collective's bytes (<see cref="TreeRankGroup"/>).</summary>
    Collective = 4,
    /// <summary>One node's <see cref="NodeOutcome"/>, to the requester.</summary>
    Outcome = 5,
    /// <summary>How many positions joined, from the root to the requester once the exchange starts.</summary>
    Launched = 6,
    /// <summary>Nothing: the requester asking whether an agent that has not answered still runs.</summary>
    Ping = 7,
    /// <summary>Nothing: a child telling its parent it is still gathering its subtree's answers (<see cref="AgentTree"/>).</summary>
    Alive = 8,
}

/// <summary>
/// One authenticated TCP connection between agents, or between node prep and an agent: length-prefixed frames after a
/// mutual challenge on the peer key (<see cref="PeerKey"/>). A request makes an agent fetch and pin data, so nobody
/// without the cluster's key may send one; the data itself is checked segment by segment against the manifest anyway.
/// </summary>
public sealed class PeerLink : IAsyncDisposable
{
    private const int NonceLength = 16;
    /// <summary>The largest frame read: a request with 100,000 members and a manifest's broadcast fit many times over.</summary>
    public const int MaxFrame = 256 << 20;
    private readonly Socket _socket;
    private readonly NetworkStream _stream;
    private readonly SemaphoreSlim _writing = new(1, 1);

    private PeerLink(Socket socket) => (_socket, _stream) = (socket, new NetworkStream(socket, ownsSocket: true));

    public EndPoint? Remote => _socket.RemoteEndPoint;

    /// <summary>Connects and proves the key both ways, within <paramref name="timeout"/>.</summary>
    public static async Task<PeerLink> ConnectAsync(string host, int port, PeerKey key, TimeSpan timeout, CancellationToken ct)
    {
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(timeout);
        var socket = new Socket(SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        try { await socket.ConnectAsync(host, port, limit.Token); }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested)
        {
            socket.Dispose();
            throw new TimeoutException($"{host}:{port} did not answer within {timeout.TotalSeconds:0.#} s");
        }
        catch
        {
            socket.Dispose();
            throw;
        }
        var link = new PeerLink(socket);
        try
        {
            var mine = RandomNumberGenerator.GetBytes(NonceLength);
            var theirs = new byte[NonceLength];
            await link._stream.ReadExactlyAsync(theirs, limit.Token);
            await link._stream.WriteAsync(Concat(mine, key.Prove("client", theirs, mine)), limit.Token);
            var proof = new byte[PeerKey.ProofLength];
            await link._stream.ReadExactlyAsync(proof, limit.Token);
            if (!CryptographicOperations.FixedTimeEquals(proof, key.Prove("server", mine, theirs)))
                throw new UnauthorizedAccessException($"{host}:{port} holds a different peer key");
            return link;
        }
        catch (OperationCanceledException) when (!ct.IsCancellationRequested)
        {
            await link.DisposeAsync();
            throw new TimeoutException($"{host}:{port} did not answer within {timeout.TotalSeconds:0.#} s");
        }
        catch
        {
            await link.DisposeAsync();
            throw;
        }
    }

    /// <summary>Takes an accepted connection; refuses (and closes) one that does not prove the key within <paramref name="timeout"/>.</summary>
    public static async Task<PeerLink> AcceptAsync(Socket accepted, PeerKey key, TimeSpan timeout, CancellationToken ct)
    {
        accepted.NoDelay = true;
        var link = new PeerLink(accepted);
        using var limit = CancellationTokenSource.CreateLinkedTokenSource(ct);
        limit.CancelAfter(timeout);
        try
        {
            var mine = RandomNumberGenerator.GetBytes(NonceLength);
            await link._stream.WriteAsync(mine, limit.Token);
            var answer = new byte[NonceLength + PeerKey.ProofLength];
            await link._stream.ReadExactlyAsync(answer, limit.Token);
            var theirs = answer.AsSpan(0, NonceLength).ToArray();
            if (!CryptographicOperations.FixedTimeEquals(answer.AsSpan(NonceLength), key.Prove("client", mine, theirs)))
            {
                // A proof that cannot match tells the other side why it is closed, rather than leaving it to guess at an
                // unreachable node.
                await link._stream.WriteAsync(new byte[PeerKey.ProofLength], limit.Token);
                throw new UnauthorizedAccessException($"{accepted.RemoteEndPoint} does not hold this agent's peer key");
            }
            await link._stream.WriteAsync(key.Prove("server", theirs, mine), limit.Token);
            return link;
        }
        catch
        {
            await link.DisposeAsync();
            throw;
        }
    }

    public async Task WriteAsync(PeerFrame type, ReadOnlyMemory<byte> payload, CancellationToken ct)
    {
        var header = new byte[5];
        header[0] = (byte)type;
        BinaryPrimitives.WriteInt32LittleEndian(header.AsSpan(1), payload.Length);
        await _writing.WaitAsync(ct);
        try
        {
            await _stream.WriteAsync(header, ct);
            await _stream.WriteAsync(payload, ct);
        }
        finally { _writing.Release(); }
    }

    /// <summary>The next frame, which must be of <paramref name="expected"/>; the connection's end is an <see cref="EndOfStreamException"/>.</summary>
    public async Task<byte[]> ReadAsync(PeerFrame expected, CancellationToken ct)
    {
        var (type, payload) = await ReadAnyAsync(ct);
        if (type != expected) throw new InvalidDataException($"expected a {expected} frame from {Remote}, got {type}");
        return payload;
    }

    public async Task<(PeerFrame Type, byte[] Payload)> ReadAnyAsync(CancellationToken ct)
    {
        var header = new byte[5];
        await _stream.ReadExactlyAsync(header, ct);
        var length = BinaryPrimitives.ReadInt32LittleEndian(header.AsSpan(1));
        if (!Enum.IsDefined((PeerFrame)header[0]) || length is < 0 or > MaxFrame)
            throw new InvalidDataException($"a malformed frame from {Remote} (type {header[0]}, {length} bytes)");
        var payload = new byte[length];
        await _stream.ReadExactlyAsync(payload, ct);
        return ((PeerFrame)header[0], payload);
    }

    public async ValueTask DisposeAsync()
    {
        try { _socket.Shutdown(SocketShutdown.Both); } catch (SocketException) { } catch (ObjectDisposedException) { }
        await _stream.DisposeAsync();
        _writing.Dispose();
    }

    private static byte[] Concat(byte[] a, byte[] b)
    {
        var both = new byte[a.Length + b.Length];
        a.CopyTo(both, 0);
        b.CopyTo(both, a.Length);
        return both;
    }
}

/// <summary>
/// The secret the agents of a cluster share (the first line of the peer key file, like the cache tier's password file):
/// whoever proves it may ask an agent to take part in node prep.
/// </summary>
public sealed class PeerKey
{
    internal const int ProofLength = 32;
    private readonly byte[] _key;

    private PeerKey(byte[] key) => _key = key;

    /// <summary>From the text of the secret: at least 16 characters, so it is not guessed.</summary>
    public static PeerKey FromSecret(string secret)
    {
        secret = secret.Trim();
        if (secret.Length < 16) throw new ArgumentException("the peer key must be at least 16 characters");
        return new PeerKey(SHA256.HashData(Encoding.UTF8.GetBytes(secret)));
    }

    /// <summary>Reads the first line of <paramref name="path"/>; an absent or short key is an <see cref="ArgumentException"/> naming the file.</summary>
    public static PeerKey Load(string path, string option)
    {
        string? line;
        try
        {
            using var reader = new StreamReader(path);
            line = reader.ReadLine();
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw new ArgumentException($"{option}: cannot read '{path}': {e.Message}");
        }
        try { return FromSecret(line ?? ""); }
        catch (ArgumentException e) { throw new ArgumentException($"{option} '{path}': {e.Message}"); }
    }

    /// <summary>A new random key as text, for a key file.</summary>
    public static string NewSecret() => Convert.ToHexString(RandomNumberGenerator.GetBytes(32)).ToLowerInvariant();

    internal byte[] Prove(string role, byte[] challenge, byte[] nonce)
    {
        var message = new byte[role.Length + challenge.Length + nonce.Length];
        Encoding.ASCII.GetBytes(role, message);
        challenge.CopyTo(message, role.Length);
        nonce.CopyTo(message, role.Length + challenge.Length);
        return HMACSHA256.HashData(_key, message);
    }
}
