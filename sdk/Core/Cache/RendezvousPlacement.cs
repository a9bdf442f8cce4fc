using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cache;

/// <summary>
/// Where a segment lives: rendezvous (highest-random-weight) hashing of its id over the host list, R replicas. Every
/// client computes the same answer from the same host list, whatever its order; adding a host moves only the
/// segments that now score highest on it.
/// </summary>
public sealed class RendezvousPlacement
{
    private readonly ulong[] _hostSeeds;

    public RendezvousPlacement(IReadOnlyList<CacheEndpoint> hosts, int replicas)
    {
        _hostSeeds = hosts.Select(h => XxHash.Hash64Of(Encoding.UTF8.GetBytes(h.ToString()))).ToArray();
        Replicas = Math.Clamp(replicas, 1, Math.Max(1, hosts.Count));
    }

    public int HostCount => _hostSeeds.Length;
    public int Replicas { get; }

    /// <summary>Fills <paramref name="hosts"/> with the R host indexes for a segment, best first.</summary>
    public void Place(in SegmentId id, Span<int> hosts)
    {
        Span<byte> key = stackalloc byte[SegmentId.ByteLength];
        id.WriteBytes(key);
        Span<ulong> best = stackalloc ulong[hosts.Length];
        var n = 0;
        for (var h = 0; h < _hostSeeds.Length; h++)
        {
            var score = XxHash.Hash64Of(key, _hostSeeds[h]);
            var pos = n < hosts.Length ? n++ : hosts.Length;
            while (pos > 0 && best[pos - 1] < score)
            {
                if (pos < hosts.Length) { best[pos] = best[pos - 1]; hosts[pos] = hosts[pos - 1]; }
                pos--;
            }
            if (pos < hosts.Length) { best[pos] = score; hosts[pos] = h; }
        }
    }

    /// <summary>For each host, the indexes of the items it holds a replica of (null when none); with
    /// <paramref name="onlyReplica"/>, only the host of that rank. Ranks from <see cref="Replicas"/> up name the hosts
    /// that hold no placed copy, in the order the same hashing ranks them: where a reader looks once the placed copies
    /// are missing (a host restarted empty, hosts added since the version was staged, a writer with other settings).</summary>
    public List<int>?[] GroupByHost(int count, Func<int, SegmentId> idOf, int? onlyReplica = null)
    {
        if (onlyReplica is { } rank && (rank < 0 || rank >= _hostSeeds.Length)) throw new ArgumentOutOfRangeException(nameof(onlyReplica));
        var byHost = new List<int>?[_hostSeeds.Length];
        Span<int> place = stackalloc int[Math.Max(Replicas, (onlyReplica ?? 0) + 1)];
        for (var i = 0; i < count; i++)
        {
            Place(idOf(i), place);
            if (onlyReplica is { } r) (byHost[place[r]] ??= []).Add(i);
            else foreach (var h in place[..Replicas]) (byHost[h] ??= []).Add(i);
        }
        return byHost;
    }
}
