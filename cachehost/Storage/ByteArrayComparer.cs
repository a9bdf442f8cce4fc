namespace Hpc.CacheHost.Storage;

/// <summary>
/// Content equality for binary keys. The span side lets the store look a key up straight from the receive buffer,
/// so a GET allocates nothing; only a key that is actually inserted becomes an array.
/// </summary>
internal sealed class ByteArrayComparer : IEqualityComparer<byte[]>, IAlternateEqualityComparer<ReadOnlySpan<byte>, byte[]>
{
    public static readonly ByteArrayComparer Instance = new();

    public bool Equals(byte[]? x, byte[]? y) =>
        ReferenceEquals(x, y) || (x is not null && y is not null && x.AsSpan().SequenceEqual(y));

    public int GetHashCode(byte[] obj) => Hash(obj);

    public bool Equals(ReadOnlySpan<byte> alternate, byte[] other) => alternate.SequenceEqual(other);

    public int GetHashCode(ReadOnlySpan<byte> alternate) => Hash(alternate);

    public byte[] Create(ReadOnlySpan<byte> alternate) => alternate.ToArray();

    // HashCode is seeded per process, which keeps a client from choosing keys that all collide.
    private static int Hash(ReadOnlySpan<byte> bytes)
    {
        var hash = new HashCode();
        hash.AddBytes(bytes);
        return hash.ToHashCode();
    }
}
