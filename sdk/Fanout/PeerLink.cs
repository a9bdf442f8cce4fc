using System.Buffers;
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
    /// <summary>A request's id, from the requester: it calls the request off before it started (its root took it and went
    /// silent). A node that took it stops waiting and does nothing for it; a copy of it that comes later is refused.</summary>
    Withdraw = 9,
}

/// <summary>
/// One secure TCP connection between agents, or between node prep and an agent. A mutual challenge on the peer key
/// (<see cref="PeerKey"/>) binds both nonces and both ends' addresses and ports as each side sees them, and derives a
/// key per direction from them; every frame after it is sealed (AES-256-GCM, a sequence number per direction as the
/// nonce, the frame's type and length authenticated with it). Someone without the key who holds a node's port can
/// neither answer the challenge nor pass one agent's challenge on to another (the addresses differ at each end of a
/// relay), nor read, change, replay, reorder or drop frames unseen. A request makes an agent fetch and pin data, so
/// nobody without the cluster's key may send one; the data itself is checked segment by segment against the manifest anyway.
/// </summary>
/// <remarks>
/// Why not TLS: it would need a certificate per node and a site CA on every node, where the agents already share one
/// key that only root and the controller's SlurmUser can read; the same guarantees (mutual authentication, a fresh
/// session key, sealed frames) come from the key with a few lines of standard primitives (HMAC-SHA256, HKDF, AES-GCM).
/// The binding to addresses means the peer network must not translate addresses between nodes (no NAT), as MPI also assumes.
/// </remarks>
public sealed class PeerLink : IAsyncDisposable
{
    private const int NonceLength = 16;
    private const int TagLength = 16;
    private const int HeaderLength = 5;
    /// <summary>The largest frame read: a request with 100,000 members and a manifest's broadcast fit many times over.</summary>
    public const int MaxFrame = 256 << 20;
    /// <summary>What a frame's payload allocates before its bytes have come: a peer that declares a large frame and
    /// sends little holds little.</summary>
    private const int FirstAllocation = 1 << 20;
    private readonly Socket _socket;
    private readonly NetworkStream _stream;
    private readonly SemaphoreSlim _writing = new(1, 1), _reading = new(1, 1);
    private AesGcm? _seal, _open;
    private ulong _sent, _received;

    private PeerLink(Socket socket) => (_socket, _stream) = (socket, new NetworkStream(socket, ownsSocket: true));

    public EndPoint? Remote => _socket.RemoteEndPoint;

    /// <summary>The connection under the seal, for tests that put bytes on the wire as an attacker would.</summary>
    internal Stream Wire => _stream;

