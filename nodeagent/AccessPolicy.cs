using Hpc.CommonData.Agent;
using Hpc.CommonData.Access;
using Hpc.CommonData.Format;

namespace Hpc.NodeAgent;

/// <summary>
/// Who may do what through the agent. Reading: a version without readers may be read by everyone; otherwise the
/// connected process must be named in its readers by user id or by one of its groups. Pins: only the user who pinned
/// a copy may drop that pin. Root and the agent's own user always may: both can read and delete the agent's files
/// directly, so refusing them would protect nothing. Members of the agent's admin group (if one is set) may drop any
/// pin, evict any copy and see every copy in status — what the agent's files, which they may read, tell them anyway —
/// but read only the datasets whose readers name them.
/// </summary>
public sealed class AccessPolicy(uint agentUid, uint? adminGroup = null)
{
    /// <summary>
    /// The owner of a pin whose pinner is not known: one made where credentials cannot be read, or kept in a pins file
    /// written before pins had owners. Only root and the agent's user may drop it ((uid_t)-1 is no user on Linux).
    /// </summary>
    public const uint NoOwner = uint.MaxValue;

    /// <summary>The policy of this process: its effective uid is the agent's user (none on Windows, see <see cref="Check"/>).</summary>
    public static AccessPolicy ForThisProcess(uint? adminGroup = null) => new(OperatingSystem.IsLinux() ? UnixAccounts.EffectiveUserId : NoOwner, adminGroup);

    public uint AgentUid { get; } = agentUid;

    /// <summary>Root or the agent's own user: may read every version and drop every pin.</summary>
    private bool IsAdministrator(PeerCredentials? peer) => peer is not null && (peer.Uid == 0 || peer.Uid == AgentUid);

    /// <summary>An administrator, or a process acting with the agent's admin group (also: exempt from the pin quota).</summary>
    public bool IsAgentAdmin(PeerCredentials? peer) =>
        IsAdministrator(peer) || peer is not null && adminGroup is { } group && peer.AllGroups.Contains(group);

    /// <summary>
    /// The credentials of <paramref name="user"/> as the node's account database gives them, for a prefetch that root
    /// or the agent's own user makes on that user's behalf (the agents' exchange, for the job's user): the readers are
    /// then checked against that user and the pin is that user's. Anyone else asking is refused, as is a user the node
    /// does not know.
    /// </summary>
    public PeerCredentials ActingFor(PeerCredentials? caller, string user, string op)
    {
        if (!IsAdministrator(caller))
            throw new CommonDataException(ErrorCode.AccessDenied, $"access denied: only root and the agent's own user may {op} on behalf of another user ('{user}')");
        if (op != AgentOps.Prefetch) throw new CommonDataException(ErrorCode.BadRequest, $"{op} cannot be made on behalf of a user");
        if (!OperatingSystem.IsLinux())
            throw new CommonDataException(ErrorCode.BadRequest, $"a prefetch on behalf of user '{user}' needs the node's account database, which only Linux agents read");
        var account = uint.TryParse(user, out var uid) && UnixAccounts.UserName(uid) is { } named ? UnixAccounts.Account(named) : UnixAccounts.Account(user);
        if (account is not { } a)
            throw new CommonDataException(ErrorCode.AccessDenied, $"access denied: user '{user}' is not known on this node");
        var name = UnixAccounts.UserName(a.Uid) ?? user;
        return new PeerCredentials(0, a.Uid, a.Gid, UnixAccounts.GroupsOf(name, a.Gid));
    }

    /// <summary>Whether status shows <paramref name="peer"/> the copy: one it may read, or any to the agent's admins.</summary>
    public bool MaySee(Manifest manifest, PeerCredentials? peer) => MayRead(manifest, peer) || IsAgentAdmin(peer);

    public bool MayRead(Manifest manifest, PeerCredentials? peer) =>
        manifest.Readers is not { } readers || IsAdministrator(peer) || peer is not null && readers.Admits(peer.Uid, peer.AllGroups);

    /// <summary>
    /// Whether <paramref name="peer"/> may drop a pin that <paramref name="owner"/> made. Where the agent cannot read
    /// credentials (Windows, see <see cref="PeerCredentials.Of"/>) pins carry no owner and anyone may, as before pins
    /// had owners; on Linux an unidentified process may drop none.
    /// </summary>
    public bool MayRelease(uint owner, PeerCredentials? peer) =>
        !OperatingSystem.IsLinux() || IsAgentAdmin(peer) || peer is not null && owner != NoOwner && peer.Uid == owner;

    /// <summary>The owner recorded for a pin <paramref name="peer"/> makes.</summary>
    public static uint OwnerOf(PeerCredentials? peer) => peer?.Uid ?? NoOwner;

    /// <summary>
    /// Throws <see cref="ErrorCode.AccessDenied"/>, naming the dataset and the user, unless <paramref name="peer"/> may
    /// read the version. Unknown credentials (on Windows, where the client's token is not consulted yet) are refused
    /// every restricted version: the agent never serves one to a process it cannot identify.
    /// </summary>
    public void Check(Manifest manifest, PeerCredentials? peer)
    {
        if (MayRead(manifest, peer)) return;
        throw new CommonDataException(ErrorCode.AccessDenied,
            $"access denied: {Who(peer)} is not among the readers of dataset '{manifest.Name}'; the stager's --readers names who may read it");
    }

    /// <summary>
    /// Throws <see cref="ErrorCode.AccessDenied"/> unless <paramref name="peer"/> may evict the copy: a copy it may read
    /// (which it could pin and hold itself), or any copy for the agent's admins.
    /// </summary>
    public void CheckEvict(Manifest manifest, PeerCredentials? peer)
    {
        if (!IsAgentAdmin(peer)) Check(manifest, peer);
    }

    /// <summary>The refusal of a release of <paramref name="pin"/>, which only other users hold on <paramref name="dataset"/>.</summary>
    public CommonDataException ReleaseRefused(string pin, string dataset, IEnumerable<uint> owners, PeerCredentials? peer) =>
        new(ErrorCode.AccessDenied,
            $"access denied: pin '{pin}' on dataset '{dataset}' belongs to {string.Join(" and ", owners.Distinct().Order().Select(Owner))}, not to {Who(peer)}; " +
            "only the user who pinned it, root, the agent's user or its admin group may release or evict it");

    private static string Who(PeerCredentials? peer) =>
        peer is null ? "this process (its credentials cannot be read on this system)" : $"user '{peer.UserName}' (uid {peer.Uid})";

    private static string Owner(uint uid) => uid == NoOwner
        ? "no known user (pinned before pins had owners, or by an unidentified process)"
        : $"user '{(OperatingSystem.IsLinux() ? UnixAccounts.UserName(uid) : null) ?? uid.ToString()}' (uid {uid})";
}
