using System.Buffers.Binary;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Hpc.CommonData.Access;

namespace Hpc.NodeAgent;

/// <summary>
/// POSIX access ACLs written straight into the <c>system.posix_acl_access</c> extended attribute, in the kernel's
/// binary form (a 4-byte version 2 header, then 8-byte entries: tag u16, permissions u16, id u32, little-endian,
/// ordered by tag and then id). No library (libacl) is needed on the node, and every program that opens the file —
/// not only workers using the SDK — gets the answer the agent gives on its socket.
/// </summary>
[SupportedOSPlatform("linux")]
public static class PosixAcl
{
    public const string AccessAttribute = "system.posix_acl_access";
    public const uint Version = 2;

    public const ushort UserObj = 0x01, User = 0x02, GroupObj = 0x04, Group = 0x08, Mask = 0x10, Other = 0x20;
    public const ushort Read = 4, Write = 2, Execute = 1;
    private const uint UndefinedId = uint.MaxValue;

    /// <summary>
    /// The ACL giving the owner <paramref name="ownerPermissions"/> and each named reader <paramref name="readerPermissions"/>;
    /// the owning group and everyone else get nothing. The mask is the readers' permissions, so it never hides a grant.
    /// </summary>
    public static byte[] Encode(DatasetReaders readers, ushort ownerPermissions, ushort readerPermissions)
    {
        var entries = new List<(ushort Tag, ushort Perm, uint Id)> { (UserObj, ownerPermissions, UndefinedId) };
        entries.AddRange(readers.Users.Distinct().Order().Select(u => (User, readerPermissions, u)));
        entries.Add((GroupObj, 0, UndefinedId));
        entries.AddRange(readers.Groups.Distinct().Order().Select(g => (Group, readerPermissions, g)));
        entries.Add((Mask, readerPermissions, UndefinedId));
        entries.Add((Other, 0, UndefinedId));

        var bytes = new byte[4 + 8 * entries.Count];
        BinaryPrimitives.WriteUInt32LittleEndian(bytes, Version);
        for (var i = 0; i < entries.Count; i++)
        {
            var at = bytes.AsSpan(4 + 8 * i);
            BinaryPrimitives.WriteUInt16LittleEndian(at, entries[i].Tag);
            BinaryPrimitives.WriteUInt16LittleEndian(at[2..], entries[i].Perm);
            BinaryPrimitives.WriteUInt32LittleEndian(at[4..], entries[i].Id);
        }
        return bytes;
    }

    /// <summary>The (tag, permissions, id) entries of an ACL in the binary form; for checks and tests.</summary>
    public static IReadOnlyList<(ushort Tag, ushort Perm, uint Id)> Decode(ReadOnlySpan<byte> acl)
    {
        if (acl.Length < 4 || (acl.Length - 4) % 8 != 0 || BinaryPrimitives.ReadUInt32LittleEndian(acl) != Version)
            throw new InvalidDataException($"not a version {Version} POSIX ACL ({acl.Length} bytes)");
        var entries = new List<(ushort, ushort, uint)>();
        for (var at = 4; at < acl.Length; at += 8)
            entries.Add((BinaryPrimitives.ReadUInt16LittleEndian(acl[at..]), BinaryPrimitives.ReadUInt16LittleEndian(acl[(at + 2)..]),
                BinaryPrimitives.ReadUInt32LittleEndian(acl[(at + 4)..])));
        return entries;
    }

    /// <summary>Sets the access ACL of <paramref name="path"/>; returns 0 or the errno of the failure (EOPNOTSUPP: the
    /// file system keeps no ACLs).</summary>
    public static int TrySet(string path, byte[] acl) =>
        setxattr(path, AccessAttribute, acl, acl.Length, 0) == 0 ? 0 : Marshal.GetLastPInvokeError();

    /// <summary>The access ACL of <paramref name="path"/>, or null when it has none (its mode bits are all there is).</summary>
    public static byte[]? Get(string path)
    {
        var buffer = new byte[4096];
        var n = getxattr(path, AccessAttribute, buffer, buffer.Length);
        return n < 0 ? null : buffer[..(int)n];
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int setxattr([MarshalAs(UnmanagedType.LPUTF8Str)] string path, [MarshalAs(UnmanagedType.LPUTF8Str)] string name,
        byte[] value, nint size, int flags);

    [DllImport("libc", SetLastError = true)]
    private static extern nint getxattr([MarshalAs(UnmanagedType.LPUTF8Str)] string path, [MarshalAs(UnmanagedType.LPUTF8Str)] string name,
        byte[] value, nint size);
}
