using System.IO.Pipes;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using Hpc.CommonData.Access;

namespace Hpc.NodeAgent;

/// <summary>
/// Who is at the other end of a pipe connection, as the kernel recorded it when the worker connected: its process,
/// user and primary group (<c>SO_PEERCRED</c>) and its supplementary groups. A worker cannot claim to be someone else.
/// </summary>
public sealed record PeerCredentials(int Pid, uint Uid, uint Gid, IReadOnlyList<uint> Groups)
{
    /// <summary>The agent's own process: what it is when it acts for itself (an administrator to <see cref="AccessPolicy"/>).</summary>
    public static PeerCredentials Agent { get; } = new(Environment.ProcessId, OperatingSystem.IsLinux() ? Hpc.CommonData.Access.UnixAccounts.EffectiveUserId : AccessPolicy.NoOwner,
        OperatingSystem.IsLinux() ? Hpc.CommonData.Access.UnixAccounts.EffectiveGroupId : AccessPolicy.NoOwner, []);

    /// <summary>Every group the process acts with: its primary group and its supplementary groups.</summary>
    public IEnumerable<uint> AllGroups => Groups.Prepend(Gid);

    /// <summary>The user's name where the node knows one, else the number (for messages and logs).</summary>
    public string UserName => (OperatingSystem.IsLinux() ? UnixAccounts.UserName(Uid) : null) ?? Uid.ToString();

    /// <summary>
    /// The credentials of the process connected to <paramref name="pipe"/> (on Unix the pipe's handle is the connected
    /// socket). Null where they cannot be read: on Windows, where the equivalent would be the client's token, which is
    /// not implemented, and on Linux only if the kernel refuses, which the access check treats as a stranger.
    /// </summary>
    public static PeerCredentials? Of(NamedPipeServerStream pipe)
    {
        if (!OperatingSystem.IsLinux()) return null;
        try
        {
            return OfSocket(pipe.SafePipeHandle);
        }
        catch (Exception e) when (e is ObjectDisposedException or InvalidOperationException or IOException)
        {
            return null; // the worker already went away: nobody to serve, and an unknown peer is refused restricted data
        }
    }

    [SupportedOSPlatform("linux")]
    public static PeerCredentials? OfSocket(SafeHandle socket) =>
        PeerCred(socket) is { } cred ? new PeerCredentials(cred.Pid, cred.Uid, cred.Gid, SupplementaryGroups(cred.Pid, cred.Uid, cred.Gid)) : null;

    /// <summary>
    /// Only the uid of the process connected to <paramref name="pipe"/>, without its groups: what the accept loop needs to
    /// count a connection against its user, at one system call. Null where <see cref="Of"/> would be.
    /// </summary>
    public static uint? UidOf(NamedPipeServerStream pipe)
    {
        if (!OperatingSystem.IsLinux()) return null;
        try { return PeerCred(pipe.SafePipeHandle)?.Uid; }
        catch (Exception e) when (e is ObjectDisposedException or InvalidOperationException or IOException) { return null; }
    }

    [SupportedOSPlatform("linux")]
    private static UCred? PeerCred(SafeHandle socket)
    {
        var added = false;
        try
        {
            socket.DangerousAddRef(ref added);
            var fd = (int)socket.DangerousGetHandle();
            var cred = default(UCred);
            var length = Marshal.SizeOf<UCred>();
            return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, ref cred, ref length) == 0 ? cred : null;
        }
        finally
        {
            if (added) socket.DangerousRelease();
        }
    }

    /// <summary>
    /// The groups the connected process really holds, from <c>/proc/PID/status</c> ("Groups:"), so a worker started
    /// with fewer groups than its user's login (setpriv, a container) gets no more than it has. Where /proc does not
    /// answer for that process (mounted with hidepid, or the process already gone and its pid reused — the uid is
    /// compared), the user's groups from the account database are used instead.
    /// </summary>
    [SupportedOSPlatform("linux")]
    public static IReadOnlyList<uint> SupplementaryGroups(int pid, uint uid, uint gid)
    {
        try
        {
            uint? effectiveUid = null;
            uint[]? groups = null;
            foreach (var line in File.ReadLines($"/proc/{pid}/status"))
            {
                if (line.StartsWith("Uid:", StringComparison.Ordinal)) // real, effective, saved, file system
                    effectiveUid = uint.Parse(line[4..].Split([' ', '\t'], StringSplitOptions.RemoveEmptyEntries)[1]);
                else if (line.StartsWith("Groups:", StringComparison.Ordinal))
                    groups = line[7..].Split([' ', '\t'], StringSplitOptions.RemoveEmptyEntries).Select(uint.Parse).ToArray();
            }
            if (effectiveUid == uid && groups is not null) return groups;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or FormatException or OverflowException or IndexOutOfRangeException) { }
        return UnixAccounts.UserName(uid) is { } name ? UnixAccounts.GroupsOf(name, gid) : [];
    }

    private const int SOL_SOCKET = 1;
    private const int SO_PEERCRED = 17;

    [StructLayout(LayoutKind.Sequential)]
    private struct UCred
    {
        public int Pid;
        public uint Uid;
        public uint Gid;
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int getsockopt(int socket, int level, int option, ref UCred value, ref int length);
}
