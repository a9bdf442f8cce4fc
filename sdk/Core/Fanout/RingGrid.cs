using System.Globalization;

namespace Hpc.CommonData.Fanout;

/// <summary>
/// The ranks as a grid, so that no block crosses more than about 2·√N links. Consecutive ranks form groups (a job's
/// nodes come in the scheduler's order, which keeps a rack's nodes together), and the members at one position of every
/// group form a column. The data is cut into one part per position: every column all-gathers its part over a ring of
/// its own, each member fetching its share of the part from the cache tier, and every group all-gathers the parts over
/// its ring, each member putting in its column's part as that arrives. Both rings run at once on every node.
/// <para>
/// A block crosses at most K − 1 column links and G − 1 group links (K groups of about G), where one ring over every
/// rank takes N − 1; each node still sends and receives about S (most of its column's part over the column, the other
/// parts over its group), and the cache tier still sends every byte once.
/// </para>
/// </summary>
public sealed class RingGrid
{
    /// <summary>Below this many ranks <c>auto</c> keeps one ring: N − 1 hops of a block are a few percent of the
    /// transfer there, and a second ring would only add connections.</summary>
    public const int AutoFromRanks = 64;

    /// <summary>Groups and columns are at least this large: a ring that loses one member must still have two.</summary>
    public const int SmallestGroup = 3;

    private readonly int _extra;

    private RingGrid(int ranks, int groups)
    {
        Ranks = ranks;
        Groups = groups;
        Positions = ranks / groups;
        _extra = ranks % groups;
    }

    public int Ranks { get; }
    /// <summary>K: groups of consecutive ranks, and so members of each column.</summary>
    public int Groups { get; }
    /// <summary>Positions in a group, one column and one part of the data each; the first <see cref="LargerGroups"/>
    /// groups have one member more, who puts no part in and is in no column.</summary>
    public int Positions { get; }

    /// <summary>Groups with a member beyond the positions: the first <c>N mod K</c>.</summary>
    public int LargerGroups => _extra;

    /// <summary>The grid for <paramref name="ranks"/> in groups of at least <paramref name="groupSize"/> (N mod K of
    /// them one larger); null where that makes fewer than <see cref="SmallestGroup"/> groups or positions.</summary>
    public static RingGrid? Of(int ranks, int groupSize)
    {
        if (groupSize < SmallestGroup) return null;
        var groups = ranks / groupSize;
        if (groups < SmallestGroup) return null;
        return new RingGrid(ranks, groups);
    }

    /// <summary>
    /// What <c>--ring-groups</c> asks for: <c>off</c> (one ring), <c>auto</c> (groups of about √N from
    /// <see cref="AutoFromRanks"/> ranks on) or a group size. Null: one ring.
    /// </summary>
    public static RingGrid? For(int ranks, string setting)
    {
        if (setting.Equals("off", StringComparison.OrdinalIgnoreCase)) return null;
        if (setting.Equals("auto", StringComparison.OrdinalIgnoreCase))
            return ranks < AutoFromRanks ? null : Of(ranks, (int)Math.Round(Math.Sqrt(ranks)));
        return Of(ranks, ParseGroupSize(setting));
    }

    /// <summary>Checks a <c>--ring-groups</c> value; throws <see cref="FormatException"/> naming what it takes.</summary>
    public static int ParseGroupSize(string setting)
    {
        if (setting.Equals("off", StringComparison.OrdinalIgnoreCase) || setting.Equals("auto", StringComparison.OrdinalIgnoreCase)) return 0;
        if (int.TryParse(setting, NumberStyles.None, CultureInfo.InvariantCulture, out var size) && size >= SmallestGroup) return size;
        throw new FormatException($"--ring-groups takes auto, off or a group size of at least {SmallestGroup} (got '{setting}')");
    }

    /// <summary>The group of <paramref name="rank"/>, and its position there.</summary>
    public (int Group, int Position) PlaceOf(int rank)
    {
        if (rank < 0 || rank >= Ranks) throw new ArgumentOutOfRangeException(nameof(rank));
        // The first _extra groups have Positions + 1 members.
        var large = _extra * (Positions + 1);
        return rank < large ? (rank / (Positions + 1), rank % (Positions + 1)) : (_extra + (rank - large) / Positions, (rank - large) % Positions);
    }

    /// <summary>The group's first rank.</summary>
    public int FirstOf(int group) => group * Positions + Math.Min(group, _extra);

    /// <summary>Ranks of a group, in ring order.</summary>
    public IReadOnlyList<int> GroupMembers(int group) =>
        Enumerable.Range(FirstOf(group), Positions + (group < _extra ? 1 : 0)).ToArray();

    /// <summary>Ranks of a column (one per group), in ring order.</summary>
    public IReadOnlyList<int> ColumnMembers(int position) =>
        position < 0 || position >= Positions ? throw new ArgumentOutOfRangeException(nameof(position))
            : Enumerable.Range(0, Groups).Select(g => FirstOf(g) + position).ToArray();

    /// <summary>Hops the last block crosses at most: one ring is N − 1.</summary>
    public int Depth => Groups - 1 + Positions;

    /// <summary>For the summary line: "grid:K×G" (groups × positions).</summary>
    public override string ToString() => string.Create(CultureInfo.InvariantCulture, $"grid:{Groups}x{Positions}{(_extra > 0 ? "+" : "")}");
}