    /// <summary>The most a frame of <paramref name="type"/> may carry: a request is a list of members, the tree's
    /// answers are lists of positions, an outcome is a line, a withdrawal an id, a ping nothing; only a collective carries data.</summary>
    public static int MaxPayload(PeerFrame type) => type switch
    {
        PeerFrame.Prep => 16 << 20,
        PeerFrame.Joined or PeerFrame.Start or PeerFrame.Launched => 4 * PrepRequest.MaxMembers,
        PeerFrame.Outcome => 64 << 10,
        PeerFrame.Withdraw => 256,
        PeerFrame.Ping or PeerFrame.Alive => 0,
        PeerFrame.Collective => MaxFrame,
        _ => -1,
    };

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
            var binding = EndpointBinding.Of(socket, connecting: true);
            var mine = RandomNumberGenerator.GetBytes(NonceLength);
            var theirs = new byte[NonceLength];
            await link._stream.ReadExactlyAsync(theirs, limit.Token);
            await link._stream.WriteAsync(Concat(mine, key.Prove("client", theirs, mine, binding)), limit.Token);
            var proof = new byte[PeerKey.ProofLength];
            await link._stream.ReadExactlyAsync(proof, limit.Token);
            if (!CryptographicOperations.FixedTimeEquals(proof, key.Prove("server", theirs, mine, binding)))
                throw new UnauthorizedAccessException($"{host}:{port} holds a different peer key, or the connection does not reach that node directly");
            link.Keys(key, theirs, mine, binding, connecting: true);
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
            var binding = EndpointBinding.Of(accepted, connecting: false);
            var mine = RandomNumberGenerator.GetBytes(NonceLength);
            await link._stream.WriteAsync(mine, limit.Token);
            var answer = new byte[NonceLength + PeerKey.ProofLength];
            await link._stream.ReadExactlyAsync(answer, limit.Token);
            var theirs = answer.AsSpan(0, NonceLength).ToArray();
            if (!CryptographicOperations.FixedTimeEquals(answer.AsSpan(NonceLength), key.Prove("client", mine, theirs, binding)))
            {
                // A proof that cannot match tells the other side why it is closed, rather than leaving it to guess at an
                // unreachable node.
                await link._stream.WriteAsync(new byte[PeerKey.ProofLength], limit.Token);
                throw new UnauthorizedAccessException($"{accepted.RemoteEndPoint} does not prove this agent's peer key for this connection (a different key, or a connection relayed from another address)");
            }
            await link._stream.WriteAsync(key.Prove("server", mine, theirs, binding), limit.Token);
            link.Keys(key, mine, theirs, binding, connecting: false);
            return link;
        }
        catch
        {
            await link.DisposeAsync();
            throw;
        }
    }

    /// <summary>One key per direction, from the peer key, both nonces and both ends' addresses.</summary>
    private void Keys(PeerKey key, byte[] serverNonce, byte[] clientNonce, byte[] binding, bool connecting)
    {
        var (toServer, toClient) = key.SessionKeys(serverNonce, clientNonce, binding);
        _seal = new AesGcm(connecting ? toServer : toClient, TagLength);
        _open = new AesGcm(connecting ? toClient : toServer, TagLength);
        CryptographicOperations.ZeroMemory(toServer);
        CryptographicOperations.ZeroMemory(toClient);
    }

    public async Task WriteAsync(PeerFrame type, ReadOnlyMemory<byte> payload, CancellationToken ct)
    {
        var frame = ArrayPool<byte>.Shared.Rent(HeaderLength + payload.Length + TagLength);
        try
        {
            await _writing.WaitAsync(ct);
            try
            {
                var seal = _seal ?? throw new ObjectDisposedException(nameof(PeerLink));
                frame[0] = (byte)type;
                BinaryPrimitives.WriteInt32LittleEndian(frame.AsSpan(1), payload.Length);
                Span<byte> nonce = stackalloc byte[12];
                BinaryPrimitives.WriteUInt64LittleEndian(nonce, _sent++);
                seal.Encrypt(nonce, payload.Span, frame.AsSpan(HeaderLength, payload.Length), frame.AsSpan(HeaderLength + payload.Length, TagLength), frame.AsSpan(0, HeaderLength));
                await _stream.WriteAsync(frame.AsMemory(0, HeaderLength + payload.Length + TagLength), ct);
            }
            finally { _writing.Release(); }
        }
        finally { ArrayPool<byte>.Shared.Return(frame); }
    }

    /// <summary>The next frame, which must be of <paramref name="expected"/>; the connection's end is an <see cref="EndOfStreamException"/>.</summary>
    public async Task<byte[]> ReadAsync(PeerFrame expected, CancellationToken ct)
    {
        var (type, payload) = await ReadAnyAsync(ct);
        if (type != expected) throw new InvalidDataException($"expected a {expected} frame from {Remote}, got {type}");
        return payload;
    }

    /// <summary>The next frame, opened and checked: a frame of no known type, longer than its type may be, or whose seal
    /// does not open (changed, replayed, reordered, or not from the key's holder) is an <see cref="InvalidDataException"/>.</summary>
    /// <param name="allowed">The frame types this phase takes (null: any); another is refused before its payload is read.</param>
    public async Task<(PeerFrame Type, byte[] Payload)> ReadAnyAsync(CancellationToken ct, PeerFrame[]? allowed = null)
    {
        await _reading.WaitAsync(ct);
        try
        {
            var header = new byte[HeaderLength];
            await _stream.ReadExactlyAsync(header, ct);
            var type = (PeerFrame)header[0];
            var length = BinaryPrimitives.ReadInt32LittleEndian(header.AsSpan(1));
            var max = allowed is null || allowed.Contains(type) ? MaxPayload(type) : -1;
            if (max < 0 || length < 0 || length > max)
                throw new InvalidDataException($"a malformed frame from {Remote} (type {header[0]}, {length} bytes{(max >= 0 ? $", at most {max} for a {type} frame" : "")})");
            var payload = await ReadGrowingAsync(length, ct);
            var tag = new byte[TagLength];
            await _stream.ReadExactlyAsync(tag, ct);
            var open = _open ?? throw new ObjectDisposedException(nameof(PeerLink));
            var nonce = new byte[12];
            BinaryPrimitives.WriteUInt64LittleEndian(nonce, _received++);
            try { open.Decrypt(nonce, payload, tag, payload, header); }
            catch (AuthenticationTagMismatchException)
            {
                throw new InvalidDataException($"a {type} frame from {Remote} whose seal does not open (changed, replayed or out of order)");
            }
            return (type, payload);
        }
        finally { _reading.Release(); }
    }

    /// <summary>Reads <paramref name="length"/> bytes into an array that grows as they come.</summary>
    private async Task<byte[]> ReadGrowingAsync(int length, CancellationToken ct)
    {
        var buffer = new byte[Math.Min(length, FirstAllocation)];
        var have = 0;
        while (true)
        {
            await _stream.ReadExactlyAsync(buffer.AsMemory(have), ct);
            have = buffer.Length;
            if (have == length) return buffer;
            Array.Resize(ref buffer, (int)Math.Min(length, 2L * have));
        }
    }

    public async ValueTask DisposeAsync()
    {
        try { _socket.Shutdown(SocketShutdown.Both); } catch (SocketException) { } catch (ObjectDisposedException) { }
        await _stream.DisposeAsync();
        // Taken so that a read or write under way finishes with the keys before they go.
        await _writing.WaitAsync();
        Interlocked.Exchange(ref _seal, null)?.Dispose();
        _writing.Release();
        if (await _reading.WaitAsync(TimeSpan.FromSeconds(5)))
        {
            Interlocked.Exchange(ref _open, null)?.Dispose();
            _reading.Release();
        }
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
/// Both ends of a TCP connection as bytes, the connecting end first, each as the 16 bytes of its IPv6 address (IPv4
/// mapped) and its port: the same bytes on both sides of a direct connection, and different ones at the two ends of a relay.
/// </summary>
public static class EndpointBinding
{
    public const int Length = 2 * 18;

    public static byte[] Of(Socket socket, bool connecting)
    {
        var local = (IPEndPoint)(socket.LocalEndPoint ?? throw new IOException("the connection has no local address"));
        var remote = (IPEndPoint)(socket.RemoteEndPoint ?? throw new IOException("the connection has no remote address"));
        var bytes = new byte[Length];
        Write(connecting ? local : remote, bytes.AsSpan(0, 18));
        Write(connecting ? remote : local, bytes.AsSpan(18, 18));
        return bytes;
    }

    private static void Write(IPEndPoint endpoint, Span<byte> into)
    {
        endpoint.Address.MapToIPv6().TryWriteBytes(into, out _);
        BinaryPrimitives.WriteUInt16BigEndian(into[16..], (ushort)endpoint.Port);
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

    /// <summary>The proof of <paramref name="role"/> for one handshake: both nonces, server's first, and both ends.</summary>
    internal byte[] Prove(string role, byte[] serverNonce, byte[] clientNonce, byte[] binding)
    {
        var message = new byte[role.Length + serverNonce.Length + clientNonce.Length + binding.Length];
        Encoding.ASCII.GetBytes(role, message);
        serverNonce.CopyTo(message, role.Length);
        clientNonce.CopyTo(message, role.Length + serverNonce.Length);
        binding.CopyTo(message, role.Length + serverNonce.Length + clientNonce.Length);
        return HMACSHA256.HashData(_key, message);
    }

    /// <summary>The keys of one connection's two directions, from the key, both nonces and both ends (HKDF-SHA256).</summary>
    internal (byte[] ToServer, byte[] ToClient) SessionKeys(byte[] serverNonce, byte[] clientNonce, byte[] binding)
    {
        var info = new byte[SessionLabel.Length + binding.Length];
        SessionLabel.CopyTo(info, 0);
        binding.CopyTo(info, SessionLabel.Length);
        var salt = new byte[serverNonce.Length + clientNonce.Length];
        serverNonce.CopyTo(salt, 0);
        clientNonce.CopyTo(salt, serverNonce.Length);
        var both = HKDF.DeriveKey(HashAlgorithmName.SHA256, _key, 64, salt, info);
        var keys = (both[..32], both[32..]);
        CryptographicOperations.ZeroMemory(both);
        return keys;
    }

    private static readonly byte[] SessionLabel = "hpcdata peer link 2"u8.ToArray();
}
