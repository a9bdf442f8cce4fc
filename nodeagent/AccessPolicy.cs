using Hpc.CommonData.Access;
using Hpc.CommonData.Format;

namespace Hpc.NodeAgent;

/// <summary>
/// Who may open a version through the agent. A version without readers may be read by everyone; otherwise the
/// connected process must be named in its readers by user id or by one of its groups. Root and the agent's own user
/// always may: both can read the agent's files directly, so refusing them would protect nothing.
/// </summary>
public sealed class AccessPolicy(uint agentUid)
{
    /// <summary>The policy of this process: its effective uid is the agent's user (none on Windows, see <see cref="Check"/>).</summary>
    public static AccessPolicy ForThisProcess() => new(OperatingSystem.IsLinux() ? UnixAccounts.EffectiveUserId : uint.MaxValue);

    public uint AgentUid { get; } = agentUid;

    public bool MayRead(Manifest manifest, PeerCredentials? peer) =>
        manifest.Readers is not { } readers ||
        peer is not null && (peer.Uid == 0 || peer.Uid == AgentUid || readers.Admits(peer.Uid, peer.AllGroups));

    /// <summary>
    /// Throws <see cref="ErrorCode.AccessDenied"/>, naming the dataset and the user, unless <paramref name="peer"/> may
    /// read the version. Unknown credentials (on Windows, where the client's token is not consulted yet) are refused
    /// every restricted version: the agent never serves one to a process it cannot identify.
    /// </summary>
    public void Check(Manifest manifest, PeerCredentials? peer)
    {
        if (MayRead(manifest, peer)) return;
        var who = peer is null ? "this process (its credentials cannot be read on this system)" : $"user '{peer.UserName}' (uid {peer.Uid})";
        throw new CommonDataException(ErrorCode.AccessDenied,
            $"access denied: {who} is not among the readers of dataset '{manifest.Name}'; the stager's --readers names who may read it");
    }
}
