using System.Runtime.InteropServices;
using System.Runtime.Versioning;

namespace Hpc.CommonData.Access;

/// <summary>
/// The node's user and group database through the C library (<c>getpwnam_r</c>, <c>getgrnam_r</c>, <c>getpwuid_r</c>,
/// <c>getgrouplist</c>), so names come from wherever the node is configured to look (files, LDAP, SSSD) exactly as
/// <c>ls</c> and <c>id</c> see them, not only from /etc/passwd.
/// </summary>
[SupportedOSPlatform("linux")]
public static partial class UnixAccounts
{
    private const int ERANGE = 34;

    /// <summary>The effective user id of this process.</summary>
    public static uint EffectiveUserId => geteuid();

    /// <summary>The effective group id of this process.</summary>
    public static uint EffectiveGroupId => getegid();

    /// <summary>The id of the named user, or null when the node knows no such user.</summary>
    public static uint? UserId(string name) =>
        WithBuffer((buffer, size) => (getpwnam_r(name, out var pw, buffer, size, out var found), found == 0 ? null : (uint?)pw.Uid));

    /// <summary>The named user's id and primary group, or null when the node knows no such user.</summary>
    public static (uint Uid, uint Gid)? Account(string name) =>
        WithBuffer((buffer, size) => (getpwnam_r(name, out var pw, buffer, size, out var found), found == 0 ? null : ((uint, uint)?)(pw.Uid, pw.Gid)));

    /// <summary>The id of the named group, or null when the node knows no such group.</summary>
    public static uint? GroupId(string name) =>
        WithBuffer((buffer, size) => (getgrnam_r(name, out var gr, buffer, size, out var found), found == 0 ? null : (uint?)gr.Gid));

    /// <summary>The user's name, or null when the id has no entry (a process may run as an id no account names).</summary>
    public static string? UserName(uint uid) =>
        WithBuffer((buffer, size) => (getpwuid_r(uid, out var pw, buffer, size, out var found), found == 0 ? null : Marshal.PtrToStringUTF8(pw.Name)));

    /// <summary>Every group of the user with id <paramref name="uid"/>, as the login would set them; none for an id no account names.</summary>
    public static uint[] GroupsOf(uint uid) => UserName(uid) is { } name && Account(name) is { } a ? GroupsOf(name, a.Gid) : [];

    /// <summary>Every group of the named user (its primary group included), as the login would set them.</summary>
    public static uint[] GroupsOf(string user, uint primaryGroup)
    {
        var count = 32;
        while (true)
        {
            var groups = new uint[count];
            var n = count;
            if (getgrouplist(user, primaryGroup, groups, ref n) >= 0) return groups[..n];
            if (n <= count) count *= 2; else count = n; // glibc reports the size it needs; others may not
            if (count > 1 << 16) return [primaryGroup];
        }
    }

    /// <summary>
    /// Runs a reentrant lookup with a scratch buffer for the entry's strings, growing it while the C library says it is
    /// too small. Any other failure, like "no such entry", is a null answer: the callers refuse what they cannot resolve.
    /// </summary>
    private static T? WithBuffer<T>(Func<IntPtr, nint, (int Result, T? Value)> call)
    {
        for (var size = 1024; ; size *= 4)
        {
            var buffer = Marshal.AllocHGlobal(size);
            try
            {
                var (r, value) = call(buffer, size);
                if (r == ERANGE && size < 1 << 22) continue;
                return r == 0 ? value : default;
            }
            finally { Marshal.FreeHGlobal(buffer); }
        }
    }

    [StructLayout(LayoutKind.Sequential)]
    private struct Passwd
    {
        public IntPtr Name, Password;
        public uint Uid, Gid;
        public IntPtr Gecos, Home, Shell;
    }

    [StructLayout(LayoutKind.Sequential)]
    private struct Group
    {
        public IntPtr Name, Password;
        public uint Gid;
        public IntPtr Members;
    }

    [LibraryImport("libc")] private static partial uint geteuid();
    [LibraryImport("libc")] private static partial uint getegid();

    [LibraryImport("libc", StringMarshalling = StringMarshalling.Utf8)]
    private static partial int getpwnam_r(string name, out Passwd pwd, IntPtr buffer, nint length, out IntPtr result);

    [LibraryImport("libc", StringMarshalling = StringMarshalling.Utf8)]
    private static partial int getgrnam_r(string name, out Group grp, IntPtr buffer, nint length, out IntPtr result);

    [LibraryImport("libc")]
    private static partial int getpwuid_r(uint uid, out Passwd pwd, IntPtr buffer, nint length, out IntPtr result);

    [LibraryImport("libc", StringMarshalling = StringMarshalling.Utf8)]
    private static partial int getgrouplist(string user, uint group, [Out] uint[] groups, ref int count);
}
