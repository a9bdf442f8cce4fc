using System.Globalization;
using System.Text;
using Hpc.CommonData.Format;

namespace Hpc.CommonData.Cache;

/// <summary>
/// Where a Redis Cluster keeps each key: 16384 hash slots (CRC16 of the key, or of its {hash tag}), each served by a
/// master and read-only replicas. Learned from <c>CLUSTER SLOTS</c> of any node that answers, and learned again when a
/// node answers MOVED or stops answering. Node addresses become host indexes of the <see cref="CacheHostSet"/>, which
/// grows as nodes appear; an index never changes meaning.
/// </summary>
internal sealed class ClusterTopology
{
    public const int SlotCount = 16384;

    /// <summary>Per slot, its nodes' host indexes: the master first, then its replicas. Swapped whole on refresh.</summary>
    private int[][] _slots = [];

    public bool Known => _slots.Length == SlotCount;

    /// <summary>The host indexes serving a slot, master first; empty when the map is not known or the slot is not served.</summary>
    public int[] NodesOf(int slot) => _slots is { Length: SlotCount } slots ? slots[slot] : [];

    /// <summary>The master of every served slot range, each once.</summary>
    public IReadOnlyList<int[]> Shards => _slots.Where(n => n.Length > 0).DistinctBy(n => n[0]).ToList();

    /// <summary>
    /// Replaces the map from a <c>CLUSTER SLOTS</c> reply (arrays of start, end, master [ip, port, id…], replicas…);
    /// <paramref name="indexOf"/> turns a node's address into a host index. Returns why the reply is unusable, or null.
    /// </summary>
    public string? Load(RespReply reply, Func<CacheEndpoint, int> indexOf)
    {
        if (reply.Kind != RespKind.Array || reply.Items is not { Length: > 0 } ranges)
            return reply.Kind == RespKind.Error ? reply.Text : "CLUSTER SLOTS returned no slot ranges";
        var slots = new int[SlotCount][];
        Array.Fill(slots, []);
        foreach (var range in ranges)
        {
            if (range.Items is not { Length: >= 3 } parts || parts[0].Kind != RespKind.Integer || parts[1].Kind != RespKind.Integer)
                return "CLUSTER SLOTS returned a malformed slot range";
            var (start, end) = ((int)parts[0].Integer, (int)parts[1].Integer);
            if (start < 0 || end >= SlotCount || start > end) return $"CLUSTER SLOTS returned slots {start}-{end}";
            var nodes = new List<int>();
            for (var i = 2; i < parts.Length; i++)
            {
                if (parts[i].Items is not { Length: >= 2 } node || node[0].Bulk is not { } ip || node[1].Kind != RespKind.Integer) continue;
                var host = Encoding.UTF8.GetString(ip);
                if (host.Length == 0) continue; // a node that does not know its own address yet
                nodes.Add(indexOf(new CacheEndpoint(host, (int)node[1].Integer)));
            }
            if (nodes.Count == 0) continue;
            var shared = nodes.ToArray();
            for (var s = start; s <= end; s++) slots[s] = shared;
        }
        _slots = slots;
        return null;
    }

    /// <summary>Moves one slot to the node a MOVED reply named, until the next full refresh.</summary>
    public void Move(int slot, int host)
    {
        if (_slots is not { Length: SlotCount } slots) return;
        slots[slot] = [host, .. slots[slot].Where(h => h != host)];
    }

    /// <summary>The hash slot of a key: CRC16 (XMODEM) of the key, or of the part between its first '{' and the next '}' when that is not empty.</summary>
    public static int SlotOf(ReadOnlySpan<byte> key)
    {
        var open = key.IndexOf((byte)'{');
        if (open >= 0)
        {
            var close = key[(open + 1)..].IndexOf((byte)'}');
            if (close > 0) key = key.Slice(open + 1, close);
        }
        return Crc16(key) & (SlotCount - 1);
    }

    public static int SlotOf(string key) => SlotOf(Encoding.UTF8.GetBytes(key));

    /// <summary>The slot of a segment's key, without allocating (the placement of every segment of a fetch).</summary>
    public static int SlotOf(in SegmentId id)
    {
        Span<byte> key = stackalloc byte[CacheKeys.SegmentKeyLength];
        CacheKeys.WriteSegmentKey(id, key);
        return SlotOf(key);
    }

    private static readonly ushort[] Table = BuildTable();

    private static ushort[] BuildTable()
    {
        var table = new ushort[256];
        for (var i = 0; i < 256; i++)
        {
            var crc = (ushort)(i << 8);
            for (var b = 0; b < 8; b++) crc = (ushort)((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
            table[i] = crc;
        }
        return table;
    }

    private static int Crc16(ReadOnlySpan<byte> data)
    {
        ushort crc = 0;
        foreach (var b in data) crc = (ushort)((crc << 8) ^ Table[((crc >> 8) ^ b) & 0xff]);
        return crc;
    }
}

/// <summary>
/// A Redis Cluster node's answer that the key is served elsewhere: MOVED (the slot has a new owner) or ASK (this one
/// key is being migrated; ask the target once, after ASKING). Also recognises the answers that say "try again shortly"
/// (CLUSTERDOWN while a failover is decided, TRYAGAIN during a migration).
/// </summary>
internal readonly record struct ClusterRedirect(bool Ask, int Slot, CacheEndpoint Target)
{
    public static bool TryParse(string serverMessage, out ClusterRedirect redirect)
    {
        redirect = default;
        var parts = serverMessage.Split(' ');
        if (parts.Length < 3 || parts[0] is not ("MOVED" or "ASK")) return false;
        if (!int.TryParse(parts[1], NumberStyles.None, CultureInfo.InvariantCulture, out var slot) || slot >= ClusterTopology.SlotCount) return false;
        // Redis 7 may announce a node without an address as ":port": the node that answered is then meant.
        if (!CacheEndpoint.TryParse(parts[2], out var target) || target is null) return false;
        redirect = new ClusterRedirect(parts[0] == "ASK", slot, target);
        return true;
    }

    /// <summary>The cluster cannot serve the key right now but will (failover or migration under way).</summary>
    public static bool IsTransient(string serverMessage) =>
        serverMessage.StartsWith("CLUSTERDOWN", StringComparison.Ordinal) || serverMessage.StartsWith("TRYAGAIN", StringComparison.Ordinal) ||
        serverMessage.StartsWith("LOADING", StringComparison.Ordinal);

    /// <summary>The answer is about where the key lives or whether the cluster can serve it, not about the command.</summary>
    public static bool IsRouting(string serverMessage) => TryParse(serverMessage, out _) || IsTransient(serverMessage);
}
